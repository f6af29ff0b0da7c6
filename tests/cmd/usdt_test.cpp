// USDT probes, live: tests/programs/usdt_target.c's semaphore-guarded probe and probe of two
// call sites counted exactly in both placements, system-wide and for a command, and as bpftrace
// counts them.
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

struct Spec {
  const char* probe;
  const char* name;  // after "PATH:tracer_test:"
  std::uint64_t per_n;
};
// hit fires only while its semaphore is set: its count says the kernel set it.
constexpr Spec kSpecs[] = {{"hit", "hit", 1}, {"tick", "tick", 3}, {"both", "*", 4}};
constexpr std::uint64_t kN = 2000;  // per copy; a copy on each CPU

fs::path recipe(const TempDir& dir, const fs::path& target, const std::string& placement) {
  std::string text = fmt::format("[recipe]\nname = \"usdt\"\nplacement = \"{}\"\n", placement);
  for (const auto& s : kSpecs)
    text += fmt::format("[[probe]]\nname = \"{}\"\nusdt = \"{}:tracer_test:{}\"\n", s.probe,
                        target.string(), s.name);
  text += "[[stage]]\nuse = \"count\"\n";
  const auto p = dir.path() / (placement + ".toml");
  std::ofstream(p) << text;
  return p;
}

TEST(Usdt, EveryCallSiteCountsInBothPlacementsAsBpftraceCounts) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdt");
  const auto runs = tracer::testing::run_beside_bpftrace(
      TRACER_CLI_PATH, dir.path(),
      {{"kernel", recipe(dir, target, "kernel")}, {"user", recipe(dir, target, "user")}},
      fmt::format("usdt:{0}:tracer_test:hit {{ @hit = count(); @both = count(); }}\n"
                  "usdt:{0}:tracer_test:tick {{ @tick = count(); @both = count(); }}\n",
                  target.string()),
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
      EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, s.probe), 2 * kN * s.per_n)
          << s.probe << *runs.bpftrace;
    }
  }
}

TEST(Usdt, ACommandTargetCountsEveryCallSite) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdtc");
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r = tracer::testing::run_tracer(fmt::format(
        "run {} --json -- {} {}", recipe(dir, target, placement).string(), target.string(), kN));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const auto& s : kSpecs)
      EXPECT_EQ(tracer::testing::summary_events(r.out, s.probe), kN * s.per_n) << s.probe << r.out;
  }
}

TEST(Usdt, TheListCommandShowsProbesSitesAndArguments) {
  const auto listed = tracer::testing::run_tracer(fmt::format("list usdt {}", TRACER_USDT_TARGET));
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("tracer_test:hit  (semaphore at 0x"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("arg0: s64 %rdi, arg1: s32 $-7, arg2: u64 "), std::string::npos)
      << listed.out;
  EXPECT_NE(listed.out.find("(2 probes, 3 call sites"), std::string::npos) << listed.out;
  TempDir dir;
  const auto bad = dir.path() / "typo.toml";
  std::ofstream(bad) << fmt::format(
      "[recipe]\nname = \"t\"\n[[probe]]\nname = \"p\"\nusdt = \"{}:tracer_test:hti\"\n"
      "[[stage]]\nuse = \"count\"\n",
      TRACER_USDT_TARGET);
  const auto typo = tracer::testing::run_tracer("check " + bad.string());
  EXPECT_EQ(typo.exit_code, 2) << typo.err;
  // argN are not the function ABI's registers on a usdt probe (its arguments are its note's
  // operands, not decoded yet): an unknown field at its position, never another value.
  const auto args = dir.path() / "args.toml";
  std::ofstream(args) << fmt::format(
      "[recipe]\nname = \"t\"\n[[probe]]\nname = \"p\"\nusdt = \"{}:tracer_test:hit\"\n"
      "[[stage]]\nuse = \"count\"\nby = [\"arg0\"]\n",
      TRACER_USDT_TARGET);
  const auto arg = tracer::testing::run_tracer("check " + args.string());
  EXPECT_EQ(arg.exit_code, 2) << arg.out << arg.err;
  EXPECT_NE(arg.err.find(":8:7: unknown field 'arg0'"), std::string::npos) << arg.err;
  EXPECT_NE(typo.err.find(":5:8: usdt: no probe tracer_test:hti"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean tracer_test:hit"), std::string::npos) << typo.err;
}

}  // namespace
