// Results users can trust, end to end on the live kernel: pairing that pairs (every read of a
// child, with both CPUs busy too), run-queue latency that counts what bpftrace counts, a comm for
// every short-lived process, and no loss on a burst with the default rings.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.hpp"
#include "support/scratch_path.hpp"
#include "support/temp_dir.hpp"

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

fs::path write_file(const std::string& name, const std::string& text) {
  return testing::write_temp(name, text);
}

/// The value of "key":N in a JSON line (the first occurrence), or -1.
long long json_number(const std::string& text, const std::string& key) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\":([0-9]+)")))
    return std::stoll(m[1]);
  return -1;
}

std::string line_of(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix))
      return line;
  }
  return {};
}

/// Busy loops on every CPU while alive: the machine a user traces on is not idle.
class BusyCpus {
 public:
  BusyCpus() {
    const long n = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
    for (long i = 0; i < n; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        volatile unsigned long x = 0;
        for (;;)
          x = x + 1;
      }
      pids_.push_back(pid);
    }
  }
  ~BusyCpus() {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);
    }
  }
  BusyCpus(const BusyCpus&) = delete;
  BusyCpus& operator=(const BusyCpus&) = delete;

 private:
  std::vector<pid_t> pids_;
};

const char* kReadvLatency = R"([recipe]
name = "readv-latency"
[[probe]]
name = "enter"
tracepoint = "syscalls:sys_enter_readv"
[[probe]]
name = "exit"
tracepoint = "syscalls:sys_exit_readv"
[[stage]]
use = "latency"
entry = "enter"
exit = "exit"
[[stage]]
use = "hist"
field = "duration"
)";

constexpr int kReadsPerChild = 5000;

