// bpf::OutputChannel: the receiving end of bpf_perf_event_output(). One
// PERF_TYPE_SOFTWARE/PERF_COUNT_SW_BPF_OUTPUT event per online CPU, each with its own ring, stored
// in the object's PERF_EVENT_ARRAY at that CPU's index. The engine drains the rings itself.
//
// Usage:
//   auto ch = bpf::OutputChannel::open(obj, "events", {.data_pages = 64});
//   for (auto& c : ch->cpus())          // index = CPU; empty for CPUs that are not online
//     if (c) reactor.watch(c->ring);    // records: PERF_RECORD_SAMPLE (raw = the BPF struct)
//                                       // and PERF_RECORD_LOST; decode with ch->layout()
//   // bpf_perf_event_output() failures (no event, ring full) are counted by the program itself.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/perf/event.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/result.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::bpf {

class Object;

struct OutputChannelOptions {
  /// Data pages per CPU ring (a power of two).
  std::uint32_t data_pages = 8;
  /// Wake the reader every this many records (used when wakeup_watermark_bytes is 0).
  std::uint32_t wakeup_events = 1;
  /// Wake the reader when this many bytes are in a ring (0: use wakeup_events).
  std::uint32_t wakeup_watermark_bytes = 0;
  /// PERF_SAMPLE_* bits besides RAW (and TIME | CPU, see below), e.g. PERF_SAMPLE_IDENTIFIER.
  std::uint64_t extra_sample_type = 0;
  /// >= 0: the payload carries its own CLOCK_MONOTONIC timestamp (bpf_ktime_get_ns()) as a u64
  /// at this offset. The events then sample RAW only: no second clock read in the kernel per
  /// event (a kvm-clock read costs the traced task ~100 ns here), no CPU (each ring is one
  /// CPU's), and decoding takes Sample::time from the payload (SampleLayout::raw_time_offset).
  /// -1: the events sample RAW | TIME | CPU, TIME on CLOCK_MONOTONIC.
  std::int32_t payload_time_offset = -1;
  /// Open the events disabled (enable() later); by default they are live on return.
  bool start_disabled = false;
};

/// One CPU's end of the channel.
struct CpuOutput {
  int cpu = -1;
  perf::Event event;
  perf::Ring ring;
};

class OutputChannel {
 public:
  OutputChannel(OutputChannel&&) noexcept = default;
  OutputChannel& operator=(OutputChannel&&) noexcept;
  OutputChannel(const OutputChannel&) = delete;
  OutputChannel& operator=(const OutputChannel&) = delete;
  /// Clears the map's entries, so the kernel drops its references to the events.
  ~OutputChannel();

  /// Opens the events and rings and stores each event in `map` (a loaded object's
  /// PERF_EVENT_ARRAY) at its CPU's index.
  /// @return the channel, or the first Failure: EINVAL if `map` is not a PERF_EVENT_ARRAY, the
  /// perf_event_open/mmap/map update errno otherwise.
  [[nodiscard]] static Result<OutputChannel> open(const Object& obj,
                                                  std::string_view map,
                                                  const OutputChannelOptions& opts = {});

  /// Index = CPU number, up to the map's size (possible CPUs); empty for CPUs not online.
  [[nodiscard]] std::span<std::optional<CpuOutput>> cpus() noexcept { return cpus_; }
  /// How to decode the rings' records.
  [[nodiscard]] const perf::SampleLayout& layout() const noexcept { return layout_; }
  /// The attr (and so the layout) open() gives the events for `opts`, without opening anything.
  [[nodiscard]] static perf::EventAttr attr_for(const OutputChannelOptions& opts) noexcept;
  [[nodiscard]] static perf::SampleLayout layout_for(const OutputChannelOptions& opts) noexcept;
  [[nodiscard]] const perf::EventAttr& attr() const noexcept { return attr_; }

  [[nodiscard]] Status enable() const;
  [[nodiscard]] Status disable() const;

 private:
  OutputChannel() = default;
  void clear_map() noexcept;

  UniqueFd map_fd_;  // our own reference to the map, to clear it on destruction
  perf::EventAttr attr_;
  perf::SampleLayout layout_;
  std::vector<std::optional<CpuOutput>> cpus_;
};

}  // namespace tracer::bpf
