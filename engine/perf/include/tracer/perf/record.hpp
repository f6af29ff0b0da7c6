// Records of the perf ring: zero-copy views decoded from raw bytes.
//
// Usage:
//   SampleLayout layout = SampleLayout::from(attr);
//   Record rec;
//   if (auto err = decode(bytes, layout, rec); err != DecodeError::kOk) { ++bad; }
//   else if (auto* s = std::get_if<Sample>(&rec.body)) use(s->raw);
//
// Every view points into `bytes`; nothing is allocated. Multi-byte values are read with memcpy,
// so input need not be aligned (perf.data files, fuzzers).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <variant>

#include "tracer/perf/abi.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

class EventAttr;

/// Reads a T from possibly unaligned bytes.
template <typename T>
[[nodiscard]] inline T load(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

/// An array of u64 inside a record (callchain ips, registers, counters): unaligned-safe view.
struct U64Array {
  const std::byte* data = nullptr;
  std::uint64_t size = 0;
  [[nodiscard]] std::uint64_t operator[](std::uint64_t i) const noexcept {
    return load<std::uint64_t>(data + i * 8);
  }
  [[nodiscard]] bool empty() const noexcept { return size == 0; }
};

/// The offsets and sizes that follow from an attr, computed once per event.
struct SampleLayout {
  std::uint64_t sample_type = 0;
  std::uint64_t read_format = 0;
  std::uint64_t branch_sample_type = 0;
  std::uint32_t regs_user_count = 0;  // popcount(sample_regs_user)
  std::uint32_t regs_intr_count = 0;  // popcount(sample_regs_intr)
  bool sample_id_all = false;
  /// Bytes of the sample_id trailer on non-SAMPLE records (0 without sample_id_all).
  std::uint32_t id_trailer_size = 0;
  /// Samples of this layout hold only fixed-size u64 fields, then at most RAW last: decode()
  /// checks their size once instead of per field. `fixed_bytes`: the fixed fields' bytes.
  bool fixed = false;
  std::uint32_t fixed_bytes = 0;
  /// A sample that carries its own timestamp in its RAW payload (a BPF output struct with a
  /// bpf_ktime_get_ns() field) and no PERF_SAMPLE_TIME: decode() takes Sample::time and
  /// sample_id.time from the payload's u64 at this offset (0 when the payload is shorter).
  /// -1: none. Set by whoever knows the payload (bpf::OutputChannel), never by from().
  std::int32_t raw_time_offset = -1;

  [[nodiscard]] static SampleLayout from(const EventAttr& attr) noexcept;
  [[nodiscard]] static SampleLayout from(std::uint64_t sample_type,
                                         std::uint64_t read_format,
                                         bool sample_id_all,
                                         std::uint64_t branch_sample_type = 0,
                                         std::uint64_t regs_user = 0,
                                         std::uint64_t regs_intr = 0) noexcept;
  [[nodiscard]] bool has(std::uint64_t bit) const noexcept { return (sample_type & bit) != 0; }
  /// Where a `fixed` layout's fields sit in its PERF_RECORD_SAMPLE records, in bytes from the
  /// record's header (-1: absent): what a sample read in place (tracer::InPlaceSample) reads
  /// without a decode. Zeros (and every field absent) for a layout that is not fixed.
  struct FixedOffsets {
    std::int16_t pid = -1, tid = -1, time = -1, cpu = -1;
    /// The RAW data (after its size word), or without RAW the end of the fixed fields.
    std::uint16_t raw = 0;
  };
  [[nodiscard]] FixedOffsets fixed_offsets() const noexcept;
};

/// read_format values (PERF_SAMPLE_READ, PERF_RECORD_READ, read(2) of a counter).
struct ReadView {
  std::uint64_t format = 0;
  const std::byte* data = nullptr;
  std::uint32_t bytes = 0;

  /// Members: 1 without PERF_FORMAT_GROUP, else nr.
  [[nodiscard]] std::uint64_t count() const noexcept;
  [[nodiscard]] std::uint64_t time_enabled() const noexcept;  // 0 if absent
  [[nodiscard]] std::uint64_t time_running() const noexcept;  // 0 if absent
  [[nodiscard]] std::uint64_t value(std::uint64_t i) const noexcept;
  [[nodiscard]] std::uint64_t id(std::uint64_t i) const noexcept;    // 0 if absent
  [[nodiscard]] std::uint64_t lost(std::uint64_t i) const noexcept;  // 0 if absent
  /// value * time_enabled / time_running (multiplexing scale); value itself when never
  /// multiplexed or when times are absent; 0 when the counter never ran.
  [[nodiscard]] double scaled(std::uint64_t i) const noexcept;
  /// Bytes this format occupies for `nr` members (nr ignored without GROUP).
  [[nodiscard]] static std::uint32_t size_for(std::uint64_t format, std::uint64_t nr) noexcept;
};

/// The sample_id trailer of non-SAMPLE records (sample_id_all), also the common fields of samples.
struct SampleId {
  std::uint32_t pid = 0, tid = 0;
  std::uint64_t time = 0;
  std::uint64_t id = 0;
  std::uint64_t stream_id = 0;
  std::uint32_t cpu = 0, res = 0;
  bool present = false;
};

struct BranchEntry {
  std::uint64_t from = 0, to = 0, flags = 0;
};
struct BranchStack {
  std::uint64_t nr = 0;
  std::uint64_t hw_idx = 0;
  bool has_hw_idx = false;
  const std::byte* entries = nullptr;  // nr * 24 bytes
  U64Array counters;                   // PERF_SAMPLE_BRANCH_COUNTERS, else empty
  [[nodiscard]] BranchEntry entry(std::uint64_t i) const noexcept {
    const std::byte* p = entries + i * 24;
    return {load<std::uint64_t>(p), load<std::uint64_t>(p + 8), load<std::uint64_t>(p + 16)};
  }
};

/// Where register `reg` (PERF_REG_* of <asm/perf_regs.h>) sits in a sample's register array
/// for the mask the event was opened with (the kernel writes them in bit order), or -1.
[[nodiscard]] constexpr int reg_slot(std::uint64_t mask, int reg) noexcept {
  if (reg < 0 || reg > 63 || ((mask >> reg) & 1U) == 0)
    return -1;
  return std::popcount(mask & ((std::uint64_t{1} << reg) - 1));
}

struct Regs {
  std::uint64_t abi = 0;  // PERF_SAMPLE_REGS_ABI_*; 0 means no registers
  U64Array regs;
};

/// A PERF_RECORD_SAMPLE. Fields that sample_type does not select are zero.
struct Sample {
  // The fields most samples carry come first: a decoded RAW|TID|TIME sample writes one cache
  // line of a RecordRef (the kernel's order is decode()'s business, not this struct's).
  std::uint64_t sample_type = 0;  // which fields below are meaningful
  std::uint32_t pid = 0, tid = 0;
  std::uint64_t time = 0;
  std::span<const std::byte> raw;
  std::uint32_t cpu = 0, res = 0;
  std::uint64_t id = 0;
  std::uint64_t identifier = 0;
  std::uint64_t stream_id = 0;
  std::uint64_t ip = 0;
  std::uint64_t addr = 0;
  std::uint64_t period = 0;
  U64Array callchain;  // with PERF_CONTEXT_* markers as the kernel wrote them
  ReadView read;
  BranchStack branch_stack;
  Regs regs_user;
  std::span<const std::byte> stack_user;
  std::uint64_t stack_user_dyn_size = 0;
  std::uint64_t weight = 0;  // WEIGHT, or WEIGHT_STRUCT's full u64
  std::uint32_t weight_var1_dw = 0;
  std::uint16_t weight_var2_w = 0, weight_var3_w = 0;
  std::uint64_t data_src = 0;
  std::uint64_t transaction = 0;
  Regs regs_intr;
  std::uint64_t phys_addr = 0;
  std::uint64_t cgroup = 0;
  std::uint64_t data_page_size = 0;
  std::uint64_t code_page_size = 0;
  std::span<const std::byte> aux;
};

struct Mmap {  // PERF_RECORD_MMAP
  std::uint32_t pid, tid;
  std::uint64_t addr, len, pgoff;
  std::string_view filename;
};
struct Mmap2 {  // PERF_RECORD_MMAP2
  std::uint32_t pid, tid;
  std::uint64_t addr, len, pgoff;
  bool has_build_id;  // misc & PERF_RECORD_MISC_MMAP_BUILD_ID
  std::uint32_t maj, min;
  std::uint64_t ino, ino_generation;
  std::uint8_t build_id_size;
  std::span<const std::byte> build_id;  // 20 bytes, build_id_size of them valid
  std::uint32_t prot, flags;
  std::string_view filename;
};
struct Lost {  // PERF_RECORD_LOST
  std::uint64_t id, lost;
};
struct Comm {  // PERF_RECORD_COMM
  std::uint32_t pid, tid;
  std::string_view comm;
  bool exec;  // misc & PERF_RECORD_MISC_COMM_EXEC
};
struct TaskEvent {  // PERF_RECORD_EXIT and PERF_RECORD_FORK
  std::uint32_t pid, ppid, tid, ptid;
  std::uint64_t time;
};
struct Throttle {  // PERF_RECORD_THROTTLE and PERF_RECORD_UNTHROTTLE
  std::uint64_t time, id, stream_id;
};
struct ReadRecord {  // PERF_RECORD_READ
  std::uint32_t pid, tid;
  ReadView values;
};
struct Aux {  // PERF_RECORD_AUX
  std::uint64_t aux_offset, aux_size, flags;
  [[nodiscard]] bool truncated() const noexcept { return (flags & abi::kAuxFlagTruncated) != 0; }
  [[nodiscard]] bool overwrite() const noexcept { return (flags & abi::kAuxFlagOverwrite) != 0; }
  [[nodiscard]] bool partial() const noexcept { return (flags & abi::kAuxFlagPartial) != 0; }
  [[nodiscard]] bool collision() const noexcept { return (flags & abi::kAuxFlagCollision) != 0; }
};
struct ItraceStart {  // PERF_RECORD_ITRACE_START
  std::uint32_t pid, tid;
};
struct LostSamples {  // PERF_RECORD_LOST_SAMPLES
  std::uint64_t lost;
};
struct Switch {   // PERF_RECORD_SWITCH and PERF_RECORD_SWITCH_CPU_WIDE
  bool out;       // misc & PERF_RECORD_MISC_SWITCH_OUT
  bool preempt;   // misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT
  bool cpu_wide;  // SWITCH_CPU_WIDE: next_prev_* are meaningful
  std::uint32_t next_prev_pid, next_prev_tid;
};
struct Namespaces {  // PERF_RECORD_NAMESPACES
  std::uint32_t pid, tid;
  std::uint64_t nr;
  const std::byte* entries;  // nr * {u64 dev, u64 ino}
  [[nodiscard]] std::uint64_t dev(std::uint64_t i) const noexcept {
    return load<std::uint64_t>(entries + i * 16);
  }
  [[nodiscard]] std::uint64_t ino(std::uint64_t i) const noexcept {
    return load<std::uint64_t>(entries + i * 16 + 8);
  }
};
struct Ksymbol {  // PERF_RECORD_KSYMBOL
  std::uint64_t addr;
  std::uint32_t len;
  std::uint16_t ksym_type, flags;
  std::string_view name;
};
struct BpfEvent {  // PERF_RECORD_BPF_EVENT
  std::uint16_t type, flags;
  std::uint32_t id;
  std::span<const std::byte> tag;  // BPF_TAG_SIZE = 8
};
struct Cgroup {  // PERF_RECORD_CGROUP
  std::uint64_t id;
  std::string_view path;
};
struct TextPoke {  // PERF_RECORD_TEXT_POKE
  std::uint64_t addr;
  std::uint16_t old_len, new_len;
  std::span<const std::byte> old_bytes, new_bytes;
};
struct AuxOutputHwId {  // PERF_RECORD_AUX_OUTPUT_HW_ID
  std::uint64_t hw_id;
};
/// A record type this code does not know (or one deliberately skipped): header and bytes only.
struct Unknown {};

using RecordBody = std::variant<Unknown,
                                Sample,
                                Mmap,
                                Mmap2,
                                Lost,
                                Comm,
                                TaskEvent,
                                Throttle,
                                ReadRecord,
                                Aux,
                                ItraceStart,
                                LostSamples,
                                Switch,
                                Namespaces,
                                Ksymbol,
                                BpfEvent,
                                Cgroup,
                                TextPoke,
                                AuxOutputHwId>;

struct Record {
  std::uint32_t type = 0;
  std::uint16_t misc = 0;
  std::uint16_t size = 0;
  std::span<const std::byte> bytes;  // the whole record, header included
  SampleId sample_id;  // trailer of non-SAMPLE records; for SAMPLEs, a copy of its id fields
  RecordBody body;
  [[nodiscard]] std::uint16_t cpumode() const noexcept { return misc & abi::kMiscCpumodeMask; }
};

enum class DecodeError : std::uint8_t {
  kOk = 0,
  kTruncatedHeader,  // fewer than 8 bytes
  kZeroSize,         // header.size == 0
  kSizePastData,     // header.size larger than the bytes given
  kMisaligned,       // header.size not a multiple of 8
  kFieldOverrun,     // a field (or an nr/size in it) runs past the record
  kTrailerOverrun,   // the sample_id trailer does not fit
  kUndescribed,      // a SAMPLE has whole words past the fields its sample_type describes
};
[[nodiscard]] std::string_view to_string(DecodeError e) noexcept;

/// Decodes one record starting at bytes[0]. On kOk `out` holds views into `bytes`; otherwise `out`
/// is unspecified (but nothing was read out of bounds). Unknown record types decode to Unknown
/// (kOk) so callers skip them by header.size.
[[nodiscard]] DecodeError decode(std::span<const std::byte> bytes,
                                 const SampleLayout& layout,
                                 Record& out) noexcept;

/// Counts decode errors by kind (per ring or per file).
struct DecodeStats {
  std::uint64_t records = 0;
  std::uint64_t errors = 0;
  std::uint64_t unknown = 0;
  std::uint64_t by_error[8] = {};
  void note(DecodeError e) noexcept {
    if (e == DecodeError::kOk)
      return;
    ++errors;
    ++by_error[static_cast<std::uint8_t>(e) & 7U];
  }
};

/// The event id of a record without decoding it fully: with PERF_SAMPLE_IDENTIFIER it sits at a
/// fixed place (first u64 of a SAMPLE body, last u64 of other records' trailer), which is how a
/// reader with several layouts on one ring picks the layout. @return 0 if absent or truncated.
[[nodiscard]] std::uint64_t peek_identifier(std::span<const std::byte> bytes,
                                            bool sample_id_all) noexcept;

/// Human name of a record type ("SAMPLE", "MMAP2", ...), "UNKNOWN" otherwise.
[[nodiscard]] std::string_view record_type_name(std::uint32_t type) noexcept;

}  // namespace tracer::perf

#pragma GCC visibility pop
