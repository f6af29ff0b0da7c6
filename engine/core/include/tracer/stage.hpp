// The pipeline stage API: what a stage sees (Event), how it reads fields (Schema, FieldRef, Value),
// where it writes (Sink, Table), its lifecycle (Stage), the roles some stages have (Aggregation,
// Output) and the registry of stages by name. What a stage type needs of a run: stage_spec.hpp.
//
// Usage (a stage's life, driven by tracer::Pipeline):
//   auto stage = registry.make("count");               // from the explicit table of built-ins
//   stage->configure(options_table, diags);            // setup: option errors with positions
//   stage->bind(ctx, diags);                           // once per run: names -> FieldRef accessors
//   stage->start();                                    // the run begins (not in `tracer check`)
//   stage->on_events(events);                          // hot path: noexcept, no allocation
//   if (auto* agg = stage->aggregation())              // the aggregation role: at each `every`
//     agg->snapshot(table, /*reset=*/true);            //   and at stop, a table for the
//                                                      //   outputs after it (Output::on_table)
//   stage->stop();                                     // flush and close outputs
//
// Field names a stage may bind (per probe, resolved once at bind):
//   sample fields   pid tid comm cpu time ip addr period callchain kstack ustack probe kind
//                   lost aux_size
//   tracefs fields  every non-common field of the probe's `format` by name (ints, char arrays,
//                   __data_loc/__rel_loc strings), and array elements as name[i]
//   uprobe registers arg0..arg5 and retval (x86-64 SysV: rdi rsi rdx rcx r8 r9, rax) when the
//                   probe's sample_regs_user has them
//   payload fields  fields of a PayloadSchema (BTF struct of a BPF output payload)
//   derived fields  values an upstream stage hands on (latency's `duration`)
#pragma once

#include <array>
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

#include "tracer/bpf/map_source.hpp"
#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/kernel_form.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/probe.hpp"
#include "tracer/stage_spec.hpp"
#include "tracer/symbols/symbols.hpp"

namespace tracer {

// ---------------------------------------------------------------------------------------------
// Record kinds (RecordKind, KindMask: stage_spec.hpp, where a stage declares the kinds it wants).

[[nodiscard]] RecordKind kind_of(const perf::Record& record) noexcept;

// ---------------------------------------------------------------------------------------------
// Values: read in place, never allocated. Strings view the record (or the CommCache) and are valid
// during on_events only.

/// A callchain used as a value (an aggregation key): the ips as the kernel wrote them (`callchain`,
/// PERF_CONTEXT_* markers included), or one part of it (`kstack`, `ustack`: no markers), and the
/// process whose address space the user addresses belong to (what symbolizes them).
struct IpList {
  perf::U64Array ips;
  std::uint32_t pid = 0;
};

using Value =
    std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string_view, IpList>;

enum class FieldType : std::uint8_t { kNone, kInt, kUint, kDouble, kString, kIps };
[[nodiscard]] std::string_view to_string(FieldType t) noexcept;

[[nodiscard]] inline bool is_none(const Value& v) noexcept {
  return std::holds_alternative<std::monostate>(v);
}
/// Integers and doubles as a double (nullopt for strings, ip lists and missing values).
[[nodiscard]] std::optional<double> to_double(const Value& v) noexcept;
/// Integers (and doubles, truncated) as int64; uint64 above INT64_MAX wraps.
[[nodiscard]] std::optional<std::int64_t> to_int(const Value& v) noexcept;

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
// comm of every thread: from COMM records as they pass, from /proc/TID/comm on a miss.

struct CommCacheOptions {
  std::size_t capacity = 32768;     // entries (rounded up to a multiple of kWays); bounded memory
  std::string proc_root = "/proc";  // tests point this at a fake tree
  bool read_proc = true;
};

/// A bounded thread id -> comm map. Lookups and updates do not allocate; a miss reads
/// /proc/TID/comm once with open/read into the entry (an absent task is remembered as "").
class CommCache {
 public:
  explicit CommCache(CommCacheOptions options = {});
  static constexpr std::size_t kWays = 4;
  static constexpr std::size_t kCommLen = 16;  // TASK_COMM_LEN

