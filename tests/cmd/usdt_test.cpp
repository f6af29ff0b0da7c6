// USDT probes, live: tests/programs/usdt_target.c's semaphore-guarded probe and probe of two
// call sites counted exactly in both placements, system-wide and for a command, and as bpftrace
// counts them.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

// The arguments' recipe: hit's (i, -7, "usdt") and tick's i (two call sites that keep it in
// different registers), summed, keyed and filtered by their string.
fs::path args_recipe(const TempDir& dir, const fs::path& target, const std::string& placement) {
  const auto p = dir.path() / ("args-" + placement + ".toml");
  std::ofstream(p) << fmt::format(R"([recipe]
name = "usdt-args"
placement = "{1}"
[[probe]]
name = "hit"
usdt = "{0}:tracer_test:hit"
strings = ["arg2"]
[[probe]]
name = "tick"
usdt = "{0}:tracer_test:tick"
[[pipeline]]
name = "hits"
[[pipeline.stage]]
use = "filter"
expr = 'probe == "hit"'
[[pipeline.stage]]
use = "sum"
field = "arg0"
by = ["arg1", "arg2"]
[[pipeline]]
name = "ticks"
[[pipeline.stage]]
use = "filter"
expr = 'probe == "tick"'
[[pipeline.stage]]
use = "sum"
field = "arg0"
[[pipeline]]
name = "words"
[[pipeline.stage]]
use = "filter"
expr = 'probe == "hit" && arg2 == "usdt" && arg1 == -7'
[[pipeline.stage]]
use = "count"
)",
                                  target.string(), placement);
  return p;
}

/// Checks a run of args_recipe over `copies` runs of the target with N = kN.
void expect_args(const std::string& json, std::uint64_t copies) {
  const std::uint64_t sum_i = kN * (kN - 1) / 2;  // 0 + 1 + ... + N-1
  const auto has = [&](const std::string& row) {
    EXPECT_NE(json.find(row), std::string::npos) << row << "\n" << json;
  };
  has(fmt::format(R"("keys":{{"arg1":-7,"arg2":"usdt"}},"sum":{}}})", copies * sum_i));
  // tick: i at one site, i and i + 1 at the other.
  has(fmt::format(R"("keys":{{}},"sum":{}}})", copies * (3 * sum_i + kN)));
  has(fmt::format(R"("keys":{{}},"count":{}}})", copies * kN));
  EXPECT_EQ(json.find("string_faults"), std::string::npos) << json;
}

TEST(Usdt, ArgumentsReadInBothPlacementsAsBpftraceReadsThem) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdta");
  const auto runs = tracer::testing::run_beside_bpftrace(
      TRACER_CLI_PATH, dir.path(),
      {{"kernel", args_recipe(dir, target, "kernel")}, {"user", args_recipe(dir, target, "user")}},
      fmt::format("usdt:{0}:tracer_test:hit {{ @hs = sum(arg0); }}\n"
                  "usdt:{0}:tracer_test:hit /arg1 == -7 && str(arg2) == \"usdt\"/ "
                  "{{ @hw = count(); }}\n"
                  "usdt:{0}:tracer_test:tick {{ @ts = sum(arg0); }}\n",
                  target.string()),
      fmt::format("taskset -c 0 {0} {1} & taskset -c 1 {0} {1} & wait", target.string(), kN));
  ASSERT_EQ(runs.problem, "");
  for (const auto& [placement, json] : runs.tracer) {
    SCOPED_TRACE(placement);
    expect_args(json, 2);
  }
  if (runs.bpftrace) {
    const std::uint64_t sum_i = kN * (kN - 1) / 2;
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "hs"), 2 * sum_i) << *runs.bpftrace;
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "hw"), 2 * kN) << *runs.bpftrace;
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "ts"), 2 * (3 * sum_i + kN))
        << *runs.bpftrace;
  }
}

TEST(Usdt, ACommandTargetReadsItsArguments) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdtac");
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r = tracer::testing::run_tracer(
        fmt::format("run {} --json -- {} {}", args_recipe(dir, target, placement).string(),
                    target.string(), kN));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_args(r.out, 1);
  }
}

