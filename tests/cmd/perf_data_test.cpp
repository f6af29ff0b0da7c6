// tracer run ... -o FILE.data / --perf-data: tracer writes, the real perf reads. Every test also
// asserts that perf says nothing on stderr about our files.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "support/perf_judge.hpp"
#include "support/perf_tool.hpp"
#include "support/test_paths.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::testing::lines_of;
using tracer::testing::shell;
using tracer::testing::temp_path;

struct Files {
  std::vector<std::string> paths;
  std::string add(const std::string& stem, const std::string& ext) {
    paths.push_back(temp_path(stem, ext));
    return paths.back();
  }
  std::string recipe(const std::string& stem, const std::string& text) {
    const auto p = add(stem, ".toml");
    std::ofstream(p) << text;
    return p;
  }
  ~Files() {
    for (const auto& p : paths)
      fs::remove(p);
  }
};

using tracer::testing::kTracer;

/// `perf evlist` output without its "# Tip: ..." comment lines.
std::string evlist_names(const std::string& data) {
  std::string names;
  for (const auto& l : lines_of(shell("perf evlist -i " + data).out)) {
    if (!l.starts_with("#"))
      names += l + "\n";
  }
  return names;
}

const char* kLseek = R"([recipe]
name = "lseek"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
)";

// A tracepoint with fields: perf script prints exactly the command's 7 calls with their values.
TEST(CliPerfData, TracepointFieldsReadByPerfScript) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("lseek", kLseek);
  const auto data = f.add("lseek", ".data");
  const auto run = shell(kTracer + " run " + recipe + " -o " + data + " -- " +
                         TRACER_SYSCALLER_PATH + " lseek 7");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "");  // -o FILE.data is not a text output
  const auto script = shell("perf script -i " + data);
  EXPECT_EQ(script.exit_code, 0) << script.err;
  EXPECT_EQ(script.err, "");
  const auto lines = lines_of(script.out);
  ASSERT_EQ(lines.size(), 7U) << script.out;
  const std::regex line(
      R"(^ *tracer_test_sys +([0-9]+) +\[[0-9]+\] +[0-9]+\.[0-9]+: +lseek: +fd: 0x00003039, )"
      R"(offset: 0x([0-9a-f]+), whence: 0x00000001$)");
  for (std::size_t i = 0; i < lines.size(); ++i) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[i], m, line)) << lines[i];
    EXPECT_EQ(std::stoul(m[2].str(), nullptr, 16), i) << lines[i];
  }
  // The probe's name is the event's name; perf evlist agrees.
  EXPECT_EQ(evlist_names(data), "lseek\n");
}

