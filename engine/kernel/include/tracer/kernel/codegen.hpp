// kernel::gen: a recipe's pipeline run in the kernel. A KernelPlan (plain data: the probes, the
// target processes, a filter per probe, one aggregation, an optional latency pairing) becomes
// BPF C text (generate), compiled by clang and cached by content hash (compile), and its maps
// are read back as typed rows (tracer/kernel/reader.hpp).
//
// Usage:
//   gen::KernelPlan plan{.probes = {{.name = "getppid", .kind = ProbeKind::kTracepoint,
//                                    .keys = {gen::Field::pid()}}},
//                        .aggregation = {.agg = count_part, .key_names = {"pid"}},
//                        .tgids = {child}};
//   auto why = gen::check(plan);                   // nullopt, or why it cannot run in the kernel
//   auto prog = gen::generate(plan);               // the C text and its map layout
//   auto obj = gen::compile(*prog);                // clang -target bpf, cached; not loaded
//   TRACER_TRY(obj->load());
//   TRACER_TRY(gen::set_targets(*obj, *prog, tgids));  // only when prog->tgid_map
//   perf_event.set_bpf(*obj->program_fd(prog->programs[0]));   // ONE event per probe
//   gen::Reader reader(*obj, *prog);
//   auto snap = reader.flip_and_read();            // every interval, and once at the end
//
// Layering: bpf/ only (the bpf glue, tracer/perf); the lead maps recipe stages to a KernelPlan
// and the rows to tracer::Table.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tracer/bpf/object.hpp"
#include "tracer/ext/kernel_form.hpp"
#include "tracer/probe.hpp"
#include "tracer/result.hpp"

namespace tracer::kernel::gen {

/// A probe's program kind is its tracer::ProbeKind (tracer/probe.hpp): a tracepoint, a kprobe or
/// uprobe (and their returns), or a sampling perf event (software, hardware, cache, raw PMU),
/// BPF_PROG_TYPE_PERF_EVENT: its program runs at each sample and returns 0, so the kernel writes
/// no sample to the ring.
[[nodiscard]] constexpr bool is_perf_event(ProbeKind k) noexcept {
  return k == ProbeKind::kSoftware || k == ProbeKind::kHardware || k == ProbeKind::kCache ||
         k == ProbeKind::kRawPmu;
}
/// The kinds an in-kernel program attaches to (the others have no program type here).
[[nodiscard]] constexpr bool has_program(ProbeKind k) noexcept {
  return k == ProbeKind::kTracepoint || k == ProbeKind::kKprobe || k == ProbeKind::kKretprobe ||
         is_user_probe(k) || is_perf_event(k);
}

/// Where a value comes from when the program runs.
enum class Source : std::uint8_t {
  kMissing,    // the probe lacks the field: every comparison on it is false, a key cell is none
  kPid,        // current tgid (the sample's pid)                      -> int
  kTid,        // current thread id                                    -> int
  kComm,       // current->comm, char[16]                               -> string
  kCpu,        // bpf_get_smp_processor_id()                            -> int
  kUid,        // current uid                                           -> uint
  kGid,        // current gid                                           -> uint
  kCgroup,     // cgroup v2 id of the current task                      -> uint
  kProbe,      // the probe's name (a key by probe over several probes) -> string
  kTpInt,      // an integer field of the tracepoint record              -> int or uint (is_signed)
  kTpString,   // a fixed char array field of the record (char comm[16])    -> string
  kTpDataLoc,  // a __data_loc (or __rel_loc) char[] field of the record    -> string
  kArg,        // kprobe/uprobe argument `index` (0..5, PT_REGS_PARMn)      -> uint
  kRetval,     // kretprobe/uretprobe return value (PT_REGS_RC)             -> int
  kDuration,   // latency: exit time - entry time, ns (exit probe, after pairing) -> uint
  kUsdtArg,    // a usdt probe's argument `index`, decoded per call site (ProbePlan::usdt_sites)
               //                                                       -> int or uint (is_signed)
  // Stacks (keys only): bpf_get_stack's frames stored in tr_stacks under their 64-bit hash, the
  // key; the reader turns hashes back into addresses (Cell Ips).
  kKernelStack,  // the kernel part                                    -> Ips (pid 0)
  kUserStack,    // the user part (with the tgid that symbolizes it)    -> Ips
  kCallchain,    // both, with perf's PERF_CONTEXT_KERNEL/USER markers  -> Ips
};

/// A field as the program reads it: the name (for messages and tables) and where it comes from.
/// The record layout is the tracepoint's `format` file's (offset, size, signed).
struct Field {
  Source source = Source::kMissing;
  std::string name;
  std::uint32_t offset = 0;  // kTpInt, kTpString, kTpDataLoc: byte offset in the record (>= 8)
  std::uint32_t size = 0;    // kTpInt: 1, 2, 4 or 8; kTpString: the array's length
  bool is_signed = false;    // kTpInt
  bool rel_loc = false;      // kTpDataLoc: __rel_loc (offset counted from the end of the field)
  /// kTpDataLoc: the field is a pointer (`const char *`, 8 bytes) to a NUL-terminated string,
  /// in user memory when `user` (a system call's argument), else in the kernel's.
  bool pointer = false;
  bool user = false;
  bool syscall_id = false;  // kTpInt: a system call number (the reader names it)
  std::uint32_t index = 0;  // kArg: 0..5; kUsdtArg and a usdt string: the argument
  /// kTpDataLoc with `pointer`: the pointer is usdt argument `index` (read per call site), not
  /// a record field (`offset` is then only a name for its buffer).
  bool usdt = false;

