// Field binding: the events stages see (Event), the fields they read by name, bound once per
// probe (Schema::bind -> FieldRef, IntReader), and BPF payload schemas.
#pragma once

#include <array>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracer/bpf/schema.hpp"
#include "tracer/comm_cache.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/probe.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/value.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// BPF payload schema: the extension point for BTF structs emitted with bpf_perf_event_output.
// ProbeInfo will carry one per probe later; today a caller passes them to Pipeline::bind.

struct PayloadField {
  enum class Kind : std::uint8_t { kInt, kUint, kDouble, kString /* char[size] */ };
  std::string name;
  std::uint32_t offset = 0;  // from the start of the sample's RAW payload
  std::uint32_t size = 0;    // 1, 2, 4, 8 for numbers (4, 8 for doubles); array length for strings
  Kind kind = Kind::kInt;
};
using PayloadSchema = std::vector<PayloadField>;

/// The payload fields of a BPF output struct from its BTF (what Schema uses for a probe whose
/// ProbeInfo::payload is set and for which no PayloadSchema was given).
[[nodiscard]] PayloadSchema payload_from_btf(const bpf::StructSchema& schema);

// ---------------------------------------------------------------------------------------------
// Events: what stages see. One per record, built by the pipeline; stages may drop an event (later
// stages do not see it) or set derived values on it for later stages.

inline constexpr std::size_t kMaxDerived = 8;

struct Event {
  const RecordRef* ref = nullptr;
  const perf::Sample* sample = nullptr;  // set for kSample
  RecordKind kind = RecordKind::kOther;
  bool dropped = false;
  /// How many events this record stands for: 1, or for a counter's reading (a counting probe's
  /// record at each tick, ProbeInfo::counts_to_stages) its count since the last (its period).
  /// count and rate add it.
  std::uint64_t weight = 1;
  std::array<Value, kMaxDerived> derived{};  // slots handed out by Schema::add_derived

  void drop() noexcept { dropped = true; }
  [[nodiscard]] std::uint32_t probe() const noexcept { return ref != nullptr ? ref->probe : 0; }
};

class Schema;

/// An integer field of a sample read in place (InPlaceSample), read as a word without a Value
/// (the in-place path's fixed-width keys): where the word is in the sample's bytes() (for a
/// delivered sample pid, tid, cpu and time in its DeliveredHeader; for a perf ring's sample
/// those of its fixed layout; the tracepoint's fields in raw() after them), and which Value
/// alternative FieldRef::read gives for it. One load, no dispatch on the field's kind.
struct IntReader {
  std::uint32_t offset = 0;  // in InPlaceSample::bytes()
  std::uint8_t size = 0;     // 1, 2, 4 or 8; 0: the probe lacks the field (read() gives nothing)
  bool is_signed = false;    // sign-extended from `size` bytes
  bool as_uint = false;      // read() gives a uint64 (else an int64)
  bool in_header = false;    // before raw(): always there
  /// A char array of `size` bytes (at most 16: a comm, a char[16] field), up to its first NUL:
  /// read_string(), not read().
  bool is_string = false;