/// Three children make kReadsPerChild readv calls each: one pinned to CPU 0, one to CPU 1, one
/// wherever the scheduler puts it. Entries and exits come from different rings (two probes, two
/// CPUs): the pairs are found only in time order.
void expect_every_readv_paired() {
  const auto recipe = write_file("readv_latency.toml", kReadvLatency);
  const std::string s = TRACER_SYSCALLER_PATH;
  const std::string cmd = "sh -c '" + s + " readv " + std::to_string(kReadsPerChild) + " 0 & " + s +
                          " readv " + std::to_string(kReadsPerChild) + " 1 & " + s + " readv " +
                          std::to_string(kReadsPerChild) + "; wait'";
  const auto r = tracer("run " + recipe.string() + " --json -- " + cmd);
  fs::remove(recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = line_of(r.out, R"({"type":"summary")");
  const auto hist = line_of(r.out, R"({"stage":"hist")");
  constexpr long long kAll = 3LL * kReadsPerChild;
  EXPECT_NE(summary.find(R"("enter":{"events":15000,"lost":0)"), std::string::npos) << summary;
  EXPECT_NE(summary.find(R"("exit":{"events":15000,"lost":0)"), std::string::npos) << summary;
  EXPECT_EQ(json_number(summary, "latency.paired"), kAll) << summary;
  EXPECT_EQ(json_number(summary, "latency.unmatched_exits"), 0) << summary;
  EXPECT_EQ(json_number(summary, "latency.unmatched_entries"), 0) << summary;
  EXPECT_EQ(json_number(summary, "order.late"), 0) << summary;
  EXPECT_EQ(json_number(hist, "count"), kAll) << hist;
}

TEST(CliCorrectness, LatencyPairsEveryReadOfChildrenOnBothCpus) {
  expect_every_readv_paired();
}

TEST(CliCorrectness, LatencyPairsEveryReadWithBothCpusBusy) {
  BusyCpus busy;
  expect_every_readv_paired();
}

bool have_bpftrace() {
  return ::access("/usr/bin/bpftrace", X_OK) == 0;
}

// Run-queue latency of a ping-pong over two pipes (each pass wakes the other side, on whichever
// CPU): the shipped runqlat pairing (wakeup's pid with switch's next_pid) narrowed to the
// workload's comm counts at least one latency per pass, and exactly as many as bpftrace's runqlat
// pairing over the same events (up to the windows' edges). Idle-context wakeups and switches on
// CPU 1 are missed by this machine's perf tracepoint events: they arrive through BPF delivery.
TEST(CliCorrectness, RunqlatCountsWhatBpftraceCountsOnAPingPong) {
  constexpr int kPasses = 3000;
  // The workload's comm (TASK_COMM_LEN - 1 bytes of the program's name).
  const std::string comm = fs::path(TRACER_SYSCALLER_PATH).filename().string().substr(0, 15);
  const std::string runqlat = slurp(fs::path(TRACER_CONFIGS_DIR) / "runqlat.toml");
  ASSERT_NE(runqlat.find("[[stage]]\nuse = \"latency\""), std::string::npos) << runqlat;
  std::string narrowed = runqlat;
  narrowed.replace(narrowed.find("[[stage]]\nuse = \"latency\""), 0,
                   "[[stage]]\nuse = \"filter\"\nexpr = 'comm == \"" + comm +
                       "\" || next_comm == \"" + comm + "\"'\n\n");
  narrowed.replace(narrowed.find("every = \"5s\""), 12, "");
  const auto recipe = write_file("runqlat_pingpong.toml", narrowed);
  const auto bt =
      write_file("runqlat.bt", std::string(testing::kBpftraceReady) +
                                   "tracepoint:sched:sched_wakeup /args->comm == \"" + comm +
                                   "\"/ { @q[args->pid] = nsecs; }\n"
                                   "tracepoint:sched:sched_switch /args->next_comm == \"" +
                                   comm +
                                   "\"/ { $t = @q[args->next_pid]; if ($t) { @n = count(); "
                                   "delete(@q[args->next_pid]); } }\n");
  const fs::path tracer_out = write_file("runqlat_tracer.out", "");
  const fs::path tracer_err = write_file("runqlat_tracer.err", "");
  const fs::path bt_out = write_file("runqlat_bt.out", "");
  // Both tools run across the whole workload: attached before it starts, stopped (SIGINT) after
  // it ends, however long a busy machine makes it.
  const pid_t t = spawn_to_file({TRACER_CLI_PATH, "run", recipe.string(), "--json", "-v"},
                                tracer_out, tracer_err);
  pid_t b = -1;
  if (have_bpftrace()) {
    b = spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out);
    ASSERT_TRUE(testing::wait_for_text(bt_out, testing::kBpftraceReadyLine)) << slurp(bt_out);
  }
  ASSERT_TRUE(testing::wait_for_text(tracer_err, "tracer: rings:")) << slurp(tracer_err);
  const auto w = shell(std::string(TRACER_SYSCALLER_PATH) + " pingpong " + std::to_string(kPasses));
  ::kill(t, SIGINT);
  if (b > 0)
    ::kill(b, SIGINT);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  ASSERT_EQ(testing::exit_code_within(t, 30), 0)
      << "tracer, after its SIGINT: " << slurp(tracer_err);
  const std::string out = slurp(tracer_out);
  const long long hist = json_number(line_of(out, R"({"stage":"hist")"), "count");
  const auto summary = line_of(out, R"({"type":"summary")");
  EXPECT_NE(summary.find(R"("lost":0,)"), std::string::npos) << summary;
  EXPECT_GE(hist, kPasses) << out;
  EXPECT_EQ(json_number(summary, "latency.paired"), hist) << summary;
  if (b > 0) {
    // bpftrace prints its maps as it exits.
    ASSERT_NE(testing::exit_code_within(b, testing::kBpftraceExitSeconds), -2)
        << "bpftrace did not end within " << testing::kBpftraceExitSeconds << " s of its SIGINT";
    const std::string bo = slurp(bt_out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(bo, m, std::regex(R"(@n: (\d+))"))) << bo;
    const long long bpftrace_n = std::stoll(m[1]);
    // The same events in both windows: equal up to a handful of wakeups at the edges.
    EXPECT_NEAR(static_cast<double>(hist), static_cast<double>(bpftrace_n),
                std::max(3.0, 0.005 * static_cast<double>(bpftrace_n)))
        << "tracer " << hist << " bpftrace " << bpftrace_n;
  }
  for (const auto& p : {recipe, bt, tracer_out, tracer_err, bt_out})
    fs::remove(p);
}

