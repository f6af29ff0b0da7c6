// Tracepoint hits delivered through a BPF output channel (bpf/progs/tp_deliver.bpf.c) instead of
// the tracepoint's own perf events: every hit, with its record, reaches the engine, also where
// the kernel's per-CPU perf tracepoint events miss hits (measured on the project machine:
// idle-context sched_switch/sched_wakeup on CPU 1, while BPF programs see them). The channel's
// records are turned back into the samples the probe's own events would have written (same
// layout, bytes and all), so everything after the rings (time order, stages, perf.data) is
// unchanged.
//
// Usage (the engine's):
//   auto d = TracepointDelivery::open(probe_count, {.data_pages = 256, ...});
//   d->attach(slot, format, event_fd);           // a link with the slot as BPF cookie
//   reader handler: d->convert(batch, probes, cpu, engine_handler);
//   stats: d->delivered(slot, cpu), d->hits(slot), d->drops(slot)
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/engine.hpp"
#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {

/// The sample_type a delivered probe's samples are rebuilt with (what the engine's tracepoint
/// probes sample by default).
inline constexpr std::uint64_t kDeliveredSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW;

class TracepointDelivery {
 public:
  /// Loads tp_deliver and opens its output channel (enabled: attach() starts delivery).
  /// @return the delivery, or the libbpf / perf_event_open / mmap failure.
  [[nodiscard]] static Result<TracepointDelivery> open(std::size_t slots,
                                                       const bpf::OutputChannelOptions& channel);
  TracepointDelivery(TracepointDelivery&&) noexcept;
  TracepointDelivery& operator=(TracepointDelivery&&) noexcept;
  ~TracepointDelivery();

  /// Delivers the hits of `format`'s tracepoint as slot `slot`, attached to the perf event
  /// `event_fd` of that tracepoint (a BPF link with the slot as cookie).
  [[nodiscard]] Status attach(std::uint32_t slot, const tracefs::Format& format, int event_fd);
  [[nodiscard]] bool attached(std::uint32_t slot) const noexcept;

  [[nodiscard]] bpf::OutputChannel& channel() noexcept { return *channel_; }

  /// Rebuilds the channel records of `in` (one CPU's ring) as samples of the probes they came
  /// from, decoded with each probe's layout, and hands them to `out`. LOST records of the
  /// channel are not handed on: every failed output is counted per slot by the program.
  void convert(const Batch& in, std::span<const ProbeInfo> probes, const BatchHandler& out);

  /// Samples handed on for `slot` from CPU `cpu`.
  [[nodiscard]] std::uint64_t delivered(std::uint32_t slot, int cpu) const noexcept;
  /// Per CPU (index = CPU): the tracepoint's hits, and the outputs that failed (ring full).
  [[nodiscard]] std::vector<std::uint64_t> hits(std::uint32_t slot) const;
  [[nodiscard]] std::vector<std::uint64_t> drops(std::uint32_t slot) const;
  /// Detaches every link (before the events they hold close).
  void detach() noexcept;

 private:
  TracepointDelivery() = default;
  struct LinkDestroy {
    void operator()(::bpf_link* l) const noexcept { ::bpf_link__destroy(l); }
  };
  std::unique_ptr<bpf::Object> object_;
  std::unique_ptr<bpf::OutputChannel> channel_;
  std::vector<std::unique_ptr<::bpf_link, LinkDestroy>> links_;
  std::vector<bool> attached_;
  std::size_t cpus_ = 1;
  std::vector<std::uint64_t> delivered_;  // [slot * cpus_ + cpu]
  std::vector<std::byte> bytes_;          // rebuilt samples of one batch
  std::vector<RecordRef> refs_;
  std::vector<std::size_t> starts_;  // offsets of the rebuilt records in bytes_
};

}  // namespace tracer::core