  /// The word of `s` (an int64's two's complement bits). @return false when read() gives no
  /// value for it (the field is missing, or past the end of a short record).
  [[nodiscard]] bool read(const InPlaceSample& s, std::uint64_t& v) const noexcept {
    if (size == 0)
      return false;
    const auto b = s.bytes();
    if (!in_header && std::size_t{offset} + size > b.size())
      return false;
    const std::byte* p = b.data() + offset;
    if (size == 4) {
      std::uint32_t x = 0;
      std::memcpy(&x, p, 4);
      v = is_signed ? static_cast<std::uint64_t>(std::int64_t{static_cast<std::int32_t>(x)}) : x;
    } else if (size == 8) {
      std::memcpy(&v, p, 8);
    } else if (size == 2) {
      std::uint16_t x = 0;
      std::memcpy(&x, p, 2);
      v = is_signed ? static_cast<std::uint64_t>(std::int64_t{static_cast<std::int16_t>(x)}) : x;
    } else {
      std::uint8_t x = 0;
      std::memcpy(&x, p, 1);
      v = is_signed ? static_cast<std::uint64_t>(std::int64_t{static_cast<std::int8_t>(x)}) : x;
    }
    return true;
  }
  /// The string of `s` (is_string). @return false when read() gives no value for it.
  [[nodiscard]] bool read_string(const InPlaceSample& s, std::string_view& out) const noexcept {
    if (size == 0)
      return false;
    const auto b = s.bytes();
    if (!in_header && std::size_t{offset} + size > b.size())
      return false;
    const char* p = reinterpret_cast<const char*>(b.data()) + offset;
    const void* nul = std::memchr(p, '\0', size);
    out = std::string_view(p, nul != nullptr
                                  ? static_cast<std::size_t>(static_cast<const char*>(nul) - p)
                                  : std::size_t{size});
    return true;
  }
  /// The string of `s` (is_string) as two words, its bytes zero-padded: what a FixedKey holds,
  /// read with word loads and no call (the first NUL found by a bit trick, the bytes after it
  /// cleared, since a char array may hold anything there). @return its length, or -1 when
  /// read() gives no value for it.
  [[nodiscard]] int read_string_words(const InPlaceSample& s, std::uint64_t* w) const noexcept {
    static_assert(std::endian::native == std::endian::little, "the first byte is the lowest");
    if (size == 0)
      return -1;
    const auto b = s.bytes();
    if (!in_header && std::size_t{offset} + size > b.size())
      return -1;
    const std::byte* p = b.data() + offset;
    std::uint64_t lo = 0, hi = 0;
    if (size == 16) [[likely]] {
      std::memcpy(&lo, p, 8);
      std::memcpy(&hi, p + 8, 8);
    } else {
      std::array<std::byte, 16> buf{};
      std::memcpy(buf.data(), p, size);
      std::memcpy(&lo, buf.data(), 8);
      std::memcpy(&hi, buf.data() + 8, 8);
    }
    // A byte's top bit in zeros(x) for its first zero byte (bits above it may be set falsely,
    // never below): the lowest set bit is the first NUL.
    constexpr std::uint64_t kOnes = 0x0101010101010101ULL, kTops = 0x8080808080808080ULL;
    const auto zeros = [](std::uint64_t x) noexcept { return (x - kOnes) & ~x & kTops; };
    // n < 8 bytes kept: the mask's shift is below 64.
    if (const std::uint64_t z = zeros(lo); z != 0) {
      const int n = std::countr_zero(z) / 8;
      w[0] = lo & ((std::uint64_t{1} << (8 * n)) - 1);
      w[1] = 0;
      return n;
    }
    w[0] = lo;
    if (const std::uint64_t z = zeros(hi); z != 0) {
      const int n = std::countr_zero(z) / 8;
      w[1] = hi & ((std::uint64_t{1} << (8 * n)) - 1);
      return 8 + n;
    }
    w[1] = hi;
    return 16;
  }
  /// The index in Value of what read() gives when there is a value (1 int64, 2 uint64).
  [[nodiscard]] std::size_t value_index() const noexcept { return as_uint ? 2 : 1; }
};

/// A field bound once for every probe of the pipeline: read() is a switch on a precomputed
/// accessor, no string lookup, no allocation.
class FieldRef {
 public:
  FieldRef() = default;
  [[nodiscard]] Value read(const Event& e) const noexcept;
  /// The field of a sample read in place (what read() gives for the same sample as a decoded
  /// record); only where reads_in_place(s.probe()).
  [[nodiscard]] Value read(const InPlaceSample& s) const noexcept;
  /// Whether probe `probe`'s samples read in place have this field: pid, tid, cpu and time
  /// where its in-place form holds them (a delivered sample's header; a perf sample's fixed
  /// layout), probe, kind, syscall and the tracepoint's own fields (or a field the probe lacks:
  /// missing either way). Not derived fields, comm, stacks, or a probe whose samples are never
  /// read in place (a layout that is not fixed).
  [[nodiscard]] bool reads_in_place(std::uint32_t probe) const noexcept;
  /// Probe `probe`'s in-place value of this field as an IntReader, when read() gives an integer
  /// (or nothing) there: pid, tid, cpu, time and the tracepoint's fixed integers; or a short
  /// string: a delivered sample's comm, a tracepoint's char array of at most 16 bytes.
  [[nodiscard]] std::optional<IntReader> int_reader(std::uint32_t probe) const noexcept;
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// The type of the field on the first probe that has it.
  [[nodiscard]] FieldType type() const noexcept { return type_; }
  [[nodiscard]] bool bound() const noexcept { return schema_ != nullptr; }
  /// Whether probe `index` has this field (else read() yields monostate for its events).
  [[nodiscard]] bool available(std::uint32_t probe) const noexcept;

  enum class Source : std::uint8_t {
    kMissing,
    kPid,
    kTid,
    kComm,
    kCpu,
    kTime,
    kIp,
    kAddr,
    kPeriod,
    kCallchain,
    kKernelStack,     // the callchain's kernel part
    kUserStack,       // the callchain's user part
    kUserStackDwarf,  // the user stack unwound from REGS_USER + STACK_USER (DWARF CFI)
    kCallchainDwarf,  // the callchain's kernel part, then the DWARF-unwound user stack
    kProbe,
    kKind,
    kLost,
    kAuxSize,
    kTracefs,         // a tracefs format field: int or string (read_int / read_string)
    kTracefsElement,  // name[i] of a fixed or dynamic array
    kPayload,         // a PayloadField
    kReg,             // a sample_regs_user register
    kDerived,         // Event::derived[slot]
    kSyscallName,     // `syscall`: raw_syscalls' `id` (`field`) by name, or syscalls:sys_*_X's X
  };
  struct Accessor {
    Source source = Source::kMissing;
    FieldType type = FieldType::kNone;
    std::uint32_t offset = 0, size = 0, index = 0;
    bool is_signed = false;
    const tracefs::Field* field = nullptr;
    int slot = -1;  // register slot or derived slot
  };

