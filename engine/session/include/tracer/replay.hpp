// Replay: a recipe's pipelines run over a recorded perf.data file (perf's or tracer's) as if live,
// with the file's own schemas (attrs, tracepoint formats): its FINISHED_ROUND records are the
// rounds (time order), its sample times the clock of interval outputs, its COMM/FORK records the
// thread names. What `tracer replay FILE RECIPE` does, for any program.
//
// Usage:
//   auto reader = tracer::perfdata::Reader::open("perf.data");      // Result<Reader>
//   tracer::Replay replay(recipe, *reader, out, {.json = false});  // throws: probes not in file
//   replay.run();                                                  // to the end (or damage)
//   if (reader->error()) ...                                       // what stopped it, if any
//
// Without a recipe, replay_print() prints a file the way `perf script` does.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tracer/perfdata/perfmon.hpp"
#include "tracer/perfdata/reader.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct ReplayOptions {
  bool json = false;  // as SessionOptions::json
  /// The file's name, for messages.
  std::string file{};
  /// Records handed to the pipelines at once.
  std::size_t max_batch = 128;
  /// Pipeline options (replay never reads this machine's /proc for comms: the file's COMM
  /// records name the threads).
  PipelineOptions pipeline{};
};

/// The probe a file's event describes (kind from its attr type and the file's PMU mappings).
[[nodiscard]] ProbeInfo probe_from(const perfdata::EventDesc& event,
                                   const perfdata::Features& features);

class Replay {
 public:
  /// Maps every recipe probe to a file event (by spec, name or tracepoint) and binds the
  /// pipelines against the file's schemas. Throws tracer::Error kRecipe naming the probes the
  /// file lacks (and what it has), or the stages' problems with their positions.
  Replay(const Recipe& recipe, perfdata::Reader& reader, Sink& out, ReplayOptions options = {});
  ~Replay();
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;

  /// Reads the file to its end (or to what the reader calls damage: Reader::error()), then
  /// stops the pipelines (final tables).
  void run();
  /// Stage counters, as SessionStats::counters.
  [[nodiscard]] std::vector<std::pair<std::string, std::uint64_t>> counters() const;
  /// The pipelines' symbolizer warnings since the last call (Pipeline::take_warnings).
  [[nodiscard]] std::vector<std::string> take_warnings();
  [[nodiscard]] std::span<const ProbeInfo> probes() const noexcept;

  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's

 private:
  std::unique_ptr<Impl> impl_;
};

struct ReplayPrintOptions {
  /// Exactly perf script's default lines (tracepoints through their print fmt), to diff with
  /// perf script; else tracer's: the event's name, then a tracepoint's fields as name=value.
  bool perf = false;
  /// The file's name, for warnings.
  std::string file{};
  /// Called with each warning about the file (no header features, tracepoints without a format,
  /// print fmts that cannot be evaluated), before anything is printed. Unset: not said.
  std::function<void(const std::string&)> warn{};
  /// More roots of separate debuginfo for the callchains' frames (as under /usr/lib/debug).
  std::vector<std::filesystem::path> debug_roots{};
};

/// A recipe's pipelines over perfmon buffers (tracer/perfdata/perfmon.hpp, what the perfmon
/// stage writes), buffer i being CPU i's. The event ids become probes: group MISC event k is the
/// recipe's k-th probe (how the perfmon stage numbers them), any other is named
/// "perfmon:GROUP:EVENT". Each TICK, COUNT, VALUE, PC or LAST_BRANCH record is a sample of its
/// event at the time of the TIME record before it (converted to ns with the header's ticks per
/// second), on its buffer's CPU: a PC record's pc is the sample's ip and its aspace the pid; a
/// COUNT's count (a VALUE's value) its period, and an event with COUNT records is a counting
/// probe (a count adds its counts). In time order across the CPUs. Throws tracer::Error kRecipe
/// for the stages' problems, with their positions.
/// @return the stage counters, as Replay::counters.
std::vector<std::pair<std::string, std::uint64_t>> replay_perfmon(
    const Recipe& recipe,
    std::span<const perfmon::Buffer> buffers,
    Sink& out,
    const ReplayOptions& options = {});
/// Prints the buffers' records, a line each: the CPU, the time in seconds, the record type, the
/// event (group:event) and the record's fields; then a line per buffer that says FULL.
void print_perfmon(std::span<const perfmon::Buffer> buffers, std::FILE* out);

/// Prints `reader`'s file to `out` the way `perf script` does: each sample as comm, tid, [cpu],
/// seconds.microseconds, then the event, in time order (FINISHED_ROUND records are the rounds),
/// each thread named as it was at the sample's time (COMM and FORK applied in order); and a perf
/// stat record file's counts at each STAT_ROUND. Reads to the end or to what the reader calls
/// damage (Reader::error()): everything read before it is printed, and `out` flushed.
void replay_print(perfdata::Reader& reader, std::FILE* out, const ReplayPrintOptions& options = {});

}  // namespace tracer

#pragma GCC visibility pop