// A tracepoint hit inside a running BPF program runs no BPF program of its own (the kernel's
// bpf_prog_active guard). A cpu-clock program at 1000 Hz that calls bpf_trace_printk makes
// bpf_trace:bpf_trace_printk fire once per run, inside it, and tracer's program on that
// tracepoint is skipped every time: no event and no LOST count, so the summary reports them as
// bpf_skipped, exactly, whether the probe is delivered through BPF (the delivery program is the
// one skipped) or sampled by its perf events (the hit counter's, and the sample with it). The
// known answer: the clock program runs on its first CPU's event (where the engine attaches a
// probe's program) and returns 1, so that CPU's clock samples are its runs.
TEST(CliCorrectness, HitsTheKernelRanNoProgramForAreReportedNotLost) {
  // (Its file name ends in _PID, not .c: clang is told the language.)
  const auto source = write_file("nested.bpf.c", R"(#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
SEC("perf_event")
int nested(void *ctx)
{
	bpf_printk("tracer: a tracepoint hit inside a BPF program");
	return 1;
}
)");
  const auto recipe = write_file("nested.toml", R"([recipe]
name = "nested"
[[probe]]
name = "clock"
software = "cpu-clock"
freq = 1000
bpf = "nested"
[[probe]]
name = "printk"
tracepoint = "bpf_trace:bpf_trace_printk"
[[stage]]
use = "count"
by = ["probe"]
[bpf]
source = ")" + source.filename().string() + R"("
)");
  for (const std::string delivery : {"bpf", "perf"}) {
    SCOPED_TRACE("--delivery " + delivery);
    const auto r =
        tracer("run " + recipe.string() + " -d 2s --placement user --delivery " + delivery);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // The table: "clock  N  L  cpu0:E/L cpu1:..." and "printk  0  0 ...".
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(r.err, m, std::regex(R"(\nclock +\d+ +\d+ +cpu(\d+):(\d+)/(\d+))")))
        << r.err;
    const long long runs = std::stoll(m[2]) + std::stoll(m[3]);
    ASSERT_GT(runs, 500) << r.err;  // 2 s at 1000 Hz
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(\nprintk +(\d+) +(\d+) )"))) << r.err;
    EXPECT_EQ(m[1], "0") << r.err;  // no program of tracer's ran for any of them
    ASSERT_TRUE(std::regex_search(
        r.err, m,
        std::regex(R"(warning: probe 'printk': the kernel skipped its BPF program (\d+) times:)")))
        << r.err;
    EXPECT_EQ(std::stoll(m[1]), runs) << r.err;
  }
  // The JSON summary carries the count too.
  const auto j = tracer("run " + recipe.string() + " -d 1s --placement user --json");
  ASSERT_EQ(j.exit_code, 0) << j.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      j.out, m, std::regex(R"("printk":\{[^{}]*\{[^{}]*\}[^{}]*"bpf_skipped":(\d+))")))
      << j.out;
  EXPECT_GT(std::stoll(m[1]), 0) << j.out;
  fs::remove(recipe);
  fs::remove(source);
}

