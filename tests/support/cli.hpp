// Test support for end-to-end CLI tests: run `tracer` and capture its exit code, stdout and
// stderr (testing::shell of perf_tool.hpp for any other command); small file and process helpers.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>
#include <string>
#include <vector>

#include "support/perf_tool.hpp"

namespace tracer::testing {

using CliResult = ShellResult;
#ifdef TRACER_CLI_PATH
/// Runs the tracer CLI under test (TRACER_CLI_PATH, defined for the test binary) with `args`.
inline CliResult run_tracer(const std::string& args) {
  return shell(std::string(TRACER_CLI_PATH) + " " + args);
}
#endif
/// The whole content of a file ("" if unreadable).
std::string slurp(const std::filesystem::path& path);
/// Writes `text` to a new file named after `name` and this process in the temp directory.
std::filesystem::path write_temp(const std::string& name, const std::string& text);
/// Forks and execs argv[0] with argv, its stdout to `out` (its stderr inherited).
pid_t spawn_to_file(const std::vector<std::string>& argv, const std::filesystem::path& out);
/// The same, with stderr into `err` as well.
pid_t spawn_to_file(const std::vector<std::string>& argv,
                    const std::filesystem::path& out,
                    const std::filesystem::path& err);
/// Waits for `pid`; true when it exited with 0.
bool exited_ok(pid_t pid);
/// The exit code of `pid` (128 + the signal that ended it), waited for at most `seconds`: then
/// the process is killed and -2 returned (a test that hangs fails naming the step, also where no
/// ctest cuts it: .ci/vmtest's guests).
int exit_code_within(pid_t pid, int seconds);
/// Waits until `file` holds `text` (a tool's "attached" line), at most 60 s; false if it never
/// does. Readiness is a line the tool prints, never a sleep (a loaded machine starts tools late).
bool wait_for_text(const std::filesystem::path& file, const std::string& text);
/// The --ready-fd handshake (`tracer run|stat --ready-fd N`): a pipe whose write end a tracer
/// started after it inherits (pass fd_arg()); wait() returns once that tracer wrote "ready",
/// which it does when every probe is attached. A child that must not start its work before
/// then blocks in wait() too (it inherits the read end across fork).
class ReadyPipe {
 public:
  ReadyPipe();
  ~ReadyPipe();
  ReadyPipe(const ReadyPipe&) = delete;
  ReadyPipe& operator=(const ReadyPipe&) = delete;
  /// The write end's number, for --ready-fd.
  [[nodiscard]] std::string fd_arg() const { return std::to_string(write_fd_); }
  /// Closes this process's write end (after the tracer was started).
  void close_writer();
  /// Waits for the "ready" line, at most `seconds`; false on a timeout or when every writer
  /// closed without it (tracer failed to start).
  bool wait(int seconds = 60);

 private:
  int read_fd_ = -1, write_fd_ = -1;
};
#ifdef TRACER_CLI_PATH
/// Starts `TRACER_CLI_PATH run ...` (args without the binary: {"run", recipe, ...}) with -v,
/// stdout to `out` and stderr to `err`, and returns once it is tracing (its "tracer: rings:"
/// line, printed after the events are enabled): the readiness handshake that replaces fixed
/// sleeps. @return its pid, or -1 (after killing it) if it never got ready.
inline pid_t spawn_tracer_ready(std::vector<std::string> args,
                                const std::filesystem::path& out,
                                const std::filesystem::path& err) {
  args.insert(args.begin(), TRACER_CLI_PATH);
  args.insert(args.begin() + 2, "-v");  // after "run": the rings line is a verbose one
  const pid_t pid = spawn_to_file(args, out, err);
  if (!wait_for_text(err, "tracer: rings:")) {
    ::kill(pid, SIGKILL);
    (void)exited_ok(pid);
    return -1;
  }
  return pid;
}
#endif
/// A system-wide test's own lseek fd (instead of the workloads' 12345): the syscaller's
/// (SYSCALLER_FD) and the oracle workload's (ORACLE_FD) calls use it when own_fd_env() is
/// before their command, so that another copy of a workload or of the suite running beside the
/// test (with 12345, or its own fd) is not counted. Unique per test process.
inline long own_fd() {
  return 100000 + static_cast<long>(::getpid());
}
/// `text` with every 12345 (a recipe's or bpftrace's fd filter) replaced by own_fd().
inline std::string with_own_fd(std::string text) {
  const std::string fd = std::to_string(own_fd());
  for (std::size_t at; (at = text.find("12345")) != std::string::npos;)
    text.replace(at, 5, fd);
  return text;
}
/// A copy of `program` in `dir` named `prefix` + this test process's pid: a comm no other
/// process on the machine has, so that a system-wide count (tracer's or bpftrace's) can keep to
/// the test's own processes beside another copy of the workload or of the suite.
inline std::filesystem::path own_program(const std::filesystem::path& dir,
                                         const std::filesystem::path& program,
                                         const std::string& prefix) {
  namespace fs = std::filesystem;
  const auto path = dir / (prefix + std::to_string(::getpid()));
  fs::copy_file(program, path, fs::copy_options::overwrite_existing);
  fs::permissions(path, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                            fs::perms::others_read | fs::perms::others_exec);
  return path;
}
/// "SYSCALLER_FD=N ORACLE_FD=N " for a shell command line.
inline std::string own_fd_env() {
  const std::string fd = std::to_string(own_fd());
  return "SYSCALLER_FD=" + fd + " ORACLE_FD=" + fd + " ";
}
/// The line bpftrace's program prints once every probe is attached (its "Attaching" line comes
/// before): put kBpftraceReady at the head of a bpftrace program, wait for kBpftraceReadyLine.
inline constexpr const char* kBpftraceReady = "BEGIN { printf(\"bpftrace attached\\n\"); }\n";
inline constexpr const char* kBpftraceReadyLine = "bpftrace attached";
/// How long a test waits for bpftrace's own exit after its SIGINT (it prints its maps as it
/// exits). Its exit, not tracer's: on 6.1 under TCG beside the ASan suite it took more than
/// 30 s, and a bpftrace cut at 60 s printed nothing. tracer's stop is bounded by its own tests.
inline constexpr int kBpftraceExitSeconds = 120;

#ifdef TRACER_SYSCALLER_PATH
/// Runs the syscaller (tests/programs/syscaller.c) with `args` ("lseek 1000") to its end, its
/// lseek calls on own_fd() when `own` (a system-wide test's).
/// @return its pid ("" when the shell failed: the test fails).
inline std::string run_syscaller(const std::string& args, bool own = false) {
  const auto r = shell((own ? own_fd_env() : std::string()) + TRACER_SYSCALLER_PATH + " " + args +
                       " & echo $!; wait");
  if (r.exit_code != 0)
    return {};
  return r.out.substr(0, r.out.find_first_of(" \n"));
}
#endif

}  // namespace tracer::testing
