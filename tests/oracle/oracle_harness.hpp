// The oracle suite's workload, recipe shapes and runners (tests/oracle/*_test.cpp).
#pragma once

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"

namespace tracer::oracle {

namespace fs = std::filesystem;
using testing::kBpftraceReady;
using testing::kBpftraceReadyLine;
using testing::shell;
using testing::slurp;
using testing::wait_for_text;

/// How long to wait for the reference bpftrace's own exit after its SIGINT:
/// testing::kBpftraceExitSeconds, or TRACER_BPFTRACE_EXIT_SECONDS when set. The kernel matrix's
/// guests set it (.ci/vmtest-init): under TCG beside a loaded host, bpftrace on 6.1 took over
/// 120 s to print its maps and end (the test passed alone in the same guest in 94 s).
inline int bpftrace_exit_seconds() {
  const char* env = std::getenv("TRACER_BPFTRACE_EXIT_SECONDS");
  const int v = env != nullptr ? std::atoi(env) : 0;
  return v > 0 ? v : testing::kBpftraceExitSeconds;
}

inline const std::string kWorkload = TRACER_ORACLE_WORKLOAD;
inline const std::string kTracer = TRACER_CLI_PATH;

// The workload: kW children (on both CPUs), kN lseek(12345, i) calls each, i = 0..kN-1.
inline constexpr long kW = 4;
inline constexpr long kN = 2500;
inline constexpr long kCalls = kW * kN;                     // 10,000
inline constexpr long kOffsetSum = kW * kN * (kN - 1) / 2;  // 12,495,000
// The storm: kStorm processes one after another, kStormN calls each.
inline constexpr long kStorm = 10500;
inline constexpr long kStormN = 2;

/// perf stat -x,'s rows (fields by row), without comments, empty lines and tracer's own
/// "tracer: ..." lines (stderr's notes beside the counts).
inline std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line.front() == '#' || line.starts_with("tracer: "))
      continue;
    std::vector<std::string> fields;
    std::size_t from = 0;
    for (std::size_t at; (at = line.find(',', from)) != std::string::npos; from = at + 1)
      fields.push_back(line.substr(from, at - from));
    fields.push_back(line.substr(from));
    rows.push_back(std::move(fields));
  }
  return rows;
}

inline std::string tree_args() {
  return kWorkload + " tree " + std::to_string(kW) + " " + std::to_string(kN);
}

using testing::own_fd;
using testing::with_own_fd;
/// tree_args() with own_fd().
inline std::string own_tree_args() {
  return testing::own_fd_env() + tree_args();
}

struct Shape {
  const char* name;
  const char* probe;   // the [[probe]] keys after its name
  const char* stages;  // the [[stage]] tables
  /// Lines of the final table (without their time), in any order: the known answer.
  std::vector<std::string> rows;
  bool system_wide = true;  // also run system-wide (its events are the workload's alone there)
  bool pids = false;        // keyed by pid: two runs of the workload differ
  /// The pipeline can be placed in the kernel: the "kernel" path forces it there. A chain
  /// that reads an aggregation's events cannot (placement = "kernel" is an error at that stage):
  /// its "kernel" path runs with placement auto, which keeps it in user space.
  bool in_kernel = true;
};

/// The flags of path `flags` for shape `s` (a shape that cannot be placed in the kernel runs
/// the "kernel" path with placement auto).
inline std::string flags_for(const Shape& s, const std::string& flags) {
  return !s.in_kernel && flags == "--placement kernel" ? std::string("--placement auto") : flags;
}

inline const std::string kLseek = R"(tracepoint = "syscalls:sys_enter_lseek")";

inline std::string row(const std::string& stage,
                       const std::string& keys,
                       const std::string& values) {
  return R"({"stage":")" + stage + R"(","interval":0,"keys":{)" + keys + "}," + values + "}";
}