  /// Reads the comm of every thread now in /proc (proc_root), so threads that exit before their
  /// first event is looked at keep their name. Does nothing without read_proc.
  /// @return the threads read.
  std::size_t seed();
  /// A COMM record: the thread was renamed (exec or prctl).
  void update(std::uint32_t tid, std::string_view comm) noexcept;
  /// A FORK record: the new thread `child` starts with the comm of `parent` (as the kernel's
  /// copy_process copies task->comm), so short-lived children keep a name after they exit.
  void fork(std::uint32_t parent, std::uint32_t child) noexcept;
  /// The comm of `tid` ("swapper" for tid 0, the idle tasks, as perf names them), or "" when
  /// unknown. The view stays valid until that entry is evicted (at
  /// least until `capacity / kWays` other threads were looked up).
  [[nodiscard]] std::string_view lookup(std::uint32_t tid) noexcept;
  [[nodiscard]] std::uint64_t proc_reads() const noexcept { return proc_reads_; }
  [[nodiscard]] std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  struct Entry {
    std::uint32_t tid = 0;
    std::uint32_t stamp = 0;  // 0: free; else last use (LRU within a set)
    std::uint8_t len = 0;
    std::array<char, kCommLen> comm{};
  };
  Entry& slot_for(std::uint32_t tid, bool& found) noexcept;
  struct Free {
    void operator()(Entry* p) const noexcept;
  };
  CommCacheOptions options_;
  /// calloc'd: all-zero entries are free ones, and the pages of a large cache are only
  /// touched as threads fill them (a replay's cache holds 2^18 threads).
  std::unique_ptr<Entry[], Free> entries_;
  std::size_t size_ = 0;
  std::uint32_t clock_ = 0;
  std::uint64_t proc_reads_ = 0, evictions_ = 0;
};

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

/// An integer field of a delivered sample, read as a word without a Value (the in-place path's
/// fixed-width keys): where the word is in the delivered record (DeliveredSample::bytes(): pid,
/// tid, cpu and time in its header, the tracepoint's fields after it), and which Value
/// alternative FieldRef::read gives for it. One load, no dispatch on the field's kind.
struct IntReader {
  std::uint32_t offset = 0;  // in DeliveredSample::bytes()
  std::uint8_t size = 0;     // 1, 2, 4 or 8; 0: the probe lacks the field (read() gives nothing)
  bool is_signed = false;    // sign-extended from `size` bytes
  bool as_uint = false;      // read() gives a uint64 (else an int64)
  bool in_header = false;    // within the DeliveredHeader: always there

  /// The word of `s` (an int64's two's complement bits). @return false when read() gives no
  /// value for it (the field is missing, or past the end of a short record).
  [[nodiscard]] bool read(const DeliveredSample& s, std::uint64_t& v) const noexcept {
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
  /// The index in Value of what read() gives when there is a value (1 int64, 2 uint64).
  [[nodiscard]] std::size_t value_index() const noexcept { return as_uint ? 2 : 1; }
};

/// A field bound once for every probe of the pipeline: read() is a switch on a precomputed
/// accessor, no string lookup, no allocation.
class FieldRef {
 public:
  FieldRef() = default;
  [[nodiscard]] Value read(const Event& e) const noexcept;
  /// The field of a sample delivered in place (what read() gives for the same sample rebuilt
  /// as a record); only where reads_delivered(s.probe).
  [[nodiscard]] Value read(const DeliveredSample& s) const noexcept;
  /// Whether probe `probe`'s delivered samples have this field in their compact form: pid, tid,
  /// cpu, time, probe, kind, syscall and the tracepoint's own fields (or a field the probe
  /// lacks: missing either way). Not derived fields, comm, or what a compact sample has not.
  [[nodiscard]] bool reads_delivered(std::uint32_t probe) const noexcept;
  /// Probe `probe`'s delivered samples' value of this field as an IntReader, when read() gives
  /// an integer (or nothing) there: pid, tid, cpu, time and the tracepoint's fixed integers.
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
  std::vector<Accessor> by_probe_;  // indexed by RecordRef::probe
  Accessor derived_{};              // used for every probe when source is kDerived
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

// ---------------------------------------------------------------------------------------------
// Output: a sink is given by the caller (stdout, a file, or a string in tests).

class Sink {
 public:
  /// Writes to `file` (not owned, not closed).
  [[nodiscard]] static Sink to_file(std::FILE* file) noexcept;
  /// Appends to `*text` (tests).
  [[nodiscard]] static Sink to_string(std::string* text) noexcept;
  /// Creates or truncates `path` (closed on destruction).
  /// @return the sink, or a Failure with the errno of fopen.
  [[nodiscard]] static Result<Sink> open(const std::string& path);

