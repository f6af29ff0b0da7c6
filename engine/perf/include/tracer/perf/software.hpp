// Software events by name, and the CPUs an event can be opened on.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"

namespace tracer::perf {

struct SoftwareEvent {
  std::string_view name;  // perf's name: "cpu-clock", "page-faults", ...
  std::uint64_t config;   // PERF_COUNT_SW_*
  std::string_view unit;  // "ns" for the clocks, "" otherwise
};

/// Every software event of the ABI with perf's names (and perf's aliases: "faults", "cs",
/// "migrations", "minor-faults"...).
[[nodiscard]] std::span<const SoftwareEvent> software_events() noexcept;
/// Looks a software event up by name or alias.
[[nodiscard]] std::optional<SoftwareEvent> find_software_event(std::string_view name) noexcept;

/// CPUs from /sys/devices/system/cpu/online.
[[nodiscard]] Result<std::vector<int>> online_cpus();

}  // namespace tracer::perf
