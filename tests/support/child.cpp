#include "support/child.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>

namespace tracer::testing {

Child::Child(std::function<void(int)> step) {
  int down[2], up[2];
  if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0) {
    throw std::runtime_error("pipe2");
  }
  pid_ = ::fork();
  if (pid_ < 0)
    throw std::runtime_error("fork");
  if (pid_ == 0) {
    ::close(down[1]);
    ::close(up[0]);
    char c = 0;
    int k = 0;
    while (::read(down[0], &c, 1) == 1) {
      step(k++);
      if (::write(up[1], &c, 1) != 1)
        break;
    }
    ::_exit(0);
  }
  ::close(down[0]);
  ::close(up[1]);
  to_child_ = down[1];
  from_child_ = up[0];
}

bool Child::go() {
  char c = 'g';
  if (::write(to_child_, &c, 1) != 1)
    return false;
  return ::read(from_child_, &c, 1) == 1;
}

int Child::finish() {
  if (pid_ < 0)
    return -1;
  ::close(to_child_);
  ::close(from_child_);
  to_child_ = from_child_ = -1;
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  return status;
}

Child::~Child() {
  finish();
}

}  // namespace tracer::testing
