// Engine on the real kernel: exact counts from a traced child, a started command
// (enable_on_exec), a pid target, loss accounting with a tiny ring, draining at stop, clean-up,
// and the errors a user sees for probes this machine cannot serve.
#include "tracer/engine.hpp"

#include <gtest/gtest.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <filesystem>
#include <map>
#include <thread>

#include "support/child.hpp"
#include "support/perf_tool.hpp"
#include "tracer/error.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kBadFd = 12345;

void lseeks(int n) {
  for (int i = 0; i < n; ++i)
    ::syscall(SYS_lseek, kBadFd, i, SEEK_CUR);
}

int perf_fds() {
  int n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == "anon_inode:[perf_event]")
      ++n;
  }
  return n;
}

ProbeOptions lseek_probe(std::string name = "lseek") {
  return ProbeOptions{
      .name = std::move(name), .kind = ProbeKind::kTracepoint, .spec = "syscalls:sys_enter_lseek"};
}

struct Collected {
  std::map<int, std::uint64_t> samples_by_cpu;
  std::uint64_t samples = 0;
  std::uint64_t foreign = 0;  // samples from other processes
  std::vector<std::int64_t> offsets;
};

BatchHandler collect(Collected& c, pid_t want, const Engine& engine) {
  return [&c, want, &engine](const Batch& b) {
    for (const auto& r : b.records) {
      const auto* s = std::get_if<perf::Sample>(&r.record.body);
      if (s == nullptr)
        continue;
      ++c.samples;
      ++c.samples_by_cpu[r.cpu];
      if (static_cast<pid_t>(s->pid) != want)
        ++c.foreign;
      const auto& info = engine.probes()[r.probe];
      if (info.format) {
        if (const auto* f = info.format->field("offset")) {
          c.offsets.push_back(tracefs::read_int(*f, s->raw).value_or(-1));
        }
      }
    }
  };
}

TEST(EngineLive, PidTargetDeliversExactlyTheChildsCalls) {
  testing::Child child([](int) { lseeks(1000); });
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()}});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(engine.running());
  ASSERT_EQ(engine.probes().size(), 1U);
  EXPECT_TRUE(engine.probes()[0].format.has_value());
  ASSERT_TRUE(child.go());
  lseeks(300);  // the parent's own calls must not show up
  io.run_for(300ms);
  engine.stop();
  EXPECT_EQ(c.samples, 1000U);
  EXPECT_EQ(c.foreign, 0U);
  ASSERT_EQ(c.offsets.size(), 1000U);
  for (std::size_t i = 0; i < c.offsets.size(); ++i)
    ASSERT_EQ(c.offsets[i], static_cast<std::int64_t>(i));
  const auto stats = engine.stats();
  ASSERT_EQ(stats.probes.size(), 1U);
  EXPECT_EQ(stats.probes[0].total().samples, 1000U);
  EXPECT_EQ(stats.probes[0].total().lost, 0U);
}

// decode_samples = false: samples arrive as header + bytes (body Unknown) and decode later with
// the probe's layout to the same values; the loss accounting is unchanged.
// As perf record -p: the trace of a process ends when it exits, with what it left drained.
TEST(EngineLive, APidTargetsExitStopsTheEngine) {
  testing::Child child([](int) { lseeks(5); });
  boost::asio::io_context io(1);
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()},
                                    .flush_interval_ms = 3600 * 1000});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  bool done = false;
  engine.on_done([&] { done = true; });
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(100ms);
  EXPECT_TRUE(engine.running()) << "the process is still there";
  EXPECT_FALSE(engine.target_exited());
  child.finish();
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (!done && std::chrono::steady_clock::now() < end)
    io.run_for(10ms);
  EXPECT_TRUE(done) << "on_done fires when the process exits";
  EXPECT_FALSE(engine.running());
  EXPECT_TRUE(engine.target_exited());
  EXPECT_EQ(c.samples, 5U) << "what the process left in the ring is drained at the stop";
}

