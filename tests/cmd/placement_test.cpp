// In-kernel placement (engine/kernel/placement.cpp): the same recipe placed in the kernel and in
// user space gives the same tables on a live workload with known answers, intervals lose and
// double-count nothing, a full map is counted, and a stage that cannot go there says why.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using testing::exited_ok;
using testing::shell;
using testing::slurp;
using testing::spawn_to_file;

testing::CliResult tracer(const std::string& args) {
  return testing::run_tracer(args);
}

std::vector<std::string> lines_with(const std::string& text, const std::string& prefix) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix))
      out.push_back(line);
  }
  return out;
}

/// A JSON table line without its time (the runs differ in when, not in what).
std::string without_time(const std::string& line) {
  return std::regex_replace(line, std::regex(R"("time":[0-9]+,)"), "");
}

long long json_number(const std::string& text, const std::string& key) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\":([0-9]+)")))
    return std::stoll(m[1]);
  return -1;
}

using tracer::testing::kSyscaller;

/// Two children on the two CPUs, each making `n` lseek calls with offsets 0..n-1.
std::string two_lseekers(int n) {
  const std::string c = kSyscaller + " lseek " + std::to_string(n);
  return "sh -c '" + c + " 0 & " + c + " 1; wait'";
}

struct Shape {
  const char* name;
  const char* stage;  // the [[stage]] body
};

class SamePlacement : public ::testing::TestWithParam<Shape> {};

