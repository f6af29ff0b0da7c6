// Runs the built `tracer` binary and checks `tracer list ...` output and exit codes.
#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "support/temp_dir.hpp"

namespace tracer::cli {
namespace {

using ::testing::HasSubstr;

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout only
  std::string err;  // stderr only
};

/// Runs TRACER_CLI_PATH with `args` (already shell-quoted), capturing stdout and stderr.
RunResult run_cli(const std::string& args) {
  ::tracer::testing::TempDir dir;
  const auto err_path = dir.path() / "stderr";
  const std::string cmd = fmt::format("'{}' {} 2>'{}'", TRACER_CLI_PATH, args, err_path.string());
  RunResult r;
  FILE* p = ::popen(cmd.c_str(), "re");
  if (p == nullptr) {
    ADD_FAILURE() << "popen failed: " << cmd;
    return r;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0)
    r.out.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = ::tracer::testing::slurp(err_path);
  return r;
}

TEST(CliList, OneTracepointByExactName) {
  const auto r = run_cli("list tracepoints 'sched:sched_switch'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "sched:sched_switch\n");
  EXPECT_EQ(r.err, "");
}

// -v lists the fields of each tracepoint with their C types, as bpftrace -lv does, and leaves
// out the common_* fields every event has.
TEST(CliList, VerboseListsFieldsWithTypes) {
  const auto r = run_cli("list tracepoints -v 'sched:sched_switch'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, ::testing::StartsWith("sched:sched_switch\n"));
  EXPECT_THAT(r.out, HasSubstr("\n    char prev_comm[16]\n"));
  EXPECT_THAT(r.out, HasSubstr("\n    pid_t prev_pid\n"));
  EXPECT_THAT(r.out, HasSubstr("\n    pid_t next_pid\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("common_pid")));
  const auto openat = run_cli("list tracepoints -v 'syscalls:sys_enter_openat'");
  ASSERT_EQ(openat.exit_code, 0) << openat.err;
  EXPECT_THAT(openat.out, HasSubstr("\n    const char * filename\n"));
  EXPECT_THAT(openat.out, HasSubstr("\n    int flags\n"));
  // Without -v: names only.
  EXPECT_EQ(run_cli("list tracepoints 'sched:sched_switch'").out, "sched:sched_switch\n");
}

TEST(CliList, GlobListsSortedSystemEventLines) {
  const auto r = run_cli("list tracepoints 'sched:sched_wak*'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("sched:sched_wakeup\n"));
  EXPECT_THAT(r.out, HasSubstr("sched:sched_wakeup_new\n"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("sched:sched_switch")));
}

TEST(CliList, AllTracepointsIncludeOpenat) {
  const auto r = run_cli("list tracepoints");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\nsyscalls:sys_enter_openat\n"));
}

TEST(CliList, NoMatchExitsOneWithNearMatches) {
  const auto r = run_cli("list tracepoints 'sched:sched_swich'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("no tracepoint matches sched:sched_swich"));
  EXPECT_THAT(r.err, HasSubstr("sched:sched_switch"));
}

TEST(CliList, PmusAndCapabilities) {
  const auto r = run_cli("list pmus");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("uprobe"));
  EXPECT_THAT(r.out, HasSubstr("\ncapabilities:\n"));
  EXPECT_THAT(r.out, HasSubstr("tracepoint  (type 2)\n"));
  const std::string uprobe_type =
      ::tracer::testing::slurp("/sys/bus/event_source/devices/uprobe/type");
  if (!uprobe_type.empty()) {
    EXPECT_THAT(r.out,
                HasSubstr(fmt::format("  [yes] uprobe  (PMU type {})\n", std::stoul(uprobe_type))));
    EXPECT_THAT(r.out, HasSubstr("    retprobe         config:0\n"));
  }
  if (!std::filesystem::exists("/sys/bus/event_source/devices/kprobe") &&
      !std::filesystem::exists("/sys/kernel/tracing/kprobe_events")) {
    EXPECT_THAT(r.out, HasSubstr("  [no ] kprobe  ("));
  }
}

TEST(CliList, UsageErrorsExitTwo) {
  EXPECT_EQ(run_cli("bogus").exit_code, 2);
  EXPECT_EQ(run_cli("list bogus").exit_code, 2);
  EXPECT_EQ(run_cli("list").exit_code, 2);
  EXPECT_EQ(run_cli("list pmus extra").exit_code, 2);
}

}  // namespace
}  // namespace tracer::cli
