#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tracer/unique_fd.hpp"

namespace tracer::detail {

Result<std::string> read_text_file(const std::filesystem::path& path,
                                   std::string_view subsystem,
                                   std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot open {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  std::string out;
  char buf[8192];
  while (out.size() <= max_bytes) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      const int err = errno;
      return fail(
          err, fmt::format("{}: cannot read {}: {}", subsystem, path.string(), std::strerror(err)));
    }
    if (n == 0)
      break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace tracer::detail
