// CounterSet (tracer/perf/counter_set.hpp) on live software counters: a group read gives what
// separate events give on the same task, disable stops and enable resumes, inherit counts the
// children, a moving task counts the same as a pinned one, every CPU's slot sums to the total,
// and every descriptor closes with the set.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "tracer/perf/counter_set.hpp"
#include "tracer/perf/software.hpp"

namespace tracer::perf {
namespace {

EventAttr software(std::uint64_t config) {
  EventAttr a;
  a.type(PERF_TYPE_SOFTWARE).config(config);
  return a;
}

/// Touches `pages` fresh pages (one fault each, at least).
void touch(std::size_t pages) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m =
      ::mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  // One fault a page whatever the machine's transparent huge pages ("always" on Debian).
  ::madvise(m, pages * page, MADV_NOHUGEPAGE);
  for (std::size_t i = 0; i < pages; ++i)
    static_cast<volatile char*>(m)[i * page] = 1;
  ::munmap(m, pages * page);
}

std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd"))
    ++n;
  return n;
}

/// A child held on a pipe until the parent writes a byte, then touching `pages` pages (in
/// `procs` processes: itself and procs-1 children it forks, each touching them), then exiting.
/// With `chunks`, its own pages are touched in that many mappings, moving to the other CPU
/// between them when `hop`.
struct HeldChild {
  pid_t pid = -1;
  int go = -1;
  HeldChild(std::size_t pages, int procs, int chunks = 0, bool hop = false) {
    int p[2], ready[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    EXPECT_EQ(::pipe2(ready, O_CLOEXEC), 0);
    pid = ::fork();
    if (pid == 0) {
      ::close(p[1]);
      ::close(ready[0]);
      char c = 'r';
      if (::write(ready[1], &c, 1) != 1)
        ::_exit(2);
      if (::read(p[0], &c, 1) != 1)
        ::_exit(2);
      for (int k = 1; k < procs; ++k) {
        if (::fork() == 0) {
          touch(pages);
          ::_exit(0);
        }
      }
      if (chunks > 0) {  // touch in chunks, moving between the CPUs between them
        for (int i = 0; i < chunks; ++i) {
          cpu_set_t set;
          CPU_ZERO(&set);
          CPU_SET(hop ? i % 2 : 0, &set);
          ::sched_setaffinity(0, sizeof set, &set);
          touch(pages / static_cast<std::size_t>(chunks));
        }
      } else {
        touch(pages);
      }
      while (::wait(nullptr) > 0) {
      }
      ::_exit(0);
    }
    ::close(p[0]);
    ::close(ready[1]);
    go = p[1];
    // The child's own start (its first writes fault in copies of the parent's pages) is over
    // before any counter opens: it is asleep in its read of `go`. A counter enabled before
    // another one then counts nothing the other misses.
    char c = 0;
    EXPECT_EQ(::read(ready[0], &c, 1), 1);
    ::close(ready[0]);
    for (int i = 0; i < 5000 && task_state(pid) != 'S'; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  static char task_state(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(in, line);
    const auto at = line.rfind(')');
    return at != std::string::npos && at + 2 < line.size() ? line[at + 2] : '?';
  }
  void run_to_end() {
    char c = 'g';
    EXPECT_EQ(::write(go, &c, 1), 1);
    ::close(go);
    int status = 0;
    EXPECT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
};

// Multiplexing on synthetic readings (no PMU here multiplexes software counters): an interval is
// scaled by its own times, each slot by its own, and only where the counter did not run the
// whole time it was enabled.
TEST(CounterSetMath, AnIntervalIsScaledByItsOwnTimesPerSlot) {
  const CounterReading before{.raw = 100, .scaled = 200, .enabled = 1000, .running = 500};
  const CounterReading after{.raw = 300, .scaled = 450, .enabled = 2000, .running = 1300};
  const CounterReading d = after.since(before);
  EXPECT_EQ(d.raw, 200u);
  EXPECT_EQ(d.enabled, 1000u);
  EXPECT_EQ(d.running, 800u);
  EXPECT_DOUBLE_EQ(d.scaled, 200.0 * 1000 / 800);  // 250: this interval ran 80% of the time
  EXPECT_DOUBLE_EQ(d.pct(), 80.0);
  const CounterReading full{.raw = 500, .scaled = 0, .enabled = 3000, .running = 2300};
  EXPECT_DOUBLE_EQ(full.since(after).scaled, 200.0);  // ran the whole interval: not scaled
  EXPECT_FALSE(CounterReading{}.since(CounterReading{}).counted());

  CounterSetReading r0, r1;
  r0.per_slot = {{before}, {CounterReading{.raw = 10, .enabled = 100, .running = 100}}};
  r1.per_slot = {{after}, {CounterReading{.raw = 60, .enabled = 200, .running = 150}}};
  r0.counters.resize(1);
  r1.counters.resize(1);
  const CounterSetReading d2 = r1.since(r0);
  ASSERT_EQ(d2.per_slot.size(), 2u);
  EXPECT_DOUBLE_EQ(d2.per_slot[1][0].scaled, 50.0 * 100 / 50);  // slot 1 ran half its interval
  EXPECT_DOUBLE_EQ(d2.counters[0].scaled, 250.0 + 100.0);       // the slots' scaled sum
  EXPECT_EQ(d2.counters[0].raw, 250u);
}

TEST(CounterSetLive, AGroupReadGivesWhatSeparateEventsGiveOnTheSameTask) {
  const std::size_t fds = open_fds();
  HeldChild child(3000, 1);
  CounterSetOptions grouped;
  grouped.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
                    {"minor-faults", software(PERF_COUNT_SW_PAGE_FAULTS_MIN)},
                    {"task-clock", software(PERF_COUNT_SW_TASK_CLOCK)}};
  grouped.slots = {{.pid = child.pid, .cpu = -1}};
  CounterSetOptions separate = grouped;
  separate.group = false;
  auto g = CounterSet::open(grouped);
  ASSERT_TRUE(g) << g.error().message;
  auto s = CounterSet::open(separate);
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_TRUE(g->grouped());
  EXPECT_FALSE(s->grouped());
  EXPECT_EQ(g->fd_count(), 3u);
  ASSERT_TRUE(g->enable());
  ASSERT_TRUE(s->enable());
  child.run_to_end();
  const auto gr = g->read(), sr = s->read();
  ASSERT_EQ(gr.counters.size(), 3u);
  // Every fault of the child is counted by both.
  EXPECT_GE(gr.counters[0].raw, 3000u);
  EXPECT_EQ(gr.counters[0].raw, sr.counters[0].raw);
  EXPECT_EQ(gr.counters[1].raw, sr.counters[1].raw);
  EXPECT_GT(gr.counters[2].raw, 0u);
  // A group's members share its times; software counters are never multiplexed.
  EXPECT_EQ(gr.counters[0].enabled, gr.counters[1].enabled);
  EXPECT_EQ(gr.counters[0].running, gr.counters[0].enabled);
  EXPECT_DOUBLE_EQ(gr.counters[0].pct(), 100.0);
  EXPECT_DOUBLE_EQ(gr.counters[0].scaled, static_cast<double>(gr.counters[0].raw));
  g.value() = CounterSet{};
  s.value() = CounterSet{};
  EXPECT_EQ(open_fds(), fds);
}

TEST(CounterSetLive, DisableStopsAndEnableResumesTheGroup) {
  CounterSetOptions o;
  o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
              {"task-clock", software(PERF_COUNT_SW_TASK_CLOCK)}};
  o.slots = {{.pid = 0, .cpu = -1}};  // this thread
  auto set = CounterSet::open(o);
  ASSERT_TRUE(set) << set.error().message;
  touch(500);  // opened disabled: not counted
  EXPECT_EQ(set->read().counters[0].raw, 0u);
  ASSERT_TRUE(set->enable());
  touch(1000);
  ASSERT_TRUE(set->disable());
  const auto first = set->read().counters[0];
  touch(4000);  // disabled: not counted
  const auto paused = set->read().counters[0];
  EXPECT_EQ(paused.raw, first.raw);
  ASSERT_TRUE(set->enable());
  touch(2000);
  ASSERT_TRUE(set->disable());
  const auto last = set->read().counters[0];
  EXPECT_GE(first.raw, 1000u);
  EXPECT_LT(first.raw, 1000u + 200);
  EXPECT_GE(last.raw - first.raw, 2000u);
  EXPECT_LT(last.raw - first.raw, 2000u + 200);
  // An interval is the difference of two readings.
  EXPECT_EQ(last.since(first).raw, last.raw - first.raw);
  ASSERT_TRUE(set->reset());
  EXPECT_EQ(set->read().counters[0].raw, 0u);
}

TEST(CounterSetLive, InheritCountsTheChildrenOfTheTaskInTheGroupRead) {
  for (const bool inherit : {true, false}) {
    SCOPED_TRACE(inherit ? "inherit" : "no inherit");
    HeldChild child(2000, 3);  // itself and two children, 2,000 pages each
    CounterSetOptions o;
    o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
                {"task-clock", software(PERF_COUNT_SW_TASK_CLOCK)}};
    o.slots = {{.pid = child.pid, .cpu = -1}};
    o.inherit = inherit;
    auto set = CounterSet::open(o);
    ASSERT_TRUE(set) << set.error().message;
    ASSERT_TRUE(set->enable());
    child.run_to_end();
    const auto faults = set->read().counters[0].raw;
    if (inherit) {
      EXPECT_GE(faults, 6000u);
      EXPECT_LT(faults, 6000u * 5 / 4 + 300);  // (ASan's shadow pages: 6,889)
    } else {
      EXPECT_GE(faults, 2000u);
      EXPECT_LT(faults, 4000u);  // its own, not its children's
    }
  }
}

TEST(CounterSetLive, EveryCpusSlotSumsToTheTotalAndAMovingTaskCountsAsAPinnedOne) {
  auto cpus = online_cpus();
  ASSERT_TRUE(cpus);
  // Per task: a task that moves between the CPUs counts the same pages as one that does not.
  std::uint64_t moving = 0, pinned = 0;
  for (const bool hop : {true, false}) {
    HeldChild child(4000, 1, 8, hop);  // the same mappings, with and without moving
    CounterSetOptions o;
    o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
                {"cpu-migrations", software(PERF_COUNT_SW_CPU_MIGRATIONS)}};
    o.slots = {{.pid = child.pid, .cpu = -1}};
    auto set = CounterSet::open(o);
    ASSERT_TRUE(set) << set.error().message;
    ASSERT_TRUE(set->enable());
    child.run_to_end();
    const auto r = set->read();
    (hop ? moving : pinned) = r.counters[0].raw;
    if (hop && cpus->size() > 1) {
      EXPECT_GE(r.counters[1].raw, 1u);  // it did move
    }
  }
  EXPECT_GE(moving, 4000u);
  EXPECT_GE(pinned, 4000u);
  EXPECT_LT(moving > pinned ? moving - pinned : pinned - moving, 100u);

