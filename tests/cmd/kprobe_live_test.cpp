// Kprobes live: a kprobe and a kretprobe on the getppid system call's function count a command's
// N calls exactly, in user space (the command target's per-task events) and in the kernel
// (system-wide, its program filtering by the command's unique name), and bpftrace's kprobe of
// the same function agrees. The project machine's kernel has no kprobes: these tests skip there
// with that reason and run under .ci/vmtest on Debian's 6.1 and 6.12.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using testing::shell;
using testing::slurp;

constexpr const char* kFunction = "__x64_sys_getppid";
constexpr int kCalls = 2000;

/// Why this kernel cannot run kprobes ("" when it can).
std::string no_kprobes() {
  if (fs::exists("/sys/bus/event_source/devices/kprobe"))
    return {};
  for (const char* t :
       {"/sys/kernel/tracing/kprobe_events", "/sys/kernel/debug/tracing/kprobe_events"}) {
    if (fs::exists(t))
      return {};
  }
  return "this kernel has no kprobes (no kprobe PMU in /sys/bus/event_source/devices, no "
         "kprobe_events in tracefs): .ci/vmtest runs this test on Debian's 6.1 and 6.12";
}

std::string recipe_text() {
  return std::string("[recipe]\nname = \"kprobes\"\n[[probe]]\nname = \"enter\"\nkprobe = \"") +
         kFunction + "\"\n[[probe]]\nname = \"ret\"\nkretprobe = \"" + kFunction +
         "\"\n[[stage]]\nuse = \"count\"\nby = [\"probe\"]\n";
}

/// Waits for `pid` at most `seconds` (a slow emulated machine included), then kills it.
/// @return true when it exited with 0 in time.
bool exited_ok_within(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (r < 0)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return false;
}

long long count_of(const std::string& json, const std::string& probe) {
  std::smatch m;
  if (std::regex_search(json, m,
                        std::regex(R"("keys":\{"probe":")" + probe + R"("\},"count":([0-9]+))")))
    return std::stoll(m[1]);
  return -1;
}

// The command target: its per-task kprobe events, in user space (a process target's kprobes
// stay there), every call of the command and none of anyone else's.
TEST(KprobeLive, AKprobeAndAKretprobeCountACommandsCallsExactly) {
  if (const auto why = no_kprobes(); !why.empty())
    GTEST_SKIP() << why;
  testing::TempDir dir;
  const auto caller = testing::own_program(dir.path(), TRACER_SYSCALLER_PATH, "kp");
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << recipe_text();
  const auto r = testing::run_tracer("run " + recipe.string() + " --json -- " + caller.string() +
                                     " getppid " + std::to_string(kCalls));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.out, "enter"), kCalls) << r.out;
  EXPECT_EQ(count_of(r.out, "ret"), kCalls) << r.out;
}

// System-wide in the kernel (the kprobe PMU's events carry the generated program), filtered by
// the command's unique name, beside bpftrace's kprobe of the same function: both count N.
TEST(KprobeLive, InTheKernelSystemWideAsBpftraceCounts) {
  if (const auto why = no_kprobes(); !why.empty())
    GTEST_SKIP() << why;
  testing::TempDir dir;
  const auto caller = testing::own_program(dir.path(), TRACER_SYSCALLER_PATH, "kp");
  const std::string comm = caller.filename().string();
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << "[recipe]\nname = \"kprobes\"\nplacement = \"kernel\"\n[[probe]]\n"
                           "name = \"enter\"\nkprobe = \""
                        << kFunction << "\"\n[[probe]]\nname = \"ret\"\nkretprobe = \"" << kFunction
                        << "\"\n[[stage]]\nuse = \"filter\"\nexpr = \"comm == \\\"" << comm
                        << "\\\"\"\n[[stage]]\nuse = \"count\"\nby = [\"probe\"]\n";
  const auto out = dir.path() / "t.out", err = dir.path() / "t.err";
  const pid_t t = testing::spawn_tracer_ready({"run", recipe.string(), "--json"}, out, err);
  ASSERT_GT(t, 0) << slurp(err);
  // bpftrace beside it, when it attaches (its kprobe of a system call's function: it may call
  // the function untraceable and still attach); every process is waited for with a bound.
  bool bpftrace = fs::exists("/usr/bin/bpftrace");
  pid_t b = -1;
  const auto bt_out = dir.path() / "b.out", bt_err = dir.path() / "b.err";
  if (bpftrace) {
    b = testing::spawn_to_file({"/usr/bin/bpftrace", "-e",
                                std::string(testing::kBpftraceReady) + "kprobe:" + kFunction +
                                    " /comm == \"" + comm + "\"/ { @ = count(); }"},
                               bt_out, bt_err);
    if (!testing::wait_for_text(bt_out, testing::kBpftraceReadyLine)) {
      ::kill(b, SIGKILL);
      (void)exited_ok_within(b, 10);
      ADD_FAILURE() << "bpftrace did not attach: " << slurp(bt_err);
      bpftrace = false;
    }
  }
  const auto w = shell(caller.string() + " getppid " + std::to_string(kCalls));
  EXPECT_EQ(w.exit_code, 0) << w.err;
  ::kill(t, SIGINT);
  ASSERT_TRUE(exited_ok_within(t, 120)) << slurp(err);
  const std::string json = slurp(out);
  EXPECT_EQ(count_of(json, "enter"), kCalls) << json << slurp(err);
  EXPECT_EQ(count_of(json, "ret"), kCalls) << json;
  if (bpftrace) {
    ::kill(b, SIGINT);
    (void)exited_ok_within(b, 120);
    EXPECT_NE(slurp(bt_out).find("@: " + std::to_string(kCalls)), std::string::npos)
        << slurp(bt_out);
  }
}

}  // namespace
}  // namespace tracer
