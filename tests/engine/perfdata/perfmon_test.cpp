// The perfmon buffer format (tracer/perfdata/perfmon.hpp): the bytes the writer lays out, pinned
// against a buffer assembled by hand from the seed's record layouts (sizes as its static
// asserts say), the round trip, a full buffer, the event id split and the last-branch fields,
// and damaged input at every length.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "tracer/perfdata/perfmon.hpp"

namespace tracer::perfmon {
namespace {

class Bytes {
 public:
  template <typename T>
  Bytes& put(T v) {
    const auto at = b_.size();
    b_.resize(at + sizeof v);
    std::memcpy(b_.data() + at, &v, sizeof v);
    return *this;
  }
  Bytes& rec(RecordType t, std::uint16_t event) {
    return put(static_cast<std::uint8_t>(t)).put(std::uint8_t{0}).put(event);
  }
  std::vector<std::byte>& bytes() { return b_; }

 private:
  std::vector<std::byte> b_;
};

constexpr std::uint16_t kEvent = make_event_id(4, 7);

std::vector<Record> sample_records() {
  return {
      {.type = RecordType::kTime, .time = 1000},
      {.type = RecordType::kTick, .event = kEvent},
      {.type = RecordType::kCount, .event = kEvent, .count = 42},
      {.type = RecordType::kValue, .event = kEvent, .value = 7},
      {.type = RecordType::kPc, .event = kEvent, .aspace = 1234, .pc = 0x401000},
      {.type = RecordType::kLastBranch,
       .event = kEvent,
       .aspace = 99,
       .branches = {{.from = 0x10, .to = 0x20, .info = 0x1'0005}, {.from = 0x30, .to = 0x40}}},
  };
}

TEST(Perfmon, TheWritersBytesAreTheSeedsLayout) {
  BufferWriter w(1 << 16, Arch::kX86_64, 1'000'000'000ULL);
  for (const auto& r : sample_records())
    ASSERT_TRUE(w.write(r));
  Bytes want;
  const std::uint64_t end = 24 + 12 + 4 + 12 + 12 + 20 + (16 + 2 * 24);
  want.put(std::uint16_t{0}).put(std::uint16_t{1}).put(std::uint32_t{0});
  want.put(std::uint64_t{1'000'000'000ULL}).put(end);
  want.rec(RecordType::kTime, 0).put(std::uint64_t{1000});
  want.rec(RecordType::kTick, kEvent);
  want.rec(RecordType::kCount, kEvent).put(std::uint64_t{42});
  want.rec(RecordType::kValue, kEvent).put(std::uint64_t{7});
  want.rec(RecordType::kPc, kEvent).put(std::uint64_t{1234}).put(std::uint64_t{0x401000});
  want.rec(RecordType::kLastBranch, kEvent).put(std::uint32_t{2}).put(std::uint64_t{99});
  want.put(std::uint64_t{0x10}).put(std::uint64_t{0x20}).put(std::uint64_t{0x1'0005});
  want.put(std::uint64_t{0x30}).put(std::uint64_t{0x40}).put(std::uint64_t{0});
  ASSERT_EQ(want.bytes().size(), end);
  EXPECT_EQ(w.bytes(), want.bytes());
  EXPECT_EQ(record_size(RecordType::kTime), 12u);
  EXPECT_EQ(record_size(RecordType::kTick), 4u);
  EXPECT_EQ(record_size(RecordType::kPc), 20u);
  EXPECT_EQ(record_size(RecordType::kLastBranch, kMaxLastBranches), 16u + 32u * 24u);
}

TEST(Perfmon, BuffersReadBackAsTheyWereWritten) {
  BufferWriter a(1 << 16, Arch::kX86_64, 1'000'000'000ULL);
  BufferWriter b(1 << 16, Arch::kArm64, 24'000'000ULL);
  for (const auto& r : sample_records()) {
    ASSERT_TRUE(a.write(r));
    ASSERT_TRUE(b.write(r));
  }
  std::vector<std::byte> file = a.bytes();
  file.insert(file.end(), b.bytes().begin(), b.bytes().end());
  ASSERT_TRUE(looks_like_perfmon(file));
  auto parsed = parse(file);
  ASSERT_TRUE(parsed) << parsed.error().message;
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[0].records, sample_records());
  EXPECT_EQ((*parsed)[1].records, sample_records());
  EXPECT_EQ((*parsed)[1].header.arch, Arch::kArm64);
  EXPECT_EQ((*parsed)[1].header.ticks_per_second, 24'000'000u);
  EXPECT_EQ((*parsed)[0].header.flags & kFlagFull, 0u);
}

// What the fuzzer found: a record's reserved flags, and a TIME record's event (it is then also
// that event's tick), are written back as they were read.
TEST(Perfmon, FlagsAndATimeRecordsEventSurviveTheRoundTrip) {
  const std::vector<Record> records = {
      {.type = RecordType::kTime, .flags = 0x10, .event = kEvent, .time = 9},
      {.type = RecordType::kTick, .flags = 0xff, .event = kEvent},
  };
  BufferWriter w(1 << 12, Arch::kX86_64, 1'000'000'000ULL);
  for (const auto& r : records)
    ASSERT_TRUE(w.write(r));
  auto parsed = parse(w.bytes());
  ASSERT_TRUE(parsed);
  EXPECT_EQ((*parsed)[0].records, records);
}

TEST(Perfmon, AFullBufferDropsAndSaysSo) {
  BufferWriter w(24 + 12 + 4 + 4, Arch::kX86_64, 1'000'000'000ULL);
  EXPECT_TRUE(w.time(5));
  EXPECT_TRUE(w.tick(kEvent));
  EXPECT_TRUE(w.tick(kEvent));
  EXPECT_FALSE(w.tick(kEvent));
  EXPECT_FALSE(w.pc(kEvent, 1, 2));
  EXPECT_EQ(w.dropped(), 2u);
  auto parsed = parse(w.bytes());
  ASSERT_TRUE(parsed);
  EXPECT_EQ((*parsed)[0].records.size(), 3u);
  EXPECT_NE((*parsed)[0].header.flags & kFlagFull, 0u);
}

TEST(Perfmon, EventIdsAndLastBranchFieldsAreTheDocumentedSplits) {
  // 6-bit group above a 10-bit event (the seed's PERFMON_MAKE_EVENT_ID).
  EXPECT_EQ(make_event_id(4, 1), 0x1001);
  EXPECT_EQ(group_of(0x1001), 4);
  EXPECT_EQ(event_of(0x1001), 1);
  EXPECT_EQ(group_of(make_event_id(kMaxGroup, kMaxEvent)), kMaxGroup);
  EXPECT_EQ(event_of(make_event_id(kMaxGroup, kMaxEvent)), kMaxEvent);
  // Cycles: shift 0, length 16; mispredicted: shift 16, length 1 (not the seed's swapped masks).
  const LastBranch b{.from = 0, .to = 0, .info = 0x3'2345};
  EXPECT_EQ(b.cycles(), 0x2345);
  EXPECT_TRUE(b.mispredicted());
  EXPECT_FALSE(LastBranch{.info = 0x2'0000}.mispredicted());
}

TEST(Perfmon, DamagedInputIsAnErrorAtEveryLength) {
  BufferWriter w(1 << 16, Arch::kX86_64, 1'000'000'000ULL);
  for (const auto& r : sample_records())
    ASSERT_TRUE(w.write(r));
  const auto& good = w.bytes();
  for (std::size_t n = 0; n < good.size(); ++n) {
    std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    const auto r = parse(cut);
    if (n == 0) {
      EXPECT_TRUE(r && r->empty());
      continue;
    }
    EXPECT_FALSE(r) << n << " bytes";
  }
  auto bad = good;
  bad[24] = std::byte{9};  // the first record's type
  EXPECT_FALSE(parse(bad));
  bad = good;
  const std::uint32_t many = 1000;  // the last-branch record's count
  std::memcpy(bad.data() + good.size() - (16 + 48) + 4, &many, 4);
  auto r = parse(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("1000 last branches"), std::string::npos) << r.error().message;
  bad = good;
  bad[0] = std::byte{1};  // version 1
  EXPECT_FALSE(parse(bad));
  EXPECT_FALSE(looks_like_perfmon(bad));
}

}  // namespace
}  // namespace tracer::perfmon
