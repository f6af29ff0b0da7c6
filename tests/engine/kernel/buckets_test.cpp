// bpf/progs/tracer_buckets.h, the C that the generated programs bucket with, against
// tracer/common/buckets.hpp, the stages' buckets: the header is compiled here on the host, and
// every function gives its C++ twin's bucket for each class of value (both signs, zero, every
// power of two and its neighbours, the extremes) and for 200,000 random ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tracer/common/buckets.hpp"

namespace tracer::kernel {
namespace {

// What the BPF build gives the header (linux/types.h; __always_inline is glibc's sys/cdefs.h's
// here, bpf_helpers.h's there).
// NOLINTBEGIN(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)
using __u32 = std::uint32_t;
using __u64 = std::uint64_t;
using __s64 = std::int64_t;
#include "tracer_buckets.h"
// NOLINTEND(bugprone-reserved-identifier,cert-dcl37-c,cert-dcl51-cpp)

std::vector<std::int64_t> values() {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  std::vector<std::int64_t> out = {0, 1, -1, kMin, kMax, kMin + 1, kMax - 1};
  for (unsigned k = 0; k < 63; ++k) {
    const auto p = std::int64_t{1} << k;
    for (const std::int64_t v : {p - 1, p, p + 1})
      out.insert(out.end(), {v, -v});
  }
  std::mt19937_64 rng(20261128);
  for (int i = 0; i < 100'000; ++i) {
    out.push_back(static_cast<std::int64_t>(rng()));
    out.push_back(static_cast<std::int64_t>(rng() >> (rng() % 64)));  // every bit width
  }
  return out;
}

TEST(Buckets, TheGeneratedProgramsLog2BucketsAreTheStages) {
  for (const std::int64_t v : values())
    ASSERT_EQ(std::size_t{tr_log2_bucket(v)}, detail::log2_bucket_of(v)) << v;
  EXPECT_LT(detail::log2_bucket_of(std::numeric_limits<std::int64_t>::max()), detail::kLog2Buckets);
}

TEST(Buckets, TheGeneratedProgramsQuantileBucketsAreTheStages) {
  for (const std::int64_t v : values()) {
    const std::uint64_t u = v < 0 ? 0 : static_cast<std::uint64_t>(v);  // as the stage's
    ASSERT_EQ(std::size_t{tr_quantile_bucket(v)}, detail::quantile_bucket_of(u)) << v;
  }
  EXPECT_EQ(detail::quantile_bucket_of(std::numeric_limits<std::uint64_t>::max()),
            detail::kQuantileBuckets - 1);
}

TEST(Buckets, TheGeneratedProgramsLinearBucketsAreTheStages) {
  constexpr auto kMin = std::numeric_limits<std::int64_t>::min();
  constexpr auto kMax = std::numeric_limits<std::int64_t>::max();
  struct Range {
    std::int64_t min, max, step;
  };
  for (const Range r :
       {Range{0, 100, 10}, Range{-50, 1000, 100}, Range{-7, 7, 3}, Range{kMin, kMax, kMax / 500},
        Range{0, kMax, 1'000'000'000'000'000LL}, Range{kMin, 0, 1LL << 53}}) {
    const auto inner = detail::linear_inner(r.min, r.max, r.step);
    ASSERT_GT(inner, 0U);
    for (const std::int64_t v : values()) {
      const std::size_t want = detail::linear_bucket_of(v, r.min, r.max, r.step, inner);
      ASSERT_LE(want, inner + 1);
      ASSERT_EQ(std::size_t{tr_linear_bucket(v, r.min, r.max, static_cast<std::uint64_t>(r.step),
                                             static_cast<std::uint32_t>(inner))},
                want)
          << v << " in [" << r.min << ", " << r.max << ") by " << r.step;
    }
  }
  EXPECT_EQ(detail::linear_inner(kMin, kMax, 1, 1'000'000), 1'000'000U) << "capped, no overflow";
}

}  // namespace
}  // namespace tracer::kernel