TEST(EngineLive, UndecodedSamplesCarryBytesThatDecodeWithTheProbesLayout) {
  testing::Child child([](int) { lseeks(1000); });
  boost::asio::io_context io;
  // The probe's own per-task events (the BPF delivery always hands on decoded samples).
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()},
                                    .deliver_tracepoints_via_bpf = false,
                                    .decode_samples = false});
  std::uint64_t undecoded = 0, decoded_bodies = 0;
  std::vector<std::int64_t> offsets;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (r.record.type != perf::abi::kSample)
        continue;
      if (std::holds_alternative<perf::Unknown>(r.record.body))
        ++undecoded;
      else
        ++decoded_bodies;
      const auto& info = engine.probes()[r.probe];
      perf::Record rec;
      ASSERT_EQ(perf::decode(r.record.bytes, info.layout, rec), perf::DecodeError::kOk);
      const auto* s = std::get_if<perf::Sample>(&rec.body);
      ASSERT_NE(s, nullptr);
      EXPECT_EQ(static_cast<pid_t>(s->pid), child.pid());
      offsets.push_back(tracefs::read_int(*info.format->field("offset"), s->raw).value_or(-1));
    }
  });
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(300ms);
  engine.stop();
  EXPECT_EQ(undecoded, 1000U);
  EXPECT_EQ(decoded_bodies, 0U);
  ASSERT_EQ(offsets.size(), 1000U);
  for (std::size_t i = 0; i < offsets.size(); ++i)
    ASSERT_EQ(offsets[i], static_cast<std::int64_t>(i));
  EXPECT_EQ(engine.stats().probes[0].total().samples, 1000U);
  EXPECT_EQ(engine.stats().probes[0].total().lost, 0U);
}

TEST(EngineLive, AllCpusWithAFilterDeliversExactlyTheChildsCalls) {
  testing::Child child([](int) { lseeks(500); });
  boost::asio::io_context io;
  auto probe = lseek_probe();
  probe.filter = "common_pid == " + std::to_string(child.pid());
  Engine engine(io.get_executor(), {.probes = {probe}});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());
  lseeks(200);
  io.run_for(200ms);
  engine.stop();
  EXPECT_EQ(c.samples, 500U);
  EXPECT_EQ(c.foreign, 0U);
  const auto stats = engine.stats();
  EXPECT_EQ(stats.probes[0].per_cpu.size(),
            static_cast<std::size_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
}

// System-wide tracepoint probes receive their hits through the BPF delivery channel
// (EngineOptions::deliver_tracepoints_via_bpf), rebuilt as the samples their own events would
// write: a child's calls on each CPU arrive exactly, with their fields, time order within a CPU,
// and every hit accounted (kernel_hits == delivered + lost, nothing missed); with delivery off
// the same calls arrive through the perf events.
void expect_child_calls_on_both_cpus(bool via_bpf,
                                     std::optional<DeliveryChannel> channel = std::nullopt) {
  constexpr int kCalls = 600;
  const long cpus = ::sysconf(_SC_NPROCESSORS_ONLN);
  boost::asio::io_context io;
  Engine engine(
      io.get_executor(),
      {.probes = {lseek_probe()}, .deliver_tracepoints_via_bpf = via_bpf, .channel = channel});
  std::map<pid_t, Collected> by_child;
  std::vector<pid_t> children;
  Collected all;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      const auto* s = std::get_if<perf::Sample>(&r.record.body);
      if (s == nullptr)
        continue;
      auto it = by_child.find(static_cast<pid_t>(s->pid));
      if (it == by_child.end())
        continue;
      Collected& c = it->second;
      ++c.samples;
      ++c.samples_by_cpu[r.cpu];
      const auto& fmt = *engine.probes()[r.probe].format;
      c.offsets.push_back(tracefs::read_int(*fmt.field("offset"), s->raw).value_or(-1));
      // The rebuilt record's common fields: the tracepoint's id and the thread.
      EXPECT_EQ(tracefs::read_int(*fmt.field("common_type"), s->raw).value_or(-1), fmt.id);
      EXPECT_EQ(tracefs::read_int(*fmt.field("common_pid"), s->raw).value_or(-1), s->tid);
      EXPECT_EQ(tracefs::read_int(*fmt.field("fd"), s->raw).value_or(-1), kBadFd);
    }
  });
  engine.start();
  for (long cpu = 0; cpu < std::min(cpus, 2L); ++cpu) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(static_cast<int>(cpu), &set);
      ::sched_setaffinity(0, sizeof(set), &set);
      lseeks(kCalls);
      ::_exit(0);
    }
    by_child[pid];
    children.push_back(pid);
  }
  for (pid_t pid : children)
    ::waitpid(pid, nullptr, 0);
  io.run_for(300ms);
  engine.stop();
  for (const auto& [pid, c] : by_child) {
    EXPECT_EQ(c.samples, static_cast<std::uint64_t>(kCalls)) << "child " << pid;
    ASSERT_EQ(c.offsets.size(), static_cast<std::size_t>(kCalls));
    for (std::size_t i = 0; i < c.offsets.size(); ++i)
      ASSERT_EQ(c.offsets[i], static_cast<std::int64_t>(i)) << "in order, field by field";
  }
  const auto total = engine.stats().probes[0].total();
  if (via_bpf) {
    // The default is the BPF ring buffer where the kernel has one (5.8+; this one does).
    ASSERT_TRUE(engine.delivery_channel().has_value());
    EXPECT_EQ(*engine.delivery_channel(), channel.value_or(DeliveryChannel::kRingbuf));
    EXPECT_GT(total.kernel_hits, 0u);
    EXPECT_EQ(total.missed, 0u);
    EXPECT_EQ(total.kernel_hits, total.samples + total.lost);
  }
}

