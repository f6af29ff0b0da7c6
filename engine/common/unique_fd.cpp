// UniqueFd's close.
#include "tracer/unique_fd.hpp"

#include <unistd.h>

#include <cerrno>

#include "tracer/check.hpp"

namespace tracer {

void close_fd(int fd) noexcept {
  // close() may report EINTR after releasing the fd on Linux; never retry it.
  [[maybe_unused]] const int rc = ::close(fd);
  TRACER_DCHECK(rc == 0 || errno == EINTR);
}

}  // namespace tracer
