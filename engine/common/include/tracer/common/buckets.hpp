// The bucket bounds and labels of tracer's histograms, once: the hist and lhist stages
// (plugins/stages/) and the reader of their in-kernel form (engine/kernel/reader.cpp) render the
// same buckets the same way.
#pragma once

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