TEST(EngineLive, SystemWideTracepointsArriveThroughTheBpfDeliveryChannel) {
  expect_child_calls_on_both_cpus(true);
}

TEST(EngineLive, SystemWideTracepointsArriveThroughThePerfDeliveryChannel) {
  expect_child_calls_on_both_cpus(true, DeliveryChannel::kPerf);
}

// The BPF ring buffer channel under overflow: a one-page ring and a 20000-call burst while the
// engine does not run. Every hit is delivered or counted lost (the program counts failed
// outputs per probe and CPU), and the loss is there to see.
TEST(EngineLive, TinyRingBufferBurstDeliveredPlusLostEqualsHits) {
  constexpr int kCalls = 20000;
  testing::Child child([](int) { lseeks(kCalls); });
  boost::asio::io_context io;
  Engine engine(
      io.get_executor(),
      {.probes = {lseek_probe()}, .channel = DeliveryChannel::kRingbuf, .ringbuf_bytes = 4096});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());  // the burst happens while nobody drains
  io.run_for(100ms);
  engine.stop();
  ASSERT_EQ(engine.delivery_channel(), DeliveryChannel::kRingbuf);
  const auto total = engine.stats().probes[0].total();
  EXPECT_GE(total.kernel_hits, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(total.kernel_hits, total.samples + total.lost);
  EXPECT_GT(total.lost, 0U) << "a 4 KiB ring cannot hold a 20000-call burst";
  EXPECT_LE(c.samples, static_cast<std::uint64_t>(kCalls));
  EXPECT_GT(c.samples, 0U) << "what fitted before the ring filled arrives";
}

TEST(EngineLive, SystemWideTracepointsArriveThroughTheirEventsWithDeliveryOff) {
  expect_child_calls_on_both_cpus(false);
}

TEST(EngineLive, CommandTargetCountsOnlyTheCommandAndStopsWhenItExits) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.target = {.kind = Target::Kind::kCommand,
                            .command = {TRACER_SYSCALLER_PATH, "lseek", "250"}},
                 .probes = {lseek_probe(), ProbeOptions{.name = "exec",
                                                        .kind = ProbeKind::kTracepoint,
                                                        .spec = "sched:sched_process_exec"}}});
  Collected c;
  pid_t command = -1;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (const auto* s = std::get_if<perf::Sample>(&r.record.body)) {
        if (r.probe == 0)
          ++c.samples;
        if (static_cast<pid_t>(s->pid) != command)
          ++c.foreign;
      }
    }
  });
  bool done = false;
  engine.on_done([&] { done = true; });
  engine.start();
  command = engine.command_pid();
  ASSERT_GT(command, 0);
  lseeks(100);     // before and during the command: not ours to count
  io.run_for(5s);  // returns early once the engine is done and nothing else is pending
  EXPECT_TRUE(done) << "the engine stops by itself when the command exits";
  EXPECT_FALSE(engine.running());
  EXPECT_EQ(c.samples, 250U);
  EXPECT_EQ(c.foreign, 0U);
  const auto stats = engine.stats();
  EXPECT_EQ(stats.probes[1].total().samples, 1U) << "exactly one exec: the command's";
}

