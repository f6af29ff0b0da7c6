// The oracle at a process's first and last events: the command's own exec, every child's exec,
// each process's exit, its last system call and its final sched_switch, and a process whose
// leader exits first, on every path (in-kernel placement, the BPF ring buffer, the BPF perf
// channel, the target's own perf events), against strace's and bpftrace's counts of the same
// workload. The workload: `/bin/sh -c 'for ...; do LC; done'`, LC a copy of /bin/true whose name
// no other process on the machine has (so that bpftrace can count its events system-wide).
#include "oracle_harness.hpp"

namespace tracer {
namespace {

using namespace oracle;

constexpr int kChildren = 300;

/// The command: sh running `child` kChildren times (a loop of its own: no other program).
std::string loop_of(const fs::path& child) {
  return "/bin/sh -c 'i=0; while [ $i -lt " + std::to_string(kChildren) + " ]; do " +
         child.string() + "; i=$((i+1)); done'";
}

/// The count of one row `keys` of the run's final table (-1: no such row).
long long count_of(const Outcome& o, const std::string& keys) {
  for (const auto& r : o.rows) {
    if (r.find(R"("keys":{)" + keys + "}") != std::string::npos)
      return json_number(r, "count");
  }
  return -1;
}

/// A pipeline of the final switches (the task dead: prev_state X or Z) by `by` ("" for none),
/// through a filter stage: a probe's own tracefs filter would make its user-space events the
/// per-task perf events (configs/README.md, "Per-task perf events"). The recipe's sched_switch
/// probe is "switch".
std::string finals_pipeline(const std::string& by) {
  return "[[pipeline]]\nname = \"finals\"\n[[pipeline.stage]]\nuse = \"filter\"\n"
         "expr = \"prev_state == 16 || prev_state == 32\"\n[[pipeline.stage]]\nuse = "
         "\"count\"\n" +
         (by.empty() ? std::string() : "by = [\"" + by + "\"]\n");
}

/// bpftrace's `@: N` for `program` while `command` runs (0 when it printed no @).
long long bpftrace_count(const fs::path& dir,
                         const std::string& program,
                         const std::string& command) {
  const pid_t b = spawn({"/usr/bin/bpftrace", "-e", std::string(kBpftraceReady) + program},
                        dir / "b.out", dir / "b.err");
  if (!wait_for_text(dir / "b.out", kBpftraceReadyLine)) {
    ::kill(b, SIGKILL);
    wait_code(b);
    ADD_FAILURE() << "bpftrace did not start: " << slurp(dir / "b.err");
    return -1;
  }
  EXPECT_EQ(shell("timeout -k 5 60 " + command).exit_code, 0);
  ::kill(b, SIGINT);
  EXPECT_NE(wait_code_within(b, bpftrace_exit_seconds()), -2)
      << "bpftrace did not end within " << bpftrace_exit_seconds() << " s of its SIGINT";
  const std::string out = slurp(dir / "b.out");
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(@: ([0-9]+))")))
    return std::stoll(m[1]);
  return 0;
}

// The command's own exec (perf's enable_on_exec: the command joins at it) and each child's,
// counted by file name: 1 and 300 on every path, as strace's successful execve calls.
TEST(OracleLifecycle, TheCommandsOwnExecAndEveryChildsCountOnEveryPath) {
  testing::TempDir dir;
  const auto child = testing::own_program(dir.path(), "/bin/true", "lc");
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "execs"
[[probe]]
name = "exec"
tracepoint = "sched:sched_process_exec"
[[stage]]
use = "count"
by = ["filename"]
)";
  for (const auto& [name, flags] : kTaskPaths) {
    SCOPED_TRACE(name);
    const auto o = run_command(recipe, flags, loop_of(child));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(count_of(o, R"("filename":"/bin/sh")"), 1) << o.err;
    EXPECT_EQ(count_of(o, R"("filename":")" + child.string() + "\""), kChildren) << o.err;
    EXPECT_EQ(o.rows.size(), 2U) << o.err;
    EXPECT_EQ(json_number(o.summary, "lost"), 0) << o.summary;
  }
  if (!fs::exists("/usr/bin/strace"))
    GTEST_SKIP() << "strace is not installed (apt-get install strace): it is the reference";
  const auto log = dir.path() / "strace.log";
  ASSERT_EQ(shell("timeout -k 5 60 /usr/bin/strace -f -qq -e trace=execve -o " + log.string() +
                  " " + loop_of(child))
                .exit_code,
            0);
  std::istringstream in(slurp(log));
  long execs = 0;
  for (std::string line; std::getline(in, line);)
    execs += line.find("execve(") != std::string::npos && line.ends_with("= 0") ? 1 : 0;
  EXPECT_EQ(execs, kChildren + 1);
}

