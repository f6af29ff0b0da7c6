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
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tracer/perfdata/reader.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"

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
  [[nodiscard]] std::span<const ProbeInfo> probes() const noexcept;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracer
