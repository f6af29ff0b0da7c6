// tracer run / check end to end: the CLI as a user runs it.
#include <gtest/gtest.h>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>
#include <csignal>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/cli.hpp"
#include "support/scratch_path.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;

using Result = tracer::testing::CliResult;

Result run(const std::string& args) {
  return tracer::testing::run_tracer(args);
}

fs::path write_recipe(const std::string& name, const std::string& text) {
  const fs::path p =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
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

// The terminal (the issue "boundaries", item 9), under a pseudo-terminal (script): the live
// status line counts what the in-kernel path counts (its hits, not 0), and is erased before the
// table is printed (never glued to it); with a command target, the command owns the terminal
// and there is no status line to land inside.
TEST(CliRun, TheStatusLineCountsTheKernelsEventsAndNeverTouchesOtherOutput) {
  if (::access("/usr/bin/script", X_OK) != 0)
    GTEST_SKIP() << "needs script (util-linux) for a pseudo-terminal";
  const fs::path recipe = write_recipe("status", R"([recipe]
name = "status"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
[[stage]]
use = "count"
by = ["probe"]
)");
  const std::string tracer = TRACER_CLI_PATH;
  const std::string caller = TRACER_SYSCALLER_PATH;
  // System-wide for 1.5 s while the syscaller makes 5,000 calls (placed in the kernel: none is
  // delivered to user space), started once tracer says it is ready (a fixed head start lost the
  // calls when a busy machine made the start slower).
  const tracer::testing::TempDir dir;
  const std::string ready = (dir.path() / "ready").string();
  const auto r = tracer::testing::shell(
      "(for i in $(seq 200); do grep -q ready " + ready + " 2>/dev/null && break; sleep 0.05; " +
      "done; " + caller + " lseek 5000 >/dev/null) & script -q -e -c '" + tracer + " run " +
      recipe.string() + " -d 1500ms --ready-fd 3 3>" + ready + "' /dev/null; wait");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // The last status line before the table: at least the 5,000 calls (others may add theirs).
  std::string shown;
  const std::regex status(R"(\]\s+\d+ events/s\s+(\d+) events)");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), status);
       it != std::sregex_iterator(); ++it)
    shown = (*it)[1];
  ASSERT_FALSE(shown.empty()) << r.out;
  EXPECT_GE(std::stoull(shown), 5000u) << r.out;
  // Erased (carriage return, erase to the end of line) right before the table's first line.
  EXPECT_NE(r.out.find("\r\033[Kcount by probe:"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("lostcount"), std::string::npos) << r.out;
  // A command target: no status line at all, the command's output on lines of its own.
  const auto c = tracer::testing::shell("script -q -e -c '" + tracer + " run " + recipe.string() +
                                        " -- /bin/sh -c \"sleep 0.6; echo hello-from-command\"' "
                                        "/dev/null");
  EXPECT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_EQ(c.out.find("events/s"), std::string::npos) << c.out;
  EXPECT_TRUE(std::regex_search(c.out, std::regex("(^|\n)hello-from-command\r?\n"))) << c.out;
  fs::remove(recipe);
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
  const fs::path out = tracer::testing::scratch_path("tracer_sigint_" + std::to_string(::getpid()));
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
  const fs::path out = tracer::testing::scratch_path("tracer_pid_" + std::to_string(::getpid()));
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

// A multi-threaded -p target: the threads it has when tracer attaches share each CPU's ring
// (SET_OUTPUT after the ring's mmap: before, the start failed with EINVAL), and the thread and
// child it creates while traced are traced too, with their creation unharmed (a probe-PMU
// uprobe cannot be inherited: the target's clone() failed; task targets place uprobes through
// tracefs). 3 threads at attach, then a new thread and a child: 5 x 1,000 getppid calls, exactly,
// through a uprobe on libc's getppid and through the system call's tracepoint.
TEST(CliRun, AMultiThreadedPidTargetIsTracedInEveryThreadAndWhatItCreates) {
  constexpr int kCalls = 1000;
  for (const char* probe :
       {R"(uprobe = "libc:getppid")", R"(tracepoint = "syscalls:sys_enter_getppid")"}) {
    SCOPED_TRACE(probe);
    tracer::testing::ReadyPipe ready;
    const pid_t target = ::fork();
    if (target == 0) {
      static std::atomic<bool> go{false};
      const auto calls = [](void*) -> void* {
        while (!go.load())
          ::usleep(1000);
        for (int i = 0; i < kCalls; ++i)
          ::getppid();
        return nullptr;
      };
      std::array<pthread_t, 2> threads{};
      for (auto& t : threads) {
        if (::pthread_create(&t, nullptr, calls, nullptr) != 0)
          ::_exit(4);
      }
      if (!ready.wait())  // tracer is attached to the 3 threads
        ::_exit(3);
      go = true;
      calls(nullptr);
      for (auto& t : threads)
        ::pthread_join(t, nullptr);
      pthread_t late{};  // created while traced
      if (::pthread_create(&late, nullptr, calls, nullptr) != 0)
        ::_exit(5);
      ::pthread_join(late, nullptr);
      const pid_t child = ::fork();
      if (child < 0)
        ::_exit(6);
      if (child == 0) {
        calls(nullptr);
        ::_exit(0);
      }
      int st = 0;
      ::waitpid(child, &st, 0);
      ::_exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 7);
    }
    const auto recipe = write_recipe("pid_threads", std::string(R"([recipe]
name = "threads"
[[probe]]
name = "getppid"
)") + probe + "\n");
    const fs::path out =
        tracer::testing::scratch_path("tracer_threads_" + std::to_string(::getpid()));
    const pid_t tracer = ::fork();
    if (tracer == 0) {
      std::freopen(out.c_str(), "w", stdout);
      std::freopen((out.string() + ".err").c_str(), "w", stderr);
      const std::string pid = std::to_string(target);
      const std::string fd = ready.fd_arg();
      ::execl(TRACER_CLI_PATH, TRACER_CLI_PATH, "run", recipe.c_str(), "--json", "-p", pid.c_str(),
              "--ready-fd", fd.c_str(), nullptr);
      ::_exit(127);
    }
    ready.close_writer();
    int target_status = 0, status = 0;
    ::waitpid(target, &target_status, 0);
    ::waitpid(tracer, &status, 0);  // it ends with its target
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    std::ifstream err_in(out.string() + ".err");
    std::stringstream es;
    es << err_in.rdbuf();
    fs::remove(out);
    fs::remove(out.string() + ".err");
    fs::remove(recipe);
    ASSERT_TRUE(WIFEXITED(target_status));
    EXPECT_EQ(WEXITSTATUS(target_status), 0) << "the target could not create its thread or child";
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << es.str();
    EXPECT_NE(last_line(ss.str()).find(R"("getppid":{"events":5000,"lost":0)"), std::string::npos)
        << ss.str() << es.str();
  }
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

}  // namespace
