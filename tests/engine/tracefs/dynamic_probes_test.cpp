// Dynamic probes through tracefs: the exact commands written (fake tree), which groups
// remove_stale() may touch (fake tree), and on this kernel: exactly one hit per call through a
// PERF_TYPE_TRACEPOINT event on the new probe, cleanup on destruction, kernel errors explained,
// and the probes of a SIGKILLed owner removed by the next run.
#include "tracer/tracefs/dynamic_probes.hpp"

#include <asm/perf_regs.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <sstream>
#include <string>

#include "support/probe_hits.hpp"
#include "support/temp_dir.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::tracefs {
namespace {

namespace fs = std::filesystem;
constexpr int kCalls = 7;

/// Field 22 of /proc/<pid>/stat, parsed here independently of the library.
std::string starttime_of(pid_t pid) {
  const std::string stat = testing::slurp("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    rest >> field;
  return field;
}

std::string own_group() {
  return "tracer_" + std::to_string(::getpid()) + "_" + starttime_of(::getpid());
}

// Fake tree -----------------------------------------------------------------------------------

TEST(DynamicProbesFake, WritesExactCommandsAndRemovesOnDestruction) {
  testing::TempDir t;
  const std::string g = own_group();
  t.write("uprobe_events", "");
  t.write("kprobe_events", "");
  t.write("events/" + g + "/fn/id", "1234\n");
  t.write("events/" + g + "/k/id", "99\n");
  const auto fs = Tracefs::at(t.path());
  {
    auto probes = DynamicProbes::create(fs);
    ASSERT_TRUE(probes.has_value()) << probes.error().describe();
    EXPECT_EQ(probes->group(), g);
    auto up = probes->add_uprobe("fn", "/bin/true", 0x1139, false);
    ASSERT_TRUE(up.has_value()) << up.error().describe();
    EXPECT_EQ(up->id, 1234U);
    EXPECT_EQ(up->name.system, g);
    EXPECT_EQ(up->name.event, "fn");
    EXPECT_EQ(up->definition, "p:" + g + "/fn /bin/true:0x1139");
    auto kp = probes->add_kprobe("k", "do_nanosleep", 16, true);
    ASSERT_TRUE(kp.has_value()) << kp.error().describe();
    EXPECT_EQ(kp->id, 99U);
    EXPECT_EQ(kp->definition, "r:" + g + "/k do_nanosleep+0x10");

    // Refused before anything is written.
    EXPECT_EQ(probes->add_uprobe("bad-name", "/bin/true", 0, false).error().errno_value(), EINVAL);
    EXPECT_EQ(probes->add_uprobe("9lives", "/bin/true", 0, false).error().errno_value(), EINVAL);
    EXPECT_EQ(probes->add_uprobe("rel", "bin/true", 0, false).error().errno_value(), EINVAL);
    EXPECT_EQ(probes->add_uprobe("sp", "/a b", 0, false).error().errno_value(), EINVAL);
    EXPECT_EQ(probes->probes().size(), 2U);

    // Moving keeps ownership in one place.
    DynamicProbes moved = std::move(*probes);
    EXPECT_EQ(moved.probes().size(), 2U);
  }
  EXPECT_EQ(testing::slurp(t.path() / "uprobe_events"),
            "p:" + g + "/fn /bin/true:0x1139\n-:" + g + "/fn\n");
  EXPECT_EQ(testing::slurp(t.path() / "kprobe_events"),
            "r:" + g + "/k do_nanosleep+0x10\n-:" + g + "/k\n");
}

TEST(DynamicProbesFake, ProbeWithoutIdIsRemovedAgain) {
  testing::TempDir t;
  t.write("uprobe_events", "");
  auto probes = DynamicProbes::create(Tracefs::at(t.path()));
  ASSERT_TRUE(probes.has_value());
  auto r = probes->add_uprobe("noid", "/bin/true", 0x10, true);
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), ENOENT);
  EXPECT_TRUE(probes->probes().empty());
  const std::string g = probes->group();
  EXPECT_EQ(testing::slurp(t.path() / "uprobe_events"),
            "r:" + g + "/noid /bin/true:0x10\n-:" + g + "/noid\n");
}

