// A chunk of AUX data as a record hands it on (RecordRef::aux): the bytes of the AUX area one
// PERF_RECORD_AUX announced, valid during the callback only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tracer/perf/abi.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

/// A chunk of AUX data announced by one PERF_RECORD_AUX. Two spans when it wraps the AUX area.
struct AuxChunk {
  std::uint64_t offset = 0;  // position in the AUX stream (PERF_RECORD_AUX aux_offset)
  std::uint64_t size = 0;
  std::uint64_t flags = 0;  // TRUNCATED, OVERWRITE, PARTIAL, COLLISION, PMU format
  std::span<const std::byte> first;
  std::span<const std::byte> second;
  [[nodiscard]] bool truncated() const noexcept { return (flags & abi::kAuxFlagTruncated) != 0; }
  /// Copies the chunk's bytes (both spans) to `out` (resized).
  void copy_to(std::vector<std::byte>& out) const;
};

}  // namespace tracer::perf

#pragma GCC visibility pop
