// Private helper shared by the engine layers: a bounds-checked forward cursor over bytes.
//
// The ring record decoder (perf/record.cpp), the perf.data reader (perfdata/internal.hpp) and
// its byte swapper (perfdata/swap.cpp) all walk records whose lengths come from the data
// itself. Header-only and inline: the record decoder's hot path reads through it.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>

namespace tracer::detail {

/// A forward reader over [p, end) that never reads past `end`: after the first overrun every
/// read returns a zero value (or an empty span), and ok() stays false. `Byte` is `const
/// std::byte` to read, or `std::byte` to also swap fields in place (take_swapped).
template <typename Byte>
class ByteCursor {
  static_assert(std::is_same_v<std::remove_const_t<Byte>, std::byte>);

 public:
  ByteCursor(Byte* p, Byte* end) noexcept : p_(p), end_(end) {}
  explicit ByteCursor(std::span<Byte> bytes) noexcept
      : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  [[nodiscard]] bool ok() const noexcept { return ok_; }
  [[nodiscard]] std::uint64_t left() const noexcept {
    return ok_ ? static_cast<std::uint64_t>(end_ - p_) : 0;
  }
  [[nodiscard]] Byte* pos() const noexcept { return p_; }
  void fail() noexcept { ok_ = false; }

  /// A T in the machine's byte order (unaligned-safe).
  template <typename T>
  T take() noexcept {
    if (!ensure(sizeof(T)))
      return T{};
    T v;
    std::memcpy(&v, p_, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  /// A T written in the other byte order: swapped in place and returned in the machine's.
  template <typename T>
  requires(!std::is_const_v<Byte>) T take_swapped()
  noexcept {
    if (!ensure(sizeof(T)))
      return T{};
    T v;
    std::memcpy(&v, p_, sizeof(T));
    if constexpr (sizeof(T) > 1)
      v = std::byteswap(v);
    std::memcpy(p_, &v, sizeof(T));
    p_ += sizeof(T);
    return v;
  }
  /// `n` bytes as a span (n may come from the data: checked against what is left).
  std::span<Byte> take_bytes(std::uint64_t n) noexcept {
    if (!ensure(n))
      return {};
    std::span<Byte> s(p_, static_cast<std::size_t>(n));
    p_ += n;
    return s;
  }
  /// `n` items of `size` bytes each; n * size overflow-safe.
  std::span<Byte> take_array(std::uint64_t n, std::uint64_t size) noexcept {
    if (!ok_ || n > static_cast<std::uint64_t>(end_ - p_) / size) {
      ok_ = false;
      return {};
    }
    std::span<Byte> s(p_, static_cast<std::size_t>(n * size));
    p_ += n * size;
    return s;
  }
  /// Skips `n` bytes. @return where they start, or nullptr (and the cursor fails) if short.
  Byte* skip(std::uint64_t n) noexcept { return take_bytes(n).data(); }
  /// A NUL-terminated string padded out to the end (PERF_RECORD_COMM, MMAP, ...): the padding
  /// after the NUL is consumed too.
  std::string_view take_string() noexcept {
    if (!ok_)
      return {};
    const auto* s = reinterpret_cast<const char*>(p_);
    const auto n = ::strnlen(s, static_cast<std::size_t>(end_ - p_));
    p_ = end_;
    return {s, n};
  }

 protected:
  bool ensure(std::uint64_t n) noexcept {
    if (!ok_ || n > static_cast<std::uint64_t>(end_ - p_)) {
      ok_ = false;
      return false;
    }
    return true;
  }
  Byte* p_;
  Byte* end_;
  bool ok_ = true;
};

}  // namespace tracer::detail
