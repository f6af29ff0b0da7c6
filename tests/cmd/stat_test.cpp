// tracer stat end to end: where the counts go, the command's exit status, repeats, event
// modifiers and events this machine lacks.
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/scratch_path.hpp"
#include "support/test_paths.hpp"

namespace {

namespace fs = std::filesystem;

using Result = tracer::testing::CliResult;

Result run_stat(const std::string& args) {
  return tracer::testing::run_tracer(args);
}

/// The count printed for `event` ("   123       event  # ..."), or -1.
double count_of(const std::string& text, const std::string& event) {
  const std::regex line(R"((?:^|\n)\s*([0-9.]+)\s+(?:msec\s+)?)" +
                        std::regex_replace(event, std::regex(R"([.*+?^$(){}|\[\]\\])"), R"(\$&)") +
                        R"(\s)");
  std::smatch m;
  if (!std::regex_search(text, m, line))
    return -1;
  return std::stod(m[1].str());
}

using tracer::testing::kSyscaller;

// perf's modifiers: :u counts user mode only, :k kernel mode only (perf stat gives the same
// numbers). sched_process_exec fires in the kernel, once for the command; a page fault is in
// one mode or the other.
TEST(CliStat, EventModifiersExcludeKernelOrUser) {
  const auto r = run_stat(
      "stat -e sched:sched_process_exec:u,sched:sched_process_exec:k,page-faults:u,"
      "page-faults:k,page-faults -- " +
      kSyscaller + " getppid 500");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "sched:sched_process_exec:u"), 0) << r.err;
  EXPECT_EQ(count_of(r.err, "sched:sched_process_exec:k"), 1) << r.err;
  const double user_faults = count_of(r.err, "page-faults:u");
  const double kernel_faults = count_of(r.err, "page-faults:k");
  EXPECT_GT(user_faults, 0) << r.err;
  EXPECT_EQ(user_faults + kernel_faults, count_of(r.err, "page-faults")) << r.err;
}

// A hardware event on a machine without a PMU is "not here", not "unknown": the command runs and
// the row says <not supported> with exit 0, as perf stat (the issue "boundaries", item 8); where
// the PMU exists, it counts.
TEST(CliStat, HardwareEventWithoutAPmuSaysSo) {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_HARDWARE;
  a.config = PERF_COUNT_HW_CPU_CYCLES;
  a.disabled = 1;
  const long fd = ::syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
  const int err = fd < 0 ? errno : 0;
  if (fd >= 0)
    ::close(static_cast<int>(fd));

  const auto r = run_stat("stat -e cycles -- " + kSyscaller + " getppid 10");
  EXPECT_EQ(r.err.find("unknown event"), std::string::npos) << r.err;
  if (fd >= 0) {
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_GT(count_of(r.err, "cycles"), 0) << r.err;
    return;
  }
  ASSERT_TRUE(err == ENOENT || err == EOPNOTSUPP) << "perf_event_open: " << err;
  // As perf stat: the command runs (exit 0), the row says <not supported>, the reason once.
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("cycles: no hardware PMU on this machine"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(<not supported>\s+cycles)"))) << r.err;
  EXPECT_NE(r.err.find("Performance counter stats for"), std::string::npos) << r.err;
  // The same rows as perf stat's CSV where perf runs.
  const auto csv = run_stat("stat -x, -e cycles,instructions -- " + kSyscaller + " getppid 10");
  EXPECT_EQ(csv.exit_code, 0) << csv.err;
  const auto perf = tracer::testing::shell("perf stat -x, -e cycles,instructions -- " + kSyscaller +
                                           " getppid 10");
  if (perf.exit_code == 0) {
    for (const char* row :
         {"<not supported>,,cycles,0,100.00,,", "<not supported>,,instructions,0,100.00,,"}) {
      EXPECT_NE(perf.err.find(row), std::string::npos) << perf.err;
      EXPECT_NE(csv.err.find(row), std::string::npos) << csv.err;
    }
  }
}

// -I: every event falls in exactly one interval, the last partial one at the command's end
// included (perf stat prints it too): the intervals' counts sum to the calls made.
TEST(CliStat, IntervalCountsSumToTheTotal) {
  const auto r = run_stat("stat -x, -I 100 -e syscalls:sys_enter_lseek -- /bin/sh -c '" +
                          kSyscaller + " lseek 3000; sleep 0.25; " + kSyscaller + " lseek 2000'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.err);
  long long sum = 0;
  int rows = 0;
  for (std::string l; std::getline(lines, l);) {
    if (l.find(",syscalls:sys_enter_lseek,") == std::string::npos)
      continue;
    ++rows;
    const auto a = l.find(',');
    const auto b = l.find(',', a + 1);
    const std::string value = l.substr(a + 1, b - a - 1);
    if (value != "<not counted>")
      sum += std::stoll(value);
  }
  EXPECT_GE(rows, 3) << r.err;
  EXPECT_EQ(sum, 5000) << r.err;
}

// `tracer list pmus --json`: every PMU of sysfs with its type, and the perfmon properties with
// the seed's field names (perfmon_ioctl_properties_t), parsed by a JSON parser.
TEST(CliListPmus, JsonListsEveryPmuAndThePerfmonProperties) {
  const auto r = run_stat("list pmus --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const fs::path json =
      tracer::testing::scratch_path("pmus_" + std::to_string(::getpid()) + ".json");
  std::ofstream(json) << r.out;
  const auto parsed = tracer::testing::shell(
      "python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); "
      "print(\" \".join(sorted(p[\"name\"]+\"=\"+str(p[\"type\"]) for p in d[\"pmus\"]))); "
      "print(\" \".join(sorted(d[\"properties\"])))' " +
      json.string());
  fs::remove(json);
  ASSERT_EQ(parsed.exit_code, 0) << parsed.err << r.out;
  std::vector<std::string> want;
  for (const auto& e : fs::directory_iterator("/sys/bus/event_source/devices")) {
    std::ifstream type(e.path() / "type");
    std::string t;
    type >> t;
    want.push_back(e.path().filename().string() + "=" + t);
  }
  std::sort(want.begin(), want.end());
  std::string line;
  for (const auto& w : want)
    line += (line.empty() ? "" : " ") + w;
  std::istringstream lines(parsed.out);
  std::string pmus, fields;
  std::getline(lines, pmus);
  std::getline(lines, fields);
  EXPECT_EQ(pmus, line);
  for (const char* f :
       {"api_version", "pm_version", "max_num_events", "max_num_fixed_events",
        "max_fixed_counter_width", "max_num_programmable_events", "max_programmable_counter_width",
        "max_num_misc_events", "max_misc_counter_width", "has_last_branch"})
    EXPECT_NE(fields.find(f), std::string::npos) << f << " in " << fields;
}

}  // namespace
