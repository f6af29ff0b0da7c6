// UniqueFd: a move-only owner of a file descriptor.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <utility>

#include "tracer/check.hpp"

namespace tracer {

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other)
      reset(other.release());
    return *this;
  }
  ~UniqueFd() { reset(); }

  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }

  /// Gives up ownership without closing.
  [[nodiscard]] int release() noexcept { return std::exchange(fd_, -1); }

  /// Closes the owned fd (if any) and takes `fd`.
  void reset(int fd = -1) noexcept {
    const int old = std::exchange(fd_, fd);
    if (old >= 0) {
      // close() may report EINTR after releasing the fd on Linux; never retry it.
      [[maybe_unused]] const int rc = ::close(old);
      TRACER_DCHECK(rc == 0 || errno == EINTR);
    }
  }

 private:
  int fd_ = -1;
};

}  // namespace tracer
