// Read access to BPF maps for code that never sees their fds (stages): names, layouts, and
// snapshots of the entries.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/bpf/schema.hpp"
#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// The entries of one BPF map at one moment, with their layout: aggregations kept in the kernel
/// (counts, histograms) read at intervals. Per-CPU maps: integer value fields summed over CPUs.
struct MapSnapshot {
  bpf::MapSchema schema;
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> entries;
};

/// Read access to BPF maps, for stages (which never see fds): the engine's BPF object's maps.
class MapSource {
 public:
  virtual ~MapSource() = default;
  [[nodiscard]] virtual std::vector<std::string> map_names() const = 0;
  /// @return the key/value layout, or ENOENT (no such map, no BPF object) / ENODATA (no BTF).
  [[nodiscard]] virtual Result<bpf::MapSchema> schema(std::string_view map) const = 0;
  /// Every entry; with `clear`, each entry read is then deleted (hash maps) or zeroed (arrays),
  /// so the next read holds what came since.
  [[nodiscard]] virtual Result<MapSnapshot> read(std::string_view map, bool clear) const = 0;
};

}  // namespace tracer

#pragma GCC visibility pop
