// The in-kernel run of the pipelines placement put in the kernel: each one's program generated,
// compiled, loaded and attached to its probes' events; its maps read at the ticks that need them
// and at the end, their rows handed to the pipeline's stages; its counters added to the stats.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tracer/bpf/object.hpp"
#include "tracer/engine.hpp"
#include "tracer/kernel/placement.hpp"
#include "tracer/kernel/reader.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/pipeline.hpp"

namespace tracer::kernel {

/// A pipeline placed in the kernel: its generated object, attached to its probes' events.
struct Run {
  std::size_t pipeline = 0;
  PipelinePlace place;
  std::unique_ptr<bpf::Object> object;  // the reader keeps its address
  std::unique_ptr<gen::Reader> reader;
  perf::Event fork_event;  // sched_process_fork, when the targets' children are followed
  perf::Event free_event;  // sched_process_free: dead targets leave the target map
  perf::Event exec_event;  // sched_process_exec, arming a command's events at its exec
  /// The events the programs are attached to: one per tracepoint, opened here and never
  /// inherited (an inherited copy of an event carries its program, and a child's exit would
  /// detach it from the tracepoint for everyone).
  std::vector<perf::Event> events;
  std::vector<std::uint32_t> event_probes;  // events[i] is engine probe event_probes[i]'s
  std::vector<gen::ProbeStats> last;        // counters at the last read
  std::uint64_t targets_dropped = 0;        // children the target map had no room for
};

/// Programs compiled ahead of start_runs (by GeneratedProgram::hash), each taken once.
using CompiledPrograms = std::map<std::string, Result<bpf::Object>, std::less<>>;

/// Generates, compiles, loads and attaches the program of each pipeline `places` put in the
/// kernel, for `target` (a pid or command target's processes and their children; system-wide
/// without tracer itself unless `trace_self`), at most `max_targets` processes at once. A
/// program found in `compiled` (compile_runs') is taken from there instead of compiled here.
/// @throws Error naming the pipeline and the step that failed (nothing stays attached).
[[nodiscard]] std::vector<Run> start_runs(Engine& engine,
                                          std::span<const PipelinePlace> places,
                                          const Target& target,
                                          bool trace_self,
                                          std::uint32_t max_targets,
                                          CompiledPrograms* compiled = nullptr);

/// The programs start_runs would generate for the same arguments (none for a pipeline whose
/// generation fails: start_runs says why). Quick (text only); on the engine's executor.
[[nodiscard]] std::vector<gen::GeneratedProgram> generate_runs(
    Engine& engine,
    std::span<const PipelinePlace> places,
    const Target& target,
    bool trace_self,
    std::uint32_t max_targets);

/// Compiles `programs` (clang: the slow step of start_runs) into `into`, by hash: on any thread,
/// as it touches nothing of the engine. Stops early once `cancel` is set.
void compile_runs(std::span<const gen::GeneratedProgram> programs,
                  CompiledPrograms& into,
                  const std::atomic<bool>* cancel = nullptr);

/// Hands what the kernel aggregated since the last read to the aggregation stages: from every
/// run with `all` (the end, a live change, a scrape of `tracer serve`), and at a tick only for a
/// pipeline whose output is due at `now`, whose stacks need the processes' maps of now, or whose
/// map may be half full. Otherwise nothing is read.
void absorb_runs(std::span<Run> runs,
                 std::span<const std::unique_ptr<Pipeline>> pipelines,
                 Engine& engine,
                 bool all,
                 std::chrono::nanoseconds now);

/// Adds the runs' counters as of their last read to `stats`: per probe, the events its program
/// saw per CPU, the events whose key or stack did not fit, cut keys, unreadable strings,
/// contended updates, targets dropped and skipped runs. `counting(probe)`: the probe's events
/// are its program's hits (no ring of its own).
/// A live change removed engine probe `probe`: the run's events on its tracepoint close (its
/// program there no longer runs; the engine closes the probe's own events, which a probe PMU's
/// or sampling event's program is attached to). What the run counted of it stays in its maps.
/// @return whether the run still has a probe that is not removed.
bool drop_probe(Run& run, std::uint32_t probe, std::span<const ProbeInfo> probes);

void add_run_stats(std::span<const Run> runs,
                   Stats& stats,
                   const std::function<bool(std::uint32_t)>& counting);

}  // namespace tracer::kernel
