// What a stage reads from an event: the record kinds, and values read in place (Value), never
// allocated.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracer/perf/record.hpp"
#include "tracer/stage_spec.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// Record kinds (RecordKind, KindMask: stage_spec.hpp, where a stage declares the kinds it wants).

[[nodiscard]] RecordKind kind_of(const perf::Record& record) noexcept;

// ---------------------------------------------------------------------------------------------
// Values: read in place, never allocated. Strings view the record (or the CommCache) and are valid
// during on_events only.

/// A callchain used as a value (an aggregation key): the ips as the kernel wrote them (`callchain`,
/// PERF_CONTEXT_* markers included), or one part of it (`kstack`, `ustack`: no markers), and the
/// process whose address space the user addresses belong to (what symbolizes them).
struct IpList {
  perf::U64Array ips;
  std::uint32_t pid = 0;
};

using Value =
    std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string_view, IpList>;

enum class FieldType : std::uint8_t { kNone, kInt, kUint, kDouble, kString, kIps };
[[nodiscard]] std::string_view to_string(FieldType t) noexcept;

[[nodiscard]] inline bool is_none(const Value& v) noexcept {
  return std::holds_alternative<std::monostate>(v);
}
/// Integers and doubles as a double (nullopt for strings, ip lists and missing values).
[[nodiscard]] std::optional<double> to_double(const Value& v) noexcept;
/// Integers (and doubles, truncated) as int64; uint64 above INT64_MAX wraps.
[[nodiscard]] std::optional<std::int64_t> to_int(const Value& v) noexcept;

}  // namespace tracer

#pragma GCC visibility pop