  void write(std::string_view bytes) noexcept;
  void flush() noexcept;
  /// The errno of the first write or flush that failed (a full disk, a closed pipe), else 0.
  [[nodiscard]] int error() const noexcept { return error_; }

 private:
  int error_ = 0;
  struct Closer {
    void operator()(std::FILE* f) const noexcept;
  };
  std::FILE* file_ = nullptr;
  std::string* text_ = nullptr;
  std::unique_ptr<std::FILE, Closer> owned_;
};

/// A stack in a table: frames leaf first, symbolized when the table was made.
struct Stack {
  std::vector<symbols::Frame> frames;
  friend bool operator==(const Stack&, const Stack&) = default;
};

/// A cell of an aggregation row (owned: rows outlive the records they came from).
using Cell = std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string, Stack>;

struct HistBucket {
  std::int64_t lo = 0, hi = 0;  // [lo, hi)
  bool lo_unbounded = false;    // (..., hi)
  bool hi_unbounded = false;    // [lo, ...)
  std::uint64_t count = 0;
  std::string label;  // "[4, 8)", "[1K, 2K)", "[0]", "(..., 0)": as the stage renders it
};

struct TableRow {
  std::vector<Cell> keys;
  std::vector<Cell> values;         // one per Table::value_names
  std::vector<HistBucket> buckets;  // histograms: from the first to the last non-empty bucket
};

/// What an aggregation stage emits at each interval and at stop.
struct Table {
  std::string stage;  // "count"
  std::string title;  // "count by comm", "hist of duration"
  std::vector<std::string> key_names;
  std::vector<std::string> value_names;
  bool histogram = false;
  std::vector<TableRow> rows;  // ordered (top N first), already cut to `top`
  /// The rows `top` cut, in the same order: outputs that need every row (folded stacks, flame
  /// graphs, CSV) read rows then rest; a table on a terminal shows rows only.
  std::vector<TableRow> rest;
  std::chrono::nanoseconds since{};  // the interval this table covers: [since, time)
  std::chrono::nanoseconds time{};
  std::uint32_t interval = 0;  // 0, 1, 2 ... per emitting stage
  std::string note;            // e.g. the quantile error bound
};

/// A stack as one line, outermost frame first, frames by name without offsets and separated by
/// ';' (the folded form of flamegraph.pl's stackcollapse; unknown frames as "0x...").
[[nodiscard]] std::string folded_text(const Stack& s);
/// Renders a cell for text output ("" for none; a stack as "outer;...;leaf", folded order).
[[nodiscard]] std::string to_text(const Cell& c);

// ---------------------------------------------------------------------------------------------
// Stage options: reads a [[stage]] table against the stage's spec.

/// Validates `table` against `spec` with the recipe loader's validator and wording (unknown keys
/// with a hint, wrong types with an example, missing required options, bad durations and sizes;
/// the key `use` is the loader's and is skipped) and gives typed access. Errors go to `diags`
/// with the position of the offending key or value.
class StageOptions {
 public:
  StageOptions(const StageSpec& spec, const ConfigValue& table, Diagnostics& diags);

  [[nodiscard]] const ConfigValue* get(std::string_view name) const noexcept;
  /// The option's position, or the table's when absent.
  [[nodiscard]] SourceRegion where(std::string_view name) const;
  [[nodiscard]] std::optional<std::string> string(std::string_view name) const;
  [[nodiscard]] std::optional<std::int64_t> integer(std::string_view name) const;
  [[nodiscard]] std::optional<double> number(std::string_view name) const;
  [[nodiscard]] std::optional<bool> boolean(std::string_view name) const;
  /// kDuration: parsed; a bad duration (reported by the constructor) yields nullopt, and so
  /// does one that is not positive (reported here).
  [[nodiscard]] std::optional<std::chrono::nanoseconds> duration(std::string_view name);
  /// kStringList/kFieldList: each entry with its position (a single string is a list of one).
  [[nodiscard]] std::vector<std::pair<std::string, SourceRegion>> list(std::string_view name) const;
  [[nodiscard]] Diagnostics& diags() noexcept { return *diags_; }