// Pipe mode: the stream goes through a pipe straight into perf script.
TEST(CliPerfData, PipeModeThroughPerfScript) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("lseek_pipe", kLseek);
  const auto err = f.add("lseek_pipe_err", ".txt");
  const auto script = shell(kTracer + " run " + recipe + " --perf-data - -- " +
                            TRACER_SYSCALLER_PATH + " lseek 5 2>" + err + " | perf script -i -");
  EXPECT_EQ(script.exit_code, 0) << script.err;
  EXPECT_EQ(script.err, "");
  const auto lines = lines_of(script.out);
  ASSERT_EQ(lines.size(), 5U) << script.out;
  for (const auto& l : lines)
    EXPECT_NE(l.find("lseek: fd: 0x00003039"), std::string::npos) << l;
  std::ifstream in(err);
  const std::string tracer_err((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(tracer_err.find("lseek"), std::string::npos) << tracer_err;  // summary on stderr
}

// A cpu-clock profile with callchains: perf report names the busy function at the top, and the
// callchain through tracer_busy_outer and main (user symbols from MMAP2 records).
TEST(CliPerfData, ProfileTopEntryIsTheBusyFunction) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("profile", R"([recipe]
name = "profile"
[[probe]]
name = "cpu"
software = "cpu-clock"
freq = 999
callchain = true
)");
  const auto data = f.add("profile", ".data");
  const auto run = shell(kTracer + " run " + recipe + " --perf-data " + data + " -- " +
                         TRACER_BUSY_LOOP + " 600");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto report = shell("perf report --stdio --no-children --sort sym -g none -i " + data);
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_EQ(report.err, "");
  std::string top;
  for (const auto& l : lines_of(report.out)) {
    if (!l.starts_with("#")) {
      top = l;
      break;
    }
  }
  EXPECT_NE(top.find("[.] tracer_busy_spin"), std::string::npos) << report.out;
  const std::regex percent(R"(^ *([0-9.]+)%)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(top, m, percent)) << top;
  EXPECT_GT(std::stod(m[1].str()), 50.0) << top;
  const auto callers = shell("perf report --stdio --no-children --sort sym -G -i " + data);
  EXPECT_NE(callers.out.find("tracer_busy_outer"), std::string::npos) << callers.out;
  EXPECT_EQ(callers.err, "");
}

// A uprobe: every call is a sample whose ip resolves to the probed function.
TEST(CliPerfData, UprobeSamplesResolveToTheFunction) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("uprobe", std::string(R"([recipe]
name = "uprobe"
[[probe]]
name = "fn"
uprobe = ")") + TRACER_UPROBE_TARGET + R"(:tracer_test_fn"
)");
  const auto data = f.add("uprobe", ".data");
  const auto run =
      shell(kTracer + " run " + recipe + " -o " + data + " -- " + TRACER_UPROBE_TARGET + " 4");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto script = shell("perf script -F comm,event,ip,sym -i " + data);
  EXPECT_EQ(script.exit_code, 0) << script.err;
  EXPECT_EQ(script.err, "");
  const auto lines = lines_of(script.out);
  ASSERT_EQ(lines.size(), 4U) << script.out;
  for (const auto& l : lines) {
    EXPECT_NE(l.find("fn:"), std::string::npos) << l;
    EXPECT_NE(l.find("tracer_test_fn"), std::string::npos) << l;
  }
}

// The BPF output channel of a recipe with a .bpf.c: perf script prints each payload as
// "BPF output" bytes; the file name the program read is in them.
TEST(CliPerfData, BpfOutputPayloadsPrintedByPerfScript) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const std::string configs = std::string(TRACER_TEST_DATA_DIR) + "/../../configs";
  const auto data = f.add("opens", ".data");
  const auto target = f.add("opens_target", ".txt");
  std::ofstream(target) << "x\n";
  const auto run =
      shell(kTracer + " run " + configs + "/opens.toml -o " + data + " -- cat " + target);
  if (run.exit_code != 0 && run.err.find("clang") != std::string::npos)
    GTEST_SKIP() << "the recipe's BPF program does not compile here: " << run.err;
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto script = shell("perf script -i " + data);
  EXPECT_EQ(script.exit_code, 0) << script.err;
  EXPECT_EQ(script.err, "");
  EXPECT_NE(script.out.find("bpf:"), std::string::npos) << script.out.substr(0, 2000);
  EXPECT_NE(script.out.find("BPF output: 0000:"), std::string::npos);
  // open_event.filename starts at byte 48: the first 8 bytes of the path are one dump line.
  EXPECT_NE(script.out.find("  " + target.substr(0, 8)), std::string::npos)
      << script.out.substr(0, 4000);
  EXPECT_EQ(evlist_names(data), "bpf\n");  // the counting carrier probe has no records
}

// perf evlist shows every probe of the recipe by its name, whatever its kind.
TEST(CliPerfData, EvlistShowsProbeNames) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("two", R"([recipe]
name = "two"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
[[probe]]
name = "clock"
software = "cpu-clock"
freq = 99
[[stage]]
use = "count"
by = ["probe"]
)");
  const auto data = f.add("two", ".data");
  const auto run = shell(kTracer + " run " + recipe + " -o " + data + " -- " +
                         TRACER_SYSCALLER_PATH + " lseek 3");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("seeks"), std::string::npos) << run.out;  // the recipe's own output
  const auto evlist = shell("perf evlist -i " + data);
  EXPECT_EQ(evlist.exit_code, 0) << evlist.err;
  EXPECT_EQ(evlist.err, "");
  EXPECT_EQ(evlist_names(data), "seeks\nclock\n");
  const auto script = shell("perf script -F event -i " + data + " | grep -c seeks:");
  EXPECT_EQ(script.out, "3\n") << script.err;
  const auto header = shell("perf report --header-only -i " + data);
  EXPECT_NE(header.out.find("# cmdline : " + kTracer + " run"), std::string::npos) << header.out;
  EXPECT_NE(header.out.find("# clockid: monotonic (1)"), std::string::npos) << header.out;
}