// Each aggregation the kernel can run gives, in the kernel and in user space, the same table
// (bucket by bucket for the histograms) over 2 x 3000 lseek calls on both CPUs.
TEST_P(SamePlacement, KernelAndUserGiveTheSameTable) {
  const Shape& shape = GetParam();
  const auto recipe =
      testing::write_temp(std::string("placement_") + shape.name + ".toml", std::string(R"([recipe]
name = "placement"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
)") + shape.stage + "\n");
  const auto plan = tracer("check --plan " + recipe.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("stage 2"), std::string::npos) << plan.out;
  EXPECT_EQ(plan.out.find("user"), std::string::npos) << plan.out;  // both stages in the kernel
  std::map<std::string, std::string> tables;
  for (const char* placement : {"kernel", "user"}) {
    const auto r = tracer("run " + recipe.string() + " --json --placement " + placement + " -- " +
                          two_lseekers(3000));
    ASSERT_EQ(r.exit_code, 0) << placement << ": " << r.err;
    const auto rows = lines_with(r.out, R"({"stage":")");
    ASSERT_EQ(rows.size(), 1U) << placement << ": " << r.out;
    tables[placement] = without_time(rows.front());
    const auto summary = lines_with(r.out, R"({"type":"summary")");
    ASSERT_EQ(summary.size(), 1U);
    // 6000 calls seen by the probe either way; in the kernel no record crossed a ring.
    EXPECT_NE(summary.front().find(R"("lseek":{"events":6000,"lost":0)"), std::string::npos)
        << placement << ": " << summary.front();
    if (std::string(placement) == "kernel") {
      EXPECT_NE(summary.front().find(R"("bytes":0)"), std::string::npos) << summary.front();
    }
  }
  EXPECT_EQ(tables["kernel"], tables["user"]);
}

INSTANTIATE_TEST_SUITE_P(Aggregations,
                         SamePlacement,
                         ::testing::Values(Shape{"count", R"(use = "count"
by = ["comm"])"},
                                           Shape{"sum", R"(use = "sum"
field = "offset"
by = ["comm"])"},
                                           Shape{"min", R"(use = "min"
field = "offset")"},
                                           Shape{"max", R"(use = "max"
field = "offset"
by = ["comm"])"},
                                           Shape{"avg", R"(use = "avg"
field = "offset")"},
                                           Shape{"hist", R"(use = "hist"
field = "offset")"},
                                           Shape{"lhist", R"(use = "lhist"
field = "offset"
min = 0
max = 3000
step = 250)"},
                                           Shape{"quantiles", R"(use = "quantiles"
field = "offset"
by = ["comm"]
quantiles = ["p10", "p50", "p90", "p99", "p999"])"},
                                           Shape{"stats", R"(use = "stats"
field = "offset")"},
                                           Shape{"stats_by_comm", R"(use = "stats"
field = "offset"
by = ["comm"])"}),
                         [](const ::testing::TestParamInfo<Shape>& p) {
                           return std::string(p.param.name);
                         });

// Known answers, not only agreement: the sum of 2 x (0 + 1 + ... + 2999).
TEST(KernelPlacement, SumIsExact) {
  const auto recipe = testing::write_temp("placement_sum.toml", R"([recipe]
name = "sum"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "sum"
field = "offset"
)");
  const auto r = tracer("run " + recipe.string() + " --json -- " + two_lseekers(3000));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = lines_with(r.out, R"({"stage":"sum")");
  ASSERT_EQ(rows.size(), 1U) << r.out;
  EXPECT_EQ(json_number(rows.front(), "sum"), 2LL * (2999LL * 3000 / 2)) << rows.front();
}

// The processes a generated program compares are read-only data set at load, not constants of
// its text: each run of a recipe in the kernel generated a new text (the command's pid, or
// tracer's own system-wide, in it), so every run compiled with clang (0.43-0.51 s a start
// here). Two runs for two commands, and two system-wide runs, compile one object each, and
// each counts its own command exactly.
TEST(KernelPlacement, EveryRunOfARecipeLoadsTheObjectItsFirstRunCompiled) {
  testing::TempDir dir;
  const auto recipe = testing::write_temp("placement_once.toml", R"([recipe]
name = "once"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["pid"]
)");
  const auto cache = dir.path() / "cache";
  const auto objects = [&] {
    std::size_t n = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(cache / "tracer/bpf", ec))
      n += e.path().extension() == ".o" ? 1 : 0;
    return n;
  };
  const auto run = [&](const std::string& args) {
    return shell("env XDG_CACHE_HOME=" + cache.string() + " " + TRACER_CLI_PATH + " run " +
                 recipe.string() + " --json " + args);
  };
  std::size_t before = 0;
  for (const int n : {300, 700}) {
    SCOPED_TRACE(n);
    const auto r = run(fmt::format("-- {} lseek {} 0", kSyscaller, n));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto rows = lines_with(r.out, R"({"stage":"count")");
    ASSERT_EQ(rows.size(), 1U) << r.out;
    EXPECT_EQ(json_number(rows.front(), "count"), n) << rows.front();
    if (n == 300)
      before = objects();
    else
      EXPECT_EQ(objects(), before) << "the second command's run compiled nothing";
  }
  EXPECT_GE(before, 1U);
  for (int i = 0; i < 2; ++i) {
    const auto r = run("--duration 200ms");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    if (i == 0)
      before = objects();
    else
      EXPECT_EQ(objects(), before) << "the second system-wide run compiled nothing";
  }
}

// `every`: the per-interval counts of a workload running across many intervals sum to N (two
// map generations flipped at each read: nothing lost or counted twice at the boundaries).
TEST(KernelPlacement, IntervalsSumToTheTotal) {
  const auto recipe = testing::write_temp("placement_every.toml", R"([recipe]
name = "every"
placement = "kernel"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
every = "100ms"
)");
  constexpr long long kManyCalls = 2000000;
  const auto r = tracer("run " + recipe.string() + " --json -- " + kSyscaller + " getppid " +
                        std::to_string(kManyCalls));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = lines_with(r.out, R"({"stage":"count")");
  long long total = 0;
  for (const auto& row : rows)
    total += std::max(0LL, json_number(row, "count"));
  EXPECT_GE(rows.size(), 3U) << r.out;  // the workload spans several intervals
  EXPECT_EQ(total, kManyCalls) << r.out;
}

// max_keys = 16 over 100 distinct keys: 16 rows, exact, and the 84 events of the keys that did
// not fit are reported lost for the probe.
TEST(KernelPlacement, AFullMapIsCountedAsLost) {
  const auto recipe = testing::write_temp("placement_full.toml", R"([recipe]
name = "full"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["offset"]
max_keys = 16
)");
  const auto r = tracer("run " + recipe.string() + " --json -- " + kSyscaller + " lseek 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = lines_with(r.out, R"({"stage":"count")");  // a line per row
  ASSERT_EQ(rows.size(), 16U) << r.out;
  for (const auto& row : rows)
    EXPECT_EQ(json_number(row, "count"), 1) << row;
  const auto summary = lines_with(r.out, R"({"type":"summary")");
  ASSERT_EQ(summary.size(), 1U);
  EXPECT_NE(summary.front().find(R"("lseek":{"events":100,"lost":84)"), std::string::npos)
      << summary.front();
}

// key_limit bounds a stage in user space: 16 rows, and the 84 events of the other keys counted by
// the stage (keys_dropped) and said, as the kernel's map_full is.
TEST(KernelPlacement, KeyLimitBoundsTheUserSpaceStage) {
  const auto recipe = testing::write_temp("placement_full_user.toml", R"([recipe]
name = "full"
placement = "user"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["offset"]
key_limit = 16
)");
  const auto r = tracer("run " + recipe.string() + " --json -- " + kSyscaller + " lseek 100");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = lines_with(r.out, R"({"stage":"count")");
  ASSERT_EQ(rows.size(), 16U) << r.out;
  for (const auto& row : rows)
    EXPECT_EQ(json_number(row, "count"), 1) << row;
  EXPECT_NE(r.out.find(R"("stages":{"count.keys_dropped":84})"), std::string::npos) << r.out;
  const auto text = tracer("run " + recipe.string() + " -- " + kSyscaller + " lseek 100");
  EXPECT_NE(text.err.find("count: 84 events of keys past the stage's key_limit were not counted"),
            std::string::npos)
      << text.err;
}

// A filter on a field no BPF program can read (the sample's time) keeps the pipeline in user
// space under "auto", with the reason; "kernel" refuses with exit 2, naming it.
TEST(KernelPlacement, AStageThatCannotGoThereSaysWhy) {
  const std::string body = R"(
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "filter"
expr = "time > 0"
[[stage]]
use = "count"
)";
  const auto autop = testing::write_temp("placement_auto.toml", "[recipe]\nname = \"a\"\n" + body);
  const auto plan = tracer("check --plan " + autop.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("count      user"), std::string::npos) << plan.out;
  EXPECT_NE(plan.out.find("field 'time'"), std::string::npos) << plan.out;
  const auto r = tracer("run " + autop.string() + " --json -- " + kSyscaller + " getppid 1000");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json_number(lines_with(r.out, R"({"stage":"count")").front(), "count"), 1000);

  const auto kernel = testing::write_temp(
      "placement_kernel.toml", "[recipe]\nname = \"k\"\nplacement = \"kernel\"\n" + body);
  const auto k = tracer("check " + kernel.string());
  EXPECT_EQ(k.exit_code, 2) << k.out << k.err;
  EXPECT_NE(k.err.find("placement = \"kernel\""), std::string::npos) << k.err;
  EXPECT_NE(k.err.find("field 'time'"), std::string::npos) << k.err;
  EXPECT_NE(k.err.find(kernel.string() + ":"), std::string::npos) << k.err;
}

// A stage after an aggregation sees the aggregation's events (an aggregation passes them on;
// configs/README.md, "Stages after an aggregation"): a second aggregation, a filter then an
// aggregation, an output of the events. Every placement gives the same rows, with the known
// answer over 2 x 3000 lseek calls (offsets 0..2999 on each CPU); such a pipeline runs in user
// space with the stage and the reason in check --plan, and placement = "kernel" is an error at
// that stage. An output of the tables alone stays in the kernel.
TEST(KernelPlacement, StagesAfterAnAggregationGiveTheSameRowsOnEveryPlacement) {
  struct Chain {
    const char* name;
    const char* stages;
    int blocking_line;  // the stage kept in user space (0: the pipeline stays in the kernel)
    std::vector<std::string> rows;  // known rows (without time)
    long long events = 0;           // event lines an output writes
  };
  const std::string head = R"([recipe]
name = "chain"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
)";
  const std::string sum = std::to_string(2LL * 2999 * 3000 / 2);
  const std::vector<Chain> chains = {
      {"count_then_sum",
       "[[stage]]\nuse = \"count\"\n[[stage]]\nuse = \"sum\"\nfield = \"offset\"\n",
       9,
       {R"({"stage":"count","interval":0,"keys":{},"count":6000})",
        R"({"stage":"sum","interval":0,"keys":{},"sum":)" + sum + "}"}},
      {"count_filter_count",
       "[[stage]]\nuse = \"count\"\n[[stage]]\nuse = \"filter\"\nexpr = \"offset < 1000\"\n"
       "[[stage]]\nuse = \"max\"\nfield = \"offset\"\n",
       9,
       {R"({"stage":"count","interval":0,"keys":{},"count":6000})",
        R"({"stage":"max","interval":0,"keys":{},"max":999})"}},
      {"min_then_lhist_then_output",
       "[[stage]]\nuse = \"min\"\nfield = \"offset\"\n[[stage]]\nuse = \"lhist\"\n"
       "field = \"offset\"\nmin = 0\nmax = 3000\nstep = 1500\n[[stage]]\nuse = \"jsonl\"\n",
       10,
       {R"({"stage":"min","interval":0,"keys":{},"min":0})",
        R"({"stage":"lhist","interval":0,"keys":{},"count":6000,"sum":)" + sum +
            R"(,"buckets":[{"lo":0,"hi":1500,"count":3000},{"lo":1500,"hi":3000,"count":3000}]})"}},
      {"count_then_events",
       "[[stage]]\nuse = \"count\"\n[[stage]]\nuse = \"jsonl\"\nevents = true\n"
       "fields = [\"offset\"]\n",
       9,
       {R"({"stage":"count","interval":0,"keys":{},"count":6000})"},
       6000},
      {"count_then_tables",
       "[[stage]]\nuse = \"count\"\n[[stage]]\nuse = \"jsonl\"\n",
       0,
       {R"({"stage":"count","interval":0,"keys":{},"count":6000})"}},
  };
  for (const auto& c : chains) {
    SCOPED_TRACE(c.name);
    const auto recipe =
        testing::write_temp(std::string("placement_chain_") + c.name + ".toml", head + c.stages);
    const auto plan = tracer("check --plan " + recipe.string());
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    const auto forced = tracer("run " + recipe.string() + " --placement kernel -- /bin/true");
    if (c.blocking_line == 0) {
      EXPECT_NE(plan.out.find("count      kernel"), std::string::npos) << plan.out;
      EXPECT_NE(plan.out.find("reads the aggregation's tables"), std::string::npos) << plan.out;
      EXPECT_EQ(forced.exit_code, 0) << forced.err;
    } else {
      EXPECT_NE(plan.out.find("an aggregation passes its events on"), std::string::npos)
          << plan.out;
      EXPECT_EQ(forced.exit_code, 2) << forced.err;
      EXPECT_NE(forced.err.find(recipe.string() + ":" + std::to_string(c.blocking_line) + ":1:"),
                std::string::npos)
          << forced.err;
    }
    for (const char* placement : {"auto", "user"}) {
      const auto r = tracer("run " + recipe.string() + " --json --placement " + placement + " -- " +
                            two_lseekers(3000));
      ASSERT_EQ(r.exit_code, 0) << placement << ": " << r.err;
      std::vector<std::string> rows;
      for (const auto& l : lines_with(r.out, R"({"stage":")"))
        rows.push_back(without_time(l));
      std::sort(rows.begin(), rows.end());
      auto want = c.rows;
      std::sort(want.begin(), want.end());
      EXPECT_EQ(rows, want) << placement;
      EXPECT_EQ(static_cast<long long>(lines_with(r.out, R"({"offset":)").size()), c.events)
          << placement;
    }
  }
}

// System-wide, under noise: the in-kernel count by pid gives each child exactly its calls, on
// both CPUs, and bpftrace's count of the same tracepoint in the same window agrees per pid.
TEST(KernelPlacement, CountByPidMatchesBpftrace) {
  if (!fs::exists("/usr/bin/bpftrace"))
    GTEST_SKIP() << "bpftrace is not installed (apt-get install bpftrace): it is the reference";
  const auto recipe = testing::write_temp("placement_pid.toml", R"([recipe]
name = "by-pid"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
by = ["pid"]
)");
  const auto bt = testing::write_temp(
      "placement_pid.bt", std::string(testing::kBpftraceReady) +
                              "tracepoint:syscalls:sys_enter_getppid { @[pid] = count(); }\n");
  const auto tracer_out = testing::write_temp("placement_pid_tracer.out", "");
  const auto tracer_err = testing::write_temp("placement_pid_tracer.err", "");
  const auto bt_out = testing::write_temp("placement_pid_bt.out", "");
  // Both stop at their SIGINT once the workload is done (a fixed window could end before it on a
  // busy machine).
  const pid_t t = spawn_to_file({TRACER_CLI_PATH, "run", recipe.string(), "--json", "-v"},
                                tracer_out, tracer_err);
  const pid_t b = spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out);
  ASSERT_TRUE(testing::wait_for_text(tracer_err, "tracer: rings:")) << slurp(tracer_err);
  ASSERT_TRUE(testing::wait_for_text(bt_out, testing::kBpftraceReadyLine)) << slurp(bt_out);
  const auto w = shell(kSyscaller + " getppid 20000 0 & echo $!; " + kSyscaller +
                       " getppid 12345 1 & echo $!; wait");
  ::kill(t, SIGINT);
  ::kill(b, SIGINT);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  ASSERT_EQ(testing::exit_code_within(t, 30), 0)
      << "tracer, after its SIGINT: " << slurp(tracer_err);
  // bpftrace prints its maps as it exits.
  ASSERT_NE(testing::exit_code_within(b, testing::kBpftraceExitSeconds), -2)
      << "bpftrace did not end within " << testing::kBpftraceExitSeconds << " s of its SIGINT";
  std::istringstream pids(w.out);
  std::string a_pid, b_pid;
  pids >> a_pid >> b_pid;
  const std::string ours = slurp(tracer_out), theirs = slurp(bt_out);
  EXPECT_NE(ours.find(R"("keys":{"pid":)" + a_pid + R"(},"count":20000})"), std::string::npos)
      << ours;
  EXPECT_NE(ours.find(R"("keys":{"pid":)" + b_pid + R"(},"count":12345})"), std::string::npos)
      << ours;
  EXPECT_NE(theirs.find("@[" + a_pid + "]: 20000"), std::string::npos) << theirs;
  EXPECT_NE(theirs.find("@[" + b_pid + "]: 12345"), std::string::npos) << theirs;
}

