// tracer run / check end to end: the CLI as a user runs it.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/cli.hpp"

namespace {

namespace fs = std::filesystem;

using Result = tracer::testing::CliResult;

Result run(const std::string& args) {
  return tracer::testing::run_tracer(args);
}

fs::path write_recipe(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(p) << text;
  return p;
}

std::string last_line(const std::string& s) {
  auto end = s.find_last_not_of('\n');
  auto start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1,
                  end - (start == std::string::npos ? 0 : start + 1) + 1);
}

const char* kGetppid = R"([recipe]
name = "getppid"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
ring = "4MiB"   # the whole 25000-call burst fits even when the consumer is slow (sanitizers)
[[stage]]
use = "count"
by = ["comm"]
)";

TEST(CliRun, JsonSummaryCountsExactlyTheCommandsCalls) {
  const auto recipe = write_recipe("getppid", kGetppid);
  const auto r =
      run("run " + recipe.string() + " --json -- " TRACER_SYSCALLER_PATH " getppid 25000");
  fs::remove(recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(last_line(r.out).rfind("{\"type\":\"summary\"", 0), 0U) << r.out;
  EXPECT_NE(last_line(r.out).find(R"("getppid":{"events":25000,"lost":0)"), std::string::npos)
      << last_line(r.out);
  // stdout is JSON lines only
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(line.starts_with("{") && line.ends_with("}")) << line;
  }
  EXPECT_NE(r.out.find("\"count\":25000"), std::string::npos) << r.out;
}

// With --json, stdout is tracer's JSON lines only: the command's own stdout goes to stderr.
TEST(CliRun, JsonStdoutCarriesNoCommandOutput) {
  const auto recipe = write_recipe("getppid_json", kGetppid);
  const auto r = run("run " + recipe.string() +
                     " --json -- sh -c 'echo command-says-hello; echo second line; exec " +
                     TRACER_SYSCALLER_PATH + " getppid 300'");
  fs::remove(recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  int n = 0;
  for (std::string line; std::getline(lines, line); ++n)
    EXPECT_TRUE(line.starts_with("{") && line.ends_with("}")) << "not JSON: " << line;
  EXPECT_GE(n, 2) << r.out;  // a count line and the summary
  EXPECT_EQ(r.out.find("command-says-hello"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("command-says-hello\nsecond line\n"), std::string::npos) << r.err;
  // The syscaller's 300 calls (sh makes one of its own before exec): counted and summarised;
  // the count rows (one per comm at the time of each call: sh's and the syscaller's) add up.
  std::smatch events;
  const std::string summary = last_line(r.out);
  ASSERT_TRUE(std::regex_search(summary, events, std::regex(R"("getppid":\{"events":(\d+),)")))
      << summary;
  long long counted = 0;
  const std::regex count_re(R"("count":(\d+)\})");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), count_re);
       it != std::sregex_iterator(); ++it)
    counted += std::stoll((*it)[1]);
  EXPECT_GE(std::stoi(events[1]), 300) << summary;
  EXPECT_EQ(std::stoll(events[1]), counted) << r.out;
}