  // System-wide, one group per CPU: each slot's count sums to the total.
  CounterSetOptions o;
  o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
              {"cpu-clock", software(PERF_COUNT_SW_CPU_CLOCK)}};
  for (int c : *cpus)
    o.slots.push_back({.pid = -1, .cpu = c});
  auto set = CounterSet::open(o);
  ASSERT_TRUE(set) << set.error().message;
  EXPECT_EQ(set->fd_count(), 2 * cpus->size());
  ASSERT_TRUE(set->enable());
  HeldChild child(3000, 2);
  child.run_to_end();
  const auto r = set->read();
  ASSERT_EQ(r.per_slot.size(), cpus->size());
  std::uint64_t sum = 0;
  for (const auto& slot : r.per_slot)
    sum += slot[0].raw;
  EXPECT_EQ(sum, r.counters[0].raw);
  EXPECT_GE(r.counters[0].raw, 6000u);
}

TEST(CounterSetLive, ATaskThatExitedIsNotASlotButTheOnlyTaskIsAnError) {
  const pid_t gone = ::fork();
  if (gone == 0)
    ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  CounterSetOptions o;
  o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)}};
  o.slots = {{.pid = gone, .cpu = -1}};
  auto alone = CounterSet::open(o);
  ASSERT_FALSE(alone);
  EXPECT_EQ(alone.error().errno_value(), ESRCH);
  EXPECT_NE(alone.error().message.find("page-faults"), std::string::npos) << alone.error().message;
  o.slots.push_back({.pid = ::getpid(), .cpu = -1});
  auto set = CounterSet::open(o);
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_EQ(set->slots().size(), 1u);
  EXPECT_EQ(set->slots()[0].pid, ::getpid());
}

TEST(CounterSetLive, PinnedAndExclusiveGroupsOpenAndCount) {
  CounterSetOptions o;
  o.events = {{"page-faults", software(PERF_COUNT_SW_PAGE_FAULTS)},
              {"task-clock", software(PERF_COUNT_SW_TASK_CLOCK)}};
  o.slots = {{.pid = 0, .cpu = -1}};
  o.pinned = true;
  auto set = CounterSet::open(o);
  ASSERT_TRUE(set) << set.error().message;
  ASSERT_TRUE(set->enable());
  touch(300);
  const auto r = set->read();
  EXPECT_GE(r.counters[0].raw, 300u);
  EXPECT_DOUBLE_EQ(r.counters[0].pct(), 100.0);
}

}  // namespace
}  // namespace tracer::perf
