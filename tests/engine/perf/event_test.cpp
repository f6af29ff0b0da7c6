// Event/Group/open_event on the real kernel (software_attr events, breakpoints) and against an
// injected syscall for the attr.size negotiation and error texts.
#include "tracer/perf/event.hpp"

#include <fcntl.h>
#include <sys/mount.h>

#include <gtest/gtest.h>
#include <linux/hw_breakpoint.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

namespace tracer::perf {
namespace {

using namespace std::chrono_literals;

void spin_for(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  volatile std::uint64_t x = 0;
  while (std::chrono::steady_clock::now() < end)
    x = x + 1;
}

EventAttr software_attr(std::uint64_t config) {
  EventAttr a;
  a.type(PERF_TYPE_SOFTWARE).config(config);
  return a;
}

TEST(GroupLive, CountsSoftwareEventsTogether) {
  const std::uint64_t rf = PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED |
                           PERF_FORMAT_TOTAL_TIME_RUNNING;
  std::vector<EventAttr> attrs = {software_attr(PERF_COUNT_SW_TASK_CLOCK),
                                  software_attr(PERF_COUNT_SW_CPU_CLOCK),
                                  software_attr(PERF_COUNT_SW_PAGE_FAULTS)};
  for (auto& a : attrs)
    a.read_format(rf);
  auto g = Group::open(attrs, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(g.has_value()) << g.error().describe();
  ASSERT_TRUE(g->reset().has_value());
  ASSERT_TRUE(g->enable().has_value());
  spin_for(50ms);
  std::vector<char> touch(64 << 20);  // fault in 16k pages
  for (std::size_t i = 0; i < touch.size(); i += 4096)
    touch[i] = 1;
  ASSERT_TRUE(g->disable().has_value());
  auto c = g->read();
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  ASSERT_EQ(c->values.size(), 3U);
  for (std::size_t i = 0; i < 3; ++i) {
    auto id = g->events()[i].id();
    ASSERT_TRUE(id.has_value());
    EXPECT_EQ(c->values[i].id, *id) << "member " << i;
  }
  EXPECT_GT(c->time_enabled, 0U);
  EXPECT_EQ(c->time_enabled, c->time_running) << "software events are never multiplexed";
  EXPECT_GE(c->values[0].value, 40'000'000U) << "task-clock ns after a 50 ms spin";
  EXPECT_GE(c->values[1].value, 40'000'000U) << "cpu-clock ns";
  EXPECT_GE(c->values[2].value, 16'000U) << "page faults for 64 MiB touched";
  EXPECT_DOUBLE_EQ(c->values[0].scaled, static_cast<double>(c->values[0].value));

  // Disabled: counts stand still.
  spin_for(20ms);
  auto c2 = g->read();
  ASSERT_TRUE(c2.has_value());
  EXPECT_EQ(c2->values[0].value, c->values[0].value);
}

TEST(EventLive, SingleReadFormatWithLost) {
  EventAttr a = software_attr(PERF_COUNT_SW_TASK_CLOCK);
  a.read_format(PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED | abi::kFormatLost);
  auto ev = Event::open(a, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  spin_for(5ms);
  auto c = ev->read();
  ASSERT_TRUE(c.has_value()) << c.error().describe();
  ASSERT_EQ(c->values.size(), 1U);
  EXPECT_GT(c->values[0].value, 0U);
  EXPECT_EQ(c->values[0].id, *ev->id());
  EXPECT_EQ(c->values[0].lost, 0U);
}

TEST(EventLive, PeriodAndRefreshIoctls) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  a.sample_period(1'000'000).sample_type(PERF_SAMPLE_IP).flag(Flag::kDisabled);
  auto ev = Event::open(a, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  EXPECT_TRUE(ev->period(2'000'000).has_value());
  EXPECT_TRUE(ev->refresh(1).has_value());
  EXPECT_TRUE(ev->reset().has_value());
  EXPECT_TRUE(ev->disable().has_value());
  // A counting event cannot be refreshed: the kernel says EINVAL and we pass it through.
  auto counting = Event::open(software_attr(PERF_COUNT_SW_TASK_CLOCK), {.pid = 0, .cpu = -1});
  ASSERT_TRUE(counting.has_value());
  auto r = counting->refresh(1);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), EINVAL);
  EXPECT_NE(r.error().message.find("REFRESH"), std::string::npos);
}

volatile std::uint64_t g_watched_a = 0;
volatile std::uint64_t g_watched_b = 0;

TEST(EventLive, BreakpointCountsWritesAndModifyAttributesMovesIt) {
  EventAttr a;
  a.type(PERF_TYPE_BREAKPOINT)
      .bp_type(HW_BREAKPOINT_W)
      .bp_addr(reinterpret_cast<std::uint64_t>(&g_watched_a))
      .bp_len(HW_BREAKPOINT_LEN_8)
      .flag(Flag::kExcludeKernel)
      .flag(Flag::kExcludeHv);
  auto ev = Event::open(a, {.pid = 0, .cpu = -1});
  if (!ev && ev.error().errno_value() == ENOENT) {
    GTEST_SKIP() << "no breakpoint PMU: " << ev.error().describe();
  }
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  for (int i = 0; i < 7; ++i)
    g_watched_a = g_watched_a + 1;
  for (int i = 0; i < 5; ++i)
    g_watched_b = g_watched_b + 1;
  auto c = ev->read();
  ASSERT_TRUE(c.has_value());
  // The modify ioctl is accepted whether or not the CPU fires (checked before any skip).
  EventAttr moved = a;
  moved.bp_addr(reinterpret_cast<std::uint64_t>(&g_watched_b));
  auto m = ev->modify_attributes(moved);
  ASSERT_TRUE(m.has_value()) << m.error().describe();
  if (c->values[0].value == 0) {
    GTEST_SKIP() << "the breakpoint PMU accepts events but the CPU never raised a debug exception: "
                    "0 of 7 watched writes counted (this hypervisor does not virtualize debug "
                    "registers)";
  }
  EXPECT_EQ(c->values[0].value, 7U);
  ASSERT_TRUE(ev->modify_attributes(a).has_value());  // back to g_watched_a for the next step

  a.bp_addr(reinterpret_cast<std::uint64_t>(&g_watched_b));
  auto m2 = ev->modify_attributes(a);
  ASSERT_TRUE(m2.has_value()) << m2.error().describe();
  for (int i = 0; i < 3; ++i)
    g_watched_b = g_watched_b + 1;
  g_watched_a = 0;
  auto c2 = ev->read();
  ASSERT_TRUE(c2.has_value());
  EXPECT_EQ(c2->values[0].value, 10U) << "3 more writes, now to g_watched_b";
}

TEST(OpenEventErrors, AnyTaskOnAnyCpuIsExplained) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  auto r = open_event(a, {.pid = -1, .cpu = -1});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), EINVAL);
  EXPECT_NE(r.error().hint.find("pid -1 and cpu -1"), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().message.find("software"), std::string::npos) << r.error().message;
}