// stats, system-wide by pid, in the kernel and in user space beside bpftrace's stats() of the
// same tracepoint: each of two children (one per CPU) gets its own count, total and (integer)
// average as bpftrace has them, and the known min, max, mean and spread of 0..n-1, on both
// placements alike.
TEST(KernelPlacement, StatsByPidMatchBpftraceOnBothPlacements) {
  if (!fs::exists("/usr/bin/bpftrace"))
    GTEST_SKIP() << "bpftrace is not installed (apt-get install bpftrace): it is the reference";
  const std::string fd = std::to_string(testing::own_fd());
  const auto recipe = testing::write_temp("placement_stats.toml", R"([recipe]
name = "stats"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == )" + fd + R"("
[[stage]]
use = "stats"
field = "offset"
by = ["pid"]
)");
  const auto bt = testing::write_temp("placement_stats.bt",
                                      std::string(testing::kBpftraceReady) +
                                          "tracepoint:syscalls:sys_enter_lseek /args->fd == " + fd +
                                          "/ { @[pid] = stats(args->offset); }\n");
  const auto bt_out = testing::write_temp("placement_stats_bt.out", "");
  std::map<std::string, std::string> outs;
  std::vector<std::string> errs;
  std::vector<pid_t> tracers;
  for (const char* placement : {"kernel", "user"}) {
    const auto out = testing::write_temp(std::string("placement_stats_") + placement + ".out", "");
    const auto err = testing::write_temp(std::string("placement_stats_") + placement + ".err", "");
    // No duration: each runs until the workload is done (a slow start, bpftrace's under
    // emulation, would otherwise eat a fixed window), then stops at its SIGINT.
    tracers.push_back(spawn_to_file(
        {TRACER_CLI_PATH, "run", recipe.string(), "--json", "-v", "--placement", placement}, out,
        err));
    outs[placement] = out.string();
    errs.push_back(err.string());
  }
  const pid_t b = spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out);
  for (const auto& err : errs)
    ASSERT_TRUE(testing::wait_for_text(err, "tracer: rings:")) << slurp(err);
  ASSERT_TRUE(testing::wait_for_text(bt_out, testing::kBpftraceReadyLine)) << slurp(bt_out);
  constexpr long long kN = 4000, kM = 2500;
  const auto w = shell("SYSCALLER_FD=" + fd + " " + kSyscaller + " lseek " + std::to_string(kN) +
                       " 0 & echo $!; SYSCALLER_FD=" + fd + " " + kSyscaller + " lseek " +
                       std::to_string(kM) + " 1 & echo $!; wait");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  for (const pid_t t : tracers) {
    ::kill(t, SIGINT);
    ASSERT_TRUE(exited_ok(t));
  }
  ::kill(b, SIGINT);
  (void)exited_ok(b);  // bpftrace prints its maps as it exits
  std::istringstream pids(w.out);
  std::string a_pid, b_pid;
  pids >> a_pid >> b_pid;
  const std::string theirs = slurp(bt_out);
  std::map<std::string, std::string> rows;  // placement -> its rows
  for (const auto& [pid, n] : {std::pair{a_pid, kN}, std::pair{b_pid, kM}}) {
    const long long total = n * (n - 1) / 2;
    // bpftrace: "@[PID]: count N, average A, total T" (the average an integer division).
    EXPECT_NE(
        theirs.find(fmt::format("@[{}]: count {}, average {}, total {}", pid, n, total / n, total)),
        std::string::npos)
        << theirs;
    const auto d = static_cast<double>(n);
    const double spread = std::sqrt(((d * d) - 1) / 12);
    for (const char* where : {"kernel", "user"}) {
      SCOPED_TRACE(where);
      const std::string ours = slurp(outs[where]);
      std::smatch m;
      ASSERT_TRUE(std::regex_search(
          ours, m,
          std::regex(
              R"("keys":\{"pid":)" + pid +
              R"(\},"count":([0-9]+),"sum":([0-9]+),"min":([0-9]+),"max":([0-9]+),"mean":([0-9.e+-]+),"stddev":([0-9.e+-]+)\})")))
          << ours;
      EXPECT_EQ(std::stoll(m[1]), n);
      EXPECT_EQ(std::stoll(m[2]), total);
      EXPECT_EQ(std::stoll(m[3]), 0);
      EXPECT_EQ(std::stoll(m[4]), n - 1);
      EXPECT_DOUBLE_EQ(std::stod(m[5]), static_cast<double>(total) / static_cast<double>(n));
      EXPECT_NEAR(std::stod(m[6]), spread, spread * 1e-9);
      rows[where] += m[0].str();
    }
  }
  EXPECT_EQ(rows["kernel"], rows["user"]);
}