// Debian's python3.11: sys.audit(NAME, i) M times in a copy on each CPU, counted by the
// python:audit probe's first argument (the event's name, a `char *`) in both placements and
// by bpftrace. (3.11's function__entry fires only for frames entered from C: no oracle.)
TEST(Usdt, PythonAuditEventsCountByTheirName) {
  const fs::path python = "/usr/bin/python3.11";
  if (!fs::exists(python))
    GTEST_SKIP() << "no /usr/bin/python3.11 (Debian 12's python3): it is the workload";
  const auto listed = tracer::testing::run_tracer("list usdt " + python.string());
  if (listed.out.find("python:audit") == std::string::npos)
    GTEST_SKIP() << python << " has no python:audit USDT probe (built without --with-dtrace)";
  constexpr std::uint64_t kM = 3000;
  const std::string name = fmt::format("tracer.test.{}", ::getpid());  // ours, not a copy's
  TempDir dir;
  std::map<std::string, fs::path> recipes;
  for (const std::string placement : {"kernel", "user"}) {
    recipes[placement] = dir.path() / (placement + ".toml");
    std::ofstream(recipes[placement]) << fmt::format(R"([recipe]
name = "audit"
placement = "{}"
[[probe]]
name = "audit"
usdt = "{}:python:audit"
strings = ["arg0"]
[[stage]]
use = "filter"
expr = 'arg0 == "{}"'
[[stage]]
use = "count"
by = ["arg0"]
)",
                                                     placement, python.string(), name);
  }
  const auto script = dir.path() / "audit.py";
  std::ofstream(script) << fmt::format("import sys\nfor i in range({}):\n    sys.audit('{}', i)\n",
                                       kM, name);
  const auto runs = tracer::testing::run_beside_bpftrace(
      TRACER_CLI_PATH, dir.path(), recipes,
      fmt::format("usdt:{}:python:audit /str(arg0) == \"{}\"/ {{ @a = count(); }}\n",
                  python.string(), name),
      fmt::format("taskset -c 0 {0} {1} & taskset -c 1 {0} {1} & wait", python.string(),
                  script.string()));
  ASSERT_EQ(runs.problem, "");
  for (const auto& [placement, json] : runs.tracer) {
    SCOPED_TRACE(placement);
    EXPECT_NE(json.find(fmt::format(R"("keys":{{"arg0":"{}"}},"count":{}}})", name, 2 * kM)),
              std::string::npos)
        << json;
  }
  if (runs.bpftrace) {
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "a"), 2 * kM) << *runs.bpftrace;
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
  // A usdt probe's fields are its own arguments (hit has 3), never the function ABI's
  // registers: arg3 is an unknown field at its position.
  const auto args = dir.path() / "args.toml";
  std::ofstream(args) << fmt::format(
      "[recipe]\nname = \"t\"\n[[probe]]\nname = \"p\"\nusdt = \"{}:tracer_test:hit\"\n"
      "[[stage]]\nuse = \"count\"\nby = [\"arg3\"]\n",
      TRACER_USDT_TARGET);
  const auto arg = tracer::testing::run_tracer("check " + args.string());
  EXPECT_EQ(arg.exit_code, 2) << arg.out << arg.err;
  EXPECT_NE(arg.err.find(":8:7: unknown field 'arg3'"), std::string::npos) << arg.err;
  EXPECT_NE(arg.err.find("arg0, arg1, arg2"), std::string::npos) << arg.err;
  // `strings` names pointer arguments only.
  for (const auto& [strings, want] :
       {std::pair{"[\"arg1\"]", "string argument 'arg1': it is not a pointer"},
        std::pair{"[\"arg3\"]", "string argument 'arg3': the probe has 3 arguments"},
        std::pair{"[3]", "expected an argument name"}}) {
    const auto bad_strings = dir.path() / "strings.toml";
    std::ofstream(bad_strings) << fmt::format(
        "[recipe]\nname = \"t\"\n[[probe]]\nname = \"p\"\nusdt = "
        "\"{}:tracer_test:hit\"\nstrings = {}\n[[stage]]\nuse = \"count\"\n",
        TRACER_USDT_TARGET, strings);
    const auto r = tracer::testing::run_tracer("check " + bad_strings.string());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
  }
  EXPECT_NE(typo.err.find(":5:8: usdt: no probe tracer_test:hti"), std::string::npos) << typo.err;
  EXPECT_NE(typo.err.find("did you mean tracer_test:hit"), std::string::npos) << typo.err;
}

}  // namespace

/// The summary of `tracer run RECIPE --json -p PID` of a process started first (argv, whose last
/// argument is a go file it waits for): the go file is made once tracer is attached, and tracer
/// ends with the process.
std::string run_on_pid(const TempDir& dir,
                       const fs::path& recipe,
                       std::vector<std::string> target_argv,
                       const std::string& tag) {
  const auto go = dir.path() / ("go-" + tag);
  target_argv.push_back(go.string());
  const pid_t target = tracer::testing::spawn_to_file(target_argv, dir.path() / (tag + ".target"));
  tracer::testing::ReadyPipe ready;
  const auto out = dir.path() / (tag + ".out"), err = dir.path() / (tag + ".err");
  const pid_t t =
      tracer::testing::spawn_to_file({TRACER_CLI_PATH, "run", recipe.string(), "--json",
                                      "--ready-fd", ready.fd_arg(), "-p", std::to_string(target)},
                                     out, err);
  ready.close_writer();
  const bool attached = ready.wait();
  std::ofstream(go) << "go\n";
  EXPECT_TRUE(tracer::testing::exited_ok(target));
  EXPECT_TRUE(tracer::testing::exited_ok(t)) << slurp(err);
  EXPECT_TRUE(attached) << slurp(err);
  return slurp(out);
}

