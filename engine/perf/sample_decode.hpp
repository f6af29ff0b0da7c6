// The SAMPLE half of perf::decode(), inline: the ring drain (perf::RingReader) decodes each
// sample with it without a call per record. Internal to the engine; decode() is the public entry.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "tracer/perf/record.hpp"

namespace tracer::perf::detail {

/// The u64-sized sample fields: a layout of these and at most RAW (last) is `fixed`.
inline constexpr std::uint64_t kFixedSampleFields =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
    PERF_SAMPLE_ADDR | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU |
    PERF_SAMPLE_PERIOD;

[[nodiscard]] constexpr bool is_fixed(std::uint64_t sample_type) noexcept {
  return (sample_type & ~(kFixedSampleFields | PERF_SAMPLE_RAW)) == 0;
}

/// Fields of a `fixed` layout in the kernel's order (perf_output_sample()): one size check,
/// then plain loads. @return false if the record is too short for its fields or has whole
/// words past them.
/// kSampleType != 0: the layout's sample_type known at compile time (the field tests fold
/// away; the ring drain instantiates the engine's usual layouts), else l.sample_type.
template <std::uint64_t kSampleType = 0>
[[nodiscard]] inline bool decode_fixed_sample(const std::byte* p,
                                              const std::byte* end,
                                              const SampleLayout& l,
                                              Sample& s) noexcept {
  static_assert(is_fixed(kSampleType));
  const std::uint64_t st = kSampleType != 0 ? kSampleType : l.sample_type;
  const bool raw = (st & PERF_SAMPLE_RAW) != 0U;
  const std::size_t fixed_bytes =
      kSampleType != 0 ? std::popcount(kSampleType & kFixedSampleFields) * 8U : l.fixed_bytes;
  const auto left = static_cast<std::size_t>(end - p);
  // The kernel writes exactly the fields (RAW padded to 8 bytes): bytes past them mean the
  // sample_type does not describe this record (a damaged attr), not a record to guess at.
  if (left < fixed_bytes + (raw ? 4U : 0U) || (!raw && left - fixed_bytes >= 8))
    return false;
  s.sample_type = st;
  const auto u64 = [&p]() noexcept {
    const auto v = load<std::uint64_t>(p);
    p += 8;
    return v;
  };
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    s.identifier = u64();
  if ((st & PERF_SAMPLE_IP) != 0U)
    s.ip = u64();
  if ((st & PERF_SAMPLE_TID) != 0U) {
    const auto v = u64();
    s.pid = static_cast<std::uint32_t>(v);
    s.tid = static_cast<std::uint32_t>(v >> 32);
  }
  if ((st & PERF_SAMPLE_TIME) != 0U)
    s.time = u64();
  if ((st & PERF_SAMPLE_ADDR) != 0U)
    s.addr = u64();
  if ((st & PERF_SAMPLE_ID) != 0U)
    s.id = u64();
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    s.stream_id = u64();
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    const auto v = u64();
    s.cpu = static_cast<std::uint32_t>(v);
    s.res = static_cast<std::uint32_t>(v >> 32);
  }
  if ((st & PERF_SAMPLE_PERIOD) != 0U)
    s.period = u64();
  if (raw) {
    const auto n = load<std::uint32_t>(p);
    p += 4;
    if (n > static_cast<std::size_t>(end - p) || static_cast<std::size_t>(end - p) - n >= 8)
      return false;
    s.raw = {p, n};
  }
  return true;
}

/// Every other layout (callchains, registers, stacks, ...): bounds-checked field by field.
/// Out of line (record.cpp). @return kFieldOverrun if a field runs past `end`, kUndescribed
/// if whole words are left past the fields.
[[nodiscard]] DecodeError decode_general_sample(const std::byte* p,
                                                const std::byte* end,
                                                const SampleLayout& l,
                                                Sample& s) noexcept;

/// `[bpf] time`: the sample's time read from its payload, where the layout says (0 if the
/// payload is too short for it).
inline void set_payload_time(const SampleLayout& layout, Sample& s) noexcept {
  if (layout.raw_time_offset >= 0) {
    const auto off = static_cast<std::size_t>(layout.raw_time_offset);
    s.time = s.raw.size() >= off + 8 ? load<std::uint64_t>(s.raw.data() + off) : 0;
  }
}

/// Every field of a sample's sample_id copy, from the sample (no reset needed).
inline void set_sample_id(std::uint64_t sample_type, const Sample& s, SampleId& id) noexcept {
  id.pid = s.pid, id.tid = s.tid, id.time = s.time, id.stream_id = s.stream_id;
  id.id = (sample_type & PERF_SAMPLE_IDENTIFIER) != 0U ? s.identifier : s.id;
  id.cpu = s.cpu, id.res = s.res;
  id.present = true;
}

/// The record fields every decoded record starts with: its header's, and its bytes `rec`.
inline void write_header(std::span<const std::byte> rec,
                         const perf_event_header& h,
                         Record& out) noexcept {
  out.type = h.type;
  out.misc = h.misc;
  out.size = h.size;
  out.bytes = rec;
}