// A sampling event (cpu-clock) runs its own program in the kernel (BPF_PROG_TYPE_PERF_EVENT on
// each CPU's event, returning 0 so no sample is written to the ring): run beside the same recipe
// in user space while a busy program spins 1 s on one CPU, both count its samples alike (two
// events have their own timers: alike, not equal). A software event that does not run a program
// at its samples (page-faults) stays in user space with the reason.
TEST(KernelPlacement, ClockSamplesCountInTheKernelAsInUserSpace) {
  const std::string body = R"([[probe]]
name = "cpu"
software = "cpu-clock"
freq = 999
[[stage]]
use = "filter"
expr = "comm == \"tracer_busy_loo\""
[[stage]]
use = "count"
by = ["comm"]
)";
  std::map<std::string, fs::path> outs;
  std::vector<pid_t> runs;
  for (const std::string placement : {"kernel", "user"}) {
    const auto recipe = testing::write_temp(
        "clock_" + placement + ".toml",
        "[recipe]\nname = \"clock\"\nplacement = \"" + placement + "\"\n" + body);
    outs[placement] = testing::write_temp("clock_" + placement + ".out", "");
    const auto err = testing::write_temp("clock_" + placement + ".err", "");
    runs.push_back(testing::spawn_tracer_ready({"run", recipe.string(), "--json", "-d", "4s"},
                                               outs[placement], err));
    ASSERT_GT(runs.back(), 0) << slurp(err);
  }
  // The loop's own CPU time bounds the samples (a loaded machine gives it less than its 1 s).
  const pid_t loop = spawn_to_file({"/usr/bin/taskset", "-c", "0", TRACER_BUSY_LOOP, "1000"},
                                   testing::write_temp("clock_loop.out", ""));
  int status = 0;
  rusage ru{};
  ASSERT_EQ(::wait4(loop, &status, 0, &ru), loop);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  for (const pid_t pid : runs)
    ASSERT_TRUE(exited_ok(pid));
  std::map<std::string, long long> counts;
  for (const auto& [placement, out] : outs) {
    const std::string text = slurp(out);
    const auto rows = lines_with(text, R"({"stage":"count")");
    ASSERT_EQ(rows.size(), 1U) << placement << ": " << text;
    counts[placement] = json_number(rows.front(), "count");
    if (placement == "kernel") {
      // The samples stayed in the kernel: the ring carried at most a few other records
      // (throttling), not the thousands of samples (over 30 bytes each).
      const auto summary = lines_with(text, R"({"type":"summary")");
      ASSERT_EQ(summary.size(), 1U);
      EXPECT_NE(summary.front().find(R"("lost":0,)"), std::string::npos) << summary.front();
      EXPECT_LT(json_number(summary.front(), "bytes"), 1024) << summary.front();
      EXPECT_GE(json_number(summary.front(), "events"), counts[placement]) << summary.front();
    }
  }
  // 999 Hz of the loop's CPU time (up to 1 s; less when the machine is busy): at least a quarter
  // of what that time gives (throttling and the start and end of the loop take some, and a
  // guest on a busy host has its timers fire late: 47 % there). Kernel and user agree below.
  EXPECT_GE(static_cast<double>(counts["kernel"]), 0.25 * 999 * cpu)
      << counts["user"] << " cpu " << cpu;
  EXPECT_GE(cpu, 0.05) << "the loop ran";
  EXPECT_LE(std::llabs(counts["kernel"] - counts["user"]) * 10,
            std::max(counts["kernel"], counts["user"]))
      << counts["kernel"] << " vs " << counts["user"];

  const auto faults = testing::write_temp("faults.toml", R"([recipe]
name = "faults"
[[probe]]
name = "faults"
software = "page-faults"
[[stage]]
use = "count"
by = ["comm"]
)");
  const auto plan = tracer("check --plan " + faults.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("user    probe 'faults' is the software event 'page-faults'"),
            std::string::npos)
      << plan.out;
}

