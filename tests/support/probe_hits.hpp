// Test support: run a program under a perf event and collect every sample it produced, so a
// probe test can say "exactly K hits, from this pid, with these register values".
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tracer/perf/event_attr.hpp"
#include "tracer/result.hpp"

namespace tracer::testing {

/// A forked child that execs `path args...` only after release(), so events can be opened on
/// its pid first. Killed and reaped on destruction if still running.
class GatedExec {
 public:
  GatedExec(std::string path, std::vector<std::string> args);
  ~GatedExec();
  GatedExec(const GatedExec&) = delete;
  GatedExec& operator=(const GatedExec&) = delete;

  [[nodiscard]] pid_t pid() const { return pid_; }
  /// Lets the child exec. False if it is gone.
  bool release();
  /// Waits for the child; returns waitpid's status.
  int wait();

 private:
  pid_t pid_ = -1;
  int gate_ = -1;
};

/// One sample, copied out of the ring.
struct Hit {
  std::uint32_t pid = 0;
  std::uint32_t tid = 0;
  std::vector<std::uint64_t> regs_user;  // in sample_regs_user bit order
};

/// Every sample of one run, and the pid of the child that ran.
struct Collected {
  pid_t child = -1;
  std::vector<Hit> hits;
};

/// Opens `attr` (sample_period 1, PERF_SAMPLE_TID added, disabled) on a GatedExec child running
/// `path args...`, enables it, lets the child run to completion, and returns every sample.
/// @return the samples, or the open/map failure; EIO when the child did not exit with 0 or
/// records were lost.
[[nodiscard]] Result<Collected> run_and_collect(perf::EventAttr attr,
                                                const std::string& path,
                                                std::vector<std::string> args);

}  // namespace tracer::testing
