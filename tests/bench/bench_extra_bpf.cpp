// The BPF runs of the throughput benchmark: (b) the engine's BPF output channel and (c) the
// reference, a minimal libbpf perf_buffer consumer of the same program with batched wakeups.
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstring>
#include <string>

#include "bench_common.hpp"
#include "libbpf_reference.hpp"
#include "syscall_output.h"
#include "tracer/engine.hpp"

namespace tracer::bench {
namespace {

// Both consumers get the engine's default output ring and wakeup (a quarter of the ring).
constexpr std::uint32_t kPages = kDefaultOutputPages;

Row run_engine_bpf_output(long calls, bool decode_samples) {
  Workload w(calls);
  boost::asio::io_context io(1);  // as the CLI runs it: one thread, no strand
  Engine engine(io.get_executor(),
                {.target = {.kind = Target::Kind::kPid, .pid = w.pid()},
                 .probes = {{.name = "getppid",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_getppid",
                             .counting = true,
                             .bpf_program = "syscall_output"}},
                 // The payload's ts as the records' time, as the shipped recipes do.
                 .bpf = BpfOptions{.builtin = "syscall_output",
                                   .payload_struct = "syscall_output_event",
                                   .payload_time = "ts"},
                 .decode_samples = decode_samples});
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

  const auto st = engine.stats().probes[1];
  // A full ring makes bpf_perf_event_output fail (counted by the program) and the kernel count
  // a LOST record for the same event: the program's count covers both.
  return {decode_samples ? "(b) engine, BPF output channel, decoded"
                         : "(b') engine, BPF output channel, header only",
          secs, events, std::max(st.total().lost, st.bpf_output_drops), cpu};
}

struct RefCounts {
  std::uint64_t samples = 0, lost = 0;
};

enum bpf_perf_event_ret on_event(void* ctx, int /*cpu*/, perf_event_header* h) {
  auto* c = static_cast<RefCounts*>(ctx);
  if (h->type == PERF_RECORD_SAMPLE) {
    ++c->samples;
  } else if (h->type == PERF_RECORD_LOST) {
    std::uint64_t lost = 0;
    std::memcpy(&lost, reinterpret_cast<const char*>(h) + sizeof(*h) + 8, sizeof(lost));
    c->lost += lost;
  }
  return LIBBPF_PERF_EVENT_CONT;
}

Row run_libbpf_reference(long calls) {
  Workload w(calls);
  auto prog = attach_syscall_output(w.pid());
  if (!prog)
    std::abort();
  auto& obj = prog->object;
  // libbpf's perf_buffer over the PERF_EVENT_ARRAY, with the engine's ring and wakeup.
  perf_event_attr attr = reference_output_attr();  // libbpf takes it non-const
  RefCounts counts;
  perf_buffer* pb =
      perf_buffer__new_raw(*obj.map_fd("events"), kPages, &attr, on_event, &counts, nullptr);
  if (pb == nullptr)
    std::abort();
  const double cpu0 = process_cpu_seconds();
  w.start();
  // The workload is looked at only when a poll times out (it has gone quiet), so the loop
  // makes one syscall per wakeup, as a tool with a signal-set exit flag would.
  for (;;) {
    if (perf_buffer__poll(pb, 5) == 0 && w.finished())
      break;
  }
  const double secs = w.wait();
  perf_buffer__consume(pb);
  const double cpu = process_cpu_seconds() - cpu0;
  perf_buffer__free(pb);
  std::uint64_t drops = obj.percpu_array_sum<std::uint64_t>("output_drops").value_or(0);
  return {"(c) libbpf perf_buffer (reference)", secs, counts.samples, std::max(counts.lost, drops),
          cpu};
}

/// The floor of the slowdown: the same program and channel, with rings that hold the whole run
/// and a wakeup watermark of a whole ring, so the kernel never wakes a consumer and no consumer
/// runs or reads while the workload does; one consume after it. No consumer of this channel can
/// slow the workload less. Its consume reads a cold ring in one go: its CPU is no reference.
Row run_floor(long calls) {
  // header, raw size, the struct and the raw area's padding; 1 MiB to spare.
  const std::size_t bytes = static_cast<std::size_t>(calls) * (sizeof(syscall_output_event) + 16);
  std::size_t pages = 1;
  while (pages * 4096 < bytes + (std::size_t{1} << 20))
    pages *= 2;
  const std::string name = "(e) floor: no consumer during the run";
  const auto cpus = static_cast<std::size_t>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (pages * 4096 * cpus > kFloorMemoryLimit)
    return {name + " (skipped: rings too large)", 0, 0, 0, 0, false};
  Workload w(calls);
  auto prog = attach_syscall_output(w.pid());
  if (!prog)
    std::abort();
  auto& obj = prog->object;
  perf_event_attr attr = reference_output_attr();
  attr.wakeup_watermark = static_cast<std::uint32_t>(pages * 4096);
  RefCounts counts;
  perf_buffer* pb =
      perf_buffer__new_raw(*obj.map_fd("events"), pages, &attr, on_event, &counts, nullptr);
  if (pb == nullptr)
    std::abort();
  w.start();
  const double secs = w.wait();
  perf_buffer__consume(pb);
  perf_buffer__free(pb);
  std::uint64_t drops = obj.percpu_array_sum<std::uint64_t>("output_drops").value_or(0);
  return {name, secs, counts.samples, std::max(counts.lost, drops), 0, false};
}

}  // namespace

std::vector<std::function<Row(long)>> extra_runs() {
  return {[](long calls) { return run_engine_bpf_output(calls, true); },
          [](long calls) { return run_engine_bpf_output(calls, false); }, run_libbpf_reference,
          run_floor};
}

}  // namespace tracer::bench