// Each process's last events: sched_process_exit, its exit_group call and its final switch (the
// task dead: prev_state X or Z), 300 children and the command, on every path, as bpftrace counts
// them. The per-task perf events (--delivery perf) are perf record's: the kernel detaches them in
// perf_event_exit_task, before a task's final switch (and before 6.16, before sched_process_exit
// too), so that path gives what perf record gives on the same kernel.
TEST(OracleLifecycle, EveryProcessesLastEventsUpToItsFinalSwitchCountOnEveryPath) {
  testing::TempDir dir;
  const auto child = testing::own_program(dir.path(), "/bin/true", "lc");
  const std::string comm = child.filename().string();
  // perf record's per-task events on this kernel: its final switches and exits of the command's
  // tasks.
  const auto data = dir.path() / "perf.data";
  const auto rec = shell("timeout -k 5 60 /usr/bin/perf record -q -o " + data.string() +
                         " -e sched:sched_switch --filter 'prev_state == 16 || prev_state == 32' "
                         "-e sched:sched_process_exit -- " +
                         loop_of(child) + " 2>&1");
  ASSERT_EQ(rec.exit_code, 0) << rec.out;
  const auto script = shell("/usr/bin/perf script -i " + data.string() + " -F event 2>/dev/null");
  long perf_finals = 0, perf_exits = 0;
  {
    std::istringstream in(script.out);
    for (std::string line; std::getline(in, line);) {
      perf_finals += line.find("sched_switch") != std::string::npos ? 1 : 0;
      perf_exits += line.find("sched_process_exit") != std::string::npos ? 1 : 0;
    }
  }
  EXPECT_EQ(perf_finals, 0) << "perf_event_exit_task comes before the final switch";
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "last-events"
[[probe]]
name = "switch"
tracepoint = "sched:sched_switch"
[[probe]]
name = "exit"
tracepoint = "sched:sched_process_exit"
[[probe]]
name = "exit_group"
tracepoint = "syscalls:sys_enter_exit_group"
)" << finals_pipeline("comm")
                        << R"([[pipeline]]
name = "exits"
[[pipeline.stage]]
use = "filter"
expr = "probe != \"switch\""
[[pipeline.stage]]
use = "count"
by = ["probe", "comm"]
)";
  for (const auto& [name, flags] : kTaskPaths) {
    SCOPED_TRACE(name);
    const auto o = run_command(recipe, flags, loop_of(child));
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(json_number(o.summary, "lost"), 0) << o.summary;
    const auto rows = [&](const std::string& keys) {
      const long long n = count_of(o, keys);
      return n < 0 ? 0 : n;
    };
    const auto exit_key = [](const std::string& probe, const std::string& c) {
      return R"("probe":")" + probe + R"(","comm":")" + c + "\"";
    };
    const long long finals = rows(R"("comm":")" + comm + "\"") + rows(R"("comm":"sh")");
    const long long exits = rows(exit_key("exit", comm)) + rows(exit_key("exit", "sh"));
    if (name == "user-perf-events") {
      EXPECT_EQ(finals, perf_finals) << o.err;
      EXPECT_EQ(exits, perf_exits) << o.err;
    } else {
      EXPECT_EQ(rows(R"("comm":")" + comm + "\""), kChildren) << o.err;
      EXPECT_EQ(rows(R"("comm":"sh")"), 1) << o.err;
      EXPECT_EQ(rows(exit_key("exit", comm)), kChildren) << o.err;
      EXPECT_EQ(rows(exit_key("exit", "sh")), 1) << o.err;
    }
    EXPECT_EQ(rows(exit_key("exit_group", comm)), kChildren) << o.err;
    EXPECT_EQ(rows(exit_key("exit_group", "sh")), 1) << o.err;
  }
  if (!fs::exists("/usr/bin/bpftrace"))
    GTEST_SKIP() << "bpftrace is not installed (apt-get install bpftrace): it is the reference";
  EXPECT_EQ(bpftrace_count(dir.path(),
                           "tracepoint:sched:sched_switch /args->prev_comm == \"" + comm +
                               "\" && (args->prev_state == 16 || args->prev_state == 32)/ "
                               "{ @ = count(); }",
                           loop_of(child)),
            kChildren);
}

// A process whose leader exits first (pthread_exit) lives on in its other thread: every call of
// that thread and both threads' final switches are the target's, on every path and every kernel
// (the target keeps a process until its leader's task is freed: no group_dead needed).
TEST(OracleLifecycle, AProcessWhoseLeaderExitsFirstKeepsItsEventsOnEveryPath) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "leader"
[[probe]]
name = "g"
tracepoint = "syscalls:sys_enter_getppid"
[[probe]]
name = "switch"
tracepoint = "sched:sched_switch"
[[pipeline]]
name = "calls"
[[pipeline.stage]]
use = "filter"
expr = "probe == \"g\""
[[pipeline.stage]]
use = "count"
by = ["probe"]
)" << finals_pipeline("");
  const std::string work = std::string(TRACER_SYSCALLER_PATH) + " leaderexit 1000";
  for (const auto& [name, flags] : kTaskPaths) {
    SCOPED_TRACE(name);
    const auto o = run_command(recipe, flags, work);
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(count_of(o, R"("probe":"g")"), 1000) << o.err;
    EXPECT_EQ(count_of(o, ""), name == "user-perf-events" ? -1 : 2) << o.err;
  }
  // tracer stat's counters (per-task events, inherited: the thread's calls are the process's).
  const auto stat = shell(kTracer + " stat -e syscalls:sys_enter_getppid -- " + work);
  EXPECT_NE(stat.err.find("1000      syscalls:sys_enter_getppid"), std::string::npos) << stat.err;
}

}  // namespace
}  // namespace tracer
