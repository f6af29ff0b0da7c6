// perf-data: a sink that writes every record it receives as a perf.data file (or a pipe-mode
// stream on stdout with path "-") that `perf script`, `perf report` and `perf evlist` read.
// Options: path (required), pipe (force pipe mode), synthesize (COMM/MMAP2 from /proc, default
// true). The file opens at Stage::start (not in `tracer check`), rounds end at the engine's
// passes (on_round), and stop() finalizes the header.
#pragma once

#include <optional>
#include <string>

#include "tracer/ext/stage.hpp"
#include "tracer/perfdata/writer.hpp"

namespace tracer::stages {

/// An output of records, not tables (Output::takes_tables is false).
class PerfData : public Stage, public Output {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  [[nodiscard]] bool rebinds() const noexcept override { return false; }
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void start() override;
  void on_events(std::span<Event* const> events) noexcept override;
  void stop() override;
  [[nodiscard]] Output* output() noexcept override { return this; }

  [[nodiscard]] bool takes_tables() const noexcept override { return false; }
  void on_round() noexcept override;
  void flush() override;

  /// The writer's counters (records, synthesized, bytes...) once started.
  [[nodiscard]] const perfdata::WriterStats* writer_stats() const noexcept;

 private:
  std::string path_;
  SourceRegion path_where_;
  bool pipe_ = false;
  bool synthesize_ = true;
  std::vector<ProbeInfo> probes_;
  std::optional<perfdata::Writer> writer_;
};

}  // namespace tracer::stages