/// Writes the PERF_RECORD_SAMPLE `rec` (exactly header.size bytes; the caller checked the
/// header: size >= 8, a multiple of 8) of a fixed layout (kSampleType != 0, or layout.fixed)
/// into `out`, whose body is `s`. `reused`: `s` holds the last complete Sample this function
/// wrote with the same layout, and out.sample_id was made from it, so the fields the layout
/// lacks are zero already and only the ones that change are written. @return false if the
/// record is too short for its fields (`s` is then marked incomplete: sample_type 0).
template <std::uint64_t kSampleType = 0>
[[nodiscard]] inline bool write_fixed_sample(std::span<const std::byte> rec,
                                             const perf_event_header& h,
                                             const SampleLayout& layout,
                                             Record& out,
                                             Sample& s,
                                             bool reused) noexcept {
  write_header(rec, h, out);
  const std::byte* body = rec.data() + sizeof(perf_event_header);
  const std::byte* end = rec.data() + rec.size();
  if (!decode_fixed_sample<kSampleType>(body, end, layout, s)) {
    // Half written: never reuse it as a complete Sample of this layout.
    s.sample_type = 0;
    return false;
  }
  set_payload_time(layout, s);
  auto& id = out.sample_id;
  if constexpr (kSampleType != 0) {
    if (reused) {
      if constexpr ((kSampleType & PERF_SAMPLE_TID) != 0U)
        id.pid = s.pid, id.tid = s.tid;
      if ((kSampleType & PERF_SAMPLE_TIME) != 0U || layout.raw_time_offset >= 0)
        id.time = s.time;
      if constexpr ((kSampleType & PERF_SAMPLE_IDENTIFIER) != 0U)
        id.id = s.identifier;
      else if constexpr ((kSampleType & PERF_SAMPLE_ID) != 0U)
        id.id = s.id;
      if constexpr ((kSampleType & PERF_SAMPLE_STREAM_ID) != 0U)
        id.stream_id = s.stream_id;
      if constexpr ((kSampleType & PERF_SAMPLE_CPU) != 0U)
        id.cpu = s.cpu, id.res = s.res;
      return true;
    }
  }
  set_sample_id(kSampleType != 0 ? kSampleType : layout.sample_type, s, id);
  return true;
}

/// Decodes the PERF_RECORD_SAMPLE `rec` (exactly header.size bytes; the caller checked the
/// header: size >= 8, a multiple of 8) into `out`. kSampleType: as for decode_fixed_sample
/// (non-zero only when layout.sample_type equals it).
// variant::emplace of a nothrow-constructible alternative cannot throw.
template <std::uint64_t kSampleType = 0>
[[nodiscard]] inline DecodeError decode_sample_record(  // NOLINT(bugprone-exception-escape)
    std::span<const std::byte> rec,
    const perf_event_header& h,
    const SampleLayout& layout,
    Record& out) noexcept {
  // Re-zeroing the whole Sample per record costs ~40% of decode time. A Sample decoded with the
  // same sample_type has every unconditional field overwritten below and its absent fields still
  // zero, so only the fields written conditionally (registers with ABI_NONE, an empty user
  // stack) need a reset, and only when the layout has them: a reset touches cache lines.
  const std::uint64_t st = kSampleType != 0 ? kSampleType : layout.sample_type;
  auto* s = std::get_if<Sample>(&out.body);
  const bool reused = s != nullptr && s->sample_type == st;
  if (reused) {
    if ((st & PERF_SAMPLE_REGS_USER) != 0U)
      s->regs_user = {};
    if ((st & PERF_SAMPLE_REGS_INTR) != 0U)
      s->regs_intr = {};
    if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
      s->stack_user = {};
      s->stack_user_dyn_size = 0;
    }
  } else {
    s = &out.body.emplace<Sample>();
  }
  if (kSampleType != 0 || layout.fixed) {
    if (write_fixed_sample<kSampleType>(rec, h, layout, out, *s, reused))
      return DecodeError::kOk;
    // Which way it failed (cold): the general decoder reads every layout.
    const auto e = decode_general_sample(rec.data() + sizeof(perf_event_header),
                                         rec.data() + rec.size(), layout, *s);
    s->sample_type = 0;
    return e == DecodeError::kOk ? DecodeError::kFieldOverrun : e;
  }
  write_header(rec, h, out);
  const std::byte* body = rec.data() + sizeof(perf_event_header);
  const std::byte* end = rec.data() + rec.size();
  if (const auto e = decode_general_sample(body, end, layout, *s); e != DecodeError::kOk) {
    s->sample_type = 0;  // half written: never reused as complete
    return e;
  }
  set_payload_time(layout, *s);
  set_sample_id(st, *s, out.sample_id);
  return DecodeError::kOk;
}

}  // namespace tracer::perf::detail
