// tracer replay end to end: files recorded here by perf, replayed by the CLI as a user runs it.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "support/perf_tool.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::testing::shell;

const std::string kTracer = TRACER_CLI_PATH;
const std::string kSyscaller = TRACER_SYSCALLER_PATH;

#define REQUIRE_PERF()                                                \
  do {                                                                \
    if (auto why = tracer::testing::perf_unavailable(); !why.empty()) \
      GTEST_SKIP() << why;                                            \
  } while (0)

std::string record_lseek(const tracer::testing::TempDir& dir, int calls, bool pipe = false) {
  const auto file = (dir.path() / (pipe ? "pipe.data" : "lseek.data")).string();
  const std::string cmd = "perf record -q -e syscalls:sys_enter_lseek -o " +
                          (pipe ? std::string("- ") : file + " ") + "-- " + kSyscaller + " lseek " +
                          std::to_string(calls) + (pipe ? " > " + file : "");
  EXPECT_EQ(shell(cmd).exit_code, 0);
  return file;
}

fs::path write_recipe(const tracer::testing::TempDir& dir, const std::string& text) {
  const auto p = dir.path() / "recipe.toml";
  std::ofstream(p) << text;
  return p;
}

const char* kCountRecipe = R"([recipe]
name = "lseek"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["comm"]
)";

using Key = std::tuple<std::uint32_t, std::uint32_t, std::string>;  // tid, cpu, time

std::multiset<Key> keys(const std::string& text) {
  static const std::regex line(R"(^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(\S+):.*$)");
  std::multiset<Key> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) {
      out.emplace(static_cast<std::uint32_t>(std::stoul(m[2])),
                  static_cast<std::uint32_t>(std::stoul(m[3])), m[4]);
    }
  }
  return out;
}

TEST(CliReplay, PrintsLikePerfScript) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 700);
  const auto ours = shell(kTracer + " replay " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const auto perfs = shell("perf script -i " + file + " -F comm,tid,cpu,time,event");
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto a = keys(ours.out), b = keys(perfs.out);
  EXPECT_EQ(a.size(), 700U);
  EXPECT_EQ(a, b);
  // Fields by name, decoded with the file's own format.
  EXPECT_NE(ours.out.find("syscalls:sys_enter_lseek: __syscall_nr=8 fd=12345 offset=699 whence=1"),
            std::string::npos);
  EXPECT_NE(ours.out.find("tracer_test_sys"), std::string::npos);
}

TEST(CliReplay, RecipeCountsTheRecordedEventsFromAFileAndFromStdin) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto recipe = write_recipe(dir, kCountRecipe);
  const auto file = record_lseek(dir, 1234);
  const std::regex count(R"re("keys":\{"comm":"tracer_test_sys"\},"count":1234\})re");
  const auto r = shell(kTracer + " replay " + file + " " + recipe.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, count)) << r.out;

  const auto pipe_file = record_lseek(dir, 1234, /*pipe=*/true);
  const auto p =
      shell("cat " + pipe_file + " | " + kTracer + " replay - " + recipe.string() + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(std::regex_search(p.out, count)) << p.out;
}

TEST(CliReplay, RecipeProbeAbsentFromTheFileIsAUsageError) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 10);
  const auto recipe = write_recipe(dir, R"([recipe]
name = "x"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
)");
  const auto r = shell(kTracer + " replay " + file + " " + recipe.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'getppid' (tracepoint syscalls:sys_enter_getppid) not in"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the file has: syscalls:sys_enter_lseek"), std::string::npos) << r.err;
}

TEST(CliReplay, DamagedFilePrintsWhatWasReadThenTheOffset) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 300);
  auto bytes = tracer::testing::read_file(file);
  ASSERT_GE(bytes.size(), 56U);
  std::uint64_t data_off = 0, data_size = 0;
  std::memcpy(&data_off, bytes.data() + 40, 8);
  std::memcpy(&data_size, bytes.data() + 48, 8);
  ASSERT_LE(data_off + data_size, bytes.size());
  const std::uint64_t cut_at = data_off + data_size / 2 + 3;
  // What the file holds before the cut, from its own record headers (perf_event_header: u32
  // type, u16 misc, u16 size): the samples that end before it, and the record it cuts. A loaded
  // machine changes how perf interleaves records, not this count.
  std::size_t samples_before = 0, samples_total = 0;
  std::uint64_t cut_record = 0;
  for (std::uint64_t off = data_off; off + 8 <= data_off + data_size;) {
    std::uint32_t type = 0;
    std::uint16_t size = 0;
    std::memcpy(&type, bytes.data() + off, 4);
    std::memcpy(&size, bytes.data() + off + 6, 2);
    ASSERT_GE(size, 8U) << "record at " << off;
    if (type == 9 /* PERF_RECORD_SAMPLE */) {
      ++samples_total;
      if (off + size <= cut_at)
        ++samples_before;
    }
    if (off < cut_at && off + size > cut_at)
      cut_record = off;
    off += size;
  }
  ASSERT_GT(samples_total, 0U);
  EXPECT_LE(samples_total, 300U);
  ASSERT_GT(cut_record, 0U);
  bytes.resize(cut_at);  // cut inside a record
  const auto cut = dir.path() / "cut.data";
  tracer::testing::write_file(cut, bytes);
  const auto r = shell(kTracer + " replay " + cut.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(keys(r.out).size(), samples_before) << r.out;  // every sample before the cut
  EXPECT_GT(samples_before, 0U);
  EXPECT_LT(samples_before, samples_total);
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(fmt::format(R"(cut\.data: offset {} \(0x{:x}\): )", cut_record, cut_record))))
      << r.err << " (the cut record starts at " << cut_record << ")";
  const auto missing = shell(kTracer + " replay " + (dir.path() / "nope.data").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("No such file"), std::string::npos) << missing.err;
}

}  // namespace