// A system-wide tracepoint delivers every hit bpftrace sees (this machine's per-CPU perf
// tracepoint events miss idle-context sched_switch on CPU 1; tracer receives them through BPF),
// and the kernel's own count of the hits agrees: nothing missed, every hit delivered or lost.
// Both count the switches away from the test's own ping-pong processes (a comm no other process
// has), per CPU: the machine's other switches (another suite, a tracer beside it) differ between
// the two tools' windows.
TEST(CliCorrectness, SystemWideTracepointDeliversEveryHitBpftraceSees) {
  if (!have_bpftrace())
    GTEST_SKIP() << "bpftrace is not installed (apt-get install bpftrace): it is the reference";
  testing::TempDir dir;
  const auto pinger = testing::own_program(dir.path(), TRACER_SYSCALLER_PATH, "sw");
  const std::string comm = pinger.filename().string();
  const auto recipe = dir.path() / "switch_hits.toml";
  std::ofstream(recipe) << R"([recipe]
name = "switch-hits"
[[probe]]
name = "switch"
tracepoint = "sched:sched_switch"
[[stage]]
use = "filter"
expr = "prev_comm == \")" + comm +
                               R"(\""
[[stage]]
use = "count"
by = ["cpu"]
)";
  const auto bt = dir.path() / "switch_hits.bt";
  std::ofstream(bt) << testing::kBpftraceReady
                    << "tracepoint:sched:sched_switch /args->prev_comm == \"" << comm
                    << "\"/ { @[cpu] = count(); }\n";
  const auto tracer_out = dir.path() / "tracer.out", tracer_err = dir.path() / "tracer.err";
  const auto bt_out = dir.path() / "bt.out";
  const pid_t t =
      // User placement: the events themselves cross (the in-kernel count has its own test).
      // Both tools stop at their SIGINT after the workload (a fixed window ended before it on a
      // busy machine).
      spawn_to_file(
          {TRACER_CLI_PATH, "run", recipe.string(), "--json", "-v", "--placement", "user"},
          tracer_out, tracer_err);
  const pid_t b = spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out);
  ASSERT_TRUE(testing::wait_for_text(tracer_err, "tracer: rings:")) << slurp(tracer_err);
  ASSERT_TRUE(testing::wait_for_text(bt_out, testing::kBpftraceReadyLine)) << slurp(bt_out);
  // Thousands of switches on each CPU, in and out of idle.
  const std::string s = pinger.string();
  const auto w = shell(s + " pingpong 4000 0 & " + s + " pingpong 4000 1; wait");
  ::kill(t, SIGINT);
  ::kill(b, SIGINT);
  ASSERT_EQ(w.exit_code, 0) << w.err;
  ASSERT_EQ(testing::exit_code_within(t, 30), 0)
      << "tracer, after its SIGINT: " << slurp(tracer_err);
  // bpftrace prints its maps as it exits.
  ASSERT_NE(testing::exit_code_within(b, testing::kBpftraceExitSeconds), -2)
      << "bpftrace did not end within " << testing::kBpftraceExitSeconds << " s of its SIGINT";
  const std::string out = slurp(tracer_out), bo = slurp(bt_out);
  const auto summary = line_of(out, R"({"type":"summary")");
  const long long events = json_number(summary, "events");
  const long long lost = json_number(summary, "lost");
  const long long hits = json_number(summary, "kernel_hits");
  const long long missed = json_number(summary, "missed");
  ASSERT_GT(hits, 0) << summary;
  // Every hit is a sample or a LOST count.
  EXPECT_EQ(missed, 0) << summary;
  EXPECT_EQ(events + lost, hits) << summary;
  std::map<int, long long> bpftrace_rows, tracer_rows;
  const std::regex bt_row(R"(@\[(\d+)\]: (\d+))");
  for (auto it = std::sregex_iterator(bo.begin(), bo.end(), bt_row); it != std::sregex_iterator();
       ++it)
    bpftrace_rows[std::stoi((*it)[1])] = std::stoll((*it)[2]);
  const std::regex tracer_row(R"(\{"cpu":(\d+)\},"count":(\d+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), tracer_row);
       it != std::sregex_iterator(); ++it)
    tracer_rows[std::stoi((*it)[1])] = std::stoll((*it)[2]);
  // Each ping-pong passes 4,000 bytes each way on its CPU: at least 4,000 switches away there.
  ASSERT_GE(bpftrace_rows[0], 4000) << bo;
  ASSERT_GE(bpftrace_rows[1], 4000) << bo;
  if (lost == 0) {
    EXPECT_EQ(tracer_rows, bpftrace_rows) << out << "\n" << bo;
  }
  for (const auto& [cpu, n] : bpftrace_rows) {
    EXPECT_LE(tracer_rows[cpu], n) << "cpu " << cpu;
    EXPECT_GE(tracer_rows[cpu] + lost, n) << "cpu " << cpu << ": " << summary;
  }
  std::cout << "sched_switch away from " << comm << ": bpftrace cpu0 " << bpftrace_rows[0]
            << " cpu1 " << bpftrace_rows[1] << ", tracer cpu0 " << tracer_rows[0] << " cpu1 "
            << tracer_rows[1] << "; all: kernel_hits " << hits << ", delivered " << events
            << ", lost " << lost << ", missed " << missed << "\n";
}

