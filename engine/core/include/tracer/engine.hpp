// Engine: owns probes (perf events, optional BPF programs), their rings, and the reactor that
// drains them on an Asio executor it is given. It starts no threads of its own.
//
// Usage:
//   boost::asio::io_context io;
//   tracer::Engine engine(io.get_executor(), {
//       .probes = {{.name = "exec", .kind = ProbeKind::kTracepoint,
//                   .spec = "sched:sched_process_exec"}}});
//   engine.on_batch([](const tracer::Batch& b) { for (auto& r : b.records) ...; });
//   engine.start();                       // throws tracer::Error with a hint on setup failure
//   io.run_for(std::chrono::seconds(5));  // or until engine.on_done fires
//   engine.stop();                        // drains what remains, detaches, closes
//   auto stats = engine.stats();
//
// Threading: the engine's handlers run on a strand of the executor, or directly on it when the
// executor is an io_context's made for one thread (io_context(1), as the CLI's: Asio then
// assumes one thread runs it, and a strand would only add a mutex and a queued operation to every
// completion). Call the engine's member functions from that executor's threads (for instance
// through asio::post) or before running it.
#pragma once

#include <sys/types.h>

// Boost 1.74's Asio uses std::exchange without including <utility> (TOOLCHAIN.md): included
// here first, so that neither this header nor an embedder's Asio after it needs a forced flag.
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracer/bpf/schema.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {

/// The channel that carries what BPF programs deliver to user space (EngineOptions::channel).
enum class DeliveryChannel : std::uint8_t {
  kRingbuf,  // one BPF_MAP_TYPE_RINGBUF for every CPU, batched wakeups (kernel 5.8+)
  kPerf,     // a PERF_EVENT_ARRAY of bpf-output events, a perf ring per CPU
};
/// "ringbuf" / "perf".
[[nodiscard]] std::string_view to_string(DeliveryChannel c) noexcept;
[[nodiscard]] std::optional<DeliveryChannel> parse_delivery_channel(std::string_view text) noexcept;

enum class ProbeKind : std::uint8_t {
  kTracepoint,  // "system:event"
  kKprobe,      // "symbol[+offset]"
  kKretprobe,
  kUprobe,  // "path:symbol[+off]", "path:0xoffset", "lib:symbol" (with a pid target)
  kUretprobe,
  kSoftware,    // "cpu-clock", "page-faults", ... (perf's names)
  kHardware,    // "cycles", "instructions", ...
  kCache,       // "L1-dcache-load-misses", ...
  kRawPmu,      // perf syntax "pmu/term=value,.../"
  kBreakpoint,  // "0xADDR[:rwx[:len]]" or "symbol[:rwx[:len]]" (symbol of the traced binary)
  kAux,         // an AUX-capable PMU: "intel_pt/cyc=1/" (AUX area mapped, chunks delivered)
  kBpfOutput,   // the BPF output channel: what programs emit with bpf_perf_event_output
};
[[nodiscard]] std::string_view to_string(ProbeKind k) noexcept;

/// Who is traced.
struct Target {
  enum class Kind : std::uint8_t { kAllCpus, kPid, kCgroup, kCommand };
  Kind kind = Kind::kAllCpus;
  pid_t pid = -1;  // kPid: the process (its threads and future children too); its exit ends it
  std::string cgroup{};                // kCgroup: a cgroup v2 directory (/sys/fs/cgroup/...)
  std::vector<std::string> command{};  // kCommand: argv of a command tracer starts and waits for
  /// kCommand: the command's stdout goes to tracer's stderr (its fd 1 is a dup of fd 2), for when
  /// tracer's own stdout carries machine output (JSON lines, a perf.data stream).
  bool stdout_to_stderr = false;
};

/// When the kernel wakes the reactor for a ring.
struct WakeupPolicy {
  std::uint32_t events = 0;           // wake every N samples (wakeup_events), if > 0
  std::uint32_t watermark_bytes = 0;  // else wake at this fill level; 0: a quarter of the ring
};

struct ProbeOptions {
  std::string name{};  // shown in stats; unique per engine
  ProbeKind kind = ProbeKind::kTracepoint;
  std::string spec{};
  /// Sampling: every `period` events, or `freq` times a second. Neither: every event for
  /// tracepoints, probes, breakpoints, AUX events and non-clock software events; 4000 Hz for
  /// cpu-clock/task-clock, hardware, cache and raw PMU events.
  std::optional<std::uint64_t> period{};
  std::optional<std::uint64_t> freq{};
  bool counting = false;                // open as a counter: no ring; its count is in stats()
  std::uint64_t extra_sample_type = 0;  // e.g. PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER
  std::uint64_t sample_regs_user = 0;
  std::uint32_t sample_stack_user = 0;
  /// Callchains (PERF_SAMPLE_CALLCHAIN): at most this many frames (sample_max_stack; 0: the
  /// kernel's kernel.perf_event_max_stack), without the kernel's or the user's part.
  std::uint16_t max_stack = 0;
  bool exclude_callchain_kernel = false;
  bool exclude_callchain_user = false;
  bool task_records = false;  // COMM/FORK/EXIT/MMAP2 records (for symbolization)
  /// With task_records: MMAP2 records of data mappings too (mmap_data), what a DWARF unwind of
  /// another probe's stack copies reads .eh_frame_hdr through (perf record --call-graph dwarf).
  bool data_mappings = false;
  bool context_switches = false;  // SWITCH records
  std::string filter{};           // tracefs filter expression (tracepoints, probes)
  std::string bpf_program{};      // program of the engine's BPF object to attach (SET_BPF)
  std::uint32_t ring_pages = 0;   // data pages per CPU ring (power of two); 0: from the
                                  // locked-memory budget (Engine::ring_note), 2 MiB unlimited
  /// COMM/FORK/EXIT records only (no MMAP): thread names at event time. A sampling probe with
  /// them on every CPU covers every task the engine traces.
  bool comm_records = false;
  WakeupPolicy wakeup{};
  std::uint64_t aux_bytes = 0;  // kAux: AUX area size (power-of-two pages); 0: 4 MiB
  bool aux_snapshot = false;    // kAux: overwrite (snapshot) mode
};

/// A BPF object for the engine: its programs attach to probes (ProbeOptions::bpf_program) and
/// what they emit through a PERF_EVENT_ARRAY arrives as the records of one more probe.
/// Data pages per CPU of the BPF output channel's rings by default: 1 MiB, woken at a quarter
/// (256 KiB, ~2000 records of 120 bytes). At a million events a second the reader then has
/// ~6 ms to come round before anything is lost, and each wakeup's fixed cost is shared by
/// thousands of records (tracer_bench_engine).
inline constexpr std::uint32_t kDefaultOutputPages = 256;

struct BpfOptions {
  std::string builtin{};  // a program shipped with tracer ("syscall_output", "tgid_gate")
  std::string object{};   // or a compiled .bpf.o
  std::string source{};   // or a .bpf.c, compiled at run time by clang and cached by content
  /// The PERF_EVENT_ARRAY drained as the output channel; empty: none.
  std::string output_map = "events";
  /// No output channel (instead of an error) when the object has no `output_map`: a recipe that
  /// left `output` out, for programs that only fill maps.
  bool output_optional = false;
  /// The name the output channel's records carry (ProbeInfo::name).
  std::string output_name = "bpf";
  /// The BTF struct the programs emit: gives the payload's fields their names.
  std::string payload_struct{};
  /// A u64 field of payload_struct that the programs fill with bpf_ktime_get_ns()
  /// (CLOCK_MONOTONIC): records take their time from it, and the output channel samples RAW
  /// only, which spares the traced task the kernel's own clock read per event. Empty: the
  /// channel samples TIME (and CPU) itself.
  std::string payload_time{};
  /// Where a recipe set `payload_struct` and `payload_time` (their errors point there).
  std::optional<SourceRegion> payload_struct_where{}, payload_time_where{};
  /// `const volatile` globals set before load (name, value as u64 of the variable's size).
  std::vector<std::pair<std::string, std::uint64_t>> globals{};
  /// Processes put into the object's `tgids` map (tracer's programs emit/pass only those), in
  /// addition to the target's process for a pid or command target.
  std::vector<pid_t> tgids{};
  std::uint32_t output_pages = 0;  // data pages per CPU ring; 0: kDefaultOutputPages
  WakeupPolicy wakeup{};
};

struct EngineOptions {
  Target target{};
  std::vector<ProbeOptions> probes{};
  std::optional<BpfOptions> bpf{};
  /// Full verifier logs in errors (else the failing part).
  bool verbose = false;
  /// Place kprobes/uprobes through tracefs dynamic events even where a probe PMU exists.
  bool prefer_tracefs_probes = false;
  /// Every ring is drained at least this often, wakeup or not (low-rate probes): on a busy
  /// ring's wakeup when the last pass over every ring is half an interval old, else by a timer,
  /// which then wakes the engine only when no ring has. Not 0.
  std::uint32_t flush_interval_ms = 100;
  /// Records handed to on_batch at most at once (one drain may deliver several batches). A
  /// RecordRef is ~0.5 KiB: 64 of them stay in L1/L2 while the stages read them (measured:
  /// tracer_bench_decode BM_RingReaderDrainOutput).
  std::uint32_t max_batch = 64;
  /// Tracepoint probes (without a BPF program or tracefs filter of their own, and sampling only
  /// what tracepoints sample by default), system-wide or of a pid or command target, receive
  /// their hits through a BPF program that copies each record into a BPF output channel
  /// (bpf/progs/tp_deliver.bpf.c), rebuilt as the samples their own events would write: every
  /// hit arrives, also where the kernel's per-CPU perf tracepoint events miss some (idle
  /// context on some machines). For a task target the program tests the target itself
  /// (tracer_target.h: the target's processes, their children, a command from its exec) and
  /// costs the traced program less than sampling its perf events. false: the perf events
  /// sample.
  bool deliver_tracepoints_via_bpf = true;
  /// The channel of that delivery: a BPF ring buffer (when the kernel has none, the perf
  /// channel) or a perf event array. nullopt: the ring buffer where the kernel has it.
  std::optional<DeliveryChannel> channel{};
  /// Bytes of that ring buffer (a power-of-two multiple of the page size); 0: what the perf
  /// channel's rings would have on every CPU together (at most 1 GiB).
  std::uint32_t ringbuf_bytes = 0;
  /// System-wide tracepoint probes without a BPF program of their own get a BPF counter of the
  /// tracepoint's hits per CPU (a shipped program that returns 1: it gates nothing), so events
  /// the kernel ran the tracepoint for but that no perf event recorded are counted
  /// (RingStats::kernel_hits, missed). Costs one BPF program run per hit.
  bool count_tracepoint_hits = true;
  /// Decode SAMPLE records before handing them on (RecordRef::record.body holds the Sample).
  /// false: a sample arrives with type, misc, size and bytes only (body Unknown, sample_id
  /// empty), for consumers that forward bytes or look at few records; decode one with
  /// perf::decode(ref.record.bytes, probes()[ref.probe].layout, record). Other record kinds are
  /// always decoded (the engine counts losses from them). Pipeline::on_batch accepts both.
  bool decode_samples = true;
  /// System-wide: tracer's own process is traced too. false (the default): its events are left
  /// out (the BPF delivery and hit counter skip its tgid, a sampled tracepoint's tracefs filter
  /// its main thread), so that a drain's own system calls are not records that wake it again.
  bool trace_self = false;
  /// A drain hands the pipeline at most this much work (milliseconds) before the reactor runs
  /// its other handlers (signals, timers, other rings): whatever the event rate, a stop or a
  /// duration is honoured on time.
  std::uint32_t drain_slice_ms = 50;
  /// stop() drains what the rings hold for at most this long; the samples left then are given
  /// up and counted (RingStats::unprocessed), so a stop never waits on a slow pipeline. With
  /// the pipelines' own last run (Pipeline::kStopBudget) a stop ends within half a second.
  std::uint32_t stop_drain_ms = 200;
  /// A pid or command target: the processes (the target and its descendants) alive at once
  /// that BPF programs following it hold (tracer_target.h's `tgids`: the delivery's, a [bpf]
  /// object's); a child past it is counted (targets_dropped), not followed.
  std::uint32_t max_targets = 65536;
};

/// What a probe resolved to, for stages that bind field names once.
struct ProbeInfo {
  std::uint32_t index = 0;
  std::string name{};
  ProbeKind kind = ProbeKind::kTracepoint;
  std::string spec{};
  perf::SampleLayout layout{};
  std::optional<tracefs::Format> format{};  // tracepoints and tracefs-backed probes
  std::string pmu{};                        // PMU name the events were opened on
  /// PERF_SAMPLE_REGS_USER mask (perf_regs.h order): uprobes carry their arguments (x86-64:
  /// rdi, rsi, rdx, rcx, r8, r9) and uretprobes their return value (rax) by default.
  std::uint64_t sample_regs_user = 0;
  /// A counting probe (counting = true) without a BPF program of its own: the session hands
  /// its count since the last reading to the user-space stages at each tick and at the end, as
  /// one sample per CPU slot (probe, cpu, time, and the count as its period and weight).
  bool counts_to_stages = false;
  /// kBpfOutput: the emitted struct's fields (from BTF), when BpfOptions::payload_struct is set.
  std::optional<bpf::StructSchema> payload{};
  /// The attr the events were opened with (sample_type, read_format, clockid...): what a
  /// perf.data writer stores for this probe.
  perf::EventAttr attr{};
};

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

/// Counters of one ring (one probe on one CPU, or one probe's share of a shared CPU ring).
struct RingStats {
  std::uint64_t records = 0;       // every record handed on
  std::uint64_t samples = 0;       // PERF_RECORD_SAMPLE
  std::uint64_t bytes = 0;         // record bytes read
  std::uint64_t lost = 0;          // PERF_RECORD_LOST totals: samples the ring had no room for
  std::uint64_t lost_samples = 0;  // PERF_RECORD_LOST_SAMPLES totals (PMU-side drops)
  std::uint64_t aux_chunks = 0;
  std::uint64_t aux_bytes = 0;
  std::uint64_t aux_truncated = 0;  // AUX records flagged TRUNCATED
  std::uint64_t aux_lost = 0;       // AUX records flagged COLLISION/PARTIAL, or invalid
  std::uint64_t decode_errors = 0;  // malformed records (never from a sane kernel)
  std::uint64_t unrouted = 0;       // records whose id matched no probe
  std::uint64_t wakeups = 0;        // drains triggered by the kernel
  /// Tracepoint probes of a system-wide engine (EngineOptions::count_tracepoint_hits): how often
  /// the kernel ran the tracepoint on this CPU while the engine ran (a BPF counter beside the
  /// perf event). 0 when not counted.
  std::uint64_t kernel_hits = 0;
  /// Hits that reached neither the ring as a sample nor a LOST count: kernel_hits - samples -
  /// lost when positive (perf's per-CPU tracepoint events miss events in some contexts on some
  /// machines; see DESIGN notes). Never silent: reported per probe and CPU.
  std::uint64_t missed = 0;
  /// Samples still in the ring when a stop's drain ran out of time (EngineOptions::
  /// stop_drain_ms): given up unprocessed, and counted as lost.
  std::uint64_t unprocessed = 0;
  RingStats& operator+=(const RingStats& o) noexcept;
};

struct ProbeStats {
  std::string name;
  std::vector<std::pair<int, RingStats>> per_cpu;  // cpu -> stats
  /// kBpfOutput: failed bpf_perf_event_output calls, from the object's per-CPU array
  /// `output_drops` when it has one (the shipped programs do). A call that failed because the
  /// ring was full is also in the ring's LOST count: events lost = max(lost, drops) when the
  /// program counts every failure.
  std::uint64_t bpf_output_drops = 0;
  /// Placed in the kernel (tracer::Session): events an aggregation's map had no room for (its
  /// max_keys, or a stack the stack map could not hold), counted by the probe's program.
  /// Lost, and reported as such.
  std::uint64_t kernel_dropped = 0;
  /// The part of kernel_dropped whose stacks did not fit the stack map (the rest: map full).
  std::uint64_t kernel_stacks_lost = 0;
  /// Placed in the kernel for a pid or command target: descendants that the program's target
  /// map had no room for ([recipe] max_targets), whose events it then never saw. Processes,
  /// not events: reported on their own.
  std::uint64_t targets_dropped = 0;
  /// Placed in the kernel: events whose string key (a `char *` field's string, a __data_loc
  /// string) was longer than the key's bytes and was cut. Counted, not lost.
  std::uint64_t keys_truncated = 0;
  /// Placed in the kernel: `char *` strings its program could not read (their page was not in
  /// memory at the event: a tracepoint program cannot fault it in); they key and filter as
  /// empty strings. Not lost events: reported on their own.
  std::uint64_t string_faults = 0;
  /// Placed in the kernel: min/max updates of a shared (not per-CPU) map that the program gave
  /// up after 64 compare-and-swap retries: the events are counted, their value may not be the
  /// extreme. Reported on their own.
  std::uint64_t kernel_contended = 0;
  /// Hits the kernel ran the probe's BPF program for none of, because another BPF program was
  /// running on that CPU (bpf_prog_active; bpf_prog_info.recursion_misses): a program-gated
  /// tracepoint then writes no sample either, so they are neither events nor a LOST count, nor
  /// in kernel_hits (the program counts those). Lost, and reported as such.
  std::uint64_t bpf_skipped = 0;
  /// bpf_skipped is the count of a program several probes share (the tracepoint delivery
  /// program, the hit counter, a [bpf] program on several probes): the kernel counts per
  /// program, so each of those probes reports the same total, some of which may be another's.
  bool bpf_skipped_shared = false;
  [[nodiscard]] RingStats total() const noexcept;

  /// The events lost, each kind on its own; lost() is their sum.
  struct Losses {
    std::uint64_t ring = 0;          // LOST and LOST_SAMPLES records of the probe's rings
    std::uint64_t output_drops = 0;  // failed BPF output calls beyond those the rings counted
    std::uint64_t map_full = 0;      // in-kernel aggregation: keys the map had no room for
    std::uint64_t stacks_lost = 0;   // in-kernel aggregation: stacks the stack map could not hold
  };
  [[nodiscard]] Losses losses() const noexcept;
  /// Every event lost (the sum of losses()); targets_dropped, bpf_skipped and missed are
  /// reported beside it.
  [[nodiscard]] std::uint64_t lost() const noexcept;
};

struct Stats {
  std::vector<ProbeStats> probes;
  /// Passes over every ring (each ends with on_round), and those of them the flush timer woke
  /// the engine for; the others were made on a ring's wakeup.
  std::uint64_t passes = 0;
  std::uint64_t timer_passes = 0;
  /// Passes that read no ring because the stages were behind (Engine::hold_while).
  std::uint64_t held_passes = 0;
};

/// The entries of one BPF map at one moment, with their layout: aggregations kept in the kernel
/// (counts, histograms) read at intervals. Per-CPU maps: integer value fields summed over CPUs.
struct MapSnapshot {
  bpf::MapSchema schema;
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> entries;
};

/// Read access to BPF maps, for stages (which never see fds): the engine's BPF object's maps.
class MapSource {
 public:
  virtual ~MapSource() = default;
  [[nodiscard]] virtual std::vector<std::string> map_names() const = 0;
  /// @return the key/value layout, or ENOENT (no such map, no BPF object) / ENODATA (no BTF).
  [[nodiscard]] virtual Result<bpf::MapSchema> schema(std::string_view map) const = 0;
  /// Every entry; with `clear`, each entry read is then deleted (hash maps) or zeroed (arrays),
  /// so the next read holds what came since.
  [[nodiscard]] virtual Result<MapSnapshot> read(std::string_view map, bool clear) const = 0;
};

class Engine {
 public:
  Engine(boost::asio::any_io_executor executor, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Where decoded records go (set before start()).
  void on_batch(BatchHandler handler);
  /// Where the samples of BPF-delivered tracepoint probes go in place, in batches, before any
  /// record is rebuilt for them (set before start()). Without it, or when it returns false for
  /// a batch, they are rebuilt as the samples the probes' own events would have written and
  /// reach the batch handler like every other record. The two paths keep each probe's order;
  /// there is no order between them (a consumer in time order takes the records).
  void on_delivered(DeliveredHandler handler);
  /// Called once when the engine stopped by itself (the traced command or pid target exited, see
  /// target_exited(); a batch handler threw) or by stop().
  void on_done(std::function<void()> handler);
  /// Called after each pass that drained every ring to its head (at least once per flush
  /// interval, and the last one in stop()): a record delivered after it was written to its ring
  /// after the pass began, so a sink can end a reorder round there, as perf record writes
  /// FINISHED_ROUND after each pass over its mmaps.
  void on_round(std::function<void()> handler);
  /// Backpressure: while `backlogged()` is true (the stages are behind: records queue faster
  /// than they run), no ring is read. Their records wait in the kernel, which counts what does
  /// not fit as LOST, instead of in a queue that grows without bound and that a stop would have
  /// to run through; passes run only the round handler, back to back with whatever else is
  /// ready (a signal, the duration's timer), until the stages catch up. Not during stop()'s own
  /// drain. Unset: always read.
  void hold_while(std::function<bool()> backlogged);
  /// Called by start() once every event is open, before any is enabled (and before a command
  /// target runs): programs attached here (attach_bpf) see every event the probes will count.
  /// What it throws fails start().
  void before_enable(std::function<void()> handler);
  /// Drains every ring now (what the flush timer does), delivering the batches and a round.
  /// From the engine's executor; nothing while it is not running.
  void drain_now();

  /// What start() would do short of opening anything: resolves every probe (tracepoint ids and
  /// formats, symbols, PMUs), loads the BPF object (compiling a source; the verifier runs) and
  /// opens no event and attaches nothing. The loaded object is kept, attached to nothing, so
  /// maps() describes its maps (a bpf-map stage's names and fields are checked against them).
  /// Notes worth a user's attention (a BPF program that gates every perf consumer of its
  /// tracepoint) are appended to `notes`.
  /// Only before start(): afterwards a usage error.
  /// @return the probes as start() would resolve them. Throws tracer::Error like start().
  std::vector<ProbeInfo> check(std::vector<std::string>* notes = nullptr);
  /// Each probe on its own, as check() would resolve and trial-open it: the error of every probe
  /// that fails (check() stops at the first), in probe order; empty when all are fine. For
  /// `tracer check`, which reports every problem of a recipe at once.
  std::vector<Error> check_probes();

  /// Checks privileges, resolves every probe, opens and maps events, attaches BPF programs,
  /// enables, and arms the reactor. Throws tracer::Error (category, message, hint) on failure,
  /// after closing whatever it had opened.
  void start();
  /// Disables every event, drains every ring to the end, detaches, closes and removes dynamic
  /// probes. Idempotent.
  void stop();
  [[nodiscard]] bool running() const noexcept;
  /// True once the engine stopped by itself because its target exited: the started command,
  /// or the process of a pid target (as perf record -p ends with its process).
  [[nodiscard]] bool target_exited() const noexcept;

  /// Probes as resolved by start().
  [[nodiscard]] std::span<const ProbeInfo> probes() const noexcept;
  /// A snapshot of every counter, per probe and CPU.
  [[nodiscard]] Stats stats() const;
  /// The exception a batch handler threw, if one did: the engine stopped itself then (on_done
  /// fired) and delivered nothing more.
  [[nodiscard]] std::exception_ptr failure() const noexcept;
  /// The maps of the engine's BPF object (none without one). They stay readable after stop(),
  /// until the engine is destroyed.
  [[nodiscard]] const MapSource& maps() const noexcept;
  /// How start() sized the rings of probes without ring_pages (and the output channel): their
  /// number and size, and the locked-memory budget they share (for -v).
  [[nodiscard]] std::string ring_note() const;
  /// The channel system-wide tracepoints are delivered through; nullopt when none is (delivery
  /// off, or no probe delivered).
  [[nodiscard]] std::optional<DeliveryChannel> delivery_channel() const;
  /// The pid of the command started for a kCommand target (-1 otherwise).
  [[nodiscard]] pid_t command_pid() const noexcept;
  /// A kCommand target's exit code once it ended by itself (128 + N after signal N, as a shell
  /// and `tracer stat` report it); nullopt while it runs, or when the engine ended it.
  [[nodiscard]] std::optional<int> command_exit_code() const noexcept;
  /// Attaches a loaded BPF program (its fd) to probe `probe`'s perf event (PERF_EVENT_IOC_SET_BPF
  /// on one event: a tracepoint's or probe's program runs on every CPU and for every task, so
  /// it must filter its targets itself). After start(), before the first batch of a command
  /// target (whose command starts once the reactor runs). The program stays attached until the
  /// events close at stop(). `every_event`: a BPF_PROG_TYPE_PERF_EVENT program (a sampling
  /// event's: cpu-clock, a hardware counter) belongs to one event, so it goes on each CPU's.
  /// Throws tracer::Error (kRuntime) with the errno.
  void attach_bpf(std::uint32_t probe, int prog_fd, bool every_event = false);

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tracer
