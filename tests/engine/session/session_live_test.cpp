// Session::apply: a recipe changed while the session runs. Two children, one per CPU, call
// getppid without pause from before the first change to after the last; a probe of getpgrp is
// added, counts a known number of calls, and is removed. The untouched probe's count is the
// children's exact number of calls across both changes (no gap, nothing twice), the added one's
// is exactly the calls made while it existed, and once it is removed this process holds exactly
// the perf events, BPF programs, maps and links it held before it was added. In the kernel and
// in user space.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <string>

#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

constexpr std::uint64_t kPgrpCalls = 2000;  // per child, while the getpgrp probe exists

/// Descriptors of this process by kind: perf events, BPF programs, maps and links.
std::map<std::string, std::size_t> kernel_objects() {
  std::map<std::string, std::size_t> n;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = fs::read_symlink(e.path(), ec).string();
    for (const char* kind : {"[perf_event]", "bpf-prog", "bpf-map", "bpf_link"}) {
      if (target == fmt::format("anon_inode:{}", kind))
        ++n[kind];
    }
  }
  return n;
}

/// What the children share with the test (MAP_SHARED).
struct Shared {
  std::atomic<int> phase{0};  // 0: wait, 1: getppid, 2: + kPgrpCalls getpgrp, 3: + as many more
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> ppid[2]{};
  std::atomic<std::uint64_t> pgrp_done[2]{};  // the phase whose getpgrp calls are made
};

class Children {
 public:
  Children() {
    void* m =
        ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared_ = new (m) Shared();
    for (int k = 0; k < 2; ++k) {
      const pid_t pid = ::fork();
      if (pid == 0)
        run(k);
      pids_[k] = pid;
    }
  }
  ~Children() {
    shared_->stop = true;
    reap();
    ::munmap(shared_, sizeof(Shared));
  }
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;

  Shared& shared() { return *shared_; }
  [[nodiscard]] pid_t pid(int k) const { return pids_[k]; }
  void reap() {
    for (bool& r : reaped_) {
      const auto k = static_cast<std::size_t>(&r - reaped_);
      if (!r && pids_[k] > 0) {
        int status = 0;
        ::waitpid(pids_[k], &status, 0);
      }
      r = true;
    }
  }

 private:
  [[noreturn]] void run(int k) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(k % std::max(1, static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN))), &set);
    ::sched_setaffinity(0, sizeof(set), &set);
    Shared& s = *shared_;
    while (s.phase.load() == 0 && !s.stop.load())
      ::usleep(100);
    int pgrp_phase = 1;
    while (!s.stop.load()) {
      ::syscall(SYS_getppid);
      s.ppid[k].fetch_add(1);
      const int phase = s.phase.load();
      if (phase > pgrp_phase) {  // this phase's getpgrp calls, then on with getppid only
        for (std::uint64_t i = 0; i < kPgrpCalls; ++i) {
          ::syscall(SYS_getpgrp);
          if (i % 16 == 0) {
            ::syscall(SYS_getppid);
            s.ppid[k].fetch_add(1);
          }
        }
        pgrp_phase = phase;
        s.pgrp_done[k] = static_cast<std::uint64_t>(phase);
      }
      ::usleep(20);
    }
    ::_exit(0);
  }
  Shared* shared_ = nullptr;
  pid_t pids_[2] = {-1, -1};
  bool reaped_[2] = {false, false};
};

std::string recipe_text(Placement placement, bool with_pgrp) {
  std::string text = fmt::format(R"([recipe]
name = "live"
placement = "{}"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
)",
                                 to_string(placement));
  if (with_pgrp) {
    text += R"([[probe]]
name = "getpgrp"
tracepoint = "syscalls:sys_enter_getpgrp"
)";
  }
  text += R"([[pipeline]]
name = "by_pid"
[[pipeline.stage]]
use = "count"
by = ["probe", "pid"]
)";
  if (with_pgrp) {  // a pipeline that exists while the getpgrp probe does
    text += R"([[pipeline]]
name = "by_probe"
[[pipeline.stage]]
use = "count"
by = ["probe"]
)";
  }
  return text;
}

Recipe load_recipe(const std::string& text) {
  return Recipe::load_string(text, "live.toml", {.stages = stage_catalog()});
}

