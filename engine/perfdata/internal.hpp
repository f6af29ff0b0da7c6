// Private helpers of the perf.data reader: a bounds-checked cursor that reads the writer's byte
// order, and the byte swapping of records written on a machine of the other endianness.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "tracer/common/byte_cursor.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::perfdata::detail {

template <typename T>
[[nodiscard]] inline T maybe_swap(T v, bool swap) noexcept {
  if constexpr (sizeof(T) == 1) {
    return v;
  } else {
    return swap ? std::byteswap(v) : v;
  }
}

/// Reads fixed-width integers in the file's byte order, never past the end. After the first
/// overrun every read returns 0 and ok() is false.
class Cursor : public tracer::detail::ByteCursor<const std::byte> {
 public:
  Cursor(std::span<const std::byte> bytes, bool swap) noexcept
      : ByteCursor(bytes), begin_(bytes.data()), swap_(swap) {}

  template <typename T>
  T take() noexcept {
    return maybe_swap(ByteCursor::take<T>(), swap_);
  }
  /// struct perf_header_string: u32 len (NUL and padding included), then the bytes.
  std::string string() {
    const auto len = take<std::uint32_t>();
    const auto b = take_bytes(len);
    std::string_view s(reinterpret_cast<const char*>(b.data()), b.size());
    return std::string(s.substr(0, s.find('\0')));
  }
  /// A NUL-terminated string (TRACING_DATA).
  std::string c_string() {
    const auto* nul = static_cast<const std::byte*>(
        ok_ ? std::memchr(p_, 0, static_cast<std::size_t>(end_ - p_)) : nullptr);
    if (nul == nullptr) {
      ok_ = false;
      return {};
    }
    std::string s(reinterpret_cast<const char*>(p_), static_cast<std::size_t>(nul - p_));
    p_ = nul + 1;
    return s;
  }
  [[nodiscard]] std::uint64_t offset() const noexcept {
    return static_cast<std::uint64_t>(p_ - begin_);
  }

 private:
  const std::byte* begin_;
  bool swap_;
};

/// Swaps a perf_event_attr of `size` bytes in place (tools/perf/util/session.c
/// perf_event__attr_swap: every field by its width, and the bit-field word bit-reversed per
/// byte, since a big-endian compiler allocates bit-fields from the most significant bit).
void swap_attr(std::byte* attr, std::uint32_t size) noexcept;

/// Swaps one record (header included) into native order in place. `layout` is the layout of the
/// record's event (nullptr: none known, no sample_id trailer); `format` the tracepoint's format,
/// whose integer fields in a RAW payload are swapped too (without it RAW bytes stay as written).
/// @return false if the record does not fit its own fields (it is then partly swapped).
[[nodiscard]] bool swap_record(std::span<std::byte> rec,
                               const perf::SampleLayout* layout,
                               const tracefs::Format* format) noexcept;

/// Swaps the integer fields of a tracepoint payload (RAW) per its format, in place.
void swap_raw(std::span<std::byte> raw, const tracefs::Format& format) noexcept;

}  // namespace tracer::perfdata::detail

#include <optional>
#include <vector>

#include "tracer/perfdata/reader.hpp"

namespace tracer::perfdata::detail {

/// One EVENT_DESC entry (names attrs by their first id).
struct EventDescEntry {
  perf::EventAttr attr;
  std::string name;
  std::vector<std::uint64_t> ids;
};

/// Reads a perf_event_attr of the file (at most `avail` bytes at `p`) into `out`, swapping it if
/// needed. @return the attr's size in the file, or 0 if it claims more than `avail` bytes.
[[nodiscard]] std::uint32_t read_attr(const std::byte* p,
                                      std::uint64_t avail,
                                      bool swap,
                                      perf::EventAttr& out) noexcept;

/// Parses one feature section's contents into `f` (TRACING_DATA into `tracing`, EVENT_DESC into
/// `descs`). @return nullopt, or the problem with its offset relative to `data`.
[[nodiscard]] std::optional<ReadError> parse_feature(std::uint32_t bit,
                                                     std::span<const std::byte> data,
                                                     bool swap,
                                                     Features& f,
                                                     std::optional<TracingData>& tracing,
                                                     std::vector<EventDescEntry>& descs);

}  // namespace tracer::perfdata::detail
