// End-to-end throughput: a workload making N getppid calls at full speed, traced per event.
//   (d) untraced, the reference for slowdown
//   (a) raw tracepoint samples (RAW|TID|TIME|CPU) through the engine
//   (b) the BPF output channel through the engine           [when built with BPF]
//   (c) a minimal libbpf perf_buffer consumer of the same BPF program, batched wakeups
//   (e) the floor of (b) and (c)'s slowdown: the same program and channel, and nothing
//       consuming (no wakeup, no read) while the workload runs
// (b) and (c) get the same ring and wakeup watermark (the engine's defaults), and the same
// payload: (b) takes each record's time from it, (c) samples RAW only.
// Prints one table: workload time and slowdown vs (d), events delivered and lost, and the
// consumer's CPU time per event (from the workload's start to the last record consumed, set-up
// and teardown left out for every run), as medians over rounds in which the runs are
// interleaved (this machine's speed drifts between runs).
// Usage: tracer_bench_engine [--pin] [--rounds] [N [ROUNDS [K]]] (default 2,000,000 calls,
// 3 rounds; K: only run K; --pin: workload and consumer on CPUs of their own; --rounds: print
// every round).
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "tracer/engine.hpp"

namespace tracer::bench {

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

}  // namespace tracer::bench

int main(int argc, char** argv) {
  using namespace tracer::bench;
  std::vector<std::function<Row(long)>> kinds = {run_untraced, run_engine_tracepoint};
  for (auto& extra : extra_runs())
    kinds.push_back(extra);
  return run_bench(argc, argv, std::move(kinds), "(c)");
}