 private:
  const ConfigValue* table_;
  Diagnostics* diags_;
};

// ---------------------------------------------------------------------------------------------
// Stage

struct BindContext {
  Schema& schema;
  Sink& out;                         // the pipeline's output (stdout for the CLI)
  bool upstream_aggregates = false;  // an aggregation stage precedes this one
  SourceRegion where{};              // the stage's table, for diagnostics without an option
  const MapSource* maps = nullptr;   // BPF maps (in-kernel aggregations), when the run has any
  /// What the stage asks of the pipeline, set by the pipeline from the stage's StageNeeds before
  /// bind. A stage whose options decide it (a `kinds` option; per-event output only without an
  /// aggregation before it) sets it in bind; the pipeline reads it back after.
  KindMask kinds = kind_bit(RecordKind::kSample);
  bool time_order = false;
  /// `tracer check`: bind to validate only. A stage opens, creates and writes nothing (an
  /// output's `path` is not touched: checking an untrusted recipe as root clobbers no file).
  bool dry_run = false;
};

class Aggregation;
class Output;

/// A pipeline stage: the small core every stage has. What only some stages do is a role reached
/// through a capability accessor (aggregation(), output()); what is fixed per stage type (record
/// kinds, time order, task records, stdout) is declared in its StageSpec::needs.
///
/// Lifecycle: configure -> bind -> start -> on_events* (interleaved with the roles' calls at
/// rounds and intervals) -> stop. Only on_events is on the hot path: it must not throw and must
/// not allocate once warm (new keys of an aggregation allocate once each).
class Stage {
 public:
  virtual ~Stage() = default;
  Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  /// Reads options. Reports every problem to `diags` (with positions) instead of throwing.
  virtual void configure(const ConfigValue& options, Diagnostics& diags) = 0;
  /// Resolves field names to accessors once; may add derived fields for later stages, and set
  /// what its options decide of its needs (BindContext::kinds, BindContext::time_order).
  virtual void bind(BindContext& ctx, Diagnostics& diags) = 0;
  /// The run begins (Pipeline::start; never called by `tracer check`): open what must not exist
  /// before a real run, such as a perf.data file. May throw tracer::Error.
  virtual void start() {}
  /// The events of one batch of the kinds this stage asked for: in time order across every ring
  /// and probe when some stage of the pipeline asked for time order, else in ring order. Call
  /// Event::drop() to stop an event here.
  virtual void on_events(std::span<Event* const> events) noexcept = 0;
  /// The in-place path (optional; Pipeline::on_delivered): whether this stage takes the samples
  /// of probe `probe` delivered through the engine's BPF channel in their compact form, every
  /// field it reads readable there (FieldRef::reads_delivered). Asked after bind. A stage that
  /// says yes never drops an event: there is no Event to drop.
  [[nodiscard]] virtual bool takes_delivered(std::uint32_t /*probe*/) const noexcept {
    return false;
  }
  /// The in-place path: the samples of one batch, doing what on_events does with the same
  /// samples rebuilt as records. Called only when takes_delivered(each sample's probe).
  virtual void on_delivered(std::span<const DeliveredSample> /*samples*/) noexcept {}
  /// Accounting a user must see at the end of a run (latency: pairs, unmatched entries and
  /// exits, evictions): name and value, shown in the run's summary and --json.
  virtual void counters(std::vector<std::pair<std::string, std::uint64_t>>& /*out*/) const {}
  /// End of the run (after the last tables): flush and close.
  virtual void stop() {}