// A storm of short-lived processes traced system-wide: every event has its comm, although each
// process is gone before tracer looks at its events.
TEST(CliCorrectness, ShortLivedProcessesAllHaveAComm) {
  constexpr int kProcesses = 300;
  const auto recipe = write_file("exit_comm.toml", R"([recipe]
name = "exit-comm"
[[probe]]
name = "exit"
tracepoint = "syscalls:sys_enter_exit_group"
[[stage]]
use = "count"
by = ["comm"]
top = 1000
)");
  const fs::path out = write_file("exit_comm.out", "");
  const fs::path err = write_file("exit_comm.err", "");
  const pid_t t =
      testing::spawn_tracer_ready({"run", recipe.string(), "--json", "-d", "4s"}, out, err);
  ASSERT_GT(t, 0) << slurp(err);
  // /bin/true through a symlink of another name: its comm is the link's name.
  const fs::path link = tracer::testing::scratch_path("tracer_shortlv");
  fs::remove(link);
  fs::create_symlink("/bin/true", link);
  const auto w =
      shell("for i in $(seq " + std::to_string(kProcesses) + "); do " + link.string() + "; done");
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const bool ok = exited_ok(t);
  fs::remove(link);
  ASSERT_TRUE(ok);
  const std::string text = slurp(out);
  fs::remove(out);
  fs::remove(recipe);
  std::istringstream in(text);
  long long named = 0, blank = 0;
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with(R"({"stage":"count")"))
      continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex(R"re("comm":"([^"]*)"\},"count":(\d+))re")))
        << line;
    if (m[1].str().empty())
      blank += std::stoll(m[2]);
    if (m[1].str() == "tracer_shortlv")
      named += std::stoll(m[2]);
  }
  EXPECT_EQ(blank, 0) << text;
  EXPECT_EQ(named, kProcesses) << text;
}

// configs/execsnoop.toml names the program of every successful exec ("exec ok: PID COMM FILE"):
// the comm there is the new program's, from the kernel's COMM record at the exec.
TEST(CliCorrectness, ExecsnoopNamesEveryExecdProgram) {
  const fs::path link = tracer::testing::scratch_path("tracer_execok");
  fs::remove(link);
  fs::create_symlink("/bin/true", link);
  const auto r = tracer("run " + (fs::path(TRACER_CONFIGS_DIR) / "execsnoop.toml").string() +
                        " -- sh -c 'for i in 1 2 3 4 5; do " + link.string() + "; done'");
  fs::remove(link);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int ok = 0;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("exec ok:") && line.find(link.string()) != std::string::npos) {
      EXPECT_NE(line.find(" tracer_execok " + link.string()), std::string::npos) << line;
      ++ok;
    }
  }
  EXPECT_EQ(ok, 5) << r.out;
}