TEST(OpenEventErrors, VanishedProcessIsExplained) {
  const pid_t child = ::fork();
  if (child == 0)
    ::_exit(0);
  ::waitpid(child, nullptr, 0);
  EventAttr a = software_attr(PERF_COUNT_SW_TASK_CLOCK);
  auto r = open_event(a, {.pid = child, .cpu = -1});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), ESRCH);
  EXPECT_NE(r.error().hint.find(std::to_string(child)), std::string::npos);
}

TEST(OpenEventErrors, MissingHardwarePmuIsExplained) {
  EventAttr a;
  a.type(PERF_TYPE_HARDWARE).config(PERF_COUNT_HW_CPU_CYCLES);
  auto r = open_event(a, {.pid = 0, .cpu = -1});
  if (r.has_value())
    GTEST_SKIP() << "this machine has a hardware PMU; the error path needs none";
  EXPECT_EQ(r.error().errno_value(), ENOENT);
  EXPECT_NE(r.error().hint.find("no hardware PMU"), std::string::npos) << r.error().describe();
}

TEST(OpenEventErrors, UnknownTracepointIdIsExplained) {
  EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(0x7ffffff0);
  auto r = open_event(a, {.pid = 0, .cpu = -1});
  ASSERT_FALSE(r.has_value());
  // 6.18 answers EINVAL for an unknown id (older kernels ENOENT); both must be explained.
  EXPECT_TRUE(r.error().errno_value() == EINVAL || r.error().errno_value() == ENOENT);
  EXPECT_NE(r.error().hint.find("no tracepoint with id"), std::string::npos)
      << r.error().describe();
}

