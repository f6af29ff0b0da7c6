// USDT probes, live: tests/programs/usdt_target.c's semaphore-guarded probe and probe of two
// call sites counted exactly in both placements, system-wide and for a command, and as bpftrace
// counts them.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

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
constexpr int kN = 2000;  // per copy; a copy on each CPU

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

std::map<std::string, std::uint64_t> probe_events(const std::string& json) {
  std::map<std::string, std::uint64_t> out;
  for (const auto& s : kSpecs) {
    const std::regex re(fmt::format(R"re("{}":\{{"events":(\d+))re", s.probe));
    std::smatch m;
    if (std::regex_search(json, m, re))
      out[s.probe] = std::stoull(m[1]);
  }
  return out;
}

TEST(Usdt, EveryCallSiteCountsInBothPlacementsAsBpftraceCounts) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdt");
  std::vector<pid_t> runs;
  std::map<std::string, fs::path> outs;
  for (const std::string placement : {"kernel", "user"}) {
    outs[placement] = dir.path() / (placement + ".out");
    runs.push_back(tracer::testing::spawn_to_file(
        {TRACER_CLI_PATH, "run", recipe(dir, target, placement).string(), "--json", "-v", "-d",
         "60s"},
        outs[placement], dir.path() / (placement + ".err")));
  }
  const bool bpftrace = fs::exists("/usr/bin/bpftrace");
  const auto bt_out = dir.path() / "bt.out";
  if (bpftrace) {
    std::string program = tracer::testing::kBpftraceReady;
    program += fmt::format(
        "usdt:{0}:tracer_test:hit {{ @hit = count(); @both = count(); }}\n"
        "usdt:{0}:tracer_test:tick {{ @tick = count(); @both = count(); }}\n"
        "interval:s:60 {{ exit(); }}\n",
        target.string());
    const auto bt = dir.path() / "usdt.bt";
    std::ofstream(bt) << program;
    runs.push_back(tracer::testing::spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out));
    ASSERT_TRUE(tracer::testing::wait_for_text(bt_out, tracer::testing::kBpftraceReadyLine))
        << slurp(bt_out);
  }
  for (const std::string placement : {"kernel", "user"}) {
    const auto err = dir.path() / (placement + ".err");
    ASSERT_TRUE(tracer::testing::wait_for_text(err, "tracer: rings:")) << slurp(err);
  }
  const auto w =
      shell(fmt::format("taskset -c 0 {0} {1} & taskset -c 1 {0} {1} & wait", target.string(), kN));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  for (const pid_t pid : runs)
    ::kill(pid, SIGINT);
  for (const pid_t pid : runs)
    ASSERT_TRUE(tracer::testing::exited_ok(pid));
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const std::string json = slurp(outs[placement]);
    const auto got = probe_events(json);
    for (const auto& s : kSpecs)
      EXPECT_EQ(got.contains(s.probe) ? got.at(s.probe) : 0, 2 * kN * s.per_n) << s.probe << json;
  }
  if (bpftrace) {
    const std::string theirs = slurp(bt_out);
    for (const auto& s : kSpecs) {
      std::smatch m;
      const std::regex re(fmt::format(R"re(@{}: (\d+))re", s.probe));
      ASSERT_TRUE(std::regex_search(theirs, m, re)) << s.probe << theirs;
      EXPECT_EQ(std::stoull(m[1]), 2 * kN * s.per_n) << s.probe << theirs;
    }
  }
  // The probes are gone with the tracers: the semaphore is down again and hit no longer fires
  // (a uprobe left behind would keep it up).
  const auto check =
      shell(fmt::format("grep -c usdt /sys/kernel/tracing/uprobe_events "
                        "2>/dev/null || true"));
  EXPECT_EQ(check.out.find_first_not_of("0\n"), std::string::npos) << check.out;
}

TEST(Usdt, ACommandTargetCountsEveryCallSite) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdtc");
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r = tracer::testing::run_tracer(fmt::format(
        "run {} --json -- {} {}", recipe(dir, target, placement).string(), target.string(), kN));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto got = probe_events(r.out);
    for (const auto& s : kSpecs)
      EXPECT_EQ(got.contains(s.probe) ? got.at(s.probe) : 0, kN * s.per_n) << s.probe << r.out;
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
  EXPECT_NE(typo.err.find(":5:8: usdt: no probe tracer_test:hti"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean tracer_test:hit"), std::string::npos) << typo.err;
}

}  // namespace
