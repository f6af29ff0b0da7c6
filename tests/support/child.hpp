// Test support: a forked child that runs steps on command, so a test can open events on its pid
// before it does anything and know exactly what it did.
#pragma once

#include <sys/types.h>

#include <functional>

namespace tracer::testing {

class Child {
 public:
  /// Forks; the child runs step(k) for the k-th go() (k = 0, 1, ...) and acknowledges each;
  /// it exits when the parent closes the pipe (destructor or finish()).
  explicit Child(std::function<void(int)> step);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Runs the next step in the child and waits until it is done. False if the child died.
  bool go();
  /// Lets the child exit and reaps it; returns its exit status (waitpid's).
  int finish();

 private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
};

}  // namespace tracer::testing