/// A session of `text` started on its own io_context, with its final tables by pipeline name
/// (`names`, by index as the recipe running then has them): "key/key" -> count.
struct LiveRun {
  LiveRun(const std::string& text, std::vector<std::string> pipeline_names)
      : names(std::move(pipeline_names)),
        session(io.get_executor(),
                load_recipe(text),
                out,
                {.duration = std::chrono::seconds(120)}) {
    session.on_table([this](const TableUpdate& u) {
      if (!u.final)
        return;
      auto& t = finals[names.at(u.pipeline)];
      for (const auto& row : u.table.rows) {
        std::string key;
        for (const auto& c : row.keys)
          key += (key.empty() ? "" : "/") + to_text(c);
        t[key] += std::get<std::uint64_t>(row.values.at(0));
      }
    });
    session.start();
  }
  // (Before the session: its destructor may emit tables.)
  std::map<std::string, std::map<std::string, std::uint64_t>> finals;
  std::vector<std::string> names;
  boost::asio::io_context io{1};
  Sink out = Sink::discard();
  Session session;
};

class SessionLive : public ::testing::TestWithParam<Placement> {};

TEST_P(SessionLive, AProbeAddedAndRemovedWhileRunningLeavesTheOthersExactAndNothingBehind) {
  const Placement placement = GetParam();
  Children children;
  LiveRun run(recipe_text(placement, false), {"by_pid"});
  auto& [finals, names, io, out, session] = run;
  const auto run_until = [&](const std::function<bool()>& done) {
    for (int i = 0; i < 3000 && !done(); ++i)
      io.run_for(std::chrono::milliseconds(10));
    return done();
  };
  auto& sh = children.shared();
  sh.phase = 1;
  io.run_for(std::chrono::milliseconds(300));
  const auto before_add = kernel_objects();

  // A probe and a pipeline are added.
  const RecipeChanges added = session.apply(load_recipe(recipe_text(placement, true)));
  names = {"by_pid", "by_probe"};
  EXPECT_EQ(added.probes_added, std::vector<std::string>{"getpgrp"});
  EXPECT_TRUE(added.probes_removed.empty());
  EXPECT_EQ(added.pipelines_added, std::vector<std::string>{"by_probe"});
  EXPECT_TRUE(added.pipelines_restarted.empty()) << added.describe();
  EXPECT_EQ(added.probes_kept, 1u);
  EXPECT_EQ(added.pipelines_kept, 1u);
  const auto with_pgrp = kernel_objects();
  EXPECT_GT(with_pgrp.at("[perf_event]"), before_add.at("[perf_event]"));

  // A change that cannot be made leaves the session as it was: an error at its position.
  try {
    (void)session.apply(load_recipe(recipe_text(placement, true) + R"([[probe]]
name = "nosuch"
tracepoint = "syscalls:sys_enter_no_such_call"
)"));
    ADD_FAILURE() << "a missing tracepoint was applied";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
    EXPECT_NE(std::string(e.what()).find("live.toml:"), std::string::npos) << e.what();
  }
  EXPECT_EQ(kernel_objects(), with_pgrp);
  if (placement == Placement::kKernel) {
    // One that fails after its new probe opened is taken back whole: a pipeline in user space
    // cannot read getppid, whose events only the kernel read since the start.
    try {
      (void)session.apply(load_recipe(recipe_text(placement, true) + R"([[probe]]
name = "getresgid"
tracepoint = "syscalls:sys_enter_getresgid"
[[pipeline]]
name = "lines"
[[pipeline.stage]]
use = "print"
)"));
      ADD_FAILURE() << "a user-space pipeline over a kernel-only probe was applied";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
      EXPECT_NE(std::string(e.what()).find("'getppid'"), std::string::npos) << e.what();
    }
    io.run_for(std::chrono::milliseconds(100));
    EXPECT_EQ(kernel_objects(), with_pgrp);
  }

  sh.phase = 2;  // kPgrpCalls getpgrp calls per child, all seen by the added probe
  ASSERT_TRUE(run_until([&] { return sh.pgrp_done[0] == 2 && sh.pgrp_done[1] == 2; }));
  io.run_for(std::chrono::milliseconds(300));

  // The probe and its pipeline go: the pipeline's final table comes now.
  const RecipeChanges removed = session.apply(load_recipe(recipe_text(placement, false)));
  EXPECT_EQ(removed.probes_removed, std::vector<std::string>{"getpgrp"});
  EXPECT_EQ(removed.pipelines_removed, std::vector<std::string>{"by_probe"});
  EXPECT_EQ(removed.pipelines_kept, 1u);
  names = {"by_pid"};
  ASSERT_TRUE(finals.contains("by_probe"));
  EXPECT_EQ(finals["by_probe"]["getpgrp"], 2 * kPgrpCalls);
  // Its events, rings, programs and maps are closed once the executor ran what was queued.
  io.run_for(std::chrono::milliseconds(200));
  EXPECT_EQ(kernel_objects(), before_add);
  // More getpgrp calls: the probe is gone, they count nowhere.
  sh.phase = 3;
  ASSERT_TRUE(run_until([&] { return sh.pgrp_done[0] == 3 && sh.pgrp_done[1] == 3; }));
  io.run_for(std::chrono::milliseconds(300));

  sh.stop = true;
  children.reap();
  io.run_for(std::chrono::milliseconds(300));
  session.stop();

  // Every getppid call of each child, across both changes; the getpgrp calls while the probe
  // existed, and only those.
  const auto& by_pid = finals["by_pid"];
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(fmt::format("child {} (pid {})", k, children.pid(k)));
    EXPECT_GT(sh.ppid[k].load(), 1000u);
    const auto count = [&](const char* probe) {
      const auto it = by_pid.find(fmt::format("{}/{}", probe, children.pid(k)));
      return it == by_pid.end() ? std::uint64_t{0} : it->second;
    };
    EXPECT_EQ(count("getppid"), sh.ppid[k].load());
    EXPECT_EQ(count("getpgrp"), kPgrpCalls);
  }
  if (::testing::Test::HasFailure()) {
    for (const auto& [key, n] : by_pid)
      std::fprintf(stderr, "by_pid %s = %llu\n", key.c_str(), static_cast<unsigned long long>(n));
  }
  const auto stats = session.stats();
  for (const auto& p : stats.engine.probes)
    EXPECT_EQ(p.total().lost, 0u) << p.name;
}

// The mirror: a probe of the recipe the session started with is removed (in the kernel, the
// program it shares with the other probe stays, detached from it), then added again under the
// same name; it counts exactly the calls made while it existed, both times.
TEST_P(SessionLive, AProbeRemovedAndAddedAgainCountsExactlyWhileItExists) {
  const Placement placement = GetParam();
  Children children;
  LiveRun run(recipe_text(placement, true), {"by_pid", "by_probe"});
  auto& [finals, names, io, out, session] = run;
  const auto phase = [&](int n) {
    children.shared().phase = n;
    for (int i = 0; i < 3000; ++i) {
      if (n < 2 || (children.shared().pgrp_done[0] == static_cast<std::uint64_t>(n) &&
                    children.shared().pgrp_done[1] == static_cast<std::uint64_t>(n)))
        break;
      io.run_for(std::chrono::milliseconds(10));
    }
    io.run_for(std::chrono::milliseconds(300));
  };
  phase(1);
  phase(2);  // counted
  const auto with_pgrp = kernel_objects();
  const RecipeChanges removed = session.apply(load_recipe(recipe_text(placement, false)));
  EXPECT_EQ(removed.probes_removed, std::vector<std::string>{"getpgrp"});
  EXPECT_EQ(removed.pipelines_removed, std::vector<std::string>{"by_probe"});
  names = {"by_pid"};
  EXPECT_EQ(finals["by_probe"]["getpgrp"], 2 * kPgrpCalls);
  io.run_for(std::chrono::milliseconds(200));
  EXPECT_LT(kernel_objects()["[perf_event]"], with_pgrp.at("[perf_event]"));
  phase(3);  // not counted
  const RecipeChanges again = session.apply(load_recipe(recipe_text(placement, true)));
  EXPECT_EQ(again.probes_added, std::vector<std::string>{"getpgrp"});
  EXPECT_TRUE(again.pipelines_restarted.empty()) << again.describe();
  names = {"by_pid", "by_probe_again"};
  phase(4);  // counted
  children.shared().stop = true;
  children.reap();
  io.run_for(std::chrono::milliseconds(300));
  session.stop();

  const auto& by_pid = finals["by_pid"];
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(fmt::format("child {} (pid {})", k, children.pid(k)));
    const auto count = [&](const char* probe) {
      const auto it = by_pid.find(fmt::format("{}/{}", probe, children.pid(k)));
      return it == by_pid.end() ? std::uint64_t{0} : it->second;
    };
    EXPECT_EQ(count("getppid"), children.shared().ppid[k].load());
    EXPECT_EQ(count("getpgrp"), 2 * kPgrpCalls);  // phases 2 and 4, not 3
  }
  EXPECT_EQ(finals["by_probe_again"]["getpgrp"], 2 * kPgrpCalls);  // phase 4
  for (const auto& p : session.stats().engine.probes)
    EXPECT_EQ(p.total().lost, 0u) << p.name;
}

