// Private to the perf.data writer: appending the fields of records (and feature sections) to a
// byte buffer, in the machine's byte order.
#pragma once

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tracer::perfdata::detail {

[[nodiscard]] constexpr std::size_t align8(std::size_t n) noexcept {
  return (n + 7) & ~std::size_t{7};
}

inline void put_raw(std::vector<std::byte>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  put_raw(out, &v, sizeof(T));
}
inline void put_zeros(std::vector<std::byte>& out, std::size_t n) {
  out.insert(out.end(), n, std::byte{0});
}

[[nodiscard]] inline perf_event_header header(std::uint32_t type,
                                              std::uint16_t misc,
                                              std::size_t size) {
  return perf_event_header{.type = type, .misc = misc, .size = static_cast<std::uint16_t>(size)};
}

}  // namespace tracer::perfdata::detail
