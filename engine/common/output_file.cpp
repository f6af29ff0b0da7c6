#include "tracer/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tracer {

Result<UniqueFd> open_output_file(const std::string& path) {
  const auto failed = [&](int err) {
    return fail(err, fmt::format("cannot write '{}': {}", path, std::strerror(err)),
                err == ELOOP ? "it is a symbolic link: tracer runs as root and does not write "
                               "through one (someone else may have planted it); name the file "
                               "it points to, or remove the link"
                             : "check that the directory exists and is writable");
  };
  if (path == "/dev/stdout" || path == "/dev/stderr") {
    const int fd =
        ::fcntl(path == "/dev/stdout" ? STDOUT_FILENO : STDERR_FILENO, F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      return failed(errno);
    return UniqueFd(fd);
  }
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd)
    return failed(errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0)
    return failed(errno);
  if (S_ISREG(st.st_mode)) {
    // Truncated only now: opening a FIFO or a device with O_TRUNC is harmless, but a regular
    // file is made the caller's alone before anything is written to it.
    if (::fchmod(fd.get(), st.st_mode & 0600) != 0 || ::ftruncate(fd.get(), 0) != 0)
      return failed(errno);
  }
  return fd;
}

}  // namespace tracer
