// bpf::read_map: a loaded object's map read whole, per-CPU values summed, optionally cleared.
#include "tracer/bpf/maps.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace tracer::bpf {

std::vector<std::byte> sum_per_cpu(const StructSchema& value, std::span<const std::byte> all) {
  const std::size_t stride = (std::size_t{value.size} + 7) / 8 * 8;
  const auto first = all.first(std::min(all.size(), std::size_t{value.size}));
  std::vector<std::byte> out(first.begin(), first.end());
  if (stride == 0 || out.size() < value.size)
    return out;
  for (const auto& f : value.fields) {
    const bool integer = f.kind == FieldKind::kSigned || f.kind == FieldKind::kUnsigned;
    if (!integer || f.bit_size != 0 || (f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8) ||
        f.offset + f.size > value.size)
      continue;
    std::uint64_t sum = 0;
    for (std::size_t base = 0; base + value.size <= all.size(); base += stride) {
      std::uint64_t v = 0;
      std::memcpy(&v, all.data() + base + f.offset, f.size);  // little-endian: low bytes
      sum += v;
    }
    std::memcpy(out.data() + f.offset, &sum, f.size);
  }
  return out;
}

Result<MapEntries> read_map(Object& obj,
                            std::string_view map,
                            const MapSchema& schema,
                            bool clear) {
  TRACER_ASSIGN_OR_RETURN(auto entries, obj.entries(map));
  MapEntries out;
  out.reserve(entries.size());
  for (auto& [key, value] : entries) {
    if (clear) {
      if (schema.array) {
        std::vector<std::byte> zero(value.size());
        [[maybe_unused]] const auto st =
            obj.update_elem(map, std::span<const std::byte>(key), std::span<const std::byte>(zero));
      } else {
        // Races with the program: increments between the read and the delete are lost, as
        // with bpftrace's clear().
        [[maybe_unused]] const auto st = obj.delete_elem(map, std::span<const std::byte>(key));
      }
    }
    if (schema.per_cpu)
      value = sum_per_cpu(schema.value, value);
    out.emplace_back(std::move(key), std::move(value));
  }
  return out;
}

}  // namespace tracer::bpf