// -p of a process that runs already, its binary mapped before tracer starts: the kernel sets
// hit's semaphore in that process (ref_ctr_offset), so every guarded call fires, and every call
// site of tick counts, in both placements.
TEST(Usdt, APidTargetRunningAlreadyCountsEveryCallSiteAndItsSemaphoreIsSet) {
  TempDir dir;
  const auto target = tracer::testing::own_program(dir.path(), TRACER_USDT_TARGET, "usdtp");
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const std::string json = run_on_pid(dir, recipe(dir, target, placement),
                                        {target.string(), std::to_string(kN)}, placement);
    for (const auto& s : kSpecs)
      EXPECT_EQ(tracer::testing::summary_events(json, s.probe), kN * s.per_n) << s.probe << json;
  }
}

/// Copies libtracer_usdt.so and its user into `dir` (the user finds the library beside itself:
/// $ORIGIN), so that a system-wide probe on the copy counts this test's processes only.
/// @return {library, user}.
std::pair<fs::path, fs::path> own_library(const TempDir& dir) {
  const auto lib = dir.path() / fs::path(TRACER_USDT_LIB).filename();
  fs::copy_file(TRACER_USDT_LIB, lib, fs::copy_options::overwrite_existing);
  const auto user = tracer::testing::own_program(dir.path(), TRACER_USDT_LIB_USER, "usdtlib");
  return {lib, user};
}

fs::path lib_recipe(const TempDir& dir, const fs::path& lib, const std::string& placement) {
  const auto p = dir.path() / ("lib-" + placement + ".toml");
  std::ofstream(p) << fmt::format(R"([recipe]
name = "usdt-lib"
placement = "{1}"
[[probe]]
name = "ping"
usdt = "{0}:tracer_lib:ping"
[[pipeline]]
name = "i"
[[pipeline.stage]]
use = "sum"
field = "arg0"
[[pipeline]]
name = "twice"
[[pipeline.stage]]
use = "sum"
field = "arg1"
)",
                                  lib.string(), placement);
  return p;
}

/// Checks a run of lib_recipe over `copies` runs of the user with N = kN.
void expect_lib(const std::string& json, std::uint64_t copies) {
  const std::uint64_t sum_i = kN * (kN - 1) / 2;
  EXPECT_EQ(tracer::testing::summary_events(json, "ping"), copies * kN) << json;
  EXPECT_NE(json.find(fmt::format(R"("keys":{{}},"sum":{}}})", copies * sum_i)), std::string::npos)
      << json;
  EXPECT_NE(json.find(fmt::format(R"("keys":{{}},"sum":{}}})", copies * 2 * sum_i)),
            std::string::npos)
      << json;
}

// A probe in a shared library, its semaphore in the library: system-wide (a copy on each CPU)
// in both placements as bpftrace counts and sums it, for a command, and with -p of a process
// that mapped the library before tracer started.
TEST(Usdt, AProbeInASharedLibraryCountsAsBpftraceCountsForEveryTarget) {
  TempDir dir;
  const auto [lib, user] = own_library(dir);
  const auto runs = tracer::testing::run_beside_bpftrace(
      TRACER_CLI_PATH, dir.path(),
      {{"kernel", lib_recipe(dir, lib, "kernel")}, {"user", lib_recipe(dir, lib, "user")}},
      fmt::format("usdt:{0}:tracer_lib:ping {{ @ping = count(); @twice = sum(arg1); }}\n",
                  lib.string()),
      fmt::format("taskset -c 0 {0} {1} & taskset -c 1 {0} {1} & wait", user.string(), kN));
  ASSERT_EQ(runs.problem, "");
  for (const auto& [placement, json] : runs.tracer) {
    SCOPED_TRACE(placement);
    expect_lib(json, 2);
  }
  if (runs.bpftrace) {
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "ping"), 2 * kN) << *runs.bpftrace;
    EXPECT_EQ(tracer::testing::bpftrace_count(*runs.bpftrace, "twice"), 2 * kN * (kN - 1))
        << *runs.bpftrace;
  }
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto r = tracer::testing::run_tracer(fmt::format(
        "run {} --json -- {} {}", lib_recipe(dir, lib, placement).string(), user.string(), kN));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    expect_lib(r.out, 1);
    expect_lib(run_on_pid(dir, lib_recipe(dir, lib, placement), {user.string(), std::to_string(kN)},
                          "lib-" + placement),
               1);
  }
}