// Stopping by SIGINT finalizes the file; SIGKILL leaves one readable up to its last round.
TEST(CliPerfData, FileAfterSigintAndSigkillIsReadable) {
  REQUIRE_PERF_JUDGE();
  Files f;
  const auto recipe = f.recipe("forever", tracer::testing::with_own_fd(kLseek));  // system-wide
  for (const int sig : {SIGINT, SIGKILL}) {
    const auto data = f.add(sig == SIGINT ? "sigint" : "sigkill", ".data");
    tracer::testing::ReadyPipe ready;
    const std::string fd = ready.fd_arg();
    const pid_t pid = ::fork();
    if (pid == 0) {
      std::freopen("/dev/null", "w", stderr);
      ::execl(kTracer.c_str(), kTracer.c_str(), "run", recipe.c_str(), "-o", data.c_str(),
              "--ready-fd", fd.c_str(), nullptr);
      ::_exit(127);
    }
    ready.close_writer();
    ASSERT_TRUE(ready.wait()) << "tracer never said ready";
    const auto calls =
        shell(tracer::testing::own_fd_env() + std::string(TRACER_SYSCALLER_PATH) + " lseek 300");
    ASSERT_EQ(calls.exit_code, 0);
    // Until a round after the calls ended in the file (written while tracer runs): perf script
    // reads all 300 of them. A bound, not a sleep: a loaded machine gets there later.
    for (int i = 0; i < 300; ++i) {
      if (lines_of(shell("perf script -i " + data + " 2>/dev/null").out).size() >= 300)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (sig == SIGINT) {
      ASSERT_TRUE(WIFEXITED(status));
      EXPECT_EQ(WEXITSTATUS(status), 0);
    } else {
      EXPECT_TRUE(WIFSIGNALED(status));
    }
    const auto script = shell("perf script -i " + data);
    EXPECT_EQ(script.exit_code, 0) << script.err;
    EXPECT_EQ(script.err, "") << strsignal(sig);
    EXPECT_EQ(lines_of(script.out).size(), 300U) << strsignal(sig);
  }
}

// Option errors point at the recipe; `tracer check` validates without creating the file.
TEST(CliPerfData, StageOptionsAreCheckedWithPositions) {
  Files f;
  const auto bad = f.recipe("bad_perf_data", R"([recipe]
name = "x"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "perf-data"
pipe = "yes"
)");
  const auto r = shell(kTracer + " check " + bad);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find(bad + ":6:1: stage 'perf-data' needs option 'path'"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(bad + ":8:8: wrong type for option 'pipe' of stage 'perf-data'"),
            std::string::npos)
      << r.err;
  const auto data = f.add("never", ".data");
  const auto good = f.recipe("good_perf_data", R"([recipe]
name = "x"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "perf-data"
path = ")" + data + R"("
)");
  const auto ok = shell(kTracer + " check " + good);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_FALSE(fs::exists(data));
  const auto nodir = f.recipe("nodir_perf_data", R"([recipe]
name = "x"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "perf-data"
path = "/nonexistent/dir/out.data"
)");
  const auto missing = shell(kTracer + " check " + nodir);
  EXPECT_EQ(missing.exit_code, 2) << missing.err;
  EXPECT_NE(missing.err.find(nodir + ":8:8: perf-data: directory '/nonexistent/dir'"),
            std::string::npos)
      << missing.err;
}

}  // namespace
