// C++ names in uprobe specs, live: every overload and pattern match of tests/programs/
// cxx_target.cpp counted exactly in both placements and as bpftrace counts them.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/beside_bpftrace.hpp"
#include "support/cli.hpp"
#include "support/temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::testing::shell;
using tracer::testing::slurp;
using tracer::testing::TempDir;

// Calls per run of cxx_target N (its header): a probe's count is N times this.
struct Spec {
  const char* probe;
  const char* ours;      // after "PATH:"
  const char* bpftrace;  // bpftrace 0.17's quoted form (it has no cpp: prefix)
  std::uint64_t per_n;
  std::uint64_t bpftrace_per_n;
};
// bpftrace matches a pattern against the whole demangled text, so "shop::*" misses the template
// instance "int shop::twice<int>(int)" (its return type comes first): 6 calls in 25 fewer.
constexpr Spec kSpecs[] = {
    {"get_int", "shop::Cache::get(int)", "shop::Cache::get(int)", 5, 5},  // operator() calls it
    {"get_all", "shop::Cache::get", "shop::Cache::get", 7, 7},
    {"cache_all", "shop::Cache::*", "shop::Cache::*", 14, 14},
    {"size", "cpp:shop::Cache::size", "shop::Cache::size", 3, 3},
    {"shop_all", "shop::*", "shop::*", 25, 25 - 6},
};
constexpr std::uint64_t kN = 500;  // per copy; a copy on each CPU

fs::path recipe(const TempDir& dir, const fs::path& target, const std::string& placement) {
  std::string text = fmt::format("[recipe]\nname = \"cxx\"\nplacement = \"{}\"\n", placement);
  for (const auto& s : kSpecs)
    text += fmt::format("[[probe]]\nname = \"{}\"\nuprobe = \"{}:{}\"\n", s.probe, target.string(),
                        s.ours);
  text += "[[stage]]\nuse = \"count\"\n";
  const auto p = dir.path() / (placement + ".toml");
  std::ofstream(p) << text;
  return p;
}

TEST(CxxUprobes, EveryOverloadAndMatchCountsInBothPlacementsAsBpftraceCounts) {
  TempDir dir;
  // A copy of its own: a uprobe is on an inode, so no other copy of the suite is counted.
  const auto target = tracer::testing::own_program(dir.path(), TRACER_CXX_TARGET, "cxxt");
  std::string program;
  for (const auto& s : kSpecs)
    program += fmt::format("uprobe:{}:\"{}\" {{ @{} = count(); }}\n", target.string(), s.bpftrace,
                           s.probe);
  const auto runs = tracer::testing::run_beside_bpftrace(
      TRACER_CLI_PATH, dir.path(),
      {{"kernel", recipe(dir, target, "kernel")}, {"user", recipe(dir, target, "user")}}, program,
      fmt::format("taskset -c 0 {0} {1} & taskset -c 1 {0} {1} & wait", target.string(), kN));
  ASSERT_EQ(runs.problem, "");
  for (const auto& [placement, json] : runs.tracer) {
    for (const auto& s : kSpecs) {
      EXPECT_EQ(tracer::testing::summary_events(json, s.probe), 2 * kN * s.per_n)
          << placement << " " << s.probe << json;
    }
  }
  for (const auto& s : kSpecs) {
    if (runs.bpftrace) {
      EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, s.probe), 2 * kN * s.bpftrace_per_n)
          << s.probe << *runs.bpftrace;
    }
  }
}

// A started command: the probe's places follow the target's tasks, each counted
// once (a tracefs uprobe's in-kernel program is on a tracepoint of each place).
TEST(CxxUprobes, ACommandTargetCountsEveryPlaceOnce) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_CXX_TARGET, "cxxc");
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r = tracer::testing::run_tracer(fmt::format("run {} --json -- {} {}",
                                                           recipe(dir, target, placement).string(),
                                                           target.string(), 2 * kN));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& s : kSpecs)
      EXPECT_EQ(tracer::testing::summary_events(r.out, s.probe), 2 * kN * s.per_n)
          << s.probe << r.out;
  }
}

TEST(CxxUprobes, TheListCommandShowsWhatASpecProbes) {
  const auto listed = tracer::testing::run_tracer(
      fmt::format("list uprobes {} 'shop::Cache::get'", TRACER_CXX_TARGET));
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("shop::Cache::get(int)  (_ZN4shop5Cache3getEi)"), std::string::npos)
      << listed.out;
  EXPECT_NE(listed.out.find("(2 functions;"), std::string::npos) << listed.out;
  const auto missing = tracer::testing::run_tracer(
      fmt::format("list uprobes {} 'shop::Cache::gte'", TRACER_CXX_TARGET));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("did you mean shop::Cache::get"), std::string::npos) << missing.err;
}

}  // namespace