TEST(DynamicProbesFake, RemoveStaleTouchesOnlyDeadOwnersGroups) {
  testing::TempDir t;
  const std::string live = own_group();
  const std::string reused = "tracer_" + std::to_string(::getpid()) + "_1";  // pid reused
  const std::string gone = "tracer_999999999_5";                             // above any pid_max
  const std::string listing = "p:" + live + "/a /bin/true:0x10\n" +          //
                              "p:" + gone + "/b /bin/true:0x20\n" +          //
                              "r:" + reused + "/c /bin/true:0x30\n" +        //
                              "p:other_group/d /bin/true:0x40\n" +           //
                              "p:tracer_x_y/e /bin/true:0x50\n" +            //
                              "p:tracer_12/f /bin/true:0x60\n";
  t.write("uprobe_events", listing);
  t.write("kprobe_events", "p:" + gone + "/k do_nanosleep+0\n");
  auto n = DynamicProbes::remove_stale(Tracefs::at(t.path()));
  ASSERT_TRUE(n.has_value()) << n.error().describe();
  EXPECT_EQ(*n, 3U);
  EXPECT_EQ(testing::slurp(t.path() / "uprobe_events"),
            listing + "-:" + gone + "/b\n-:" + reused + "/c\n");
  EXPECT_EQ(testing::slurp(t.path() / "kprobe_events"),
            "p:" + gone + "/k do_nanosleep+0\n-:" + gone + "/k\n");
}

TEST(DynamicProbesFake, OwnerGroupName) {
  auto g = owner_group_name(::getpid());
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(*g, own_group());
  auto none = owner_group_name(999999999);
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().errno_value(), ENOENT);
}

// This kernel ---------------------------------------------------------------------------------

class DynamicProbesLive : public ::testing::Test {
 protected:
  void SetUp() override {
    auto fs = Tracefs::open();
    if (!fs)
      GTEST_SKIP() << fs.error().describe();
    if (!fs::exists(fs->root() / "uprobe_events"))
      GTEST_SKIP() << "no tracefs uprobe_events (CONFIG_UPROBE_EVENTS off)";
    fs_.emplace(std::move(*fs));
    auto off = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
    ASSERT_TRUE(off.has_value()) << off.error().describe();
    offset_ = *off;
  }

  [[nodiscard]] bool group_exists(const std::string& group) const {
    return fs::exists(fs_->root() / "events" / group);
  }
  [[nodiscard]] bool listed(const std::string& group) const {
    return testing::slurp(fs_->root() / "uprobe_events").find(group + "/") != std::string::npos;
  }

  std::optional<Tracefs> fs_;
  std::uint64_t offset_ = 0;
};

TEST_F(DynamicProbesLive, ExactHitsThroughTheTracepointAndCleanup) {
  std::string group;
  {
    auto probes = DynamicProbes::create(*fs_);
    ASSERT_TRUE(probes.has_value()) << probes.error().describe();
    group = probes->group();
    auto entry = probes->add_uprobe("tracer_test_fn", TRACER_UPROBE_TARGET, offset_, false);
    ASSERT_TRUE(entry.has_value()) << entry.error().describe();
    auto ret = probes->add_uprobe("tracer_test_fn_ret", TRACER_UPROBE_TARGET, offset_, true);
    ASSERT_TRUE(ret.has_value()) << ret.error().describe();
    EXPECT_NE(entry->id, ret->id);
    EXPECT_TRUE(group_exists(group));
    EXPECT_TRUE(listed(group));
    {
      perf::EventAttr attr;
      attr.type(PERF_TYPE_TRACEPOINT).config(entry->id);
      auto run = testing::run_and_collect(attr, TRACER_UPROBE_TARGET, {std::to_string(kCalls)});
      ASSERT_TRUE(run.has_value()) << run.error().describe();
      ASSERT_EQ(run->hits.size(), static_cast<std::size_t>(kCalls));
      for (const auto& h : run->hits)
        EXPECT_EQ(h.pid, static_cast<std::uint32_t>(run->child));
    }
    {
      // The return probe, with the return value from the sampled user registers.
      perf::EventAttr attr;
      attr.type(PERF_TYPE_TRACEPOINT)
          .config(ret->id)
          .sample_type(PERF_SAMPLE_REGS_USER)
          .sample_regs_user(std::uint64_t{1} << PERF_REG_X86_AX);
      auto run = testing::run_and_collect(attr, TRACER_UPROBE_TARGET, {std::to_string(kCalls)});
      ASSERT_TRUE(run.has_value()) << run.error().describe();
      ASSERT_EQ(run->hits.size(), static_cast<std::size_t>(kCalls));
      for (std::size_t i = 0; i < run->hits.size(); ++i) {
        ASSERT_EQ(run->hits[i].regs_user.size(), 1U);
        EXPECT_EQ(run->hits[i].regs_user[0] & 0xffffffffU, 3 * (i + 1));
      }
    }
    // Every perf event on the probes is closed here, so removal cannot meet EBUSY.
  }
  EXPECT_FALSE(group_exists(group));
  EXPECT_FALSE(listed(group));
}

