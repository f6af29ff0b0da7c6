#include "core/probe_resolver.hpp"

#include <gtest/gtest.h>
#include <linux/hw_breakpoint.h>

namespace tracer::core {
namespace {

TEST(ProbeResolver, CacheEventNamesFollowPerf) {
  EXPECT_EQ(cache_event_config("L1-dcache-load-misses"),
            PERF_COUNT_HW_CACHE_L1D | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                (PERF_COUNT_HW_CACHE_RESULT_MISS << 16));
  EXPECT_EQ(cache_event_config("LLC-loads"), PERF_COUNT_HW_CACHE_LL |
                                                 (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                                                 (PERF_COUNT_HW_CACHE_RESULT_ACCESS << 16));
  EXPECT_EQ(cache_event_config("dTLB-store-misses"), PERF_COUNT_HW_CACHE_DTLB |
                                                         (PERF_COUNT_HW_CACHE_OP_WRITE << 8) |
                                                         (PERF_COUNT_HW_CACHE_RESULT_MISS << 16));
  EXPECT_FALSE(cache_event_config("L1-dcache-jump-misses"));
  EXPECT_FALSE(cache_event_config("L3-loads"));
  EXPECT_EQ(hardware_event_config("instructions"), PERF_COUNT_HW_INSTRUCTIONS);
  EXPECT_FALSE(hardware_event_config("instrs"));
}

TEST(ProbeResolver, BreakpointSpecs) {
  auto a = parse_breakpoint("0x601040");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->addr, 0x601040U);
  EXPECT_EQ(a->type, static_cast<std::uint32_t>(HW_BREAKPOINT_W));
  EXPECT_EQ(a->len, 8U);
  auto b = parse_breakpoint("0x601040:rw:4");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->type, static_cast<std::uint32_t>(HW_BREAKPOINT_RW));
  EXPECT_EQ(b->len, 4U);
  auto x = parse_breakpoint("0x401000:x");
  ASSERT_TRUE(x.has_value());
  EXPECT_EQ(x->len, sizeof(long));
  EXPECT_FALSE(parse_breakpoint("0x401000:rx").has_value());
  EXPECT_FALSE(parse_breakpoint("0x401000:w:3").has_value());
  EXPECT_FALSE(parse_breakpoint("main").has_value());
}

TEST(ProbeResolver, DefaultsPerKind) {
  ResolveContext ctx;
  auto tp = resolve_probe(
      {.name = "t", .kind = ProbeKind::kTracepoint, .spec = "sched:sched_switch"}, 0, ctx);
  EXPECT_EQ(tp.attr.raw()->sample_period, 1U);
  EXPECT_FALSE(tp.attr.has(perf::Flag::kFreq));
  EXPECT_NE(tp.attr.sample_type() & PERF_SAMPLE_RAW, 0U);
  EXPECT_TRUE(tp.attr.has(perf::Flag::kSampleIdAll));
  EXPECT_TRUE(tp.attr.has(perf::Flag::kUseClockid));
  EXPECT_TRUE(tp.attr.has(perf::Flag::kWatermark));
  EXPECT_EQ(tp.attr.raw()->wakeup_watermark, 64U * 4096 / 4);
  ASSERT_TRUE(tp.info.format.has_value());
  EXPECT_NE(tp.info.format->field("next_pid"), nullptr);

  auto clock =
      resolve_probe({.name = "c", .kind = ProbeKind::kSoftware, .spec = "cpu-clock"}, 1, ctx);
  EXPECT_TRUE(clock.attr.has(perf::Flag::kFreq));
  EXPECT_EQ(clock.attr.raw()->sample_freq, 4000U);
  auto faults = resolve_probe(
      {.name = "f", .kind = ProbeKind::kSoftware, .spec = "page-faults", .wakeup = {.events = 1}},
      2, ctx);
  EXPECT_EQ(faults.attr.raw()->sample_period, 1U);
  EXPECT_FALSE(faults.attr.has(perf::Flag::kWatermark));
  EXPECT_EQ(faults.attr.raw()->wakeup_events, 1U);
  auto counting = resolve_probe(
      {.name = "n", .kind = ProbeKind::kSoftware, .spec = "task-clock", .counting = true}, 3, ctx);
  EXPECT_EQ(counting.attr.sample_type(), 0U);
  EXPECT_TRUE(counting.counting);
  auto raw = resolve_probe({.name = "r", .kind = ProbeKind::kRawPmu, .spec = "software/config=3/"},
                           4, ctx);
  EXPECT_EQ(raw.attr.type(), static_cast<std::uint32_t>(PERF_TYPE_SOFTWARE));
  EXPECT_EQ(raw.attr.config(), 3U);
  EXPECT_EQ(raw.info.pmu, "software");
}

}  // namespace
}  // namespace tracer::core
