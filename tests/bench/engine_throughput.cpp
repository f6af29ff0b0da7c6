// End-to-end throughput: a workload making N getppid calls at full speed, traced per event.
//   (d) untraced, the reference for slowdown
//   (a) raw tracepoint samples (RAW|TID|TIME|CPU) through the engine
//   (b) the BPF output channel through the engine           [when built with BPF]
//   (c) a minimal libbpf perf_buffer consumer of the same BPF program, batched wakeups
// (b) and (c) get the same ring and wakeup watermark (the engine's defaults), and the same
// payload: (b) takes each record's time from it, (c) samples RAW only.
// Prints one table: workload time and slowdown vs (d), events delivered and lost, and the
// consumer's CPU time per event (from the workload's start to the last record consumed, set-up
// and teardown left out for every run), as medians over rounds in which the runs are
// interleaved (this machine's speed drifts between runs).
// Usage: tracer_bench_engine [N [ROUNDS [K]]] (default 2,000,000 calls, 3 rounds; K: only run K).
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "tracer/engine.hpp"

namespace tracer::bench {

Workload::Workload(long calls) : calls_(calls) {
  int go[2], done[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0)
    std::abort();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(go[1]);
    ::close(done[0]);
    char c = 0;
    if (::read(go[0], &c, 1) != 1)
      ::_exit(1);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls_; ++i)
      ::syscall(SYS_getppid);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    [[maybe_unused]] auto n = ::write(done[1], &secs, sizeof(secs));
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(done[1]);
  go_ = go[1];
  done_ = done[0];
}

void Workload::start() {
  const char c = 'g';
  [[maybe_unused]] auto n = ::write(go_, &c, 1);
  ::close(go_);
}

bool Workload::finished() const {
  pollfd p{done_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

void Workload::run_until_finished(boost::asio::io_context& io) const {
  boost::asio::posix::stream_descriptor done(io, ::fcntl(done_, F_DUPFD_CLOEXEC, 0));
  done.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [&io](const boost::system::error_code&) { io.stop(); });
  io.run();
  io.restart();
}

double Workload::wait() {
  double secs = 0;
  [[maybe_unused]] auto n = ::read(done_, &secs, sizeof(secs));
  ::close(done_);
  ::waitpid(pid_, nullptr, 0);
  return secs;
}

double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

Row run_untraced(long calls) {
  Workload w(calls);
  w.start();
  return {"(d) untraced", w.wait(), 0, 0, 0};
}

Row run_engine_tracepoint(long calls) {
  Workload w(calls);
  boost::asio::io_context io(1);  // as the CLI runs it: one thread, no strand
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = w.pid()},
                                    .probes = {{.name = "getppid",
                                                .kind = ProbeKind::kTracepoint,
                                                .spec = "syscalls:sys_enter_getppid",
                                                .ring_pages = 256}}});
  std::uint64_t events = 0;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records)
      events += r.record.type == perf::abi::kSample ? 1 : 0;
  });
  // Consumer CPU ends with stop()'s final pass over the rings (its last round), before the
  // teardown (unmapping, closing), as the reference's ends with its last consume.
  double cpu_end = 0;
  engine.on_round([&] { cpu_end = process_cpu_seconds(); });
  engine.start();
  const double cpu0 = process_cpu_seconds();
  w.start();
  w.run_until_finished(io);
  const double secs = w.wait();
  engine.stop();
  const double cpu = cpu_end - cpu0;
  const auto st = engine.stats().probes[0].total();
  return {"(a) engine, raw tracepoint samples", secs, events, st.lost, cpu};
}

/// One row per run kind: the median over rounds of workload time and of consumer CPU per event,
/// with the delivered/lost counts of every round (loss comes and goes with scheduling).
struct Summary {
  std::string name;
  std::vector<Row> rounds;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double per_event_ns(const Row& r) {
  return r.events > 0 ? r.consumer_cpu_seconds * 1e9 / static_cast<double>(r.events) : 0;
}

void print(const std::vector<Summary>& runs, long calls, int rounds) {
  std::vector<double> base;
  for (const auto& r : runs.front().rounds)
    base.push_back(r.workload_seconds);
  const double base_median = median(base);
  fmt::print("workload: {} getppid calls, {} CPUs, {} rounds (runs interleaved), medians\n\n",
             calls, ::sysconf(_SC_NPROCESSORS_ONLN), rounds);
  fmt::print("{:<46} {:>10} {:>9} {:>12} {:>26}\n", "run", "workload s", "slowdown", "CPU ns/event",
             "lost per round");
  for (const auto& run : runs) {
    if (run.rounds.empty())
      continue;
    std::vector<double> secs, cpu;
    std::string lost;
    for (const auto& r : run.rounds) {
      secs.push_back(r.workload_seconds);
      if (r.events > 0)
        cpu.push_back(per_event_ns(r));
      lost += fmt::format("{}{}", lost.empty() ? "" : " ", r.lost);
    }
    const double m = median(secs);
    fmt::print("{:<46} {:>10.3f} {:>8.2f}x {:>12.1f} {:>26}\n", run.name, m, m / base_median,
               median(cpu), cpu.empty() ? "-" : lost);
  }
  // The machine's speed drifts between rounds (and with where the scheduler puts the consumer):
  // each round's ratio to the reference run of the same round is steadier than a ratio of
  // medians.
  const auto ref = std::find_if(runs.begin(), runs.end(),
                                [](const Summary& r) { return r.name.starts_with("(c)"); });
  if (ref == runs.end() || ref->rounds.empty())
    return;
  fmt::print("\nper round, against {} (median of the rounds' ratios, rounds below 1):\n",
             ref->name);
  fmt::print("{:<46} {:>10} {:>9} {:>12}\n", "run", "slowdown", "CPU", "CPU wins");
  for (const auto& run : runs) {
    if (&run == &*ref || run.rounds.size() != ref->rounds.size() ||
        per_event_ns(run.rounds[0]) == 0)
      continue;
    std::vector<double> slow, cpu;
    int wins = 0;
    for (std::size_t i = 0; i < run.rounds.size(); ++i) {
      slow.push_back(run.rounds[i].workload_seconds / ref->rounds[i].workload_seconds);
      cpu.push_back(per_event_ns(run.rounds[i]) / per_event_ns(ref->rounds[i]));
      wins += cpu.back() < 1 ? 1 : 0;
    }
    fmt::print("{:<46} {:>9.3f}x {:>8.3f}x {:>8}/{}\n", run.name, median(slow), median(cpu), wins,
               run.rounds.size());
  }
}

}  // namespace tracer::bench

int main(int argc, char** argv) {
  using namespace tracer::bench;
  const long calls = argc > 1 ? std::atol(argv[1]) : 2'000'000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  // A third argument runs only the untraced reference and run number K (1: (a), 2: (b), ...),
  // to profile one consumer.
  const std::size_t only = argc > 3 ? static_cast<std::size_t>(std::atoi(argv[3])) : 0;
  std::vector<std::function<Row(long)>> kinds = {run_untraced, run_engine_tracepoint};
  for (auto& extra : extra_runs())
    kinds.push_back(extra);
  std::vector<Summary> runs(kinds.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      if (k > 0 && only != 0 && k != only)
        continue;
      Row row = kinds[k](calls);
      runs[k].name = row.name;
      runs[k].rounds.push_back(std::move(row));
    }
  }
  print(runs, calls, rounds);
  return 0;
}