  [[nodiscard]] static Field missing(std::string name);
  [[nodiscard]] static Field pid() { return {.source = Source::kPid, .name = "pid"}; }
  [[nodiscard]] static Field tid() { return {.source = Source::kTid, .name = "tid"}; }
  [[nodiscard]] static Field comm() { return {.source = Source::kComm, .name = "comm"}; }
  [[nodiscard]] static Field cpu() { return {.source = Source::kCpu, .name = "cpu"}; }
  [[nodiscard]] static Field uid() { return {.source = Source::kUid, .name = "uid"}; }
  [[nodiscard]] static Field gid() { return {.source = Source::kGid, .name = "gid"}; }
  [[nodiscard]] static Field cgroup() { return {.source = Source::kCgroup, .name = "cgroup"}; }
  [[nodiscard]] static Field probe() { return {.source = Source::kProbe, .name = "probe"}; }
  [[nodiscard]] static Field duration() {
    return {.source = Source::kDuration, .name = "duration"};
  }
  [[nodiscard]] static Field retval() { return {.source = Source::kRetval, .name = "retval"}; }
  [[nodiscard]] static Field kstack() { return {.source = Source::kKernelStack, .name = "kstack"}; }
  [[nodiscard]] static Field ustack() { return {.source = Source::kUserStack, .name = "ustack"}; }
  [[nodiscard]] static Field callchain() {
    return {.source = Source::kCallchain, .name = "callchain"};
  }
  [[nodiscard]] static Field arg(std::uint32_t n);
  [[nodiscard]] static Field tp_int(std::string name,
                                    std::uint32_t offset,
                                    std::uint32_t size,
                                    bool is_signed);
  [[nodiscard]] static Field tp_string(std::string name, std::uint32_t offset, std::uint32_t len);
  [[nodiscard]] static Field tp_data_loc(std::string name, std::uint32_t offset, bool rel = false);
  /// A `char *` field: the string it points to, read at the event (bounded by the key's string
  /// bytes; a longer one is cut and counted as truncated), compared and keyed as a string.
  [[nodiscard]] static Field tp_string_pointer(std::string name, std::uint32_t offset, bool user);
  /// usdt argument `n` as an integer of `size` bytes.
  [[nodiscard]] static Field usdt_arg(std::uint32_t n, std::uint32_t size, bool is_signed);
  /// usdt argument `n` as the string it points to (user memory), read at the event.
  [[nodiscard]] static Field usdt_string(std::uint32_t n);
};

/// Where a usdt call site keeps one argument (tracer/symbols/usdt.hpp's UsdtArg, decoded).
struct UsdtOperand {
  enum class Kind : std::uint8_t { kNone, kRegister, kConstant, kMemory };
  Kind kind = Kind::kNone;
  std::string reg{};       // kRegister, kMemory (base): a struct pt_regs member ("di")
  std::int64_t value = 0;  // kConstant: the value; kMemory: the displacement
  std::uint32_t size = 8;  // bytes
  bool is_signed = false;
  friend bool operator==(const UsdtOperand&, const UsdtOperand&) = default;
};

/// The filter expression tree. Integers compare by value whatever their signedness
/// (as the user-space filter's 128-bit compare); strings compare by equality (== !=) with a
/// literal, or with a literal prefix when the literal is a glob whose only metacharacter is one
/// trailing `*`. A missing field makes every comparison on it false.
/// The filter tree is KernelForm's (tracer/ext/kernel_form.hpp, one shape from the filter stage to
/// here), each field operand resolved to the probe's Field (`text` keeps its name).
using Cmp = FilterCmp;
using Operand = FilterOperand<Field>;
using FilterNode = tracer::FilterNode<Operand>;
struct Filter {
  std::vector<FilterNode> nodes;
  int root = -1;  // -1: every event passes
  [[nodiscard]] bool empty() const noexcept { return root < 0; }
};

/// The one aggregation of the pipeline. `agg` is its stage's kernel part (KernelForm::agg): the
/// value its map keeps per key and the C that updates it; the generator and the reader name no
/// aggregation, and the stage absorbs the values it reads back (InKernel::absorb).
struct Aggregation {
  std::shared_ptr<const KernelAgg> agg{};
  std::vector<std::string> key_names{};  // the `by` fields, in order (ProbePlan::keys match)
  std::string value_name{};              // what it aggregates (KernelAgg::needs_value)
  /// Keys the map holds (per generation); events of keys that do not fit are counted
  /// (Snapshot::map_full), never silently dropped.
  std::uint32_t max_keys = 10240;
  /// Bytes kept of a __data_loc string key, NUL included (longer ones are cut and counted in
  /// Snapshot::truncated). At most 256.
  std::uint32_t string_key_bytes = 128;
  /// Its name in messages and plans ("count", "lhist"), "none" without a kernel part.
  [[nodiscard]] std::string_view kind() const noexcept { return agg ? agg->name() : "none"; }
  /// Stack keys: the stack map's entries (distinct stacks over the whole run: a stack stays
  /// under its hash across intervals) and the frames kept of each (at most
  /// kernel.perf_event_max_stack). The event of a stack that does not fit is not aggregated: it
  /// is counted (Stats::stacks_lost).
  std::uint32_t max_stacks = 16384;
  std::uint32_t stack_depth = 127;
};

/// Entry/exit pairing (plugins/stages/latency.cpp): the entry probe stores the time under its
/// key, the exit probe takes it and aggregates `duration` (Source::kDuration).
struct Latency {
  std::uint32_t entry_probe = 0, exit_probe = 1;  // indexes in KernelPlan::probes
  std::uint32_t max_pending = 65536;
};

enum class Role : std::uint8_t { kAggregate, kLatencyEntry, kLatencyExit };

struct ProbePlan {
  std::string name;
  ProbeKind kind = ProbeKind::kTracepoint;
  /// The probe's own filter (its tracefs filter on the user path): events failing it are not
  /// the probe's events at all, so they stop before its hits are counted.
  Filter probe_filter{};
  /// Events failing it stop here (before the latency pairing).
  Filter filter{};
  /// One per Aggregation::key_names: this probe's source of each key.
  std::vector<Field> keys{};
  /// The aggregated value (sum .. lhist); kMissing: this probe's events are not aggregated.
  Field value{};
  /// Latency: the pairing key (an integer; tid by default).
  Field latency_key = Field::tid();
  /// Latency exit (and aggregate probes): a filter applied after the pairing (may read duration).
  Filter post_filter{};
  /// The fixed size of a tracepoint's record (its format's last field end): fields must lie
  /// within it (0: not checked).
  std::uint32_t record_size = 0;
  /// A perf event's (is_perf_event): the program returns 1, so the kernel also writes the sample to
  /// the event's ring (user space reads the probe too); else 0, the sample is only aggregated here.
  bool keep_samples = false;
  /// The probe is sched:sched_process_exec: with KernelPlan::arm_on_exec, its program arms the
  /// command at the command's own exec before it tests the target.
  bool arms_command = false;
  /// A usdt probe's call sites (in ProbeInfo::usdt_args order), each with its arguments'
  /// operands: the sites whose operands differ get programs of their own
  /// (GeneratedProgram::site_programs). Empty: not a usdt probe, or no argument is read.
  std::vector<std::vector<UsdtOperand>> usdt_sites{};
};

/// sched:sched_process_fork's child_pid, for following the children of the target processes,
/// and sched:sched_process_free's pid: a process leaves the target map when its leader's task is
/// freed (kFreeProgram), after its last thread's last switch and its reaping, so every event up
/// to then is counted (on every kernel: a leader that exits first keeps its process in).
struct ForkTracepoint {
  std::uint32_t child_pid_offset = 20;
  std::uint32_t child_pid_size = 4;
  std::uint32_t free_pid_offset = 24;
  std::uint32_t free_pid_size = 4;
};

struct KernelPlan {
  std::vector<ProbePlan> probes;
  Aggregation aggregation{};
  std::optional<Latency> latency{};
  /// Target processes. Empty: every process; one (and no follow_children): a constant compare
  /// compiled in; more: a hash map filled by set_targets().
  std::vector<std::uint32_t> tgids{};
  /// The target map's size: the target processes alive at once (kDefaultMaxTargets). Children
  /// that do not fit are counted (Stats::targets_dropped).
  std::uint32_t max_tgids = 65536;
  /// Every process (no tgids): this one is left out (tracer's own, 0: none).
  std::uint32_t exclude_tgid = 0;
  /// Adds a program for sched:sched_process_fork that adds the children of target processes
  /// to the target map (a command's children are traced as perf's inherit does).
  std::optional<ForkTracepoint> follow_children{};
  /// The first target is a command held before its exec (perf's enable_on_exec): its events
  /// count only once it has exec'd; a program on sched:sched_process_exec (kExecProgram) arms
  /// them, and so does a probe's own program on that tracepoint (ProbePlan::arms_command), so
  /// that the command's exec counts whichever program the kernel runs first.
  bool arm_on_exec = false;
};

/// Where one key column lives in the packed key struct and what it decodes to.
struct KeyColumn {
  std::string name;
  /// kStack: {__u64 kernel hash, __u64 user hash, __u32 tgid, pad} (24 bytes; hash 0: no stack).
  enum class Type : std::uint8_t { kInt, kUint, kString, kStack } type = Type::kInt;
  std::uint32_t offset = 0, size = 0;  // in the key struct
  bool is_signed = false;              // integer storage
  bool syscall_id = false;
  bool probe_name = false;  // stored as the probe index, decoded to its name
  int missing_bit = -1;     // bit in the key's `missing` byte when some probe lacks the field
  Source stack = Source::kMissing;  // kStack: kKernelStack, kUserStack or kCallchain
};

/// The maps a generated object has, as the reader needs them.
struct Layout {
  bool percpu = true;   // PERCPU_HASH / PERCPU_ARRAY, else HASH with atomic updates
  bool keyless = true;  // no `by`: an array of one slot
  /// Every key cell is known from the probe alone (pid when the target is one constant tgid,
  /// probe, a field the probe lacks): an array indexed by probe, no hashing per event; the
  /// reader fills the cells.
  bool by_probe = false;
  /// The same keys, but the target's children are followed (they may appear at any time): the
  /// events of the one constant target go to an array slot per probe (kOwnMaps), no hashing;
  /// its children's to the hash (kAggMaps). The reader merges both.
  bool own_slot = false;
  std::uint32_t key_size = 4, value_size = 8;
  std::vector<KeyColumn> columns;
  std::uint32_t missing_offset = 0;  // offset of the `missing` byte when some column has a bit
  std::uint32_t probes = 0;          // stats slots: one per probe, then one for the pipeline
  bool stacks = false;               // a key column is a stack: the object has kStacksMap
};

/// Names of what a generated object holds.
inline constexpr const char* kAggMaps[2] = {"tr_agg0", "tr_agg1"};
inline constexpr const char* kOwnMaps[2] = {"tr_own0", "tr_own1"};  // Layout::own_slot
inline constexpr const char* kStatsMap = "tr_stats";
inline constexpr const char* kStacksMap = "tr_stacks";  // Layout::stacks
inline constexpr const char* kTgidsMap = "tr_tgids";
inline constexpr const char* kStartMap = "tr_start";
inline constexpr const char* kSyncMap = "tr_sync";
inline constexpr const char* kSyncInnerMap = "tr_sync_in";
inline constexpr const char* kGenerationVar = "tr_gen";
inline constexpr const char* kForkProgram = "tr_fork";
inline constexpr const char* kExecProgram = "tr_exec";
inline constexpr const char* kFreeProgram = "tr_free";  // follow_children: sched_process_free

/// Per-probe (and, in the last slot, per-pipeline) counters, per CPU in the tr_stats map.
struct Stats {
  std::uint64_t hits = 0;       // events of the target processes the probe saw
  std::uint64_t map_full = 0;   // events whose key did not fit (or whose update failed)
  std::uint64_t truncated = 0;  // string keys cut to string_key_bytes
  std::uint64_t contended = 0;  // shared-map min/max updates given up after 64 retries
  std::uint64_t paired = 0;     // latency (pipeline slot)
  std::uint64_t unmatched_exits = 0;
  std::uint64_t unmatched_entries = 0;  // an entry overwritten before its exit
  std::uint64_t out_of_order = 0;
  std::uint64_t entries_dropped = 0;  // the pending-entry map was full
  std::uint64_t targets_dropped = 0;  // follow_children: the target map was full
  std::uint64_t stacks_lost = 0;      // events whose stack did not fit the stack map
  std::uint64_t keys_added = 0;       // keys inserted into an aggregation map (any generation)
  std::uint64_t read_faults = 0;      // `char *` strings the program could not read (not paged in)
};

struct GeneratedProgram {
  std::string source;                 // the BPF C text
  std::string name;                   // object name: "trk_<hash>"
  std::string hash;                   // 16 hex digits of the text's hash
  std::vector<std::string> programs;  // one per KernelPlan::probes, same order
  /// Per probe: the program of each call site of a usdt probe whose sites read their arguments
  /// from different places (ProbePlan::usdt_sites); empty: `programs[i]` on every site.
  std::vector<std::vector<std::string>> site_programs;
  bool tgid_map = false;  // targets go in tr_tgids (set_targets)
  Layout layout;
  KernelPlan plan;
};

/// Whether `plan` can run in the kernel.
/// @return nullopt, or the reason it cannot (naming the probe, field or option).
[[nodiscard]] std::optional<std::string> check(const KernelPlan& plan);

/// Generates the BPF C text of `plan`. `possible_cpus` (0: this machine's) sizes the per-CPU
/// maps: a key too wide or a value too large for per-CPU copies of every key on every CPU
/// within 64 MiB uses a shared HASH map with atomic updates instead.
/// @return the program, or EINVAL with check()'s reason.
[[nodiscard]] Result<GeneratedProgram> generate(const KernelPlan& plan,
                                                std::uint32_t possible_cpus = 0);

/// Compiles `prog` with clang (Object::compile_and_open: the text is written to
/// <cache>/gen/<name>.bpf.c and the object cached by content hash; the same text is compiled
/// once) and opens it. Not loaded.
/// @return the object, or compile_and_open's failure.
[[nodiscard]] Result<bpf::Object> compile(const GeneratedProgram& prog,
                                          const bpf::CompileOptions& opts = {});

/// The read-only globals a generated program compares task ids with: the first target's tgid
/// (when the plan has targets) and tracer's own (system-wide, leaving tracer out).
inline constexpr const char* kTargetGlobal = "tr_target";
inline constexpr const char* kSelfGlobal = "tr_self";

/// Loads compile()'s object of `prog`: its load-time constants (kTargetGlobal, kSelfGlobal from
/// prog.plan) set first, then bpf::Object::load. An object of the same text made for another
/// run loads with this run's processes.
[[nodiscard]] Status load(bpf::Object& obj, const GeneratedProgram& prog);

/// Fills the target map (prog.tgid_map) with `tgids`. After load.
[[nodiscard]] Status set_targets(bpf::Object& obj,
                                 const GeneratedProgram& prog,
                                 const std::vector<std::uint32_t>& tgids);

}  // namespace tracer::kernel::gen