/// The log2 histogram of the workload's offsets (0..kN-1 in each of kW children).
inline std::string hist_values() {
  std::string buckets;
  auto add = [&](long lo, long hi) {
    const long n = kW * (std::min(hi, kN) - lo);
    buckets += std::string(buckets.empty() ? "" : ",") + R"({"lo":)" + std::to_string(lo) +
               R"(,"hi":)" + std::to_string(hi) + R"(,"count":)" + std::to_string(n) + "}";
  };
  add(0, 1);
  for (long lo = 1; lo < kN; lo *= 2)
    add(lo, lo * 2);
  const long sum = kW * (kN - 1) * kN / 2;  // of the offsets
  return R"("count":)" + std::to_string(kCalls) + R"(,"sum":)" + std::to_string(sum) +
         R"(,"buckets":[)" + buckets + "]";
}

inline std::vector<Shape> shapes() {
  const std::string n = std::to_string(kCalls);
  const std::string comm = R"("comm":"oracle_workload")";
  return {
      {"probe_filter_count",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "count")",
       {row("count", "", R"("count":)" + n)}},
      {"probe_filter_by_comm",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "count"
by = ["comm"])",
       {row("count", comm, R"("count":)" + n)}},
      {"probe_filter_glob_and_stage_filter",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345 && comm ~ \"oracle_*\"")",
       R"([[stage]]
use = "filter"
expr = "offset < 1000"
[[stage]]
use = "count"
by = ["comm"])",
       {row("count", comm, R"("count":)" + std::to_string(kW * 1000))}},
      {"stage_filter_sum",
       R"(tracepoint = "syscalls:sys_enter_lseek")",
       R"([[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
use = "sum"
field = "offset"
by = ["comm"])",
       {row("sum", comm, R"("sum":)" + std::to_string(kOffsetSum))}},
      {"stage_filter_max",
       R"(tracepoint = "syscalls:sys_enter_lseek")",
       R"([[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
use = "max"
field = "offset"
by = ["comm"])",
       {row("max", comm, R"("max":)" + std::to_string(kN - 1))}},
      {"probe_filter_min",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345 && offset >= 7")",
       R"([[stage]]
use = "min"
field = "offset")",
       {row("min", "", R"("min":7)")}},
      {"probe_filter_hist",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "hist"
field = "offset")",
       {row("hist", "", hist_values())}},
      {"count_by_pid",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "count"
by = ["pid"])",
       {},
       true,
       true},
      // Stage chains (configs/README.md, "Stages after an aggregation"): an aggregation passes
      // its events on, so a second one aggregates the same events and a filter after it
      // filters them; in the kernel such a pipeline runs in user space, an output of the
      // tables alone stays there. The same tables on every path.
      {"chain_count_then_sum",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "count"
by = ["comm"]
[[stage]]
use = "sum"
field = "offset"
by = ["comm"])",
       {row("count", comm, R"("count":)" + n),
        row("sum", comm, R"("sum":)" + std::to_string(kOffsetSum))},
       /*system_wide=*/true,
       /*pids=*/false,
       /*in_kernel=*/false},
      {"chain_max_filter_count",
       R"(tracepoint = "syscalls:sys_enter_lseek")",
       R"([[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
use = "max"
field = "offset"
by = ["comm"]
[[stage]]
use = "filter"
expr = "offset < 1000"
[[stage]]
use = "count"
by = ["comm"])",
       {row("max", comm, R"("max":)" + std::to_string(kN - 1)),
        row("count", comm, R"("count":)" + std::to_string(kW * 1000))},
       /*system_wide=*/true,
       /*pids=*/false,
       /*in_kernel=*/false},
      {"chain_hist_then_tables",
       R"(tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345")",
       R"([[stage]]
use = "hist"
field = "offset"
[[stage]]
use = "jsonl")",
       {row("hist", "", hist_values())}},
      // raw_syscalls' id named: the workload's lseek calls are all its lseek calls (task targets
      // only: system-wide, other processes' lseek calls count too).
      {"raw_syscalls_by_name",
       R"(tracepoint = "raw_syscalls:sys_enter"
filter = "id == 8")",
       R"([[stage]]
use = "count"
by = ["syscall"])",
       {row("count", R"("syscall":"lseek")", R"("count":)" + n)},
       /*system_wide=*/false},
  };
}

/// The files the workload opens with a DIR argument (tree W N DIR).
inline void make_workload_files(const fs::path& dir) {
  std::ofstream(dir / "oracle-a") << "a";
  std::ofstream(dir / "oracle-b") << "b";
}

