// The records the reactor hands on: RecordRef (a record decoded in place, with its probe and
// CPU) in batches, and DeliveredSample (a tracepoint hit read where it lies in the BPF delivery
// channel's ring). Both are valid during the callback only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>

#include "tracer/perf/record.hpp"
#include "tracer/perf/ring.hpp"

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
  std::uint32_t pad = 0;
};

/// A tracepoint hit delivered through the engine's BPF channel (system-wide tracepoint probes),
/// read where it lies in the channel's ring: no perf record is rebuilt for it, nothing copied.
/// Valid during the callback only.
class DeliveredSample {
 public:
  DeliveredSample() = default;
  /// `record`: a DeliveredHeader, then its `size` bytes (the engine checked they are there).
  explicit DeliveredSample(const std::byte* record) noexcept : rec_(record) {}

  [[nodiscard]] std::uint64_t time() const noexcept { return load<std::uint64_t>(0); }
  [[nodiscard]] std::uint32_t probe() const noexcept { return load<std::uint32_t>(8); }
  [[nodiscard]] std::uint32_t pid() const noexcept { return load<std::uint32_t>(16); }
  [[nodiscard]] std::uint32_t tid() const noexcept { return load<std::uint32_t>(20); }
  [[nodiscard]] std::uint32_t cpu() const noexcept { return load<std::uint32_t>(24); }
  /// The tracepoint's record (common fields first).
  [[nodiscard]] std::span<const std::byte> raw() const noexcept {
    return {rec_ + sizeof(DeliveredHeader), load<std::uint32_t>(12)};
  }
  /// The 4 bytes at `offset` of the header (offsetof(DeliveredHeader, ...)).
  [[nodiscard]] std::uint32_t word32(std::size_t offset) const noexcept {
    return load<std::uint32_t>(offset);
  }
  /// The whole delivered record: the DeliveredHeader, then raw().
  [[nodiscard]] std::span<const std::byte> bytes() const noexcept {
    return {rec_, sizeof(DeliveredHeader) + load<std::uint32_t>(12)};
  }

 private:
  template <typename T>
  [[nodiscard]] T load(std::size_t offset) const noexcept {
    T v;
    std::memcpy(&v, rec_ + offset, sizeof(T));
    return v;
  }
  const std::byte* rec_ = nullptr;
};
/// Takes delivered samples in place (Engine::on_delivered). @return false to have them rebuilt
/// as PERF_RECORD_SAMPLE records and handed to the batch handler instead.
using DeliveredHandler = std::function<bool(std::span<const DeliveredSample>)>;

}  // namespace tracer
