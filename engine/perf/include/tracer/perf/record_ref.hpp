// The records the reactor hands on: RecordRef (a record decoded in place, with its probe and
// CPU) in batches, and InPlaceSample (a sample read where it lies in its ring, not decoded).
// Both are valid during the callback only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>

#include "tracer/perf/aux_chunk.hpp"
#include "tracer/perf/record.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// One record as the reactor hands it on: decoded in place, valid during the callback only.
struct RecordRef {
  std::uint32_t probe = 0;  // index into Engine::probes()
  std::int32_t cpu = -1;    // ring's CPU
  /// The ITRACE_START context of the ring, and for PERF_RECORD_AUX the AUX data it announced.
  std::uint32_t itrace_pid = 0, itrace_tid = 0;
  /// What a drain writes per record (the fields above, then the record's header, sample_id and
  /// first Sample fields) is contiguous from the start; `aux` is rare and comes last.
  perf::Record record{};
  std::optional<perf::AuxChunk> aux{};
};

struct Batch {
  std::span<const RecordRef> records;
};
using BatchHandler = std::function<void(const Batch&)>;

/// The header the engine's delivery programs write before each tracepoint record they copy
/// into the channel (bpf/progs/tp_deliver.h's tp_deliver_hdr, the same bytes).
struct DeliveredHeader {
  std::uint64_t time = 0;   // CLOCK_MONOTONIC ns, as the probes' samples
  std::uint32_t probe = 0;  // index into Engine::probes()
  std::uint32_t size = 0;   // bytes of the tracepoint's record after the header
  std::uint32_t pid = 0;    // tgid
  std::uint32_t tid = 0;
  std::uint32_t cpu = 0;
  std::uint32_t flags = 0;  // kCommFlag: comm holds the task's name at the hit
  char comm[16] = {};       // bpf_get_current_comm() (EngineOptions::deliver_comm)
  static constexpr std::uint32_t kCommFlag = 1;
};

/// A sample read where it lies, not decoded: a tracepoint hit in the BPF delivery channel's ring
/// (a DeliveredHeader, then the tracepoint's record), or a PERF_RECORD_SAMPLE of a fixed layout
/// (perf::SampleLayout::fixed) in its probe's perf ring. No record is rebuilt or decoded for it,
/// nothing copied: a stage reads the words it binds at offsets known per probe (IntReader).
/// Valid during the callback only.
class InPlaceSample {
 public:
  InPlaceSample() = default;
  /// A record of the delivery channel: a DeliveredHeader, then its `size` bytes (the engine
  /// checked they are there).
  [[nodiscard]] static InPlaceSample delivered(const std::byte* record) noexcept {
    DeliveredHeader h;
    std::memcpy(&h, record, sizeof(h));
    return {record, h.probe, sizeof(DeliveredHeader), h.size};
  }
  /// A PERF_RECORD_SAMPLE of probe `probe`, from its header: its RAW data (`raw_size` bytes) at
  /// `raw_at`; without RAW, `raw_at` is the end of its fields and `raw_size` 0.
  InPlaceSample(const std::byte* record,
                std::uint32_t probe,
                std::uint32_t raw_at,
                std::uint32_t raw_size) noexcept
      : rec_(record), probe_(probe), raw_at_(raw_at), raw_size_(raw_size) {}

  [[nodiscard]] std::uint32_t probe() const noexcept { return probe_; }
  /// The tracepoint's record (common fields first), or the BPF output payload.
  [[nodiscard]] std::span<const std::byte> raw() const noexcept {
    return {rec_ + raw_at_, raw_size_};
  }
  /// The record up to the end of raw(): where IntReader offsets point.
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {rec_, std::size_t{raw_at_} + raw_size_};
  }
  /// The 4 bytes at `offset` of bytes(), an offset before raw() (a header word).
  [[nodiscard]] std::uint32_t word32(std::size_t offset) const noexcept {
    std::uint32_t v = 0;
    std::memcpy(&v, rec_ + offset, sizeof(v));
    return v;
  }

 private:
  const std::byte* rec_ = nullptr;
  std::uint32_t probe_ = 0;
  std::uint32_t raw_at_ = 0;
  std::uint32_t raw_size_ = 0;
};
/// Takes samples in place (Engine::on_in_place). @return false to have them handed to the
/// batch handler as records instead (delivered samples rebuilt as PERF_RECORD_SAMPLEs, perf
/// ring samples decoded).
using InPlaceHandler = std::function<bool(std::span<const InPlaceSample>)>;

}  // namespace tracer

#pragma GCC visibility pop
