#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tracer/unique_fd.hpp"

namespace tracer::detail {

Result<std::string> read_text_fd(int fd,
                                 const std::filesystem::path& path,
                                 std::string_view subsystem,
                                 std::size_t max_bytes) {
  std::string out;
  char buf[8192];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int err = errno;
      return fail(
          err, fmt::format("{}: cannot read {}: {}", subsystem, path.string(), std::strerror(err)));
    }
    if (n == 0)
      return out;
    if (static_cast<std::size_t>(n) > max_bytes - out.size()) {
      return fail(EFBIG, fmt::format("{}: {} is larger than {} bytes: not read", subsystem,
                                     path.string(), max_bytes));
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

Result<std::string> read_text_file(const std::filesystem::path& path,
                                   std::string_view subsystem,
                                   std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot open {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot stat {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode))
    return fail(EINVAL, fmt::format("{}: {} is not a regular file", subsystem, path.string()));
  return read_text_fd(fd.get(), path, subsystem, max_bytes);
}

}  // namespace tracer::detail
