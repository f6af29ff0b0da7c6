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
  std::size_t used = 0;
  out.resize(std::min(max_bytes, std::size_t{64} << 10));
  while (used < max_bytes) {
    if (used == out.size())
      out.resize(std::min(out.size() * 2, max_bytes));
    const ssize_t n = ::read(fd, out.data() + used, out.size() - used);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int err = errno;
      return fail(
          err, fmt::format("{}: cannot read {}: {}", subsystem, path.string(), std::strerror(err)));
    }
    if (n == 0)
      break;
    used += static_cast<std::size_t>(n);
  }
  out.resize(used);
  return out;
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
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(EINVAL, fmt::format("{}: {} is not a regular file", subsystem, path.string()));
  return read_text_fd(fd.get(), path, subsystem, max_bytes);
}

}  // namespace tracer::detail
