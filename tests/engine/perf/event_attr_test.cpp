#include "tracer/perf/event_attr.hpp"

#include <gtest/gtest.h>

#include <cstring>

namespace tracer::perf {
namespace {

std::uint64_t flags_word(const EventAttr& a) {
  std::uint64_t w = 0;
  std::memcpy(&w, reinterpret_cast<const std::byte*>(a.raw()) + 40, 8);
  return w;
}

TEST(EventAttr, FlagBitsSitWhereTheAbiSays) {
  // Bit positions of the u64 at offset 40, from include/uapi/linux/perf_event.h (little endian).
  const std::pair<Flag, int> expected[] = {
      {Flag::kDisabled, 0},
      {Flag::kInherit, 1},
      {Flag::kPinned, 2},
      {Flag::kExclusive, 3},
      {Flag::kExcludeUser, 4},
      {Flag::kExcludeKernel, 5},
      {Flag::kExcludeHv, 6},
      {Flag::kExcludeIdle, 7},
      {Flag::kMmap, 8},
      {Flag::kComm, 9},
      {Flag::kFreq, 10},
      {Flag::kInheritStat, 11},
      {Flag::kEnableOnExec, 12},
      {Flag::kTask, 13},
      {Flag::kWatermark, 14},
      {Flag::kMmapData, 17},
      {Flag::kSampleIdAll, 18},
      {Flag::kExcludeHost, 19},
      {Flag::kExcludeGuest, 20},
      {Flag::kExcludeCallchainKernel, 21},
      {Flag::kExcludeCallchainUser, 22},
      {Flag::kMmap2, 23},
      {Flag::kCommExec, 24},
      {Flag::kUseClockid, 25},
      {Flag::kContextSwitch, 26},
      {Flag::kWriteBackward, 27},
      {Flag::kNamespaces, 28},
      {Flag::kKsymbol, 29},
      {Flag::kBpfEvent, 30},
      {Flag::kAuxOutput, 31},
      {Flag::kCgroup, 32},
      {Flag::kTextPoke, 33},
      {Flag::kBuildId, 34},
      {Flag::kInheritThread, 35},
      {Flag::kRemoveOnExec, 36},
      {Flag::kSigtrap, 37},
  };
  for (auto [flag, bit] : expected) {
    SCOPED_TRACE(flag_name(flag));
    EventAttr a;
    a.flag(flag);
    EXPECT_TRUE(a.has(flag));
    EXPECT_EQ(flags_word(a), std::uint64_t{1} << bit);
    a.flag(flag, false);
    EXPECT_FALSE(a.has(flag));
    EXPECT_EQ(flags_word(a), 0U);
  }
}

TEST(EventAttr, AuxActionBitsAndPreciseIp) {
  EventAttr a;
  a.flag(Flag::kAuxStartPaused).flag(Flag::kAuxResume);
  std::uint32_t action = 0;
  std::memcpy(&action, reinterpret_cast<const std::byte*>(a.raw()) + 116, 4);
  EXPECT_EQ(action, 0b101U);
  EXPECT_TRUE(a.has(Flag::kAuxStartPaused));
  EXPECT_FALSE(a.has(Flag::kAuxPause));
  a.precise_ip(3);
  EXPECT_EQ(flags_word(a), std::uint64_t{3} << 15);
}

TEST(EventAttr, PeriodFreqWatermarkClockid) {
  EventAttr a;
  a.sample_freq(99);
  EXPECT_TRUE(a.has(Flag::kFreq));
  EXPECT_EQ(a.raw()->sample_freq, 99U);
  a.sample_period(1);
  EXPECT_FALSE(a.has(Flag::kFreq));
  a.wakeup_watermark(8192);
  EXPECT_TRUE(a.has(Flag::kWatermark));
  EXPECT_EQ(a.raw()->wakeup_watermark, 8192U);
  a.wakeup_events(4);
  EXPECT_FALSE(a.has(Flag::kWatermark));
  a.clockid(CLOCK_MONOTONIC);
  EXPECT_TRUE(a.has(Flag::kUseClockid));
  EXPECT_EQ(a.raw()->clockid, CLOCK_MONOTONIC);
}

TEST(EventAttr, RequiredSizeFollowsTheLastFieldSet) {
  EventAttr a;
  EXPECT_EQ(a.size(), abi::kAttrSizeVer8);
  a.type(PERF_TYPE_SOFTWARE).config(PERF_COUNT_SW_CPU_CLOCK).sample_period(1000);
  EXPECT_EQ(a.required_size(), 64U);  // VER0 covers it
  a.config1(1);
  EXPECT_EQ(a.required_size(), 64U);
  a.config2(1);
  EXPECT_EQ(a.required_size(), 72U);  // VER1
  a.sample_max_stack(10);
  EXPECT_EQ(a.required_size(), 112U);
  a.sig_data(1);
  EXPECT_EQ(a.required_size(), 128U);  // VER7
  a.config3(1);
  EXPECT_EQ(a.required_size(), 136U);  // VER8
  EXPECT_EQ(a.first_field_set_from(128), "config3");
  EXPECT_EQ(EventAttr::field_at(92), "clockid");
  EXPECT_EQ(EventAttr::field_at(500), "beyond perf_event_attr");
}

TEST(EventAttr, DescribeNamesWhatIsSet) {
  EventAttr a;
  a.type(2).config(0x1a2).sample_period(1).sample_type(PERF_SAMPLE_RAW | PERF_SAMPLE_TID);
  a.flag(Flag::kDisabled).read_format(PERF_FORMAT_ID | PERF_FORMAT_GROUP);
  EXPECT_EQ(a.describe(),
            "type=2 config=0x1a2 sample_period=1 sample_type=TID|RAW read_format=ID|GROUP "
            "flags=disabled");
  EXPECT_EQ(sample_type_names(std::uint64_t{1} << 40), "bit40");
}

}  // namespace
}  // namespace tracer::perf