// The shipped recipes with their own BPF C run with no compiler on the host: tracer's build
// makes their objects (configs/*.bpf.o, installed beside the recipes), and a recipe naming both
// loads its object when it is there. Here each recipe and its object alone, as installed (no
// .bpf.c), run in a mount namespace where every LLVM (clang, llvm-strip) is hidden under an
// empty tmpfs, and count exactly what the same recipe counts from the source tree (compiled
// with clang). Without the object (the source alone), the run fails saying what to install.
TEST(CliCorrectness, TheShippedBpfRecipesRunFromTheirObjectsWithNoCompiler) {
  if (shell("command -v unshare >/dev/null").exit_code != 0)
    GTEST_SKIP() << "no unshare(1) (util-linux) to hide the compiler with";
  tracer::testing::TempDir dir;
  const std::string hide =
      "unshare -m sh -c 'for d in /usr/lib/llvm-*; do mount -t tmpfs none \"$d\" || exit 99; "
      "done; exec \"$@\"' hidden ";
  ASSERT_NE(shell(hide + "clang-14 --version").exit_code, 0) << "clang is hidden";
  // tracer itself links no LLVM.
  const auto libs = shell(std::string("ldd ") + TRACER_CLI_PATH);
  ASSERT_EQ(libs.exit_code, 0);
  EXPECT_EQ(libs.out.find("libLLVM"), std::string::npos) << libs.out;
  EXPECT_EQ(libs.out.find("libclang"), std::string::npos) << libs.out;
  struct Shipped {
    const char* name;
    std::string workload;
    std::string line;  // what each of the workload's `times` events prints
    int times;
  };
  const std::vector<Shipped> recipes = {
      {"execsnoop", "sh -c 'for i in 1 2 3 4 5; do /bin/true; done'", " /bin/true", 5},
      {"opens", "sh -c 'for i in 1 2 3 4 5 6 7; do cat /etc/hostname >/dev/null; done'",
       " cat /etc/hostname", 7},
  };
  for (const auto& r : recipes) {
    SCOPED_TRACE(r.name);
    const fs::path installed = dir.path() / r.name;
    fs::create_directories(installed);
    const std::string toml = std::string(r.name) + ".toml", obj = std::string(r.name) + ".bpf.o";
    fs::copy_file(fs::path(TRACER_CONFIGS_DIR) / toml, installed / toml);
    fs::copy_file(fs::path(TRACER_CONFIG_OBJECTS_DIR) / obj, installed / obj);
    const auto count = [&](const std::string& out) {
      int n = 0;
      std::istringstream in(out);
      for (std::string line; std::getline(in, line);)
        n += line.ends_with(r.line) ? 1 : 0;
      return n;
    };
    const auto prebuilt =
        shell(hide + TRACER_CLI_PATH + " run " + (installed / toml).string() + " -- " + r.workload);
    ASSERT_EQ(prebuilt.exit_code, 0) << prebuilt.err;
    EXPECT_EQ(count(prebuilt.out), r.times) << prebuilt.out;
    const auto compiled =
        tracer("run " + (fs::path(TRACER_CONFIGS_DIR) / toml).string() + " -- " + r.workload);
    ASSERT_EQ(compiled.exit_code, 0) << compiled.err;
    EXPECT_EQ(count(compiled.out), r.times) << compiled.out;

    // The source alone with no compiler: an error naming what to install.
    fs::remove(installed / obj);
    fs::copy_file(fs::path(TRACER_CONFIGS_DIR) / (std::string(r.name) + ".bpf.c"),
                  installed / (std::string(r.name) + ".bpf.c"));
    const auto no_clang =
        shell(hide + TRACER_CLI_PATH + " run " + (installed / toml).string() + " -- /bin/true");
    EXPECT_NE(no_clang.exit_code, 0);
    EXPECT_NE(no_clang.err.find("no clang"), std::string::npos) << no_clang.err;
    EXPECT_NE(no_clang.err.find("apt-get install clang"), std::string::npos) << no_clang.err;
    EXPECT_NE(no_clang.err.find((installed / obj).string()), std::string::npos) << no_clang.err;
  }
}

// A burst of a two-probe per-event recipe with the default rings: nothing lost, everything
// paired (the issue's dd run lost 1,860 + 2,109 events with the old default).
TEST(CliCorrectness, ABurstFitsTheDefaultRings) {
  const auto recipe = write_file("dd_latency.toml", R"([recipe]
name = "dd"
[[probe]]
name = "enter"
tracepoint = "syscalls:sys_enter_read"
[[probe]]
name = "exit"
tracepoint = "syscalls:sys_exit_read"
[[stage]]
use = "latency"
entry = "enter"
exit = "exit"
[[stage]]
use = "hist"
field = "duration"
)");
  const auto r = tracer("run " + recipe.string() +
                        " --json -- dd if=/dev/zero of=/dev/null bs=1k count=50000");
  fs::remove(recipe);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = line_of(r.out, R"({"type":"summary")");
  const long long enter = json_number(summary, "events");
  EXPECT_GE(enter, 50000) << summary;
  EXPECT_NE(summary.find(R"("enter":{"events":)" + std::to_string(enter) + R"(,"lost":0,)"),
            std::string::npos)
      << summary;
  EXPECT_NE(summary.find(R"("exit":{"events":)" + std::to_string(enter) + R"(,"lost":0,)"),
            std::string::npos)
      << summary;
  EXPECT_EQ(json_number(summary, "latency.paired"), enter) << summary;
}

}  // namespace
}  // namespace tracer