  /// The aggregation role (count, hist, bpf-map, ...): tables out. nullptr for other stages.
  [[nodiscard]] virtual Aggregation* aggregation() noexcept { return nullptr; }
  /// In-kernel placement: what this stage computes, as configured, in a form the planner can
  /// compile to BPF; kNone with the reason when it has none. Called after configure().
  [[nodiscard]] virtual KernelForm kernel_form() const {
    return {.why_not = "this stage runs in user space only"};
  }
  /// A latency pairing placed in the kernel: its counters so far (replace the stage's own).
  virtual void absorb_counters(const KernelLatencyCounters& /*counters*/) {}
  /// The output role (print, jsonl, csv, perf-data): where data leaves the pipeline. nullptr
  /// for other stages.
  [[nodiscard]] virtual Output* output() noexcept { return nullptr; }
};

/// Role: an aggregation. Its state becomes a table at each `every` and at the end of the run;
/// the pipeline hands the table to the outputs after it (Output::on_table). A stage with this
/// role returns itself from Stage::aggregation().
class Aggregation {
 public:
  /// The interval of `every`, or nullopt for a table at the end of the run only.
  [[nodiscard]] virtual std::optional<std::chrono::nanoseconds> every() const noexcept = 0;
  /// The rows so far (ordered, cut to top); clears the state when `reset`.
  virtual void snapshot(Table& out, bool reset) = 0;
  /// Placed in the kernel: adds the rows the kernel computed since the last read to the state,
  /// as if their events had reached on_events (snapshot() then renders them as ever).
  virtual void absorb(const std::vector<KernelRow>& /*rows*/) {}

 protected:
  Aggregation() = default;
  ~Aggregation() = default;  // owned and destroyed as a Stage
  Aggregation(const Aggregation&) = default;
  Aggregation& operator=(const Aggregation&) = default;
};

/// Role: an output, where data leaves the pipeline: text, JSON or CSV of events and tables, or
/// the records themselves (perf-data). A stage with this role returns itself from
/// Stage::output().
class Output {
 public:
  /// Whether the tables of the aggregations before this output reach on_table. An output of
  /// records only (perf-data) says no: an aggregation before it still gets an implicit print.
  [[nodiscard]] virtual bool takes_tables() const noexcept { return true; }
  /// A table of an aggregation before this stage, at its interval or at the end of the run.
  virtual void on_table(const Table& /*table*/) {}
  /// The engine finished a pass over every ring (Engine::on_round), or a perf.data file's
  /// FINISHED_ROUND: records handed on after it were written to their rings after the pass
  /// began. Outputs that keep time order (perf.data's FINISHED_ROUND) end a round here.
  virtual void on_round() noexcept {}
  /// End of a tick: write what is buffered.
  virtual void flush() {}

 protected:
  Output() = default;
  ~Output() = default;  // owned and destroyed as a Stage
  Output(const Output&) = default;
  Output& operator=(const Output&) = default;
};

// ---------------------------------------------------------------------------------------------
// Registry

using StageFactory = std::function<std::unique_ptr<Stage>()>;

/// One row of the explicit table of built-in stages.
struct StageEntry {
  StageSpec (*spec)() = nullptr;
  std::unique_ptr<Stage> (*make)() = nullptr;
};
/// stage<Count>(): an entry for a class with `static StageSpec spec()` and a default constructor.
template <typename S>
[[nodiscard]] constexpr StageEntry stage() noexcept {
  return {&S::spec, []() -> std::unique_ptr<Stage> { return std::make_unique<S>(); }};
}

class StageRegistry {
 public:
  /// A registry of the stages of `table`, checked for duplicate names (the built-in table is
  /// the stages layer's: tracer/stages.hpp). Throws tracer::Error (kRuntime) on a duplicate: a
  /// bug in the table.
  [[nodiscard]] static StageRegistry from_table(std::span<const StageEntry> table);

  /// Adds an embedder's stage. Throws tracer::Error (kUsage) if the name is taken.
  void register_stage(StageSpec spec, StageFactory factory);
  [[nodiscard]] const StageSpec* find(std::string_view name) const noexcept;
  /// A new stage, or nullptr for an unknown name.
  [[nodiscard]] std::unique_ptr<Stage> make(std::string_view name) const;
  [[nodiscard]] std::vector<const StageSpec*> specs() const;
  /// Names close to `name` ("did you mean").
  [[nodiscard]] std::string suggest(std::string_view name) const;

 private:
  struct Item {
    StageSpec spec;
    StageFactory factory;
  };
  std::vector<Item> items_;
};

}  // namespace tracer
