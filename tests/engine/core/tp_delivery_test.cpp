// The BPF ring buffer channel of tracepoint delivery (core::TracepointDelivery with
// DeliveryChannel::kRingbuf, bpf::RingBuffer) on the real kernel: a one-page ring drained
// after every few calls wraps its end again and again, and every record arrives whole and in
// order; what the ring had no room for is counted as dropped, per CPU.
#include "core/tp_delivery.hpp"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <string_view>
#include <vector>

#include "tracer/perf/event.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {
namespace {

constexpr int kFd = 54321;  // lseek(kFd, i, SEEK_CUR): EBADF, harmless

struct Lseek {
  tracefs::Format format;
  perf::Event event;  // a counting event: the program's attach point
};

Lseek open_lseek() {
  auto fs = tracefs::Tracefs::open();
  EXPECT_TRUE(fs.has_value());
  auto format = fs->format({"syscalls", "sys_enter_lseek"});
  EXPECT_TRUE(format.has_value());
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(format->id);
  auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
  EXPECT_TRUE(ev.has_value()) << ev.error().describe();
  return {std::move(*format), std::move(*ev)};
}

/// Delivery of sys_enter_lseek as slot 0 through a one-page BPF ring buffer, of this process's
/// calls only (its target map holds this process): another process's lseek calls beside the
/// test (another copy of the suite's workloads) never take the ring's room.
Result<core::TracepointDelivery> one_page_delivery(const Lseek& lseek) {
  TRACER_ASSIGN_OR_RETURN(auto d,
                          core::TracepointDelivery::open(1, {.kind = DeliveryChannel::kRingbuf,
                                                             .ringbuf_bytes = 4096,
                                                             .wakeup_bytes = 1024,
                                                             .target_tasks = true}));
  TRACER_TRY((d.object().update_elem<std::uint32_t, std::uint8_t>(
      "tgids", static_cast<std::uint32_t>(::getpid()), 1)));  // tracer_target.h: in the target
  TRACER_TRY(d.attach(0, lseek.format, lseek.event.fd()));
  return d;
}

TEST(TracepointDeliveryRingbuf, AOnePageRingWrapsAndKeepsEveryRecordInOrder) {
  if (!core::kernel_has_ringbuf())
    GTEST_SKIP() << "this kernel has no BPF_MAP_TYPE_RINGBUF (5.8+)";
  auto lseek = open_lseek();
  auto d = one_page_delivery(lseek);
  ASSERT_TRUE(d.has_value()) << d.error().describe();
  ASSERT_NE(d->ring_buffer(), nullptr);
  EXPECT_EQ(d->ring_buffer()->size(), 4096U);
  const std::vector<ProbeInfo> probes(1);
  const auto* offset = lseek.format.field("offset");
  ASSERT_NE(offset, nullptr);
  std::vector<std::int64_t> seen;
  const BatchHandler collect = [&](const Batch& b) {
    for (const auto& r : b.records) {
      const auto* s = std::get_if<perf::Sample>(&r.record.body);
      ASSERT_NE(s, nullptr);
      if (static_cast<pid_t>(s->pid) != ::getpid())
        continue;
      EXPECT_EQ(r.record.bytes.size(), r.record.size);
      EXPECT_EQ(s->tid, static_cast<std::uint32_t>(::gettid()));
      seen.push_back(tracefs::read_int(*offset, s->raw).value_or(-1));
    }
  };
  // ~80 bytes a record: 30 calls fill ~60% of the ring, so every other round wraps its end.
  constexpr int kRounds = 60, kPerRound = 30;
  for (int round = 0; round < kRounds; ++round) {
    for (int i = 0; i < kPerRound; ++i)
      ::syscall(SYS_lseek, kFd, round * kPerRound + i, SEEK_CUR);
    d->drain(probes, collect);
    EXPECT_EQ(d->ring_buffer()->waiting(), 0U);
  }
  const auto drops = d->drops(0);
  EXPECT_EQ(std::accumulate(drops.begin(), drops.end(), std::uint64_t{0}), 0U);
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kRounds * kPerRound));
  for (std::size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], static_cast<std::int64_t>(i));
}

TEST(TracepointDeliveryRingbuf, WhatDoesNotFitIsCountedAsDropped) {
  if (!core::kernel_has_ringbuf())
    GTEST_SKIP() << "this kernel has no BPF_MAP_TYPE_RINGBUF (5.8+)";
  auto lseek = open_lseek();
  auto d = one_page_delivery(lseek);
  ASSERT_TRUE(d.has_value()) << d.error().describe();
  constexpr int kCalls = 1000;  // ~80 KB into a 4 KiB ring, nobody draining
  for (int i = 0; i < kCalls; ++i)
    ::syscall(SYS_lseek, kFd, i, SEEK_CUR);
  const std::vector<ProbeInfo> probes(1);
  std::uint64_t delivered = 0;
  d->drain(probes, [&](const Batch& b) { delivered += b.records.size(); });
  const auto hits = d->hits(0);
  const auto drops = d->drops(0);
  const auto sum = [](const std::vector<std::uint64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::uint64_t{0});
  };
  EXPECT_GE(sum(hits), static_cast<std::uint64_t>(kCalls));
  EXPECT_GT(sum(drops), 0U);
  EXPECT_GT(delivered, 0U);
  EXPECT_EQ(delivered + sum(drops), sum(hits));
}

