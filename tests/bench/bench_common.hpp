// Shared pieces of the end-to-end throughput benchmark.
#pragma once

#include <boost/asio/io_context.hpp>

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace tracer::bench {

/// The CPU the workload runs on (--pin), or -1: where the scheduler puts it.
inline int workload_cpu = -1;
void pin_to(int cpu);

/// A forked child that makes `calls` getppid calls when start()ed and reports its own time.
class Workload {
 public:
  explicit Workload(long calls);
  [[nodiscard]] pid_t pid() const { return pid_; }
  void start();
  /// Seconds the calls took, measured inside the child. Reaps it.
  double wait();
  /// True once the child has reported (its result is waiting on the pipe).
  [[nodiscard]] bool finished() const;
  /// Runs `io` until the child reports (an async_wait on its pipe: no polling, no timers of the
  /// harness's own in the traced runs).
  void run_until_finished(boost::asio::io_context& io) const;

 private:
  long calls_;
  pid_t pid_ = -1;
  int go_ = -1, done_ = -1;
};

struct Row {
  std::string name;
  double workload_seconds = 0;
  std::uint64_t events = 0;
  std::uint64_t lost = 0;
  double consumer_cpu_seconds = 0;
  /// False for a run whose consumer CPU is no comparison (the floor's one cold consume).
  bool cpu_measured = true;
};

/// The floor run maps rings that hold a whole run: at most this much memory for all CPUs.
inline constexpr std::size_t kFloorMemoryLimit = std::size_t{2} << 30;

double process_cpu_seconds();

/// The untraced run, the reference for slowdown: "(d) untraced".
Row run_untraced(long calls);

/// One row per run kind, with every round's figures.
struct Summary {
  std::string name;
  std::vector<Row> rounds;
};

/// The benchmarks' main: [--pin] [--rounds] [N [ROUNDS [K]]]. Runs `kinds` (the first is the
/// untraced reference) interleaved in each round, then prints the medians and every run's
/// per-round ratios against the run whose name starts with `ref_prefix`.
int run_bench(int argc,
              char** argv,
              std::vector<std::function<Row(long)>> kinds,
              std::string_view ref_prefix);

/// `bpftrace -e PROG` running and attached (its BEGIN probe has printed), its stdout and stderr
/// on a pipe; `keys_max` raises BPFTRACE_MAP_KEYS_MAX (its default holds 4,096 keys).
class Bpftrace {
 public:
  explicit Bpftrace(const std::string& prog, unsigned keys_max = 0);
  Bpftrace(const Bpftrace&) = delete;
  Bpftrace& operator=(const Bpftrace&) = delete;
  ~Bpftrace();
  [[nodiscard]] pid_t pid() const { return pid_; }
  /// SIGINT, then everything it printed (its maps at exit); reaps it.
  std::string stop();

 private:
  pid_t pid_ = -1;
  std::FILE* out_ = nullptr;
  std::string text_;
};

/// Runs added by optional parts (the BPF output channel and the libbpf reference).
std::vector<std::function<Row(long)>> extra_runs();

}  // namespace tracer::bench
