// perfmon: a sink that writes the samples it receives as perfmon buffers (the Fuchsia perfmon
// format of ../shared/seeds, tracer/perfdata/perfmon.hpp): one buffer per CPU with a size cap,
// written at the end of the run. Options: path (required), max_bytes (per CPU buffer, header
// included; default 4 MiB). Each sample becomes a TIME record when its time differs from the
// buffer's last, then a PC record (aspace: the process id, pc: the sample's ip) when it has an
// ip, a COUNT record (its count) for a counting probe's reading, else a TICK record; its event
// id is group MISC, event = the probe's index + 1. Records past a buffer's cap are dropped,
// counted (the stage counter perfmon.dropped), and the buffer says FULL.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tracer/ext/stage.hpp"
#include "tracer/perfdata/perfmon.hpp"

namespace tracer::stages {

class Perfmon : public Stage, public Output {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  [[nodiscard]] bool rebinds() const noexcept override { return false; }
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const override;
  void stop() override;
  [[nodiscard]] Output* output() noexcept override { return this; }
  [[nodiscard]] bool takes_tables() const noexcept override { return false; }

  /// The event id of probe `probe` (MISC group, event = probe + 1).
  [[nodiscard]] static std::uint16_t event_id(std::uint32_t probe) noexcept;

 private:
  std::string path_;
  SourceRegion path_where_;
  std::uint64_t max_bytes_ = 4U << 20;
  std::vector<bool> counting_;  // by probe: its samples are counts (ProbeInfo::counts_to_stages)
  std::map<std::uint32_t, perfmon::BufferWriter> cpus_;
  std::uint64_t records_ = 0, unmapped_ = 0;
  bool dry_run_ = false;
};

}  // namespace tracer::stages
