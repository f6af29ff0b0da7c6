// Ring on the real kernel: tracepoint samples from a child that makes an exact number of calls,
// decoded through the tracepoint's format file; overflow accounting; overwrite snapshots;
// SET_OUTPUT/ID merging two events into one ring.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#include <map>

#include "support/child.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::perf {
namespace {

constexpr int kBadFd = 12345;  // lseek on it fails with EBADF: a harmless syscall with arguments

void lseeks(int first, int n) {
  for (int i = first; i < first + n; ++i)
    ::syscall(SYS_lseek, kBadFd, i, SEEK_CUR);
}

class RingLive : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fs = tracefs::Tracefs::open();
    ASSERT_TRUE(fs.has_value()) << fs.error().describe();
    auto fmt = fs->format({"syscalls", "sys_enter_lseek"});
    ASSERT_TRUE(fmt.has_value()) << fmt.error().describe();
    format_ = *fmt;
    offset_ = format_.field("offset");
    fd_ = format_.field("fd");
    ASSERT_NE(offset_, nullptr);
    ASSERT_NE(fd_, nullptr);
  }

  EventAttr attr(std::uint32_t id) const {
    EventAttr a;
    a.type(PERF_TYPE_TRACEPOINT)
        .config(id)
        .sample_period(1)
        .sample_type(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                     PERF_SAMPLE_RAW)
        .flag(Flag::kSampleIdAll)
        .flag(Flag::kDisabled)
        .clockid(CLOCK_MONOTONIC)
        .wakeup_events(1);
    return a;
  }

  // Drains everything published; calls on_sample for each sample; returns lost.
  template <typename Fn>
  std::uint64_t drain(Ring& ring, const SampleLayout& l, Fn&& on_sample) {
    std::uint64_t lost = 0;
    ring.load_head();
    for (auto p = ring.peek(); !p.record.empty(); p = ring.peek()) {
      Record r;
      EXPECT_EQ(decode(p.record, l, r), DecodeError::kOk);
      if (const auto* s = std::get_if<Sample>(&r.body))
        on_sample(*s);
      if (const auto* lr = std::get_if<Lost>(&r.body))
        lost += lr->lost;
      ring.consume(p.record.size());
    }
    EXPECT_EQ(ring.peek().error, DecodeError::kOk);
    ring.commit();
    return lost;
  }

  tracefs::Format format_;
  const tracefs::Field* offset_ = nullptr;
  const tracefs::Field* fd_ = nullptr;
};

TEST_F(RingLive, ExactSamplesFromAChildDecodedThroughTheFormat) {
  constexpr int kSteps = 10, kPerStep = 100;
  testing::Child child([](int k) { lseeks(k * kPerStep, kPerStep); });
  EventAttr a = attr(format_.id);
  auto ev = Event::open(a, {.pid = child.pid(), .cpu = -1});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto ring = Ring::map(ev->fd(), {.data_pages = 8});
  ASSERT_TRUE(ring.has_value()) << ring.error().describe();
  ASSERT_TRUE(ev->enable().has_value());
  const auto layout = SampleLayout::from(a);
  const auto id = *ev->id();

  std::int64_t expect = 0;
  std::uint64_t lost = 0, last_time = 0;
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(child.go());
    lost += drain(*ring, layout, [&](const Sample& s) {
      EXPECT_EQ(s.pid, static_cast<std::uint32_t>(child.pid()));
      EXPECT_EQ(s.identifier, id);
      EXPECT_GE(s.time, last_time) << "one task's samples arrive in time order";
      last_time = s.time;
      EXPECT_EQ(tracefs::read_int(*fd_, s.raw), kBadFd);
      EXPECT_EQ(tracefs::read_int(*offset_, s.raw), expect);
      ++expect;
    });
  }
  EXPECT_EQ(expect, kSteps * kPerStep) << "exactly one sample per call";
  EXPECT_EQ(lost, 0U);
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  EXPECT_LE(last_time, static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + now.tv_nsec)
      << "timestamps are CLOCK_MONOTONIC";
}