// A cgroup without a perf_event state (here a cgroup v1 hierarchy of no controller, mounted for
// the test): the kernel answers ENOENT for the cgroup, and the error says so instead of blaming
// the tracepoint's id.
TEST(OpenEventErrors, ACgroupWithoutThePerfEventControllerIsExplained) {
  char dir[] = "/tmp/tracer-cgv1-XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  if (::mount("cgroup", dir, "cgroup", 0, "none,name=tracer_test") != 0) {
    const int err = errno;
    ::rmdir(dir);
    GTEST_SKIP() << "cannot mount a cgroup v1 hierarchy here: " << std::strerror(err);
  }
  const int cg = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(cg, 0);
  EventAttr a;
  a.type(PERF_TYPE_SOFTWARE).config(PERF_COUNT_SW_CPU_CLOCK);
  auto r = open_event(a, {.pid = cg, .cpu = 0, .flags = PERF_FLAG_PID_CGROUP});
  ::close(cg);
  ::umount(dir);
  ::rmdir(dir);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), ENOENT);
  EXPECT_NE(r.error().hint.find("no perf_event controller"), std::string::npos)
      << r.error().describe();
  EXPECT_EQ(r.error().hint.find("tracepoint"), std::string::npos) << r.error().describe();
}

// A fake kernel whose perf_event_attr is 120 bytes and that refuses any larger size outright
// (as kernels before 3.x did when size > sizeof(attr) without zero-checking).
long old_kernel(perf_event_attr* attr, pid_t, int, int, unsigned long) {
  if (attr->size > 120) {
    attr->size = 120;
    errno = E2BIG;
    return -1;
  }
  return ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

TEST(OpenEventNegotiation, RetriesWithTheKernelsSize) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  auto fd = open_event(a, {.pid = 0, .cpu = -1}, &old_kernel);
  ASSERT_TRUE(fd.has_value()) << fd.error().describe();
  EXPECT_EQ(a.size(), 120U);
}

TEST(OpenEventNegotiation, FailsNamingTheFieldTheKernelLacks) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  a.config3(5);
  auto fd = open_event(a, {.pid = 0, .cpu = -1}, &old_kernel);
  ASSERT_FALSE(fd.has_value());
  EXPECT_EQ(fd.error().errno_value(), E2BIG);
  EXPECT_NE(fd.error().message.find("120 bytes"), std::string::npos) << fd.error().message;
  EXPECT_NE(fd.error().message.find("config3"), std::string::npos) << fd.error().message;
  EXPECT_EQ(a.size(), abi::kAttrSizeVer8) << "size restored for the caller";
}

TEST(OpenEventNegotiation, RealKernelAcceptsOurSize) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  auto fd = open_event(a, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(fd.has_value()) << fd.error().describe();
  EXPECT_EQ(a.size(), abi::kAttrSizeVer8) << "a 6.3+ kernel knows VER8";
}

long refuse_with(int err) {
  errno = err;
  return -1;
}
long fake_emfile(perf_event_attr*, pid_t, int, int, unsigned long) {
  return refuse_with(EMFILE);
}
long fake_eacces(perf_event_attr*, pid_t, int, int, unsigned long) {
  return refuse_with(EACCES);
}

TEST(OpenEventErrors, FdLimitAndPermissionTexts) {
  EventAttr a = software_attr(PERF_COUNT_SW_CPU_CLOCK);
  auto r = open_event(a, {.pid = 0, .cpu = -1}, &fake_emfile);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().hint.find("ulimit -n"), std::string::npos) << r.error().describe();
  auto p = open_event(a, {.pid = 0, .cpu = -1}, &fake_eacces);
  ASSERT_FALSE(p.has_value());
  EXPECT_EQ(p.error().errno_value(), EACCES);
  EXPECT_NE(p.error().hint.find("CAP_PERFMON"), std::string::npos) << p.error().describe();
}

}  // namespace
}  // namespace tracer::perf