TEST(EngineLive, TinyRingBurstDeliveredPlusLostEqualsGeneratedPerCpu) {
  constexpr int kCalls = 20000;
  const int cpu = 0;
  testing::Child child([](int) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    ::sched_setaffinity(0, sizeof(set), &set);
    lseeks(kCalls);
  });
  boost::asio::io_context io;
  auto probe = lseek_probe();
  probe.ring_pages = 1;  // 4 KiB: ~45 samples
  // The probe's own per-task ring (the BPF delivery's ring is sized for every probe).
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {probe},
                                    .deliver_tracepoints_via_bpf = false});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());  // the burst happens while nobody drains
  io.run_for(100ms);
  engine.stop();
  const auto stats = engine.stats();
  std::uint64_t total_lost = 0;
  for (const auto& [ring_cpu, rs] : stats.probes[0].per_cpu) {
    SCOPED_TRACE(ring_cpu);
    const std::uint64_t generated = ring_cpu == cpu ? kCalls : 0;
    EXPECT_EQ(c.samples_by_cpu[ring_cpu] + rs.lost, generated);
    EXPECT_EQ(rs.samples, c.samples_by_cpu[ring_cpu]);
    total_lost += rs.lost;
  }
  EXPECT_GT(total_lost, 0U) << "a 4 KiB ring cannot hold a 20000-call burst";
}

// The same burst to a -p target through the BPF ring buffer delivery of one page: the copies
// that did not fit are counted by the program per CPU, and delivered plus lost is the burst
// (and the kernel's own count of the target's hits).
TEST(EngineLive, TinyDeliveryRingBurstDeliveredPlusLostEqualsGenerated) {
  constexpr int kCalls = 20000;
  testing::Child child([](int) { lseeks(kCalls); });
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()},
                                    .channel = DeliveryChannel::kRingbuf,
                                    .ringbuf_bytes = 4096});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());  // the burst happens while nobody drains
  io.run_for(100ms);
  engine.stop();
  EXPECT_EQ(c.foreign, 0U) << "only the target's hits are delivered";
  const Stats stats = engine.stats();
  const auto& p = stats.probes[0];
  const auto t = p.total();
  EXPECT_EQ(t.samples, c.samples);
  EXPECT_GT(p.losses().ring, 0U) << "a 4 KiB ring cannot hold a 20000-call burst";
  EXPECT_EQ(p.lost(), p.losses().ring);
  EXPECT_EQ(stats.lost(), p.lost()) << "one probe: the engine's total is its";
  EXPECT_EQ(c.samples + p.lost(), static_cast<std::uint64_t>(kCalls));
}

TEST(EngineLive, StopDrainsWhatTheWakeupPolicyHeldBack) {
  testing::Child child([](int) { lseeks(100); });
  boost::asio::io_context io;
  auto probe = lseek_probe();
  probe.wakeup.watermark_bytes = 200 * 1024;  // 100 samples never reach it
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {probe},
                                    .flush_interval_ms = 3600 * 1000});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(100ms);
  EXPECT_EQ(c.samples, 0U) << "no wakeup and no flush yet";
  engine.stop();
  EXPECT_EQ(c.samples, 100U);
}

// drain_now() is what a change of the pipelines (Session::apply) and a read of the tables count
// on: every record the rings hold at the call is handed on before it returns, however slow the
// handler (the flush timer's pass yields after drain_slice_ms) and while the stages are held.
// A restarted pipeline that got the rest later counted those events twice (ASan in CI).
TEST(EngineLive, DrainNowHandsOnEverythingTheRingsHoldWhateverTheSliceAndTheHold) {
  constexpr int kCalls = 20000;
  testing::Child child([](int) { lseeks(kCalls); });
  boost::asio::io_context io;
  auto probe = lseek_probe();
  probe.ring_pages = 1024;                  // 4 MiB: the burst fits, nothing is lost
  probe.wakeup.watermark_bytes = 3u << 20;  // no wakeup: the records wait in the ring
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {probe},
                                    .flush_interval_ms = 3600 * 1000,
                                    .drain_slice_ms = 1});
  Collected c;
  const BatchHandler count = collect(c, child.pid(), engine);
  std::uint64_t batches = 0;
  engine.on_batch([&](const Batch& b) {
    count(b);
    ++batches;
    std::this_thread::sleep_for(200us);  // a slow pipeline: a 1 ms slice takes a few batches
  });
  engine.hold_while([] { return true; });  // the stages are behind: the timer's passes read none
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(50ms);
  ASSERT_EQ(c.samples, 0U) << "no wakeup, no flush, and held";
  bool drained = false;
  boost::asio::post(io, [&] {
    engine.drain_now();
    drained = true;
  });
  while (!drained)
    io.run_one_for(1s);
  EXPECT_EQ(c.samples, static_cast<std::uint64_t>(kCalls)) << batches << " batches";
  EXPECT_EQ(c.foreign, 0U);
  EXPECT_GT(batches, 5U) << "a pass of many batches, longer than a slice";
  for (const auto& p : engine.stats().probes)
    EXPECT_EQ(p.lost(), 0U);
  engine.stop();
}