TEST_F(DynamicProbesLive, RemovalWaitsForPerfEventsToClose) {
  auto probes = DynamicProbes::create(*fs_);
  ASSERT_TRUE(probes.has_value());
  auto p = probes->add_uprobe("busy_probe", TRACER_UPROBE_TARGET, offset_, false);
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  perf::EventAttr attr;
  attr.type(PERF_TYPE_TRACEPOINT).config(p->id).sample_period(1);
  auto ev = perf::Event::open(attr, {.pid = -1, .cpu = 0});
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto busy = probes->remove_all();
  ASSERT_FALSE(busy.has_value());
  EXPECT_EQ(busy.error().errno_value(), EBUSY);
  EXPECT_NE(busy.error().message.find("-:" + probes->group() + "/busy_probe"), std::string::npos)
      << busy.error().message;
  EXPECT_NE(busy.error().hint.find("close its perf events"), std::string::npos);
  EXPECT_EQ(probes->probes().size(), 1U) << "kept for a retry";
  ev->close();
  auto ok = probes->remove_all();
  EXPECT_TRUE(ok.has_value()) << ok.error().describe();
  EXPECT_TRUE(probes->probes().empty());
  EXPECT_FALSE(group_exists(probes->group()));
}

TEST_F(DynamicProbesLive, KernelErrorsQuoteTheLine) {
  auto probes = DynamicProbes::create(*fs_);
  ASSERT_TRUE(probes.has_value());
  ASSERT_TRUE(probes->add_uprobe("dup", TRACER_UPROBE_TARGET, offset_, false).has_value());
  auto dup = probes->add_uprobe("dup", TRACER_UPROBE_TARGET, offset_, false);
  ASSERT_FALSE(dup.has_value());
  EXPECT_EQ(dup.error().errno_value(), EEXIST);
  const std::string line = "p:" + probes->group() + "/dup " + TRACER_UPROBE_TARGET + ":0x";
  EXPECT_NE(dup.error().message.find(line), std::string::npos) << dup.error().message;
  EXPECT_NE(dup.error().hint.find("already exists"), std::string::npos) << dup.error().hint;

  auto missing = probes->add_uprobe("missing", "/no/such/file", 0x10, false);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().errno_value(), ENOENT) << missing.error().describe();
  EXPECT_NE(missing.error().message.find("/no/such/file:0x10"), std::string::npos);

  if (!fs::exists(fs_->root() / "kprobe_events")) {
    auto k = probes->add_kprobe("k", "do_nanosleep", 0, false);
    ASSERT_FALSE(k.has_value());
    EXPECT_EQ(k.error().errno_value(), ENOENT);
    EXPECT_NE(k.error().hint.find("no kprobe_events"), std::string::npos) << k.error().hint;
  }
  EXPECT_EQ(probes->probes().size(), 1U);
}

TEST_F(DynamicProbesLive, StaleGroupOfAKilledOwnerIsRemoved) {
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Create a probe, report, and wait for SIGKILL: no destructor ever runs.
    auto probes = DynamicProbes::create(*fs_);
    const bool ok =
        probes && probes->add_uprobe("crash_probe", TRACER_UPROBE_TARGET, offset_, false);
    const char c = ok ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    for (;;)
      ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  const std::string stale = "tracer_" + std::to_string(child) + "_" + starttime_of(child);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_EQ(c, 'y') << "the child could not create its probe";
  EXPECT_TRUE(group_exists(stale)) << "a killed owner leaves its probes behind";

  // A live owner's group (ours) must survive.
  auto mine = DynamicProbes::create(*fs_);
  ASSERT_TRUE(mine.has_value());
  ASSERT_TRUE(mine->add_uprobe("live_probe", TRACER_UPROBE_TARGET, offset_, false).has_value());

  auto removed = DynamicProbes::remove_stale(*fs_);
  ASSERT_TRUE(removed.has_value()) << removed.error().describe();
  EXPECT_GE(*removed, 1U);
  EXPECT_FALSE(group_exists(stale));
  EXPECT_FALSE(listed(stale));
  EXPECT_TRUE(group_exists(mine->group()));
  EXPECT_TRUE(listed(mine->group()));
}

}  // namespace
}  // namespace tracer::tracefs
