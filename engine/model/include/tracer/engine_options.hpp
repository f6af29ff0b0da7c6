// What an Engine is asked to run (EngineOptions): the target, the probes, an optional BPF object
// (BpfOptions), and the reactor's limits. No Engine and no Asio: recipes build these.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tracer/error.hpp"
#include "tracer/probe.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

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
  /// No probe is an error unless this is set: a session whose recipe only counts ([[counter]]
  /// groups) runs the target (a command, the end of a process) and its timers without probes.
  bool allow_no_probes = false;
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
  /// Each delivered record carries the task's name at the hit (bpf_get_current_comm): stages
  /// that key by comm read it there, with no time order across rings (ProbeInfo::delivered_comm).
  bool deliver_comm = false;
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

}  // namespace tracer

#pragma GCC visibility pop