// The rebuilt records reach the pipeline in batches of at most max_batch (their RecordRefs stay
// in the caches while the stages read them), and none is lost at a batch's edge.
TEST(TracepointDeliveryRingbuf, RebuiltBatchesHoldAtMostMaxBatchRecords) {
  if (!core::kernel_has_ringbuf())
    GTEST_SKIP() << "this kernel has no BPF_MAP_TYPE_RINGBUF (5.8+)";
  auto lseek = open_lseek();
  auto d = core::TracepointDelivery::open(
      1, {.kind = DeliveryChannel::kRingbuf, .ringbuf_bytes = 1U << 20, .max_batch = 8});
  ASSERT_TRUE(d.has_value()) << d.error().describe();
  ASSERT_TRUE(d->attach(0, lseek.format, lseek.event.fd()).has_value());
  constexpr int kCalls = 1000;  // ~80 KB: one drain, more than a hundred batches
  for (int i = 0; i < kCalls; ++i)
    ::syscall(SYS_lseek, kFd, i, SEEK_CUR);
  const std::vector<ProbeInfo> probes(1);
  const auto* offset = lseek.format.field("offset");
  ASSERT_NE(offset, nullptr);
  std::size_t batches = 0, largest = 0;
  std::vector<std::int64_t> seen;
  d->drain(probes, [&](const Batch& b) {
    ++batches;
    largest = std::max(largest, b.records.size());
    for (const auto& r : b.records) {
      const auto* smp = std::get_if<perf::Sample>(&r.record.body);
      if (smp != nullptr && static_cast<pid_t>(smp->pid) == ::getpid())
        seen.push_back(tracefs::read_int(*offset, smp->raw).value_or(-1));
    }
  });
  EXPECT_LE(largest, 8U);
  EXPECT_GE(batches, static_cast<std::size_t>(kCalls / 8));
  ASSERT_EQ(seen.size(), static_cast<std::size_t>(kCalls));
  for (std::size_t i = 0; i < seen.size(); ++i)
    ASSERT_EQ(seen[i], static_cast<std::int64_t>(i));
}

// A record of a small fixed size is read with direct loads of the context by the program for
// its size; the bytes delivered are those bpf_probe_read_kernel copies. Two deliveries of
// sys_enter_lseek (40 bytes) and sys_enter_getppid (12: a 4-byte tail), one of each kind,
// side by side on the same calls: the records are equal byte for byte.
TEST(TracepointDeliveryRingbuf, DirectLoadsDeliverTheBytesTheHelperCopies) {
  if (!core::kernel_has_ringbuf())
    GTEST_SKIP() << "this kernel has no BPF_MAP_TYPE_RINGBUF (5.8+)";
  auto fs = tracefs::Tracefs::open();
  ASSERT_TRUE(fs.has_value());
  for (const char* event : {"sys_enter_lseek", "sys_enter_getppid"}) {
    SCOPED_TRACE(event);
    auto format = fs->format({"syscalls", event});
    ASSERT_TRUE(format.has_value());
    perf::EventAttr a;
    a.type(PERF_TYPE_TRACEPOINT).config(format->id);
    std::vector<perf::Event> evs;  // one each: an event holds one program
    std::vector<core::TracepointDelivery> ds;
    for (const bool direct : {true, false}) {
      auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
      ASSERT_TRUE(ev.has_value()) << ev.error().describe();
      auto d = core::TracepointDelivery::open(1, {.kind = DeliveryChannel::kRingbuf,
                                                  .ringbuf_bytes = 1U << 20,
                                                  .wakeup_bytes = 1U << 18,
                                                  .direct_loads = direct});
      ASSERT_TRUE(d.has_value()) << d.error().describe();
      ASSERT_TRUE(d->attach(0, *format, ev->fd()));
      evs.push_back(std::move(*ev));
      ds.push_back(std::move(*d));
    }
    const std::uint32_t fixed = format->fields.back().offset + format->fields.back().size;
    EXPECT_EQ(ds[0].program(0), fmt::format("tp_deliver_q{}", (fixed + 3) / 4));
    EXPECT_EQ(ds[1].program(0), "tp_deliver");
    const std::vector<ProbeInfo> probes(1);
    for (auto& d : ds)  // what loading the second delivery did (libelf reads the object)
      d.drain(probes, [](const Batch&) {});
    constexpr int kCalls = 2000;
    for (int i = 0; i < kCalls; ++i) {
      if (std::string_view(event) == "sys_enter_lseek")
        ::syscall(SYS_lseek, kFd, i, SEEK_CUR);
      else
        ::syscall(SYS_getppid);
    }
    std::vector<std::vector<std::byte>> raw[2];
    for (int k = 0; k < 2; ++k) {
      ds[k].drain(probes, [&](const Batch& b) {
        for (const auto& r : b.records) {
          const auto* s = std::get_if<perf::Sample>(&r.record.body);
          ASSERT_NE(s, nullptr);
          if (static_cast<pid_t>(s->pid) == ::getpid())
            raw[k].emplace_back(s->raw.begin(), s->raw.end());
        }
      });
    }
    ASSERT_EQ(raw[0].size(), static_cast<std::size_t>(kCalls));
    ASSERT_EQ(raw[1].size(), raw[0].size());
    for (std::size_t i = 0; i < raw[0].size(); ++i) {
      ASSERT_GE(raw[0][i].size(), fixed);  // (RAW keeps the sample 8-byte aligned)
      ASSERT_EQ(raw[0][i], raw[1][i]) << "record " << i;
    }
    if (std::string_view(event) == "sys_enter_lseek") {
      const auto* offset = format->field("offset");
      ASSERT_NE(offset, nullptr);
      EXPECT_EQ(tracefs::read_int(*offset, raw[0][kCalls - 1]).value_or(-1), kCalls - 1);
    }
  }
}

}  // namespace
}  // namespace tracer
