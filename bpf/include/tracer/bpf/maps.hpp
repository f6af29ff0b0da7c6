// Private to libtracer: reading a loaded object's maps whole, as the bpf-map stage wants them
// (aggregations kept in the kernel, read at intervals): per-CPU values summed, and optionally
// cleared as they are read. The engine's MapSource (Engine::maps()) is built on it.
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/bpf/object.hpp"
#include "tracer/bpf/schema.hpp"
#include "tracer/result.hpp"

namespace tracer::bpf {

/// (key, value) bytes of every entry of a map.
using MapEntries = std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>>;

/// Every entry of `map`, whose layout is `schema` (Object::map_schema). Per-CPU maps: the integer
/// fields of the CPUs' copies are summed into one value. With `clear`, each entry read is then
/// deleted (hash maps) or zeroed (arrays), so the next read holds what came since.
/// @return the entries, or the errno of Object::entries().
[[nodiscard]] Result<MapEntries> read_map(Object& obj,
                                          std::string_view map,
                                          const MapSchema& schema,
                                          bool clear);

/// Sums the integer fields of `value`'s per-CPU copies in `all` (each padded to 8 bytes) into
/// one value of `value.size` bytes (the first copy's bytes elsewhere).
[[nodiscard]] std::vector<std::byte> sum_per_cpu(const StructSchema& value,
                                                 std::span<const std::byte> all);

}  // namespace tracer::bpf
