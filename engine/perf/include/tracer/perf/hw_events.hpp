// Generic hardware and hardware-cache events by perf's names: one table for recipes
// (`hardware = "..."`, `cache = "..."`) and `tracer stat -e`, so a name one accepts the other
// does too.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tracer::perf {

struct HardwareEvent {
  std::string_view name;  // perf's name or alias: "cycles", "cpu-cycles", "idle-cycles-frontend"
  std::uint64_t config;   // PERF_COUNT_HW_*
};

/// perf's generic hardware event names and aliases (tools/perf/util/parse-events.c
/// event_symbols_hw, with the idle-cycles-* aliases).
[[nodiscard]] std::span<const HardwareEvent> hardware_events() noexcept;
/// A PERF_TYPE_HARDWARE config by name or alias.
[[nodiscard]] std::optional<std::uint64_t> find_hardware_event(std::string_view name) noexcept;
/// A PERF_TYPE_HW_CACHE config from "CACHE-OP[-RESULT]" (perf's evsel__hw_cache names:
/// L1-dcache-load-misses, LLC-loads, dTLB-store-misses, ...); OP alone counts accesses.
[[nodiscard]] std::optional<std::uint64_t> find_cache_event(std::string_view name) noexcept;
/// The hardware names, comma-separated, for hints.
[[nodiscard]] std::string hardware_event_names();
/// How a cache event is written, for hints.
[[nodiscard]] std::string_view cache_event_grammar() noexcept;

}  // namespace tracer::perf