 private:
  friend class Schema;
  /// The sources read from a sample's RAW bytes (tracefs fields, payload, syscall).
  [[nodiscard]] Value read_raw(const Accessor& a,
                               std::uint32_t probe,
                               std::span<const std::byte> raw) const noexcept;
  std::string name_;
  FieldType type_ = FieldType::kNone;
  const Schema* schema_ = nullptr;
  /// int_reader() as computed once at bind (Schema::bind), per probe.
  [[nodiscard]] std::optional<IntReader> compute_int_reader(std::uint32_t probe) const noexcept;
  std::vector<Accessor> by_probe_;                          // indexed by RecordRef::probe
  std::vector<std::optional<IntReader>> in_place_readers_;  // by probe: int_reader()
  Accessor derived_{};  // used for every probe when source is kDerived
};

/// The probes a pipeline reads and the fields they offer, plus the derived fields that stages
/// add for the stages after them. Built by Pipeline::bind from Engine::probes().
class Schema {
 public:
  /// Copies `probes` (RecordRef::probe indexes them); payloads[i] is probe i's BPF payload.
  Schema(std::span<const ProbeInfo> probes,
         std::span<const PayloadSchema> payloads,
         CommCache& comm);
  Schema(const Schema&) = delete;
  Schema& operator=(const Schema&) = delete;

  [[nodiscard]] std::span<const ProbeInfo> probes() const noexcept { return probes_; }
  [[nodiscard]] std::optional<std::uint32_t> probe_index(std::string_view name) const noexcept;

  /// Binds `name` on every probe. A name no probe has adds one diagnostic at `where` naming each
  /// probe with the fields it has (and a "did you mean" hint).
  /// @return the accessor, or nullopt after adding the diagnostic.
  [[nodiscard]] std::optional<FieldRef> bind(std::string_view name,
                                             const SourceRegion& where,
                                             Diagnostics& diags) const;
  /// Every field name probe `probe` offers (sample fields first, then format/payload/registers,
  /// then derived).
  [[nodiscard]] std::vector<std::string> field_names(std::uint32_t probe) const;
  /// Payload fields of probe `probe` (format fields without common_*, payload fields): what
  /// per-event outputs print by default.
  [[nodiscard]] std::vector<std::string> payload_field_names(std::uint32_t probe) const;

  /// A value that a stage sets on the events it hands on (Event::derived[slot]).
  /// @return the slot, or nullopt if the name exists already or kMaxDerived slots are taken.
  [[nodiscard]] std::optional<std::uint32_t> add_derived(std::string name, FieldType type);
  [[nodiscard]] std::size_t derived_count() const noexcept { return derived_.size(); }

  /// Where probe `probe` keeps field `name` (not derived ones), or nullopt: what bind() resolves
  /// per probe, for the in-kernel planner.
  [[nodiscard]] std::optional<FieldRef::Accessor> lookup(std::uint32_t probe,
                                                         std::string_view name) const {
    return resolve(probe, name);
  }

  [[nodiscard]] CommCache& comm() const noexcept { return *comm_; }
  /// The symbolizer of stacks (made on first use; the pipeline feeds it the task records when
  /// some stage bound a stack field).
  [[nodiscard]] symbols::Symbolizer& symbolizer() const;
  /// Whether some stage bound `callchain`, `kstack` or `ustack`.
  [[nodiscard]] bool stacks_bound() const noexcept { return stacks_bound_; }
  /// The user stack of a sample unwound with DWARF CFI (after the callchain's kernel part when
  /// `with_kernel`): a view of a scratch buffer, valid until the next call.
  [[nodiscard]] IpList unwound_stack(const Event& e, bool with_kernel) const noexcept;
  /// Options of the symbolizer made by symbolizer() (set before the stages bind).
  void set_symbolize_options(symbols::SymbolizeOptions options) {
    symbolize_options_ = std::move(options);
  }
  /// Takes `old`'s symbolizer (what it learnt of the processes' maps; stages that interned
  /// stacks keep referring to it): a schema rebuilt for changed probes (Pipeline::rebind).
  void adopt_symbolizer(Schema& old) noexcept { symbolizer_ = std::move(old.symbolizer_); }
  /// Whether some stage bound the sample field `comm` (thread names at event time then need the
  /// records in time order, COMM and FORK records included).
  [[nodiscard]] bool comm_bound() const noexcept { return comm_bound_; }

 private:
  std::optional<FieldRef::Accessor> resolve(std::uint32_t probe, std::string_view name) const;
  std::vector<ProbeInfo> probes_;
  std::vector<PayloadSchema> payloads_;
  std::vector<std::pair<std::string, FieldType>> derived_;
  CommCache* comm_;
  mutable bool comm_bound_ = false;
  mutable bool stacks_bound_ = false;
  symbols::SymbolizeOptions symbolize_options_;
  mutable std::unique_ptr<symbols::Symbolizer> symbolizer_;
  mutable std::vector<std::uint64_t> unwound_;  // unwound_stack()'s scratch
};

}  // namespace tracer

#pragma GCC visibility pop