inline std::string recipe_text(const Shape& s) {
  return std::string("[recipe]\nname = \"oracle-") + s.name + "\"\n[[probe]]\nname = \"p\"\n" +
         s.probe + "\n" + s.stages + "\n";
}

/// The final table's lines, without their time, sorted; and the probe's summary.
struct Outcome {
  std::vector<std::string> rows;
  std::string summary;
  std::string err;
  int exit_code = -1;
};

inline Outcome outcome(const std::string& out, const std::string& err, int code) {
  Outcome o;
  o.err = err;
  o.exit_code = code;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(R"({"stage":")"))
      o.rows.push_back(std::regex_replace(line, std::regex(R"("time":[0-9]+,)"), ""));
    else if (line.starts_with(R"({"type":"summary")"))
      o.summary = line;
  }
  std::sort(o.rows.begin(), o.rows.end());
  return o;
}

inline long long json_number(const std::string& text, const std::string& key) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\":([0-9]+)")))
    return std::stoll(m[1]);
  return -1;
}

/// Checks one path's outcome against the known answer.
inline void expect_answer(const Shape& s, const Outcome& o, const std::string& path) {
  SCOPED_TRACE(path);
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_EQ(json_number(o.summary, "lost"), 0) << o.summary;
  if (!s.rows.empty()) {
    auto want = s.rows;
    std::sort(want.begin(), want.end());
    EXPECT_EQ(o.rows, want) << o.err;
  }
  if (std::string(s.name) == "count_by_pid") {  // one row per child, kN calls each
    ASSERT_EQ(o.rows.size(), static_cast<std::size_t>(kW)) << o.err;
    for (const auto& r : o.rows)
      EXPECT_EQ(json_number(r, "count"), kN) << r;
  }
}

/// The longest a `tracer run` of a test may take (its command included).
inline constexpr int kRunLimitSeconds = 60;

/// Runs `tracer run` on the shape with a command target.
inline Outcome run_command(const fs::path& recipe,
                           const std::string& flags,
                           const std::string& command) {
  // A run that hangs fails as such (exit 124 from timeout) instead of using up ctest's limit.
  const auto r = shell("timeout -k 5 " + std::to_string(kRunLimitSeconds) + " " + kTracer +
                       " run " + recipe.string() + " --json " + flags + " -- " + command);
  return outcome(r.out,
                 r.exit_code == 124 ? "tracer run did not end within " +
                                          std::to_string(kRunLimitSeconds) + " s\n" + r.err
                                    : r.err,
                 r.exit_code);
}

inline pid_t spawn(const std::vector<std::string>& argv, const fs::path& out, const fs::path& err) {
  return testing::spawn_to_file(argv, out, err);
}

/// The exit code of `pid`, waited for at most `seconds` (testing::exit_code_within: -2 when
/// it did not end and was killed).
inline int wait_code_within(pid_t pid, int seconds) {
  return testing::exit_code_within(pid, seconds);
}

inline int wait_code(pid_t pid) {
  return wait_code_within(pid, kRunLimitSeconds);
}

inline std::vector<std::string> split_flags(const std::string& flags) {
  std::vector<std::string> out;
  std::istringstream in(flags);
  for (std::string f; in >> f;)
    out.push_back(f);
  return out;
}

// A pid or command target per event: through the BPF ring buffer (the default), the BPF perf
// channel (both: the delivery program tests the target) and the target's own perf events.
inline const std::vector<std::pair<std::string, std::string>> kTaskPaths = {
    {"kernel", "--placement kernel"},
    {"user-ringbuf", "--placement user"},
    {"user-perf-channel", "--placement user --channel perf"},
    {"user-perf-events", "--placement user --delivery perf"},
};
inline const std::vector<std::pair<std::string, std::string>> kSystemPaths = {
    {"kernel", "--placement kernel"},
    {"user-ringbuf", "--placement user --channel ringbuf"},
    {"user-perf-channel", "--placement user --channel perf"},
    {"user-perf-events", "--placement user --delivery perf"},
};

}  // namespace tracer::oracle