// A delivered probe's own ring size sizes the delivery ring (it got the default share whatever
// it asked: a plugin pipeline lost 827 of 6,000 events beside busy CPUs with ring = "1MiB" not
// taken). A burst of 20,000 calls waits in the ring while the consumer does not run at all: a
// probe of 4 MiB keeps every one, a probe of 16 KiB loses most, counted.
TEST(EngineLive, ADeliveredProbesRingSizeSizesTheDeliveryRing) {
  constexpr int kCalls = 20000;
  for (const std::uint32_t pages : {1024U, 4U}) {
    SCOPED_TRACE(pages);
    testing::Child child([](int) { lseeks(kCalls); });
    boost::asio::io_context io;
    auto probe = lseek_probe();
    probe.ring_pages = pages;
    Engine engine(io.get_executor(),
                  {.target = {.kind = Target::Kind::kPid, .pid = child.pid()}, .probes = {probe}});
    Collected c;
    engine.on_batch(collect(c, child.pid(), engine));
    engine.start();
    ASSERT_TRUE(engine.probes()[0].delivered) << "the test is of the BPF delivery";
    ASSERT_TRUE(child.go());  // done when it returns; the io_context has not run: nothing read
    engine.stop();
    const auto lost = engine.stats().probes.at(0).lost();
    EXPECT_EQ(c.samples + lost, static_cast<std::uint64_t>(kCalls)) << "every call, read or lost";
    EXPECT_EQ(c.foreign, 0U);
    if (pages == 1024U)
      EXPECT_EQ(lost, 0U) << "4 MiB holds the burst";
    else
      EXPECT_GT(lost, static_cast<std::uint64_t>(kCalls) / 2) << "16 KiB per CPU cannot";
  }
}

// The guard of the kernel-free suites (tests/no_kernel_guard.cpp, kernel_free.cmake): a live
// test run as one of them fails at its first perf event, naming the list, and one that touches
// no kernel passes under it.
TEST(EngineLive, TheKernelFreeGuardFailsALiveTestAndPassesAKernelFreeOne) {
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const auto live = testing::shell("TRACER_TEST_NO_KERNEL=1 " + self +
                                   " --gtest_filter=EngineLive.FlushTimerDeliversLowRateEvents");
  EXPECT_EQ(live.exit_code, 70) << live.out << live.err;
  EXPECT_NE(live.err.find("this test called perf_event_open"), std::string::npos) << live.err;
  EXPECT_NE(live.err.find("tests/kernel_free.cmake"), std::string::npos) << live.err;
  EXPECT_EQ(live.out.find("[       OK ]"), std::string::npos) << live.out;
  const auto free =
      testing::shell("TRACER_TEST_NO_KERNEL=1 " + self + " --gtest_filter=CpuList.*:Recipe.*");
  EXPECT_EQ(free.exit_code, 0) << free.out << free.err;
  EXPECT_NE(free.out.find("[  PASSED  ]"), std::string::npos) << free.out;
}

TEST(EngineLive, FlushTimerDeliversLowRateEvents) {
  testing::Child child([](int) { lseeks(3); });
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()},
                                    .flush_interval_ms = 20});
  Collected c;
  engine.on_batch(collect(c, child.pid(), engine));
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(200ms);
  EXPECT_EQ(c.samples, 3U) << "delivered by the timer, before stop()";
  EXPECT_GE(engine.stats().timer_passes, 1U) << "no ring woke the engine: the timer did";
  engine.stop();
}

