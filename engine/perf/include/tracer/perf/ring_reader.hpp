// RingReader: drains one ring (one probe on one CPU): decodes in place, routes AUX records to
// their chunk, counts everything, hands records on in batches and releases the ring once per
// drain. No fds, no reactor: the engine calls drain() when the ring is readable.
#pragma once

#include <chrono>

#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <vector>

#include "tracer/perf/record_ref.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/perf/ring_stats.hpp"

namespace tracer::perf {

class RingReader {
 public:
  /// `layout` must outlive the reader (it lives in the engine's ProbeInfo).
  RingReader(perf::Ring ring,
             std::uint32_t probe,
             int cpu,
             const perf::SampleLayout* layout,
             std::uint32_t max_batch,
             bool decode_samples = true);

  /// Reads everything the kernel has published, hands it to `handler` in batches of at most
  /// max_batch records, then releases the space (data_tail once, aux_tail after the batches that
  /// used the AUX chunks). Allocation-free in steady state.
  /// `in_place` set and a fixed layout: the samples go to it as InPlaceSamples in batches of at
  /// most max_batch, not decoded (the other records, and a sample that wraps around the ring's
  /// end, are decoded for `handler`); a batch it refuses is decoded for `handler`.
  /// @return records delivered.
  std::uint64_t drain(const BatchHandler& handler,
                      const InPlaceHandler* in_place = nullptr) noexcept;
  /// A drain stops after the batch during which `at` passed (steady clock; max: never), with
  /// the rest left in the ring and more() true: a slow pipeline does not keep the reactor from
  /// its signals and timers.
  void yield_at(std::chrono::steady_clock::time_point at) noexcept { yield_at_ = at; }
  /// The last drain stopped at yield_at() with records left.
  [[nodiscard]] bool more() const noexcept { return more_; }
  /// A malformed header was met: nothing after it is read.
  [[nodiscard]] bool corrupt() const noexcept { return corrupt_; }
  /// Gives up what is left in the ring without handing it on (a stop past its time): the
  /// records are counted in RingStats::unprocessed. @return how many.
  std::uint64_t discard_rest() noexcept;

  [[nodiscard]] perf::Ring& ring() noexcept { return ring_; }
  [[nodiscard]] int cpu() const noexcept { return cpu_; }
  [[nodiscard]] std::uint32_t probe() const noexcept { return probe_; }
  /// The layout moved (the engine's probes grew while it ran): the same layout at `layout`.
  void set_layout(const perf::SampleLayout* layout) noexcept { layout_ = layout; }
  [[nodiscard]] const RingStats& stats() const noexcept { return stats_; }
  /// The exception a batch handler threw, if any. The reader delivers nothing more after one
  /// (the engine stops and reports it).
  [[nodiscard]] std::exception_ptr handler_failure() const noexcept { return failure_; }
  void count_wakeup() noexcept { ++stats_.wakeups; }

 private:
  void flush(const BatchHandler& handler) noexcept;
  /// drain() for samples of sample_type kSampleType (a fixed layout), or any layout (0);
  /// kDecode false: samples are handed on undecoded (header only).
  template <std::uint64_t kSampleType, bool kDecode = true>
  std::uint64_t drain_as(const BatchHandler& handler) noexcept;
  /// Where a drain starts: the published head, the data area, the read position; nullopt (the
  /// ring counted and marked corrupt) when the position is misaligned.
  struct DrainStart {
    std::uint64_t head = 0;
    std::span<const std::byte> area;
    std::uint64_t pos = 0;
  };
  [[nodiscard]] std::optional<DrainStart> begin_drain() noexcept;
  /// After a batch: whether yield_at() has passed (then more() says `records_left`).
  [[nodiscard]] bool yield_due(bool records_left) noexcept;
  /// drain() with its samples handed on in place.
  std::uint64_t drain_in_place(const BatchHandler& handler,
                               const InPlaceHandler& in_place) noexcept;
  /// drain_in_place(): decodes `rec` into the batch (a record that is not taken in place).
  void add_decoded(std::span<const std::byte> rec, const BatchHandler& handler) noexcept;
  /// drain_in_place(): hands the samples gathered on, or decodes them when refused.
  void flush_in_place(const BatchHandler& handler, const InPlaceHandler& in_place) noexcept;
  /// Counts a non-SAMPLE record (losses, AUX chunks, ITRACE_START context).
  void account(RecordRef& ref) noexcept;

  perf::Ring ring_;
  std::uint32_t probe_;
  int cpu_;
  const perf::SampleLayout* layout_;
  std::uint32_t max_batch_;
  bool decode_samples_;
  std::vector<RecordRef> batch_;
  /// Per slot: its Sample when it holds the last complete sample of the reader's fixed layout
  /// (rewritten in place by the next one), else nullptr.
  std::vector<perf::Sample*> ready_;
  std::vector<InPlaceSample> in_place_;  // drain_in_place()'s batch (empty until used)
  std::size_t in_place_used_ = 0;
  std::size_t used_ = 0;
  RingStats stats_;
  std::uint32_t itrace_pid_ = 0, itrace_tid_ = 0;
  std::uint64_t aux_release_ = 0;
  bool aux_pending_ = false;
  bool aux_in_batch_ = false;  // some slot of the batch being filled holds an AUX chunk
  bool itrace_seen_ = false;   // an ITRACE_START came: slots get itrace_pid/tid
  bool corrupt_ = false;       // a malformed header: nothing after it can be trusted
  bool more_ = false;          // the last drain yielded with records left
  std::chrono::steady_clock::time_point yield_at_ = std::chrono::steady_clock::time_point::max();
  std::exception_ptr failure_;
};

}  // namespace tracer::perf