/// Probes and stages of a count of the test programs' lseek calls by pid.
const std::string kLseekCountByPid = R"([[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
use = "count"
by = ["pid"]
)";

// Per-event delivery (a user-placed count) of a system-wide tracepoint through either BPF
// channel: the BPF ring buffer (the default) and the perf rings give each of two children on
// the two CPUs exactly its calls, nothing lost, and `-v` names the channel chosen.
TEST(DeliveryChannel, RingBufferAndPerfRingsGiveExactCountsPerProcess) {
  const auto recipe = testing::write_temp(
      "channel_pid.toml",
      "[recipe]\nname = \"channel\"\nplacement = \"user\"\n" + kLseekCountByPid);
  const std::string c = kSyscaller + " lseek 20000";
  for (const std::string channel : {"ringbuf", "perf"}) {
    SCOPED_TRACE(channel);
    const auto out = testing::write_temp("channel_" + channel + ".out", "");
    const auto err = testing::write_temp("channel_" + channel + ".err", "");
    const pid_t t = testing::spawn_tracer_ready(
        {"run", recipe.string(), "--json", "-d", "3s", "--channel", channel}, out, err);
    ASSERT_GT(t, 0) << slurp(err);
    const auto w = shell(c + " 0 & echo $!; " + c + " 1 & echo $!; wait");
    ASSERT_EQ(w.exit_code, 0) << w.err;
    ASSERT_TRUE(exited_ok(t)) << slurp(err);
    std::istringstream pids(w.out);
    std::string a_pid, b_pid;
    pids >> a_pid >> b_pid;
    const std::string ours = slurp(out);
    EXPECT_NE(ours.find(R"("keys":{"pid":)" + a_pid + R"(},"count":20000})"), std::string::npos)
        << ours;
    EXPECT_NE(ours.find(R"("keys":{"pid":)" + b_pid + R"(},"count":20000})"), std::string::npos)
        << ours;
    EXPECT_NE(ours.find(R"("lseek":{"events":)"), std::string::npos) << ours;
    EXPECT_NE(ours.find(R"("lost":0,)"), std::string::npos) << ours;
    EXPECT_NE(slurp(err).find(channel == "ringbuf" ? "through a BPF ring buffer"
                                                   : "through a BPF perf channel"),
              std::string::npos)
        << slurp(err);
  }
}