// One thread runs the io_context (its handlers run without a strand). A busy ring's wakeups
// come every few milliseconds; a quiet ring below its watermark gets its records handed on by
// the passes those wakeups make, and the flush timer, pushed back each time, never wakes the
// engine.
TEST(EngineLive, BusyRingsWakeupsFlushTheQuietOnesWithoutTheTimer) {
  testing::Child child([](int step) {
    if (step == 0) {
      lseeks(3);
      return;
    }
    for (int i = 0; i < 5000; ++i)
      ::syscall(SYS_getppid);
  });
  boost::asio::io_context io(1);
  auto quiet = lseek_probe("quiet");
  quiet.wakeup.watermark_bytes = 200 * 1024;  // 3 samples never reach it
  ProbeOptions busy{.name = "busy",
                    .kind = ProbeKind::kTracepoint,
                    .spec = "syscalls:sys_enter_getppid",
                    .ring_pages = 2};  // 8 KiB, woken at 2 KiB: a wakeup per ~50 calls
  // The probes' own per-task rings, each with its wakeup policy (not the BPF delivery's ring).
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {quiet, busy},
                                    .flush_interval_ms = 400,
                                    .deliver_tracepoints_via_bpf = false});
  std::uint64_t quiet_samples = 0, busy_samples = 0;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (r.record.type == perf::abi::kSample)
        ++(r.probe == 0 ? quiet_samples : busy_samples);
    }
  });
  engine.start();
  ASSERT_TRUE(child.go());  // the quiet probe's 3 records
  const auto end = std::chrono::steady_clock::now() + 1s;
  while (std::chrono::steady_clock::now() < end) {
    ASSERT_TRUE(child.go());
    io.run_for(10ms);
  }
  const Stats st = engine.stats();
  EXPECT_EQ(quiet_samples, 3U) << "handed on by a pass on the busy ring's wakeups";
  EXPECT_GT(busy_samples, 0U);
  EXPECT_GE(st.passes, 2U) << "a pass every half interval at least";
  EXPECT_EQ(st.timer_passes, 0U) << "the busy ring's wakeups kept pushing the timer back";
  EXPECT_GT(st.probes[1].total().wakeups, st.passes);
  engine.stop();
}

TEST(EngineLive, AThrowingHandlerStopsTheEngineAndIsReported) {
  testing::Child child([](int) { lseeks(10); });
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                                    .probes = {lseek_probe()},
                                    .flush_interval_ms = 10});
  int calls = 0;
  bool done = false;
  engine.on_batch([&](const Batch&) {
    ++calls;
    throw std::runtime_error("sink broke");
  });
  engine.on_done([&] { done = true; });
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(500ms);
  EXPECT_TRUE(done);
  EXPECT_FALSE(engine.running());
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(engine.failure());
  EXPECT_THROW(std::rethrow_exception(engine.failure()), std::runtime_error);
}

TEST(EngineLive, StopClosesEveryPerfFd) {
  const int before = perf_fds();
  {
    boost::asio::io_context io;
    Engine engine(io.get_executor(),
                  {.probes = {lseek_probe(), ProbeOptions{.name = "clock",
                                                          .kind = ProbeKind::kSoftware,
                                                          .spec = "cpu-clock"}}});
    engine.start();
    EXPECT_GE(perf_fds(), before + 4) << "two probes on every CPU";
    io.run_for(50ms);
    engine.stop();
    EXPECT_EQ(perf_fds(), before);
    engine.stop();  // idempotent
  }
  EXPECT_EQ(perf_fds(), before);
}

TEST(EngineLive, SoftwareClockSamplesABusyChild) {
  testing::Child child([](int) {
    // 200 ms of CPU time, however busy the machine is (task-clock counts CPU time).
    auto cpu_ns = [] {
      timespec ts{};
      ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return ts.tv_sec * 1'000'000'000LL + ts.tv_nsec;
    };
    const auto end = cpu_ns() + 200'000'000LL;
    volatile std::uint64_t x = 0;
    while (cpu_ns() < end)
      x = x + 1;
  });
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.target = {.kind = Target::Kind::kPid, .pid = child.pid()},
                 .probes = {ProbeOptions{.name = "clock",
                                         .kind = ProbeKind::kSoftware,
                                         .spec = "task-clock",
                                         .freq = 1000,
                                         .extra_sample_type = PERF_SAMPLE_CALLCHAIN}}});
  Collected c;
  std::uint64_t with_callchain = 0;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (const auto* s = std::get_if<perf::Sample>(&r.record.body)) {
        ++c.samples;
        if (static_cast<pid_t>(s->pid) != child.pid())
          ++c.foreign;
        if (s->callchain.size > 1)
          ++with_callchain;
      }
    }
  });
  engine.start();
  ASSERT_TRUE(child.go());
  io.run_for(50ms);
  engine.stop();
  // 1000 Hz over 200 ms of CPU: 200 nominal. At least a quarter: a guest on a busy host (the
  // kernel matrix beside the ASan suite) has its timers fire late, 93 there.
  EXPECT_GE(c.samples, 50U) << "1000 Hz over 200 ms of CPU";
  EXPECT_LE(c.samples, 400U);
  EXPECT_EQ(c.foreign, 0U);
  EXPECT_EQ(with_callchain, c.samples);
}

