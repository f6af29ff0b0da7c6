// Self-monitoring (tracer/perf/self_counter.hpp): the user page's arithmetic on synthetic pages
// (the PMU value sign-extended from its width, the times extended from the TSC, a short clock,
// the seqlock taken again when the kernel updated the page meanwhile), and live counters of
// this thread: a region's page faults and task-clock, through the user page where the kernel
// allows it (a hardware PMU with rdpmc) and through read() otherwise.
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "tracer/perf/self_counter.hpp"

namespace tracer::perf {
namespace {

UserPageValues rdpmc_page() {
  UserPageValues v;
  v.index = 3;
  v.offset = 1000;
  v.time_enabled = 5000;
  v.time_running = 4000;
  v.cap_user_rdpmc = true;
  v.pmc_width = 48;
  return v;
}

TEST(SelfCounterMath, ThePmcValueIsSignExtendedFromItsWidthAndAddedToTheOffset) {
  UserPageValues v = rdpmc_page();
  // 48 bits wide: bits above are noise; 0xffff'ffff'fff6 is -10.
  auto r = reading_from(v, 0xdead'0000'0000'0000ULL | 0xffff'ffff'fff6ULL, 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->value, 990u);
  EXPECT_TRUE(r->user_space);
  r = reading_from(v, 0xbeef'0000'0000'0005ULL, 0);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->value, 1005u);
  EXPECT_EQ(r->time_enabled, 5000u);  // no cap_user_time: as the page says
  EXPECT_EQ(r->time_running, 4000u);
}

TEST(SelfCounterMath, TheTimesAreExtendedFromTheTsc) {
  UserPageValues v = rdpmc_page();
  v.cap_user_time = true;
  v.time_shift = 10;
  v.time_mult = 3 << 10;  // 3 ns per cycle, in 1/1024 units
  v.time_offset = 7;
  // delta = offset + (cyc >> shift) * mult + ((cyc & mask) * mult >> shift) = 7 + 3 * cyc.
  auto r = reading_from(v, 0, 100'000);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->time_enabled, 5000u + 7 + 300'000);
  EXPECT_EQ(r->time_running, 4000u + 7 + 300'000);
  // A 32-bit clock: the cycles since time_cycles, within its mask.
  v.cap_user_time_short = true;
  v.time_cycles = 0xffff'fff0ULL;
  v.time_mask = 0xffff'ffffULL;
  v.time_offset = 0;
  r = reading_from(v, 0, 0x1'0000'0010ULL);  // wrapped: 0x20 cycles after time_cycles
  ASSERT_TRUE(r);
  EXPECT_EQ(r->time_enabled, 5000u + 3 * (0xffff'fff0ULL + 0x20));
}

TEST(SelfCounterMath, WithoutRdpmcOrOffThePmuThePageCannotAnswer) {
  UserPageValues v = rdpmc_page();
  v.index = 0;
  EXPECT_FALSE(reading_from(v, 5, 0));
  v = rdpmc_page();
  v.cap_user_rdpmc = false;
  EXPECT_FALSE(reading_from(v, 5, 0));
}

TEST(SelfCounterMath, ScalingUsesTheTimesWithoutOverflow) {
  SelfReading r{.value = 1'000'000'000'000ULL,
                .time_enabled = 3'000'000'000ULL,
                .time_running = 1'000'000'000ULL};
  EXPECT_EQ(r.scaled(), 3'000'000'000'000ULL);
  r.time_running = r.time_enabled;
  EXPECT_EQ(r.scaled(), r.value);
}

// The seqlock: a pass during which the kernel updated the page is made again, and the values
// of the pass that saw no update are the ones used.
perf_event_mmap_page* g_page = nullptr;
int g_pmc_reads = 0;
std::uint64_t updating_rdpmc(std::uint32_t counter) {
  EXPECT_EQ(counter, 2u);    // index - 1
  if (++g_pmc_reads == 1) {  // the kernel updates the page while the first pass reads
    g_page->lock += 2;
    g_page->offset = 2000;
  }
  return 7;
}
std::uint64_t zero_tsc() {
  return 0;
}

TEST(SelfCounterMath, APassThatRacedAnUpdateIsMadeAgain) {
  perf_event_mmap_page page{};
  page.index = 3;
  page.offset = 1000;
  page.cap_user_rdpmc = 1;
  page.pmc_width = 48;
  page.time_enabled = page.time_running = 10;
  g_page = &page;
  g_pmc_reads = 0;
  const auto r = read_user_page(page, &updating_rdpmc, &zero_tsc);
  ASSERT_TRUE(r);
  EXPECT_EQ(g_pmc_reads, 2);
  EXPECT_EQ(r->value, 2007u);  // the second pass's offset
}

// Live: this thread's page faults over a region that touches a known number of fresh pages.
TEST(SelfCounterLive, ARegionsPageFaultsAndTaskClock) {
  EventAttr faults;
  faults.type(PERF_TYPE_SOFTWARE).config(PERF_COUNT_SW_PAGE_FAULTS);
  auto c = SelfCounter::open(faults);
  ASSERT_TRUE(c) << c.error().message;
  EventAttr clock;
  clock.type(PERF_TYPE_SOFTWARE).config(PERF_COUNT_SW_TASK_CLOCK);
  auto t = SelfCounter::open(clock);
  ASSERT_TRUE(t) << t.error().message;
  constexpr std::size_t kPages = 2000;
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* m =
      ::mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  ::madvise(m, kPages * page, MADV_NOHUGEPAGE);  // a fault a page, whatever THP says
  const SelfReading before = c->read();
  const SelfReading t0 = t->read();
  for (std::size_t i = 0; i < kPages; ++i)
    static_cast<volatile char*>(m)[i * page] = 1;
  const SelfReading after = c->read();
  const SelfReading t1 = t->read();
  ::munmap(m, kPages * page);
  EXPECT_GE(after.value - before.value, kPages);
  // Not many more: this thread's own faults besides (under ASan, the shadow pages of the
  // touched ones: one per eight).
  EXPECT_LT(after.value - before.value, 2 * kPages);
  EXPECT_GT(t1.value, t0.value);  // ns of this thread's CPU time
  EXPECT_GE(after.time_enabled, before.time_enabled);
  // A software counter is never on a PMU counter: the page sends the read to read().
  EXPECT_FALSE(c->user_readable());
  EXPECT_FALSE(after.user_space);
  // The user page path, where it applies, and read() agree on a count that does not move.
  const auto a = c->read();
  const auto b = c->read_syscall();
  EXPECT_EQ(a.value, b.value);
}

TEST(SelfCounterLive, AHardwareCounterReadsWithoutASystemCallWhereThePmuAllows) {
  EventAttr cycles;
  cycles.type(PERF_TYPE_HARDWARE).config(PERF_COUNT_HW_INSTRUCTIONS).flag(Flag::kExcludeKernel);
  auto c = SelfCounter::open(cycles);
  if (!c) {
    GTEST_SKIP() << "no hardware PMU on this machine (perf_event_open: " << c.error().message
                 << "): the rdpmc path is tested on synthetic pages (SelfCounterMath)";
  }
  if (!c->user_readable())
    GTEST_SKIP() << "the kernel does not let user space read this counter (cap_user_rdpmc 0)";
  const auto a = c->read();
  volatile std::uint64_t x = 0;
  for (int i = 0; i < 100000; ++i)
    x = x + 1;
  const auto b = c->read();
  EXPECT_TRUE(b.user_space);
  EXPECT_GE(b.value - a.value, 100000u);
}

}  // namespace
}  // namespace tracer::perf