// Latency pairing placed in the kernel and in user space: the same pairs (6000 lseek
// entries/exits of two children on both CPUs, paired by thread), counted by comm.
TEST(KernelPlacement, LatencyPairsTheSameInTheKernelAndInUserSpace) {
  const auto recipe = testing::write_temp("placement_latency.toml", R"([recipe]
name = "latency"
[[probe]]
name = "enter"
tracepoint = "syscalls:sys_enter_lseek"
[[probe]]
name = "exit"
tracepoint = "syscalls:sys_exit_lseek"
[[stage]]
use = "latency"
entry = "enter"
exit = "exit"
key = "tid"
[[stage]]
use = "count"
by = ["comm"]
)");
  const auto plan = tracer("check --plan " + recipe.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(plan.out.find("user"), std::string::npos) << plan.out;
  std::map<std::string, std::string> tables;
  for (const char* placement : {"kernel", "user"}) {
    const auto r = tracer("run " + recipe.string() + " --json --placement " + placement + " -- " +
                          two_lseekers(3000));
    ASSERT_EQ(r.exit_code, 0) << placement << ": " << r.err;
    const auto rows = lines_with(r.out, R"({"stage":"count")");
    ASSERT_EQ(rows.size(), 1U) << placement << ": " << r.out;
    tables[placement] = without_time(rows.front());
    EXPECT_NE(rows.front().find(R"("count":6000)"), std::string::npos) << rows.front();
    const auto summary = lines_with(r.out, R"({"type":"summary")");
    ASSERT_EQ(summary.size(), 1U);
    EXPECT_EQ(json_number(summary.front(), "latency.paired"), 6000) << summary.front();
  }
  EXPECT_EQ(tables["kernel"], tables["user"]);
}

// A command that forks a child making calls, waits for it, then makes its own (exec, the same
// process): in the kernel, the command's events take its array slot (no hashing), the child's
// the hash; the counts by pid are those of user space.
TEST(KernelPlacement, CountByPidOfACommandAndItsChild) {
  const auto recipe =
      testing::write_temp("placement_own.toml", "[recipe]\nname = \"own\"\n" + kLseekCountByPid);
  for (const char* placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r =
        tracer("run " + recipe.string() + " --json --placement " + placement + " -- sh -c '" +
               kSyscaller + " lseek 300; exec " + kSyscaller + " lseek 500'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::multiset<long long> counts;
    for (const auto& row : lines_with(r.out, R"({"stage":"count")"))
      counts.insert(json_number(row, "count"));
    EXPECT_EQ(counts, (std::multiset<long long>{300, 500})) << r.out;
  }
}

}  // namespace
}  // namespace tracer
