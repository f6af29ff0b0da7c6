// tracer stat's targets and groupings beside perf stat's on the same workloads: {group} syntax,
// -A (per CPU), -p lists, -t, --per-thread and -G (a cgroup), in perf's CSV rows and with the
// same counts.
#include "support/test_paths.hpp"

#include <fcntl.h>

#include <cmath>
#include <cstdlib>

#include "oracle_harness.hpp"

namespace tracer {
namespace {

using namespace oracle;
namespace fs = std::filesystem;

using tracer::testing::kSyscaller;

std::string read_comm(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

/// The perf events process `pid` holds open (its fds that are anon_inode:[perf_event]).
std::size_t perf_event_fds(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    std::error_code link_ec;
    n += fs::read_symlink(e.path(), link_ec).string() == "anon_inode:[perf_event]" ? 1 : 0;
  }
  return n;
}

/// What a counting tool printed and how it exited.
struct ToolRun {
  int exit_code = -1;
  std::string out;  // stdout and stderr
};

/// Processes started in the background, each `sh` waiting for a go file, then `exec syscaller
/// lseek N`: run() starts a counting tool on them (-p/-t LIST) and lets them go once the tool is
/// attached (tracer: its --ready-fd line; perf: its perf events on every process), so that every
/// call is counted however late a loaded machine starts the tool. Never a fixed sleep.
class Background {
 public:
  explicit Background(const std::vector<int>& calls) {
    const std::string go = (dir_.path() / "go").string();
    for (int n : calls) {
      const std::string cmd = "while [ ! -e " + go + " ]; do sleep 0.01; done; exec " + kSyscaller +
                              " lseek " + std::to_string(n);
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      pids_.push_back(pid);
    }
    // Each child is "sh" before a tool reads its name (a fork of a large, sanitized test
    // binary can still carry the test's name when perf or tracer looks).
    for (pid_t p : pids_) {
      for (int i = 0; i < 2000 && read_comm(p) != "sh"; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    reaper_ = std::thread([pids = pids_] {
      for (pid_t p : pids)
        ::waitpid(p, nullptr, 0);
    });
  }
  ~Background() {
    for (pid_t p : pids_)
      ::kill(p, SIGKILL);
    reaper_.join();
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  [[nodiscard]] std::string list() const {
    std::string s;
    for (pid_t p : pids_)
      s += (s.empty() ? "" : ",") + std::to_string(p);
    return s;
  }
  [[nodiscard]] const std::vector<pid_t>& pids() const { return pids_; }

  /// Runs `argv` (tracer or perf, its target options naming list()), releases the processes
  /// once it is attached, and waits for it (it ends with them).
  ToolRun run(std::vector<std::string> argv) {
    const bool ours = argv.front() == kTracer;
    testing::ReadyPipe ready;
    if (ours) {
      argv.insert(argv.begin() + 2, "--ready-fd");  // after "stat"
      argv.insert(argv.begin() + 3, ready.fd_arg());
    }
    const auto out = dir_.path() / ("tool" + std::to_string(runs_++));
    const pid_t tool = testing::spawn_to_file(argv, out, out);
    ready.close_writer();
    bool attached = false;
    if (ours) {
      attached = ready.wait();
    } else {
      for (int i = 0; i < 6000 && !attached && ::kill(tool, 0) == 0; ++i) {
        attached = perf_event_fds(tool) >= pids_.size();
        if (!attached)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    std::ofstream(dir_.path() / "go") << "go\n";
    ToolRun r;
    r.exit_code = oracle::wait_code(tool);
    r.out = slurp(out);
    EXPECT_TRUE(attached) << r.out;
    return r;
  }

 private:
  testing::TempDir dir_;
  std::vector<pid_t> pids_;
  std::thread reaper_;
  int runs_ = 0;
};

// {group}: the group's members counted together, in perf's rows; its modifiers apply to each
// member (perf's rule), :W is accepted; braces that do not close are a usage error.
TEST(OracleStat, GroupsCountLikePerfStatsGroups) {
  const std::string work = " -- " + kWorkload + " tree 2 3000 2>&1 >/dev/null";
  const std::string events = " -e '{syscalls:sys_enter_lseek,page-faults}',task-clock";
  const auto ours = shell(kTracer + " stat -x," + events + work);
  const auto perf = shell("/usr/bin/perf stat -x," + events + work);
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  ASSERT_EQ(perf.exit_code, 0) << perf.out;
  const auto o = csv_rows(ours.out), p = csv_rows(perf.out);
  ASSERT_EQ(o.size(), 3u) << ours.out;
  ASSERT_EQ(p.size(), 3u) << perf.out;
  for (std::size_t i = 0; i < o.size(); ++i) {
    EXPECT_EQ(o[i].size(), p[i].size()) << ours.out << "\nperf:\n" << perf.out;
    EXPECT_EQ(o[i][2], p[i][2]);
  }
  EXPECT_EQ(o[0][0], "6000");
  EXPECT_EQ(p[0][0], "6000");
  // A group's members ran for the same time (one schedule on the PMU).
  EXPECT_EQ(o[0][3], o[1][3]);

  const auto mods =
      shell(kTracer + " stat -x, -e '{syscalls:sys_enter_lseek,page-faults}:uW'" + work);
  ASSERT_EQ(mods.exit_code, 0) << mods.out;
  const auto m = csv_rows(mods.out);
  ASSERT_EQ(m.size(), 2u) << mods.out;
  EXPECT_EQ(m[0][2], "syscalls:sys_enter_lseek:u");
  EXPECT_EQ(m[1][2], "page-faults:u");

  const auto bad = shell(kTracer + " stat -e '{page-faults,task-clock' -- /bin/true");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("without its '}'"), std::string::npos) << bad.err;
}

// -A: a row per CPU, event by event, as perf stat -A: two pinned processes make 3,000 readv
// calls on CPU 1 and 2,000 on CPU 0, and each CPU's row has its own. (readv: a call little else
// on a machine makes; lseek's count took in another copy of the workload beside the test.)
TEST(OracleStat, PerCpuRowsAsPerfStatA) {
  const std::string pinned = " -e syscalls:sys_enter_readv,page-faults -- /bin/sh -c '" +
                             kSyscaller + " readv 3000 1 & " + kSyscaller +
                             " readv 2000 0; wait' 2>&1 >/dev/null";
  const auto ours = shell(kTracer + " stat -x, -a -A -C 0,1" + pinned);
  const auto perf = shell("/usr/bin/perf stat -x, -a -A -C 0,1" + pinned);
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  ASSERT_EQ(perf.exit_code, 0) << perf.out;
  const auto o = csv_rows(ours.out), p = csv_rows(perf.out);
  ASSERT_EQ(o.size(), 4u) << ours.out;
  ASSERT_EQ(p.size(), 4u) << perf.out;
  for (std::size_t i = 0; i < o.size(); ++i) {
    EXPECT_EQ(o[i].size(), p[i].size()) << ours.out << "\nperf:\n" << perf.out;
    EXPECT_EQ(o[i][0], p[i][0]);  // CPU0, CPU1, CPU0, CPU1
    EXPECT_EQ(o[i][3], p[i][3]);  // the event
  }
  // Each CPU's calls (and rarely another process's readv there), never the other CPU's.
  for (const auto* rows : {&o, &p}) {
    EXPECT_GE(std::stoll((*rows)[0][1]), 2000);
    EXPECT_LT(std::stoll((*rows)[0][1]), 2500);
    EXPECT_GE(std::stoll((*rows)[1][1]), 3000);
    EXPECT_LT(std::stoll((*rows)[1][1]), 3500);
  }
  const auto not_wide = shell(kTracer + " stat -A -e page-faults -- /bin/true");
  EXPECT_EQ(not_wide.exit_code, 2) << not_wide.err;
}

// -p with a list counts every process (and what they start), -t the threads, --per-thread a
// row per thread: the same numbers and rows as perf stat's.
TEST(OracleStat, ProcessListsThreadsAndPerThreadRowsAsPerfStat) {
  const std::vector<std::string> ev = {"-e", "syscalls:sys_enter_lseek"};
  const auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  {
    Background b({300, 200});
    const auto ours = b.run(with({kTracer, "stat", "-x,", "-p", b.list()}, ev));
    ASSERT_EQ(ours.exit_code, 0) << ours.out;
    const auto o = csv_rows(ours.out);
    ASSERT_EQ(o.size(), 1u) << ours.out;
    EXPECT_EQ(o[0][0], "500") << ours.out;
  }
  {
    Background b({300, 200});
    const auto perf = b.run(with({"/usr/bin/perf", "stat", "-x,", "-p", b.list()}, ev));
    const auto p = csv_rows(perf.out);
    ASSERT_EQ(p.size(), 1u) << perf.out;
    EXPECT_EQ(p[0][0], "500") << perf.out;
  }
  {
    Background b({300, 200});
    const auto ours = b.run(with({kTracer, "stat", "-x,", "-t", b.list()}, ev));
    ASSERT_EQ(ours.exit_code, 0) << ours.out;
    const auto o = csv_rows(ours.out);
    ASSERT_EQ(o.size(), 1u) << ours.out;
    EXPECT_EQ(o[0][0], "500") << ours.out;
  }
  std::vector<std::vector<std::string>> per_thread[2];
  std::vector<pid_t> pids[2];
  for (int tool = 0; tool < 2; ++tool) {
    Background b({300, 200});
    pids[tool] = b.pids();
    const auto r =
        b.run({tool == 0 ? kTracer : std::string("/usr/bin/perf"), "stat", "-x,", "--per-thread",
               "-p", b.list(), "-e", "syscalls:sys_enter_lseek,page-faults"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    per_thread[tool] = csv_rows(r.out);
  }
  const auto& o = per_thread[0];
  const auto& p = per_thread[1];
  ASSERT_EQ(o.size(), 4u);
  ASSERT_EQ(p.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(o[i].size(), p[i].size());
    EXPECT_EQ(o[i][3], p[i][3]);  // event by event, as perf's
    // "comm-tid" of each process, in the order given (perf's order of threads varies).
    EXPECT_EQ(o[i][0], "sh-" + std::to_string(pids[0][i % 2]));
  }
  for (int tool = 0; tool < 2; ++tool) {
    std::map<std::string, std::string> lseeks;
    for (const auto& r : per_thread[tool]) {
      if (r[3] == "syscalls:sys_enter_lseek")
        lseeks[r[0]] = r[1];
    }
    EXPECT_EQ(lseeks["sh-" + std::to_string(pids[tool][0])], "300") << tool;
    EXPECT_EQ(lseeks["sh-" + std::to_string(pids[tool][1])], "200") << tool;
  }

  const auto gone = shell(kTracer + " stat -p 999999999 -e page-faults");
  EXPECT_EQ(gone.exit_code, 2) << gone.err;
  const auto bad = shell(kTracer + " stat -p 12,x -e page-faults");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("-p: '12,x'"), std::string::npos) << bad.err;
}

std::optional<fs::path> cgroup2_root() {
  std::ifstream in("/proc/mounts");
  for (std::string dev, dir, type, rest; in >> dev >> dir >> type && std::getline(in, rest);) {
    if (type == "cgroup2")
      return fs::path(dir);
  }
  return std::nullopt;
}

/// A cgroup made for a test under the cgroup v2 hierarchy, removed after it (empty by then: the
/// processes put in it have exited).
struct TestCgroup {
  std::string name;
  fs::path dir;
  explicit TestCgroup(const fs::path& root, const std::string& prefix)
      : name(prefix + std::to_string(::getpid())), dir(root / name) {
    made = fs::create_directory(dir);
  }
  ~TestCgroup() { ::rmdir(dir.c_str()); }
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;
  bool made = false;
};

// -G: only the cgroup's tasks count: of a command whose child joins the cgroup and makes 2,000
// lseek calls, and then makes 500 outside it, 2,000; perf's row with its cgroup column.
TEST(OracleStat, ACgroupCountsOnlyItsTasksAsPerfStatG) {
  const auto root = cgroup2_root();
  if (!root)
    GTEST_SKIP() << "no cgroup v2 hierarchy is mounted (perf's cgroup events need one)";
  const TestCgroup cgroup(*root, "tracer-stat-");
  ASSERT_TRUE(cgroup.made) << cgroup.dir;
  const std::string& name = cgroup.name;
  const fs::path& dir = cgroup.dir;
  const std::string work = R"( -- sh -c "sh -c 'echo \$\$ > )" + (dir / "cgroup.procs").string() +
                           "; exec " + kSyscaller + " lseek 2000'; " + kSyscaller +
                           R"( lseek 500" 2>&1)";
  const auto ours = shell(kTracer + " stat -x, -a -e syscalls:sys_enter_lseek -G " + name + work);
  const auto perf =
      shell("/usr/bin/perf stat -x, -a -e syscalls:sys_enter_lseek -G " + name + work);
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  ASSERT_EQ(perf.exit_code, 0) << perf.out;
  const auto o = csv_rows(ours.out), p = csv_rows(perf.out);
  ASSERT_EQ(o.size(), 1u) << ours.out;
  ASSERT_EQ(p.size(), 1u) << perf.out;
  EXPECT_EQ(o[0].size(), p[0].size()) << ours.out << "\nperf:\n" << perf.out;
  EXPECT_EQ(o[0][0], "2000") << ours.out;
  EXPECT_EQ(p[0][0], "2000") << perf.out;
  EXPECT_EQ(o[0][3], name);
  EXPECT_EQ(p[0][3], name);

  const auto missing = shell(kTracer + " stat -a -G no-such-cgroup-here -e page-faults -d 100ms");
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find("no-such-cgroup-here"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

using namespace oracle;

/// A number at the start of `text`; NaN (and a test failure naming `text`) when there is none.
double number_at(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) {
    ADD_FAILURE() << "not a number: '" << text.substr(0, 200) << "'";
    return std::nan("");
  }
  return v;
}

/// A JSON line's number after "key": (the first one).
double json_number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  return at == std::string::npos ? -1 : number_at(line.substr(at + key.size() + 3));
}

// The shelf's counters recipe (configs/counters.toml) on a command that touches 20,000 pages
// and then sleeps past the first second: an interval table each second and the run's total,
// the intervals adding up to the total, page faults within 1% of perf stat's on the same
// command, and the derived rate.
TEST(OracleStat, TheCountersRecipePrintsEachIntervalAndTheTotalAsPerfStatCounts) {
  const std::string work = "-- sh -c '" + kWorkload + " pages 20000; sleep 1.1'";
  const auto ours = shell(kTracer + " run " + TRACER_CONFIGS_DIR + "/counters.toml --json " + work +
                          " 2>/dev/null");
  ASSERT_EQ(ours.exit_code, 0) << ours.out;
  double sum = 0, total = -1, rate = -1;
  int intervals = 0;
  std::istringstream in(ours.out);
  for (std::string line; std::getline(in, line);) {
    if (line.find(R"("counter":"page-faults")") != std::string::npos) {
      if (line.find(R"("total":true)") != std::string::npos) {
        total = json_number(line, "value");
      } else {
        sum += json_number(line, "value");
        ++intervals;
      }
    }
    if (line.find(R"("counter":"faults_per_s")") != std::string::npos &&
        line.find(R"("total":true)") != std::string::npos)
      rate = json_number(line, "value");
  }
  EXPECT_GE(intervals, 2) << ours.out;
  EXPECT_EQ(sum, total) << ours.out;
  const auto perf = shell("/usr/bin/perf stat -x, -e page-faults " + work + " 2>&1 >/dev/null");
  ASSERT_EQ(perf.exit_code, 0) << perf.out;
  const double theirs = number_at(perf.out);
  EXPECT_GE(total, 20000);
  EXPECT_NEAR(total, theirs, theirs * 0.01) << "perf stat: " << perf.out;
  // faults_per_s: the total over the run's seconds (a little over 1.1 s).
  EXPECT_GT(rate, total / 3);
  EXPECT_LT(rate, total / 1.1);
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

using namespace oracle;

// -M: a metric in the metric column of its first event, from the counts of its events (counted
// as a group when -e does not list them): a built-in rate, one of your own, the hardware ones
// empty where their events are not supported, and an unknown name a usage error.
TEST(OracleStat, MetricsGoInTheMetricColumnOfTheirFirstEvent) {
  const auto r = shell(kTracer +
                       " stat -x, -M page_faults_per_second,IPC -M "
                       "'faults_per_ms=page-faults / task-clock * 1000000' -e task-clock -- " +
                       kWorkload + " pages 5000 2>&1 >/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto rows = csv_rows(r.out);
  std::map<std::string, std::vector<std::string>> by_event;
  for (const auto& row : rows) {
    if (row.size() >= 7)
      by_event[row[2]] = row;
  }
  ASSERT_TRUE(by_event.contains("page-faults")) << r.out;
  ASSERT_TRUE(by_event.contains("task-clock")) << r.out;
  const double faults = std::stod(by_event["page-faults"][0]);
  const double clock_ms = std::stod(by_event["task-clock"][0]);
  EXPECT_GE(faults, 5000);
  // The last metric of an event is the one shown: faults_per_ms, page-faults being its first.
  EXPECT_EQ(by_event["page-faults"][6], "faults_per_ms") << r.out;
  EXPECT_NEAR(std::stod(by_event["page-faults"][5]), faults / (clock_ms * 1e6) * 1e6,
              faults / (clock_ms * 1e6) * 1e6 * 0.01 + 0.01)
      << r.out;
  // IPC's events: counted (a hardware PMU) or not supported here, the metric then empty.
  ASSERT_TRUE(by_event.contains("instructions")) << r.out;
  if (by_event["instructions"][0] == "<not supported>") {
    EXPECT_EQ(by_event["instructions"][5], "") << r.out;
  } else {
    EXPECT_EQ(by_event["instructions"][6], "IPC") << r.out;
  }

  const auto rate = shell(kTracer + " stat -x, -M page_faults_per_second -- " + kWorkload +
                          " pages 5000 2>&1 >/dev/null");
  ASSERT_EQ(rate.exit_code, 0) << rate.out;
  const auto rr = csv_rows(rate.out);
  ASSERT_EQ(rr.size(), 1u) << rate.out;
  EXPECT_EQ(rr[0][2], "page-faults");
  EXPECT_EQ(rr[0][6], "page_faults_per_second");
  EXPECT_GT(std::stod(rr[0][5]), 0);

  const auto unknown = shell(kTracer + " stat -M no_such_metric -- /bin/true");
  EXPECT_EQ(unknown.exit_code, 2) << unknown.err;
  EXPECT_NE(unknown.err.find("page_faults_per_second"), std::string::npos) << unknown.err;
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

using namespace oracle;

// tracer run --cgroup: a recipe's probe and its [[counter]] group see only the cgroup's tasks
// (the count stays in user space: in the kernel it counted every task's 2,500 calls).
// A process joins the cgroup and makes 2,000 lseek calls, another outside it 500: the probe's
// count and the group's are 2,000 each, nothing of the other.
TEST(OracleStat, ARecipesProbesAndCounterGroupsOfACgroupTarget) {
  const auto root = cgroup2_root();
  if (!root)
    GTEST_SKIP() << "no cgroup v2 hierarchy is mounted (perf's cgroup events need one)";
  const TestCgroup cgroup(*root, "tracer-run-");
  ASSERT_TRUE(cgroup.made) << cgroup.dir;
  const std::string& name = cgroup.name;
  const fs::path& dir = cgroup.dir;
  testing::TempDir tmp;
  const auto recipe = tmp.path() / "cg.toml";
  std::ofstream(recipe) << R"([recipe]
name = "cgroup"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[pipeline]]
name = "count"
[[pipeline.stage]]
use = "count"
[[counter]]
name = "calls"
events = ["syscalls:sys_enter_lseek"]
)";
  const auto out = tmp.path() / "out", err = tmp.path() / "err";
  const pid_t tracer =
      testing::spawn_tracer_ready({"run", recipe.string(), "--cgroup", name, "--json"}, out, err);
  ASSERT_GT(tracer, 0) << slurp(err);
  const auto joined = shell("sh -c 'echo $$ > " + (dir / "cgroup.procs").string() + "; exec " +
                            kSyscaller + " lseek 2000'");
  ASSERT_EQ(joined.exit_code, 0) << joined.err;
  const auto outside = shell(kSyscaller + " lseek 500");
  ASSERT_EQ(outside.exit_code, 0);
  ::kill(tracer, SIGINT);
  ASSERT_TRUE(testing::exited_ok(tracer)) << slurp(err);
  const std::string text = slurp(out);
  double probe = -1, group = -1;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(R"("stage":"count")") != std::string::npos)
      probe = json_number(line, "count");
    if (line.find(R"("counter":"syscalls:sys_enter_lseek")") != std::string::npos)
      group = json_number(line, "value");
  }
  EXPECT_EQ(probe, 2000) << text;
  EXPECT_EQ(group, 2000) << text;
  const auto bad = shell(kTracer + " run " + recipe.string() + " --cgroup " + name + " -p 1");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  // In the kernel a count would see every task (its programs do not test the cgroup): refused
  // at the stage, where auto placement kept it in user space above.
  const auto kernel = shell(kTracer + " run " + recipe.string() + " --cgroup " + name +
                            " --placement kernel -d 100ms");
  EXPECT_EQ(kernel.exit_code, 2) << kernel.err;
  EXPECT_NE(kernel.err.find("cg.toml:8:1: placement = \"kernel\": a cgroup target"),
            std::string::npos)
      << kernel.err;
}

}  // namespace
}  // namespace tracer
