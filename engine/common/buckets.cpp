#include "tracer/common/buckets.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>

namespace tracer::detail {

std::string power_label(unsigned power) {
  static constexpr std::string_view kSuffix[] = {"", "K", "M", "G", "T", "P", "E"};
  const unsigned group = std::min(power / 10, 6U);
  return fmt::format("{}{}", std::uint64_t{1} << (power - group * 10), kSuffix[group]);
}

BucketBounds log2_bucket(std::size_t b) {
  BucketBounds hb;
  if (b == 0) {
    hb.lo_unbounded = true;
    hb.hi = 0;
    hb.label = "(..., 0)";
  } else if (b == 1 || b == 2) {
    hb.lo = static_cast<std::int64_t>(b - 1);
    hb.hi = hb.lo + 1;
    hb.label = fmt::format("[{}]", hb.lo);
  } else {
    const auto k = static_cast<unsigned>(b - 2);
    hb.lo = std::int64_t{1} << k;
    if (k + 1 >= 63)
      hb.hi_unbounded = true;
    else
      hb.hi = std::int64_t{1} << (k + 1);
    hb.label = fmt::format("[{}, {})", power_label(k), power_label(k + 1));
  }
  return hb;
}

BucketBounds linear_bucket(std::size_t b,
                           std::int64_t min,
                           std::int64_t max,
                           std::int64_t step,
                           std::size_t inner) {
  BucketBounds hb;
  if (b == 0) {
    hb.lo_unbounded = true;
    hb.hi = min;
    hb.label = fmt::format("(..., {})", min);
  } else if (b == inner + 1) {
    hb.lo = max;
    hb.hi_unbounded = true;
    hb.label = fmt::format("[{}, ...)", max);
  } else {
    hb.lo = min + (static_cast<std::int64_t>(b - 1) * step);
    hb.hi = std::min(hb.lo + step, max);
    hb.label = fmt::format("[{}, {})", hb.lo, hb.hi);
  }
  return hb;
}

}  // namespace tracer::detail
