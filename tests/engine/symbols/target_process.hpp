// TargetProcess: tests/programs/symbols_target.c run as a child, its printed run-time addresses
// parsed; with `wait` it blocks until its stdin closes (finish()), so its maps can be read.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include <gtest/gtest.h>

namespace tracer::testing {

class TargetProcess {
 public:
  explicit TargetProcess(bool wait) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) {
      ADD_FAILURE() << "pipe2 failed";
      return;
    }
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::execl(TRACER_SYMBOLS_TARGET, TRACER_SYMBOLS_TARGET, wait ? "wait" : nullptr, nullptr);
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    char c;
    while (::read(out[0], &c, 1) == 1 && c != '\n')
      line_ += c;
    ::close(out[0]);
    outer = field("outer=");
    static_fn = field("static=");
    ret = field("ret=");
    lib = field("lib=");
    if (outer == 0 || ret == 0 || lib == 0)
      ADD_FAILURE() << "unexpected output of " << TRACER_SYMBOLS_TARGET << ": '" << line_ << "'";
  }
  TargetProcess(const TargetProcess&) = delete;
  TargetProcess& operator=(const TargetProcess&) = delete;
  ~TargetProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      finish();
    }
  }

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Lets the child exit and reaps it.
  void finish() {
    if (stdin_ >= 0)
      ::close(stdin_);
    stdin_ = -1;
    if (pid_ > 0) {
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  // Run-time addresses the program printed.
  std::uint64_t outer = 0, static_fn = 0, ret = 0, lib = 0;

 private:
  std::uint64_t field(std::string_view name) const {
    const auto at = line_.find(name);
    return at == std::string::npos ? 0
                                   : std::strtoull(line_.c_str() + at + name.size(), nullptr, 16);
  }

  pid_t pid_ = -1;
  int stdin_ = -1;
  std::string line_;
};

/// The 1-based line of symbols_target.c holding `marker` (0 when absent).
inline std::uint32_t source_line_of(std::string_view marker) {
  std::ifstream in(TRACER_SYMBOLS_TARGET_SRC);
  std::string line;
  for (std::uint32_t n = 1; std::getline(in, line); ++n) {
    if (line.find(marker) != std::string::npos)
      return n;
  }
  return 0;
}

}  // namespace tracer::testing