TEST_F(RingLive, OverflowIsCountedExactly) {
  constexpr int kCalls = 3000;
  testing::Child child([](int k) { lseeks(k == 0 ? 0 : kCalls, k == 0 ? kCalls : 1); });
  EventAttr a = attr(format_.id);
  a.read_format(abi::kFormatLost);
  auto ev = Event::open(a, {.pid = child.pid(), .cpu = -1});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto ring = Ring::map(ev->fd(), {.data_pages = 1});  // 4 KiB: about 45 samples
  ASSERT_TRUE(ring.has_value()) << ring.error().describe();
  ASSERT_TRUE(ev->enable().has_value());
  const auto layout = SampleLayout::from(a);

  ASSERT_TRUE(child.go());  // 3000 calls with nobody reading
  std::uint64_t samples = 0;
  std::uint64_t lost = drain(*ring, layout, [&](const Sample&) { ++samples; });
  // The kernel emits the LOST record with the next sample that fits: one more call.
  ASSERT_TRUE(child.go());
  lost += drain(*ring, layout, [&](const Sample&) { ++samples; });
  EXPECT_GT(lost, 0U);
  EXPECT_EQ(samples + lost, static_cast<std::uint64_t>(kCalls + 1));
  // PERF_FORMAT_LOST agrees with the LOST records.
  auto c = ev->read();
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  EXPECT_EQ(c->values[0].lost, lost);
  EXPECT_EQ(c->values[0].value, static_cast<std::uint64_t>(kCalls + 1));
}

TEST_F(RingLive, OverwriteModeSnapshotHoldsTheNewestCalls) {
  constexpr int kCalls = 2000;
  testing::Child child([](int) { lseeks(0, kCalls); });
  EventAttr a = attr(format_.id);
  a.flag(Flag::kWriteBackward);
  auto ev = Event::open(a, {.pid = child.pid(), .cpu = -1});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto ring = Ring::map(ev->fd(), {.data_pages = 2, .overwrite = true});
  ASSERT_TRUE(ring.has_value()) << ring.error().describe();
  ASSERT_TRUE(ev->enable().has_value());
  ASSERT_TRUE(child.go());

  std::vector<std::byte> snap;
  auto n = ring->snapshot(snap);
  ASSERT_TRUE(n.has_value()) << n.error().describe();
  ASSERT_GT(*n, 50U);
  ASSERT_LT(*n, static_cast<std::size_t>(kCalls)) << "a 8 KiB ring cannot hold every call";
  const auto layout = SampleLayout::from(a);
  std::int64_t expect = kCalls - 1;  // newest first
  std::size_t seen = 0;
  EXPECT_EQ(for_each_record(snap,
                            [&](std::span<const std::byte> rec) {
                              Record r;
                              ASSERT_EQ(decode(rec, layout, r), DecodeError::kOk);
                              const auto& s = std::get<Sample>(r.body);
                              EXPECT_EQ(tracefs::read_int(*offset_, s.raw), expect);
                              --expect;
                              ++seen;
                            }),
            DecodeError::kOk);
  EXPECT_EQ(seen, *n);
}

TEST_F(RingLive, SetOutputMergesTwoEventsDistinguishedById) {
  auto fs = tracefs::Tracefs::open();
  auto exit_id = fs->tracepoint_id({"syscalls", "sys_exit_lseek"});
  ASSERT_TRUE(exit_id.has_value()) << exit_id.error().describe();
  constexpr int kCalls = 200;
  testing::Child child([](int) { lseeks(0, kCalls); });
  EventAttr enter = attr(format_.id);
  EventAttr exit = attr(*exit_id);
  auto a = Event::open(enter, {.pid = child.pid(), .cpu = -1});
  auto b = Event::open(exit, {.pid = child.pid(), .cpu = -1});
  ASSERT_TRUE(a.has_value() && b.has_value());
  auto ring = Ring::map(a->fd(), {.data_pages = 16});
  ASSERT_TRUE(ring.has_value());
  ASSERT_TRUE(b->set_output(a->fd()).has_value());
  ASSERT_TRUE(a->enable().has_value());
  ASSERT_TRUE(b->enable().has_value());
  const std::uint64_t id_a = *a->id(), id_b = *b->id();
  ASSERT_NE(id_a, id_b);
  ASSERT_TRUE(child.go());

  std::map<std::uint64_t, int> per_id;
  std::uint64_t prev = 0;
  // Both layouts are equal here; a real reader picks the layout by peek_identifier().
  drain(*ring, SampleLayout::from(enter), [&](const Sample& s) {
    ++per_id[s.identifier];
    // enter, exit, enter, exit...: alternate ids in one task's ring
    if (prev != 0) {
      EXPECT_NE(s.identifier, prev);
    }
    prev = s.identifier;
  });
  EXPECT_EQ(per_id[id_a], kCalls);
  EXPECT_EQ(per_id[id_b], kCalls);
  // SET_OUTPUT to an event of another task is refused by the kernel.
  auto other = Event::open(enter, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(other.has_value());
  EXPECT_FALSE(other->set_output(a->fd()).has_value());
}

}  // namespace
}  // namespace tracer::perf
