// The perfmon sink and `tracer replay` of its buffers, end to end: a recipe records 500 getppid
// calls of a command and the cpu-clock samples of a busy loop as perfmon buffers (TICK and PC
// records); the file replayed through a count recipe gives each probe's count as the run counted
// it (the calls exactly), and printed it shows one record per sample.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace tracer {
namespace {

using testing::shell;
using testing::slurp;

using tracer::testing::kTracer;

constexpr const char* kProbes = R"([recipe]
name = "pm"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[probe]]
name = "clock"
software = "cpu-clock"
freq = 499
)";

long long events_of(const std::string& json, const std::string& probe) {
  std::smatch m;
  if (!std::regex_search(json, m, std::regex("\"" + probe + R"(":\{"events":([0-9]+))")))
    return -1;
  return std::stoll(m[1]);
}

TEST(CliPerfmon, RecordedBuffersReplayWithTheRunsCounts) {
  testing::TempDir dir;
  const auto file = dir.path() / "out.perfmon";
  const auto record = dir.path() / "record.toml";
  // The command's own calls only (the shell that runs it makes one too).
  std::ofstream(record) << kProbes << R"([[stage]]
use = "filter"
expr = "probe == \"clock\" || comm == \"tracer_test_sys\""
[[stage]]
use = "perfmon"
path = ")" << file.string()
                        << "\"\n";
  const auto count = dir.path() / "count.toml";
  std::ofstream(count) << kProbes << "[[stage]]\nuse = \"count\"\nby = [\"probe\"]\n";
  const auto run = shell(kTracer + " run " + record.string() + " --json -- /bin/sh -c '" +
                         TRACER_SYSCALLER_PATH + " getppid 500; " + TRACER_BUSY_LOOP + " 300'");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_GE(events_of(run.out, "getppid"), 500) << run.out;
  const long long clock = events_of(run.out, "clock");
  ASSERT_GT(clock, 20) << run.out;
  EXPECT_NE(run.out.find(R"("perfmon.dropped":0)"), std::string::npos) << run.out;

  const auto replay =
      shell(kTracer + " replay " + file.string() + " " + count.string() + " --json");
  ASSERT_EQ(replay.exit_code, 0) << replay.err;
  EXPECT_NE(replay.out.find(R"("keys":{"probe":"getppid"},"count":500})"), std::string::npos)
      << replay.out;
  EXPECT_NE(replay.out.find(R"("keys":{"probe":"clock"},"count":)" + std::to_string(clock) + "}"),
            std::string::npos)
      << replay.out;

  const auto print = shell(kTracer + " replay " + file.string());
  ASSERT_EQ(print.exit_code, 0) << print.err;
  std::istringstream lines(print.out);
  long long ticks = 0, pcs = 0;
  for (std::string l; std::getline(lines, l);) {
    ticks += l.find(" TICK ") != std::string::npos ? 1 : 0;
    pcs += l.find(" PC ") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(ticks, 500);
  EXPECT_EQ(pcs, clock);
}

}  // namespace
}  // namespace tracer