TEST(CliRun, RecipeErrorsExitTwoWithPositions) {
  const auto recipe = write_recipe("bad", R"([recipe]
name = "bad"
[[probe]]
name = "x"
tracepont = "sched:sched_switch"
[[stage]]
use = "cout"
)");
  const auto r = run("check " + recipe.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(recipe.string() + ":5:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("tracepoint"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("count"), std::string::npos) << r.err << " (did you mean for the stage)";
  fs::remove(recipe);
}

// Seven mistakes of five kinds (a key, a stage option, an unknown stage, a tracepoint, a filter
// field, a software event, a symbol and a file) in one `tracer check`: each at its position,
// once (a recipe with five mistakes took three rounds to fix). The stages' fields are bound
// once the probes resolve: a misspelt `by` field is the next round's, and the only one left.
TEST(CliRun, CheckReportsEveryProblemOfARecipeAtOnce) {
  const auto recipe = write_recipe("many", R"([recipe]
name = "many"
[[probe]]
name = "a"
tracepoint = "syscalls:sys_enter_opnat"
[[probe]]
name = "b"
tracepoint = "syscalls:sys_enter_read"
filter = "nosuch == 3"
fitler = "fd == 3"
[[probe]]
name = "c"
software = "cpu-clok"
[[probe]]
name = "d"
uprobe = "/bin/true:nosuchfn"
[[probe]]
name = "e"
uprobe = "/bin/nosuch:main"
[[stage]]
use = "count"
by = ["nosuchfield"]
[[stage]]
use = "hist"
fied = "count"
[[stage]]
use = "nosuchstage"
)");
  const auto r = run("check " + recipe.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  const std::string at = recipe.string() + ":";
  for (const char* where :
       {"5:14: unknown tracepoint", "9:10: filter of probe 'b'", "10:1: unknown key 'fitler'",
        "13:12: probe 'c': unknown software", "16:10: elf: no function 'nosuchfn'",
        "19:10: probe: /bin/nosuch", "23:1: stage 'hist' needs option 'field'",
        "25:1: unknown option 'fied'", "27:7: unknown stage 'nosuchstage'"}) {
    EXPECT_NE(r.err.find(at + where), std::string::npos) << where << " in\n" << r.err;
  }
  // Said once each, where two checks find the same problem.
  const auto count = [&](const std::string& what) {
    std::size_t n = 0;
    for (auto p = r.err.find(what); p != std::string::npos; p = r.err.find(what, p + 1))
      ++n;
    return n;
  };
  EXPECT_EQ(count("unknown stage 'nosuchstage'"), 1U) << r.err;
  EXPECT_EQ(count("sys_enter_opnat'"), 1U) << r.err;
  // The second round: the probes fixed, the stages' own problems fixed, the field is left.
  const auto fixed = write_recipe("many2", R"([recipe]
name = "many"
[[probe]]
name = "b"
tracepoint = "syscalls:sys_enter_read"
filter = "fd == 3"
[[stage]]
use = "count"
by = ["nosuchfield"]
)");
  const auto r2 = run("check " + fixed.string());
  EXPECT_EQ(r2.exit_code, 2) << r2.err;
  EXPECT_NE(r2.err.find("nosuchfield"), std::string::npos) << r2.err;
  fs::remove(recipe);
  fs::remove(fixed);
}

TEST(CliRun, MissingTracepointSuggestsNearMatches) {
  const auto recipe = write_recipe("typo", R"([recipe]
name = "typo"
[[probe]]
name = "x"
tracepoint = "syscalls:sys_enter_opnat"
)");
  const auto r = run("check " + recipe.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("sys_enter_openat"), std::string::npos) << r.err;
  fs::remove(recipe);
}

// A filter naming a field its tracepoint lacks is found by check and by run, at the filter's
// position, with the field meant; the kernel itself would only say EINVAL.
TEST(CliRun, FilterOnAMisspeltFieldIsARecipeError) {
  const auto recipe = write_recipe("filter_typo", R"T([recipe]
name = "filter_typo"
[[probe]]
name = "sw"
tracepoint = "sched:sched_switch"
filter = "prev_pid > 0 && (prev_pidd == 1 || common_pid == 1)"
)T");
  for (const std::string cmd : {"check ", "run -d 1s "}) {
    const auto r = run(cmd + recipe.string());
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_NE(r.err.find(recipe.string() + ":6:10:"), std::string::npos) << cmd << r.err;
    EXPECT_NE(r.err.find("no field 'prev_pidd'"), std::string::npos) << cmd << r.err;
    EXPECT_NE(r.err.find("did you mean 'prev_pid'?"), std::string::npos) << cmd << r.err;
  }
  fs::remove(recipe);
}

// The kernel's generic fields (cpu, comm) and common_* fields are fields of every event.
TEST(CliRun, FilterOnCommonAndGenericFieldsPassesCheck) {
  const auto recipe = write_recipe("filter_ok", R"([recipe]
name = "filter_ok"
[[probe]]
name = "sw"
tracepoint = "sched:sched_switch"
filter = "(common_pid != 0 || cpu >= 0) && comm != \"nobody\" && next_comm ~ \"s*\""
)");
  const auto r = run("check " + recipe.string());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  fs::remove(recipe);
}

// A filter the kernel rejects although its fields exist (a string field compared with '<')
// fails the run at the filter's position, exit 2.
TEST(CliRun, FilterTheKernelRejectsIsReportedAtItsPosition) {
  const auto recipe = write_recipe("filter_rejected", R"([recipe]
name = "filter_rejected"
[[probe]]
name = "sw"
tracepoint = "sched:sched_switch"
filter = "prev_comm < 5"
)");
  const auto r = run("run -d 1s " + recipe.string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(recipe.string() + ":6:10:"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rejected"), std::string::npos) << r.err;
  fs::remove(recipe);
}

// run finds what check finds, with the same position and exit code: an unknown tracepoint and a
// uprobe on a symbol the binary lacks.
TEST(CliRun, RunReportsAMissingTracepointOrSymbolLikeCheck) {
  const auto tp = write_recipe("run_typo", R"([recipe]
name = "run_typo"
[[probe]]
name = "x"
tracepoint = "syscalls:sys_enter_opnat"
)");
  for (const std::string cmd : {"check ", "run -d 1s "}) {
    const auto r = run(cmd + tp.string());
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_NE(r.err.find(tp.string() + ":5:14:"), std::string::npos) << cmd << r.err;
    EXPECT_NE(r.err.find("sys_enter_openat"), std::string::npos) << cmd << r.err;
  }
  fs::remove(tp);
  const auto up = write_recipe("run_nosym", std::string(R"([recipe]
name = "run_nosym"
[[probe]]
name = "u"
uprobe = ")") + TRACER_UPROBE_TARGET + R"(:tracer_test_fnn"
)");
  for (const std::string cmd : {"check ", "run -d 1s "}) {
    const auto r = run(cmd + up.string());
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_NE(r.err.find(up.string() + ":5:10:"), std::string::npos) << cmd << r.err;
    EXPECT_NE(r.err.find("tracer_test_fn"), std::string::npos) << cmd << r.err;
  }
  fs::remove(up);
}

// A recipe file that is not there is a bad argument: exit 2, for check and run.
TEST(CliRun, MissingRecipeFileIsAUsageError) {
  for (const std::string cmd : {"check ", "run "}) {
    const auto r = run(std::string(cmd) + "/nonexistent/missing.toml");
    EXPECT_EQ(r.exit_code, 2) << cmd << r.err;
    EXPECT_NE(r.err.find("missing.toml"), std::string::npos) << cmd << r.err;
  }
}

// raw_syscalls carries a number in `id`; the `syscall` field names it: a count by syscall shows
// "getppid" with the command's exact number of calls.
TEST(CliRun, CountBySyscallNamesRawSyscallIds) {
  const auto recipe = write_recipe("by_syscall", R"([recipe]
name = "by_syscall"
[[probe]]
name = "sys"
tracepoint = "raw_syscalls:sys_enter"
ring = "4MiB"
[[stage]]
use = "count"
by = ["syscall"]
)");
  const auto r = run("run " + recipe.string() + " --json -- " TRACER_SYSCALLER_PATH " getppid 777");
  fs::remove(recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"("keys":\{"syscall":"getppid"\}[^\n]*"count":777\b)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"("keys":\{"syscall":"exit_group"\})")))
      << r.out;
  EXPECT_FALSE(std::regex_search(r.out, std::regex(R"("syscall":\d)"))) << r.out;
}

// A tracepoint glob is one probe per match ("name:event"), each its own perf event: the
// getppid probe among them counts the command's calls exactly, the others their own.
TEST(CliRun, TracepointGlobExpandsToOneProbePerMatch) {
  const auto recipe = write_recipe("glob", R"([recipe]
name = "glob"
[[probe]]
name = "g"
tracepoint = "syscalls:sys_enter_getp*"
ring = "1MiB"
[[stage]]
use = "count"
by = ["probe", "syscall"]
)");
  const auto r = run("run " + recipe.string() + " --json -- " TRACER_SYSCALLER_PATH " getppid 432");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string summary = last_line(r.out);
  EXPECT_NE(summary.find(R"("g:sys_enter_getppid":{"events":432,"lost":0)"), std::string::npos)
      << summary;
  EXPECT_NE(summary.find(R"("g:sys_enter_getpid":{"events":)"), std::string::npos) << summary;
  EXPECT_NE(summary.find(R"("g:sys_enter_getpgid":{"events":)"), std::string::npos) << summary;
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(
          R"("keys":\{"probe":"g:sys_enter_getppid","syscall":"getppid"\}[^\n]*"count":432\b)")))
      << r.out;
  const auto listed = run("check " + recipe.string());
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("g:sys_enter_getppid"), std::string::npos) << listed.out;
  fs::remove(recipe);

  const auto none = write_recipe("glob_none", R"([recipe]
name = "glob_none"
[[probe]]
name = "g"
tracepoint = "syscalls:sys_enter_getppidd*"
)");
  for (const std::string cmd : {"check ", "run -d 1s "}) {
    const auto n = run(cmd + none.string());
    EXPECT_EQ(n.exit_code, 2) << cmd << n.err;
    EXPECT_NE(n.err.find(none.string() + ":5:14:"), std::string::npos) << cmd << n.err;
    EXPECT_NE(n.err.find("no tracepoint matches 'syscalls:sys_enter_getppidd*'"), std::string::npos)
        << cmd << n.err;
    EXPECT_NE(n.err.find("syscalls:sys_enter_getppid"), std::string::npos) << cmd << n.err;
  }
  fs::remove(none);
}

// tracer check loads the recipe's BPF object (the verifier runs, nothing is attached) and checks
// the bpf-map stage's map and field names against the object's maps and their BTF.
TEST(CliRun, CheckNamesAMissingBpfMapAndField) {
  const std::string source = std::string(TRACER_TEST_DATA_DIR) + "/syscalls_by_pid.bpf.c";
  const auto recipe_with = [&](const std::string& stage) {
    return R"([recipe]
name = "maps"
[[probe]]
name = "sys_enter"
tracepoint = "raw_syscalls:sys_enter"
counting = true
bpf = "count_syscalls"
[bpf]
source = ")" +
           source + R"("
[[stage]]
use = "bpf-map"
)" + stage;
  };
  const auto map_typo = write_recipe("map_typo", recipe_with("map = \"count\"\n"));
  auto r = run("check " + map_typo.string());
  fs::remove(map_typo);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find(map_typo.string() + ":12:7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("did you mean 'counts'? maps: counts\n"), std::string::npos)
      << r.err << " (libbpf's internal .rodata map is not the user's)";

  const auto field_typo =
      write_recipe("field_typo", recipe_with("map = \"counts\"\nvalues = [\"cals\"]\n"));
  r = run("check " + field_typo.string());
  fs::remove(field_typo);
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("map 'counts' has no value field 'cals'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("calls (__u64)"), std::string::npos) << r.err;

  const auto good =
      write_recipe("maps_ok", recipe_with("map = \"counts\"\nvalues = [\"calls\"]\n"));
  r = run("check " + good.string());
  fs::remove(good);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

TEST(CliRun, SigintStopsCleanlyWithASummary) {
  const auto recipe = write_recipe("forever", kGetppid);
  const fs::path out = fs::temp_directory_path() / ("tracer_sigint_" + std::to_string(::getpid()));
  tracer::testing::ReadyPipe ready;
  const std::string fd = ready.fd_arg();
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(out.c_str(), "w", stdout);
    ::execl(TRACER_CLI_PATH, TRACER_CLI_PATH, "run", recipe.c_str(), "--json", "--ready-fd",
            fd.c_str(), nullptr);
    ::_exit(127);
  }
  ready.close_writer();
  EXPECT_TRUE(ready.wait()) << "tracer never said ready";
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(last_line(ss.str()).rfind("{\"type\":\"summary\"", 0), 0U) << ss.str();
  // Nothing of ours is left behind.
  std::ifstream events("/sys/kernel/tracing/uprobe_events");
  std::stringstream ev;
  ev << events.rdbuf();
  EXPECT_EQ(ev.str().find("tracer_" + std::to_string(pid) + "_"), std::string::npos);
  fs::remove(out);
  fs::remove(recipe);
}

// tracer run -p PID ends by itself when the process exits, as perf record -p does.
TEST(CliRun, APidTargetsExitEndsTheRun) {
  constexpr int kCalls = 1000;
  tracer::testing::ReadyPipe ready;
  const pid_t target = ::fork();
  if (target == 0) {
    if (!ready.wait())  // tracer is attached: the calls are all seen
      ::_exit(3);
    for (int i = 0; i < kCalls; ++i)
      ::getppid();
    ::_exit(0);
  }
  const auto recipe = write_recipe("pid_exit", kGetppid);
  const fs::path out = fs::temp_directory_path() / ("tracer_pid_" + std::to_string(::getpid()));
  const fs::path err = out.string() + ".err";
  const pid_t tracer = ::fork();
  if (tracer == 0) {
    std::freopen(out.c_str(), "w", stdout);
    std::freopen(err.c_str(), "w", stderr);
    const std::string pid = std::to_string(target);
    const std::string fd = ready.fd_arg();
    ::execl(TRACER_CLI_PATH, TRACER_CLI_PATH, "run", recipe.c_str(), "--json", "-p", pid.c_str(),
            "--ready-fd", fd.c_str(), nullptr);
    ::_exit(127);
  }
  ready.close_writer();
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 1000 && !exited; ++i) {  // 10 s
    exited = ::waitpid(tracer, &status, WNOHANG) == tracer;
    if (!exited)
      ::usleep(10 * 1000);
  }
  if (!exited) {
    ::kill(tracer, SIGINT);
    ::waitpid(tracer, &status, 0);
  }
  ::waitpid(target, nullptr, 0);
  auto slurp = [](const fs::path& p) {
    std::ifstream in(p);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string o = slurp(out), e = slurp(err);
  fs::remove(out);
  fs::remove(err);
  fs::remove(recipe);
  ASSERT_TRUE(exited) << "tracer still ran 9 s after its target exited\n" << e;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << e;
  EXPECT_NE(e.find("process " + std::to_string(target) + " exited"), std::string::npos) << e;
  EXPECT_NE(last_line(o).find(R"("getppid":{"events":1000,"lost":0)"), std::string::npos) << o;
}

// tracer stat -p PID ends by itself when the process exits, with its exact count, as perf stat
// -p does (-d 20s only bounds the test if it did not).
TEST(CliStat, APidTargetsExitEndsTheCount) {
  tracer::testing::ReadyPipe ready;
  const pid_t target = ::fork();
  if (target == 0) {
    if (!ready.wait())  // tracer is counting: the calls are all seen
      ::_exit(3);
    for (int i = 0; i < 700; ++i)
      ::getppid();
    ::_exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = run("stat -d 20s -e syscalls:sys_enter_getppid -p " + std::to_string(target) +
                     " --ready-fd " + ready.fd_arg());
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::waitpid(target, nullptr, 0);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_LT(secs, 10.0) << "ran on after the process exited";
  EXPECT_NE(r.err.find("process " + std::to_string(target) + " exited"), std::string::npos)
      << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\b700\s+syscalls:sys_enter_getppid)")))
      << r.err;
}

TEST(CliRun, ListStagesAndRecipes) {
  const auto stages = run("list stages");
  EXPECT_EQ(stages.exit_code, 0) << stages.err;
  for (const char* s :
       {"filter", "count", "hist", "lhist", "quantiles", "latency", "print", "jsonl", "csv"}) {
    EXPECT_NE(stages.out.find(s), std::string::npos) << s;
  }
  const auto recipes = run("list recipes");
  EXPECT_EQ(recipes.exit_code, 0) << recipes.err;
  EXPECT_NE(recipes.out.find("syscalls-by-process"), std::string::npos) << recipes.out;
}

}  // namespace