// An in-kernel pipeline that pairs probes (latency) cannot take a new probe in programs of its
// own: it restarts (here in user space, where a pipeline that prints every event reads the
// probes too), said in RecipeChanges, its first table emitted at the change.
TEST(SessionLiveRestart, AnInKernelLatencyPipelineRestartsWhenAProbeIsAdded) {
  Children children;
  std::vector<std::map<std::string, std::uint64_t>> finals;  // per instance: pid -> pairs
  boost::asio::io_context io(1);
  Sink out = Sink::discard();
  const auto text = [](bool with_pgrp) {
    std::string t = R"([recipe]
name = "lat"
[[probe]]
name = "enter"
tracepoint = "syscalls:sys_enter_getppid"
[[probe]]
name = "exit"
tracepoint = "syscalls:sys_exit_getppid"
)";
    if (with_pgrp)
      t += "[[probe]]\nname = \"getpgrp\"\ntracepoint = \"syscalls:sys_enter_getpgrp\"\n";
    return t + R"([[pipeline]]
name = "lat"
[[pipeline.stage]]
use = "latency"
entry = "enter"
exit = "exit"
key = "tid"
[[pipeline.stage]]
use = "count"
by = ["pid"]
[[pipeline]]
name = "lines"
[[pipeline.stage]]
use = "print"
)";
  };
  Session session(io.get_executor(), load_recipe(text(false)), out,
                  {.duration = std::chrono::seconds(120)});
  session.on_table([&](const TableUpdate& u) {
    if (!u.final || u.pipeline != 0)
      return;
    auto& t = finals.emplace_back();
    for (const auto& row : u.table.rows)
      t[to_text(row.keys.at(0))] += std::get<std::uint64_t>(row.values.at(0));
  });
  session.start();
  ASSERT_NE(session.placement().find("latency    kernel"), std::string::npos)
      << session.placement();
  children.shared().phase = 1;
  io.run_for(std::chrono::milliseconds(400));
  const RecipeChanges c = session.apply(load_recipe(text(true)));
  ASSERT_EQ(c.pipelines_restarted.size(), 1u) << c.describe();
  EXPECT_TRUE(c.pipelines_restarted[0].starts_with("lat (its programs pair probes"))
      << c.describe();
  EXPECT_EQ(c.pipelines_kept, 1u);
  EXPECT_NE(session.placement().find("latency    user"), std::string::npos) << session.placement();
  ASSERT_EQ(finals.size(), 1u);  // the first instance's table, at the change
  io.run_for(std::chrono::milliseconds(400));
  children.shared().stop = true;
  children.reap();
  io.run_for(std::chrono::milliseconds(200));
  session.stop();
  ASSERT_EQ(finals.size(), 2u);
  for (int k = 0; k < 2; ++k) {
    SCOPED_TRACE(k);
    const std::string pid = std::to_string(children.pid(k));
    EXPECT_GT(finals[0][pid], 0u);
    EXPECT_GT(finals[1][pid], 0u);
    // Each call paired once at most: the restart may miss the calls of its own moment.
    EXPECT_LE(finals[0][pid] + finals[1][pid], children.shared().ppid[k].load())
        << finals[0][pid] << " + " << finals[1][pid];
  }
  if (::testing::Test::HasFailure()) {
    for (std::size_t f = 0; f < finals.size(); ++f) {
      for (const auto& [key, n] : finals[f])
        std::fprintf(stderr, "instance %zu: pid %s = %llu\n", f, key.c_str(),
                     static_cast<unsigned long long>(n));
    }
    std::fprintf(stderr, "%s\n", session.placement().c_str());
    for (const auto& p : session.stats().engine.probes)
      std::fprintf(stderr, "probe %s: samples %llu, lost %llu\n", p.name.c_str(),
                   static_cast<unsigned long long>(p.total().samples),
                   static_cast<unsigned long long>(p.lost()));
  }
}

INSTANTIATE_TEST_SUITE_P(Placements,
                         SessionLive,
                         ::testing::Values(Placement::kKernel, Placement::kUser),
                         [](const auto& param_info) {
                           return param_info.param == Placement::kKernel ? std::string("Kernel")
                                                                         : std::string("User");
                         });

}  // namespace
}  // namespace tracer
