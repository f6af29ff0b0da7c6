// Default ring sizes from the locked-memory budget (core::plan_rings), and the budget this
// process has.
#include "core/ring_budget.hpp"

#include <gtest/gtest.h>

namespace tracer::core {
namespace {

TEST(RingBudget, WithoutALimitEachRingGetsFourMiBUntilTheTotalCap) {
  const MlockBudget unlimited{.unlimited = true, .perf_bytes = 0, .rlimit_bytes = 0};
  EXPECT_EQ(plan_rings(4, unlimited).data_pages, 1024u);  // 4 MiB
  // 256 MiB in all: 128 rings get 2 MiB, 4096 rings 64 KiB, 100000 rings the 32 KiB floor.
  EXPECT_EQ(plan_rings(128, unlimited).data_pages, 512u);
  EXPECT_EQ(plan_rings(4096, unlimited).data_pages, 16u);
  EXPECT_EQ(plan_rings(100000, unlimited).data_pages, 8u);
  EXPECT_NE(plan_rings(4, unlimited).why.find("no locked-memory limit"), std::string::npos);
}

TEST(RingBudget, ABudgetIsSharedWithAMetadataPagePerRing) {
  // CAP_PERFMON without CAP_IPC_LOCK here: perf_event_mlock_kb 516 x 2 CPUs, RLIMIT_MEMLOCK 8 MiB.
  const MlockBudget user{
      .unlimited = false, .perf_bytes = std::uint64_t{516} * 1024 * 2, .rlimit_bytes = 0};
  // 1032 KiB over 4 rings: 258 KiB each, 254 KiB of data -> 32 pages (128 KiB, a power of two).
  const auto p = plan_rings(4, user);
  EXPECT_EQ(p.data_pages, 32u);
  EXPECT_LE((p.data_pages + 1) * 4096u * 4u, user.perf_bytes);  // every ring maps
  EXPECT_NE(p.why.find("perf_event_mlock_kb"), std::string::npos) << p.why;
  const MlockBudget with_rlimit{
      .unlimited = false, .perf_bytes = std::uint64_t{516} * 1024 * 2, .rlimit_bytes = 8 << 20};
  const auto q = plan_rings(4, with_rlimit);
  EXPECT_EQ(q.data_pages, 512u);  // (1032 KiB + 8 MiB) / 4 - 4 KiB -> 2 MiB
  EXPECT_LE((q.data_pages + 1) * 4096ull * 4u, with_rlimit.perf_bytes + with_rlimit.rlimit_bytes);
  // Too many rings for the budget still get one page each (mmap then says which limit).
  EXPECT_EQ(plan_rings(10000, user).data_pages, 1u);
}

TEST(RingBudget, RootHereHasNoLimit) {
  // Tests run as root (CAP_IPC_LOCK): the budget the engine sees must say so.
  EXPECT_TRUE(mlock_budget().unlimited);
}

}  // namespace
}  // namespace tracer::core