Error start_error(EngineOptions o) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(), std::move(o));
  try {
    engine.start();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "start() did not fail";
  return {ErrorCategory::kRuntime, {}, "none"};
}

Error start_error(ProbeOptions p, Target t = {}) {
  return start_error(EngineOptions{.target = std::move(t), .probes = {std::move(p)}});
}

TEST(EngineErrors, AZeroFlushIntervalIsAUsageError) {
  const auto e = start_error(EngineOptions{.probes = {lseek_probe()}, .flush_interval_ms = 0});
  EXPECT_EQ(e.category(), ErrorCategory::kUsage);
  EXPECT_NE(std::string(e.what()).find("flush_interval_ms"), std::string::npos) << e.what();
}

TEST(EngineErrors, MissingTracepointNamesItselfAndNearMatches) {
  const auto e = start_error(
      {.name = "x", .kind = ProbeKind::kTracepoint, .spec = "syscalls:sys_enter_opnat"});
  EXPECT_EQ(e.category(), ErrorCategory::kNotFound);
  EXPECT_NE(std::string(e.what()).find("syscalls:sys_enter_opnat"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("sys_enter_openat"), std::string::npos) << e.hint();
}

TEST(EngineErrors, HardwareEventsOnAMachineWithoutAPmu) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.probes = {{.name = "cyc", .kind = ProbeKind::kHardware, .spec = "cycles"}}});
  try {
    engine.start();
    engine.stop();
    GTEST_SKIP() << "this machine has a hardware PMU";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(e.hint().find("no hardware PMU"), std::string::npos) << e.hint();
  }
}

TEST(EngineErrors, AuxPmuThatDoesNotExistSaysWhichExist) {
  const auto e = start_error({.name = "pt", .kind = ProbeKind::kAux, .spec = "intel_pt/cyc=1/"});
  EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
  EXPECT_NE(e.hint().find("AUX-capable PMUs here"), std::string::npos) << e.hint();
}

// check() loads a BPF object of its own: after start() it would replace the attached one.
TEST(EngineErrors, CheckAfterStartIsAUsageError) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.probes = {lseek_probe()}});
  engine.start();
  try {
    engine.check();
    ADD_FAILURE() << "check() after start() did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUsage) << e.what();
  }
  EXPECT_TRUE(engine.running()) << "the refused check() leaves the run alone";
  engine.stop();
  EXPECT_THROW(engine.check(), Error) << "nor after stop(): the maps stay readable";
}

TEST(EngineErrors, UsageMistakes) {
  EXPECT_EQ(start_error({.name = "s", .kind = ProbeKind::kSoftware, .spec = "cpu-clok"}).category(),
            ErrorCategory::kUsage);
  EXPECT_EQ(
      start_error({.name = "t", .kind = ProbeKind::kTracepoint, .spec = "nocolon"}).category(),
      ErrorCategory::kUsage);
  EXPECT_EQ(
      start_error({.name = "b", .kind = ProbeKind::kBreakpoint, .spec = "0x1000:q"}).category(),
      ErrorCategory::kUsage);
  EXPECT_EQ(start_error({.name = "r",
                         .kind = ProbeKind::kTracepoint,
                         .spec = "syscalls:sys_enter_lseek",
                         .ring_pages = 3})
                .category(),
            ErrorCategory::kUsage);
  auto gone = start_error(lseek_probe(), Target{.kind = Target::Kind::kPid, .pid = 0x7ffffff0});
  EXPECT_EQ(gone.category(), ErrorCategory::kUsage);
  EXPECT_NE(std::string(gone.what()).find("no process"), std::string::npos);
  auto bad_filter = lseek_probe();
  bad_filter.filter = "no_such_field == 1";
  EXPECT_EQ(start_error(bad_filter).category(), ErrorCategory::kUsage);
  EXPECT_EQ(perf_fds(), 0) << "a failed start leaves nothing open";
}

}  // namespace
}  // namespace tracer
