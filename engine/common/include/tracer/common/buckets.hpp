// tracer's histogram buckets, once: which bucket a value falls in, how many there are, and
// their bounds and labels. The hist, lhist and quantiles stages (plugins/stages/), the code
// generator of their in-kernel form (engine/kernel/) and its reader use these; the generated
// programs use bpf/progs/tracer_buckets.h, the same functions in C (a test holds them equal).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace tracer::detail {

struct BucketBounds {
  std::int64_t lo = 0, hi = 0;  // [lo, hi)
  bool lo_unbounded = false;    // (..., hi)
  bool hi_unbounded = false;    // [lo, ...)
  std::string label;            // "[4, 8)", "[1K, 2K)", "[0]", "(..., 0)"
};

/// A log2 histogram (hist): 0 negative, 1 zero, 2 one, then [2^k, 2^(k+1)) at k + 2.
inline constexpr std::size_t kLog2Buckets = 66;
[[nodiscard]] constexpr std::size_t log2_bucket_of(std::int64_t v) noexcept {
  if (v < 0)
    return 0;
  if (v == 0)
    return 1;
  return 1 + static_cast<std::size_t>(std::bit_width(static_cast<std::uint64_t>(v)));
}

/// A log-linear histogram (quantiles): values below kQuantileExact exactly, then
/// 2^kQuantileSubBits sub-buckets per power of two (relative error 1/kQuantileExact).
inline constexpr unsigned kQuantileSubBits = 6;
inline constexpr std::size_t kQuantileExact = std::size_t{2} << kQuantileSubBits;  // 128
inline constexpr std::size_t kQuantileBuckets =
    kQuantileExact + (63 - kQuantileSubBits) * (std::size_t{1} << kQuantileSubBits);
[[nodiscard]] constexpr std::size_t quantile_bucket_of(std::uint64_t v) noexcept {
  if (v < kQuantileExact)
    return static_cast<std::size_t>(v);
  const unsigned e = static_cast<unsigned>(std::bit_width(v)) - 1;  // >= 7
  const unsigned shift = e - kQuantileSubBits;                      // >= 1
  const std::uint64_t mant = v >> shift;                            // [64, 128)
  return kQuantileExact + (shift - 1) * (std::size_t{1} << kQuantileSubBits) +
         static_cast<std::size_t>(mant - (std::uint64_t{1} << kQuantileSubBits));
}

/// A linear histogram (lhist) from `min` to `max` by `step` (step > 0, max > min): its inner
/// buckets (at most `cap`), then the bucket of `v` among inner + 2 (0 below min, inner + 1 at
/// or above max).
[[nodiscard]] constexpr std::size_t linear_inner(std::int64_t min,
                                                 std::int64_t max,
                                                 std::int64_t step,
                                                 std::size_t cap = SIZE_MAX) noexcept {
  if (step <= 0 || max <= min)
    return 0;
  const auto span = static_cast<unsigned __int128>(static_cast<__int128>(max) - min);
  const auto n =
      (span + static_cast<unsigned __int128>(step) - 1) / static_cast<unsigned __int128>(step);
  return n > cap ? cap : static_cast<std::size_t>(n);
}
[[nodiscard]] constexpr std::size_t linear_bucket_of(std::int64_t v,
                                                     std::int64_t min,
                                                     std::int64_t max,
                                                     std::int64_t step,
                                                     std::size_t inner) noexcept {
  if (v < min)
    return 0;
  if (v >= max)
    return inner + 1;
  return 1 + static_cast<std::size_t>(
                 (static_cast<std::uint64_t>(v) - static_cast<std::uint64_t>(min)) /
                 static_cast<std::uint64_t>(step));
}

/// The label bpftrace gives 2^power: 1, 2 ... 512, 1K ... 16E.
[[nodiscard]] std::string power_label(unsigned power);

/// Bucket `b` of a log2 histogram (hist): 0 negative, 1 zero, 2 one, then [2^k, 2^(k+1)) for
/// b = k + 2.
[[nodiscard]] BucketBounds log2_bucket(std::size_t b);

/// Bucket `b` of a linear histogram (lhist) with `inner` buckets of `step` from `min` to `max`:
/// 0 below min, inner + 1 at or above max.
[[nodiscard]] BucketBounds linear_bucket(std::size_t b,
                                         std::int64_t min,
                                         std::int64_t max,
                                         std::int64_t step,
                                         std::size_t inner);

}  // namespace tracer::detail
