// Stacks end to end: callchains sampled live and symbolized by `tracer run` (the profile recipe,
// uprobes in a PIE, a shared library, a stripped binary and one with separate debuginfo, kernel
// stacks of a system call), the folded and SVG outputs of a run, and `tracer replay` of a
// `perf record -g` file against `perf script`.
#include <fmt/core.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/cli.hpp"
#include "support/perf_tool.hpp"
#include "support/temp_dir.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::testing::run_tracer;
using tracer::testing::shell;
using tracer::testing::slurp;
using tracer::testing::TempDir;

/// `tracer replay --perf FILE` and `perf script -i FILE` of one file.
struct ReplayAndScript {
  tracer::testing::CliResult ours, theirs;
};
ReplayAndScript replay_and_script(const std::string& file) {
  return {shell(fmt::format("{} replay --perf {}", TRACER_CLI_PATH, file)),
          shell(fmt::format("perf script -i {} 2>/dev/null", file))};
}

/// The lines of `text`; with `frames_only`, the frame lines alone (a tab first).
std::vector<std::string> text_lines(const std::string& text, bool frames_only) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!frames_only || line.starts_with("\t"))
      out.push_back(line);
  }
  return out;
}

/// A row of a --json table: its stack frames (symbol and module, leaf first) and its count.
struct StackRow {
  std::vector<std::pair<std::string, std::string>> frames;
  std::uint64_t count = 0;
  std::string line;
};

std::vector<StackRow> stack_rows(const std::string& json) {
  std::vector<StackRow> rows;
  const std::regex frame(
      R"re(\{"addr":"0x[0-9a-f]+","sym":(null|"([^"]*)"),"offset":\d+,"module":"([^"]*)")re");
  const std::regex count(R"re("count":(\d+)\}$)re");
  std::istringstream in(json);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(R"("stage":"count")") == std::string::npos)
      continue;
    StackRow r;
    r.line = line;
    for (auto it = std::sregex_iterator(line.begin(), line.end(), frame);
         it != std::sregex_iterator(); ++it)
      r.frames.emplace_back((*it)[2], (*it)[3]);
    std::smatch m;
    if (std::regex_search(line, m, count))
      r.count = std::stoull(m[1]);
    rows.push_back(std::move(r));
  }
  return rows;
}

/// Whether `names` appear in `row` as consecutive frames, in this order.
bool has_path(const StackRow& row, const std::vector<std::string>& names) {
  for (std::size_t i = 0; i + names.size() <= row.frames.size(); ++i) {
    bool all = true;
    for (std::size_t k = 0; k < names.size() && all; ++k)
      all = row.frames[i + k].first == names[k];
    if (all)
      return true;
  }
  return false;
}

/// The busy loop's samples in a --json count table keyed by comm and a stack: how many have
/// tracer_busy_spin <- tracer_busy_outer <- main, and how many there are.
struct BusyShare {
  std::uint64_t in_path = 0, total = 0;
};
BusyShare busy_share(const std::vector<StackRow>& rows) {
  BusyShare out;
  for (const auto& row : rows) {
    if (row.line.find(R"("comm":"tracer_busy_loo")") == std::string::npos)
      continue;
    out.total += row.count;
    if (has_path(row, {"tracer_busy_spin", "tracer_busy_outer", "main"}))
      out.in_path += row.count;
  }
  return out;
}

fs::path write_recipe(const TempDir& dir, const std::string& text) {
  const auto p = dir.path() / "recipe.toml";
  std::ofstream(p) << text;
  return p;
}

TEST(Stacks, ProfileNamesTheBusyFunctionsInCallOrderAndWritesFoldedAndSvg) {
  TempDir dir;
  const auto folded = dir.path() / "p.folded";
  const auto svg = dir.path() / "p.svg";
  const auto r =
      run_tracer(fmt::format("run {}/profile.toml --json --folded {} --flamegraph {} -- {} 1500",
                             TRACER_CONFIGS_DIR, folded.string(), svg.string(), TRACER_BUSY_LOOP));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto rows = stack_rows(r.out);
  const auto [in_path, total] = busy_share(rows);
  for (const auto& row : rows) {
    for (const auto& [sym, module] : row.frames) {
      if (sym == "tracer_busy_spin") {
        EXPECT_TRUE(module.ends_with("/tracer_busy_loop")) << row.line;
      }
    }
  }
  // 99 Hz of the busy thread's CPU time (less than 1.5 s on a busy machine): every sample the
  // probe took is in a row, and nearly all are in the spin loop (the rest in clock_gettime's
  // vDSO and the kernel).
  std::smatch events;
  ASSERT_TRUE(std::regex_search(r.out, events, std::regex(R"re("cpu":\{"events":(\d+))re")));
  EXPECT_EQ(total, std::stoull(events[1])) << r.out;
  EXPECT_GE(total, 30u) << r.out;
  EXPECT_GE(in_path * 10, total * 8) << r.out;
  // The folded file: the same samples, root first.
  std::uint64_t folded_path = 0;
  std::istringstream in(slurp(folded));
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("main;tracer_busy_outer;tracer_busy_spin") != std::string::npos)
      folded_path += std::stoull(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_EQ(folded_path, in_path);
  const std::string image = slurp(svg);
  EXPECT_NE(image.find("data-name=\"tracer_busy_spin\""), std::string::npos);
  EXPECT_NE(image.find("</svg>"), std::string::npos);
}

/// The share of a busy loop's samples whose user stack is tracer_busy_spin <- tracer_busy_outer
/// <- main, with `unwind` ("fp" or "dwarf"), and the samples.
std::pair<std::uint64_t, std::uint64_t> busy_path(const TempDir& dir,
                                                  const char* binary,
                                                  const char* unwind) {
  const auto recipe = dir.path() / fmt::format("unwind-{}.toml", unwind);
  std::ofstream(recipe) << fmt::format(R"([recipe]
name = "unwind"
[[probe]]
name = "cpu"
software = "cpu-clock"
freq = 499
unwind = "{}"
[[stage]]
use = "count"
by = ["comm", "ustack"]
)",
                                       unwind);
  const auto r = run_tracer(fmt::format("run {} --json -- {} 800", recipe.string(), binary));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const auto share = busy_share(stack_rows(r.out));
  return {share.in_path, share.total};
}

TEST(Stacks, DwarfUnwindingFindsTheCallersOfABinaryWithoutFramePointers) {
  TempDir dir;
  const auto [dwarf_path, dwarf_total] = busy_path(dir, TRACER_BUSY_LOOP_NOFP, "dwarf");
  ASSERT_GE(dwarf_total, 30u);  // 499 Hz of the loop's CPU time, 0.8 s of it on an idle machine
  EXPECT_GE(dwarf_path * 10, dwarf_total * 8) << "DWARF CFI names the callers";
  // The kernel's frame-pointer walk cannot: without frame pointers rbp holds data.
  const auto [fp_path, fp_total] = busy_path(dir, TRACER_BUSY_LOOP_NOFP, "fp");
  ASSERT_GE(fp_total, 30u);
  EXPECT_LE(fp_path * 10, fp_total * 2) << "frame pointers are not there to follow";
  // With frame pointers both agree.
  const auto [fp2_path, fp2_total] = busy_path(dir, TRACER_BUSY_LOOP, "dwarf");
  EXPECT_GE(fp2_path * 10, fp2_total * 8);
}

/// count by ustack of a uprobe's hits: every hit's stack, exactly.
/// A recipe counting a uprobe's hits by user stack; `recipe_keys` go into [recipe].
std::string ustack_recipe(const std::string& uprobe, const std::string& recipe_keys = {}) {
  return fmt::format(R"([recipe]
name = "ustacks"
{}
[[probe]]
name = "fn"
uprobe = "{}"
callchain = true
[[stage]]
use = "count"
by = ["ustack"]
)",
                     recipe_keys, uprobe);
}

std::vector<StackRow> uprobe_stacks(const TempDir& dir,
                                    const std::string& uprobe,
                                    const std::string& command,
                                    const std::string& extra = {}) {
  const auto recipe = write_recipe(dir, ustack_recipe(uprobe));
  const auto r = run_tracer(fmt::format("run {} --json {} -- {}", recipe.string(), extra, command));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return stack_rows(r.out);
}

TEST(Stacks, UprobeInASharedLibraryNamesItAndItsCallerExactly) {
  TempDir dir;
  const auto rows = uprobe_stacks(dir, fmt::format("{}:tracer_lib_fn", TRACER_TARGET_LIB),
                                  fmt::format("{} 2000", TRACER_LIB_USER));
  ASSERT_EQ(rows.size(), 1u) << "one stack for every call";
  const auto& row = rows.front();
  EXPECT_EQ(row.count, 2000u);
  ASSERT_GE(row.frames.size(), 2u) << row.line;
  EXPECT_EQ(row.frames[0].first, "tracer_lib_fn");
  EXPECT_TRUE(row.frames[0].second.ends_with("/libtracer_target.so")) << row.line;
  EXPECT_EQ(row.frames[1].first, "main");
  EXPECT_TRUE(row.frames[1].second.ends_with("/tracer_lib_user")) << row.line;
}

TEST(Stacks, StrippedBinaryNamesItsExportedFunctionFromDynsym) {
  TempDir dir;
  const auto rows =
      uprobe_stacks(dir, fmt::format("{}:tracer_test_fn", TRACER_UPROBE_TARGET_STRIPPED),
                    fmt::format("{} 500", TRACER_UPROBE_TARGET_STRIPPED));
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows.front().count, 500u);
  ASSERT_GE(rows.front().frames.size(), 2u) << rows.front().line;
  EXPECT_EQ(rows.front().frames[0].first, "tracer_test_fn");
  EXPECT_EQ(rows.front().frames[1].first, "main") << "-rdynamic puts main in .dynsym too";
}

TEST(Stacks, SeparateDebuginfoByBuildIdNamesAStaticFunction) {
  // The split binary has neither .symtab nor its static function in .dynsym: only the debug
  // file under DEBUG_ROOT/.build-id names it. Its offset is the unstripped twin's.
  auto fn = tracer::symbols::find_function(TRACER_SYMBOLS_TARGET, "tracer_sym_static");
  ASSERT_TRUE(fn.has_value()) << fn.error().message;
  TempDir dir;
  const std::string probe = fmt::format("{}:{:#x}", TRACER_SYMBOLS_TARGET_SPLIT, fn->file_offset);
  const auto with = uprobe_stacks(dir, probe, TRACER_SYMBOLS_TARGET_SPLIT,
                                  fmt::format("--debuginfo {}", TRACER_DEBUG_ROOT));
  ASSERT_EQ(with.size(), 1u);
  EXPECT_EQ(with.front().count, 1u);
  ASSERT_GE(with.front().frames.size(), 2u) << with.front().line;
  EXPECT_EQ(with.front().frames[0].first, "tracer_sym_static");
  EXPECT_EQ(with.front().frames[1].first, "main");
  // Without the debug root the frame has no name (and says where it was).
  const auto without = uprobe_stacks(dir, probe, TRACER_SYMBOLS_TARGET_SPLIT);
  ASSERT_EQ(without.size(), 1u);
  ASSERT_FALSE(without.front().frames.empty());
  EXPECT_EQ(without.front().frames[0].first, "");
  EXPECT_TRUE(without.front().frames[0].second.ends_with("tracer_symbols_target_split"));
}

TEST(Stacks, KernelStacksOfASystemCallLoopNameTheSyscallEntry) {
  // cpu-clock samples of a getppid loop: those taken in the kernel unwind through the system
  // call's path. (A syscalls tracepoint would not do: the kernel samples it with the task's user
  // registers, so its callchain has no kernel part.)
  TempDir dir;
  const auto recipe = write_recipe(dir, R"([recipe]
name = "kstacks"
[[probe]]
name = "cpu"
software = "cpu-clock"
freq = 999
callchain = true
[[stage]]
use = "count"
by = ["comm", "kstack"]
)");
  const auto r = run_tracer(
      fmt::format("run {} --json -- {} getppid 3000000", recipe.string(), TRACER_SYSCALLER_PATH));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::uint64_t total = 0, in_kernel = 0, entry = 0;
  for (const auto& row : stack_rows(r.out)) {
    if (row.line.find(R"("comm":"tracer_test_sys")") == std::string::npos)
      continue;
    total += row.count;
    if (row.frames.empty())
      continue;  // sampled in user mode
    in_kernel += row.count;
    for (const auto& [sym, module] : row.frames) {
      // The kernel's, or another tracer's BPF program run in the system call (bpftrace beside
      // the test), named as /proc/kallsyms names it.
      EXPECT_TRUE(module == "[kernel.kallsyms]" || (module == "[bpf]" && sym.starts_with("bpf_")))
          << row.line;
      EXPECT_FALSE(sym.empty()) << row.line;
    }
    if (has_path(row, {"do_syscall_64"}) &&
        std::any_of(row.frames.begin(), row.frames.end(),
                    [](const auto& f) { return f.first.starts_with("entry_SYSCALL_64"); }))
      entry += row.count;
  }
  ASSERT_GE(total, 100u) << r.out;
  EXPECT_GE(in_kernel * 10, total * 3) << "a getppid loop spends much of its time in the kernel";
  EXPECT_GE(entry * 10, in_kernel * 9) << r.out;
}

// Stack keys go into the kernel (bpf_get_stackid into a stack-trace map) by default; a stack
// unwound with DWARF needs the stack's bytes in user space and stays there with the reason.
TEST(KernelStacks, StackKeysArePlacedInTheKernelUnlessUnwoundWithDwarf) {
  TempDir dir;
  const auto recipe = [&](const std::string& head, const std::string& unwind) {
    return write_recipe(dir, fmt::format(R"([recipe]
name = "k"
{}
[[probe]]
name = "cpu"
software = "cpu-clock"
callchain = true
{}
[[stage]]
use = "count"
by = ["comm", "ustack"]
)",
                                         head, unwind));
  };
  const auto plan = run_tracer("check --plan " + recipe("", "").string());
  EXPECT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_NE(plan.out.find("count      kernel  aggregates in BPF maps"), std::string::npos)
      << plan.out;
  const auto dwarf = run_tracer("check --plan " + recipe("", R"(unwind = "dwarf")").string());
  EXPECT_EQ(dwarf.exit_code, 0) << dwarf.err;
  EXPECT_NE(dwarf.out.find("user"), std::string::npos) << dwarf.out;
  EXPECT_NE(dwarf.out.find("field 'ustack' of probe 'cpu' is unwound with DWARF"),
            std::string::npos)
      << dwarf.out;
  const auto refused = run_tracer(
      "check --plan " + recipe(R"(placement = "kernel")", R"(unwind = "dwarf")").string());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("unwound with DWARF"), std::string::npos) << refused.err;
}

/// The rows of a --json output's count table keyed by stacks, each as its frames and count,
/// sorted (the two placements list equal rows in either order).
std::vector<std::string> sorted_rows(const std::string& json) {
  std::vector<std::string> out;
  for (const auto& row : stack_rows(json)) {
    std::string text;
    for (const auto& [sym, module] : row.frames)
      text += sym + "@" + module + ";";
    out.push_back(fmt::format("{} {}", text, row.count));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A uprobe in a shared library, system-wide, called 2 x 1500 times from two processes on the two
// CPUs: the stacks aggregated in the kernel (stack ids, symbolized once per stack when the table
// is made, after both processes exited) give the table user space gives from every sample's
// callchain, run side by side on the same calls; bpftrace's count of the same probe agrees.
TEST(KernelStacks, UprobeStackKeysInTheKernelEqualUserSpaceAndBpftrace) {
  TempDir dir;
  const std::string probe = fmt::format("{}:tracer_lib_fn", TRACER_TARGET_LIB);
  const auto recipe = [&](const char* placement) {
    const auto p = dir.path() / fmt::format("{}.toml", placement);
    std::ofstream(p) << ustack_recipe(probe, fmt::format("placement = \"{}\"", placement));
    return p;
  };
  const bool bpftrace = fs::exists("/usr/bin/bpftrace");
  std::vector<pid_t> runs;
  std::map<std::string, fs::path> outs;
  for (const char* placement : {"kernel", "user"}) {
    outs[placement] = dir.path() / fmt::format("{}.out", placement);
    runs.push_back(tracer::testing::spawn_to_file(
        {TRACER_CLI_PATH, "run", recipe(placement).string(), "--json", "-v", "-d", "60s"},
        outs[placement], dir.path() / fmt::format("{}.err", placement)));
  }
  const auto bt_out = dir.path() / "bt.out";
  if (bpftrace) {
    const auto bt = dir.path() / "u.bt";
    std::ofstream(bt) << tracer::testing::kBpftraceReady
                      << fmt::format(
                             "uprobe:{} {{ @[ustack] = count(); }}\ninterval:s:60 {{ exit(); }}\n",
                             probe);
    runs.push_back(tracer::testing::spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out));
    ASSERT_TRUE(tracer::testing::wait_for_text(bt_out, tracer::testing::kBpftraceReadyLine))
        << slurp(bt_out);
  }
  for (const char* placement : {"kernel", "user"}) {
    const auto err = dir.path() / fmt::format("{}.err", placement);
    ASSERT_TRUE(tracer::testing::wait_for_text(err, "tracer: rings:")) << slurp(err);
  }
  const auto w =
      shell(fmt::format("taskset -c 0 {0} 1500 >/dev/null & taskset -c 1 {0} 1500 "
                        ">/dev/null & wait",
                        TRACER_LIB_USER));
  ASSERT_EQ(w.exit_code, 0) << w.err;
  // Every tool stops on SIGINT once the workload is done (the 60 s are a safety net).
  for (const pid_t pid : runs)
    ::kill(pid, SIGINT);
  for (const pid_t pid : runs)
    ASSERT_TRUE(tracer::testing::exited_ok(pid));
  const std::string kernel = slurp(outs["kernel"]), user = slurp(outs["user"]);
  const auto k_rows = stack_rows(kernel);
  ASSERT_EQ(k_rows.size(), 1U) << "one stack for every call: " << kernel;
  EXPECT_EQ(k_rows.front().count, 3000U) << kernel;
  ASSERT_GE(k_rows.front().frames.size(), 2U) << kernel;
  EXPECT_EQ(k_rows.front().frames[0].first, "tracer_lib_fn");
  EXPECT_TRUE(k_rows.front().frames[0].second.ends_with("/libtracer_target.so"));
  EXPECT_EQ(k_rows.front().frames[1].first, "main");
  EXPECT_EQ(sorted_rows(kernel), sorted_rows(user));
  EXPECT_NE(kernel.find(R"("fn":{"events":3000,"lost":0)"), std::string::npos) << kernel;
  if (bpftrace) {  // bpftrace names no frame of an exited process: its count is the check
    std::uint64_t total = 0;
    const std::string theirs = slurp(bt_out);
    const std::regex count(R"re(\]: (\d+))re");
    for (auto it = std::sregex_iterator(theirs.begin(), theirs.end(), count);
         it != std::sregex_iterator(); ++it)
      total += std::stoull((*it)[1]);
    EXPECT_EQ(total, 3000U) << theirs;
  }
}

// The profile recipe system-wide runs in the kernel (a perf_event program on each CPU's
// cpu-clock event: no sample crosses a ring) and still names a busy program's functions in call
// order, its user frames from the task records of a process that exited before the table.
TEST(KernelStacks, SystemWideProfileAggregatesInTheKernelAndNamesTheBusyFunctions) {
  TempDir dir;
  const auto out = dir.path() / "profile.out";
  const auto err = dir.path() / "profile.err";
  const auto plan = run_tracer(fmt::format("check --plan {}/profile.toml", TRACER_CONFIGS_DIR));
  EXPECT_NE(plan.out.find("count      kernel"), std::string::npos) << plan.out;
  const pid_t t =
      tracer::testing::spawn_tracer_ready({"run", std::string(TRACER_CONFIGS_DIR) + "/profile.toml",
                                           "--json", "-d", "4s", "--set", "hz=499"},
                                          out, err);
  ASSERT_GT(t, 0) << slurp(err);
  ASSERT_EQ(shell(fmt::format("{} 1200", TRACER_BUSY_LOOP)).exit_code, 0);
  ASSERT_TRUE(tracer::testing::exited_ok(t)) << slurp(err);
  const std::string json = slurp(out);
  const auto rows = stack_rows(json);
  const auto [in_path, total] = busy_share(rows);
  EXPECT_GE(total, 100U) << json;  // 499 Hz of up to 1.2 s of the loop's CPU time
  EXPECT_GE(in_path * 10, total * 8) << json;
  // The samples were the program's: the probe's events are its hits, none lost; the table
  // (top = 20 rows) holds at most those.
  std::uint64_t all = 0;
  for (const auto& row : rows)
    all += row.count;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"re("cpu":\{"events":(\d+),"lost":0,)re")))
      << json;
  EXPECT_GE(std::stoull(m[1]), all);
}

// A stack map too small for the stacks (max_stacks = 1) holds the first stack; the events of
// another are counted as lost, never aggregated under a wrong stack. Two
// processes of the same PIE make 400 and 300 lseek calls one after the other: their user
// stacks differ (address-space randomization), so the second's 300 are lost, exactly.
TEST(KernelStacks, StacksThatDoNotFitTheStackMapAreCountedAsLost) {
  TempDir dir;
  const auto recipe = write_recipe(dir, R"([recipe]
name = "tiny"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
callchain = true
[[stage]]
use = "filter"
expr = "fd == 12345"
[[stage]]
use = "count"
by = ["ustack"]
max_stacks = 1
)");
  // The two processes are the command's (system-wide, another process's identical calls beside
  // the test could take the one slot first).
  const auto r =
      run_tracer(fmt::format("run {0} --json -- sh -c '{1} lseek 400 0 && {1} lseek 300 1'",
                             recipe.string(), TRACER_SYSCALLER_PATH));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string json = r.out;
  const auto rows = stack_rows(json);
  ASSERT_EQ(rows.size(), 1U) << json;
  EXPECT_EQ(rows.front().count, 400U) << json;
  // The probe's events are every lseek of the command (the filter comes after): at least 700.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(json, m, std::regex(R"re("lseek":\{"events":(\d+),"lost":300,)re")))
      << json;
  EXPECT_GE(std::stoull(m[1]), 700U) << json;
}

TEST(Stacks, ReplayOfAPerfRecordGFileNamesEveryFrameAsPerfScriptDoes) {
  REQUIRE_PERF();
  TempDir dir;
  const auto data = (dir.path() / "g.data").string();
  // Kernel and user frames: a system-call loop, then a loop in the vDSO's clock_gettime (a
  // shell, ld.so and libc on the way), sampled every 50 us of CPU with callchains.
  ASSERT_EQ(shell(fmt::format("perf record -q -g -e cpu-clock -c 50000 -o {} -- sh -c '{} getppid "
                              "1000000; {} 1000'",
                              data, TRACER_SYSCALLER_PATH, TRACER_BUSY_LOOP))
                .exit_code,
            0);
  const auto [ours, theirs] = replay_and_script(data);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  ASSERT_EQ(theirs.exit_code, 0);
  // The frames: address, symbol+offset, module.
  const auto a = text_lines(ours.out, true), b = text_lines(theirs.out, true);
  ASSERT_GE(b.size(), 100u) << theirs.out.substr(0, 2000);
  EXPECT_NE(theirs.out.find("([vdso])"), std::string::npos) << "the workload runs in the vDSO";
  ASSERT_EQ(a.size(), b.size());
  // One known difference: perf script names an address in the PLT by whichever overlapping
  // symbol its tree search meets first, often the unsized _init before .plt ("_init+0x30");
  // tracer names the PLT entry ("clock_gettime@plt+0x0"), as perf does when it meets that first.
  // A sample inside an entry (the lazy-binding push/jmp of a first call: "strtol@plt+0xb" where
  // perf says "_init+0x4b") is the same quirk.
  const auto plt_quirk = [](const std::string& mine, const std::string& perf) {
    return mine.find("@plt+0x") != std::string::npos &&
           perf.find(" _init+0x") != std::string::npos && mine.substr(0, 18) == perf.substr(0, 18);
  };
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i] && !plt_quirk(a[i], b[i]) && differ++ < 5)
      ADD_FAILURE() << "frame " << i << ": tracer '" << a[i] << "', perf '" << b[i] << "'";
  }
  EXPECT_EQ(differ, 0u);
  // The sample lines too (comm, tid, time, period, event), and their number.
  std::size_t headers = 0;
  std::istringstream oi(ours.out), ti(theirs.out);
  std::string ol, tl;
  while (std::getline(ti, tl)) {
    ASSERT_TRUE(static_cast<bool>(std::getline(oi, ol)));
    if (!tl.starts_with("\t")) {
      ++headers;
      EXPECT_EQ(ol, tl);
    }
  }
  EXPECT_GE(headers, 100u);
}

// A user stack word the kernel's frame walk took for a return address can fall in the range of
// the callchain markers (0xffffffffffffffb8 was met in a recorded profile); perf script then
// takes the callchain for corrupt and prints none of its frames. tracer replay --perf printed
// the frames around it (and "[unknown]" for the word): every line after differed. Here a
// recorded file has that word put in place of the first return address of every third user
// callchain: both print the same, frames and sample lines.
TEST(Stacks, ReplayDropsACallchainPerfTakesForCorruptAsPerfScriptDoes) {
  REQUIRE_PERF();
  TempDir dir;
  const auto data = (dir.path() / "g.data").string();
  ASSERT_EQ(shell(fmt::format("perf record -q -g -e cpu-clock -c 100000 -o {} -- {} 300", data,
                              TRACER_BUSY_LOOP))
                .exit_code,
            0);
  std::string bytes;
  {
    std::ifstream in(data, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const auto u64_at = [&](std::size_t at) {
    std::uint64_t v = 0;
    std::memcpy(&v, bytes.data() + at, 8);
    return v;
  };
  ASSERT_GE(bytes.size(), 56u);
  // perf_file_header: magic, size, attr_size, attrs {offset, size}, data {offset, size}.
  const std::size_t begin = u64_at(40), end = begin + u64_at(48);
  ASSERT_LE(end, bytes.size());
  constexpr std::uint64_t kUser = static_cast<std::uint64_t>(-512), kBogus = 0xffffffffffffffb8;
  std::size_t chains = 0, patched = 0;
  for (std::size_t at = begin; at + 24 <= end; at += 8) {
    const std::uint64_t ret = u64_at(at + 16);  // after the marker: the ip, then the caller
    if (u64_at(at) != kUser || ret == 0 || ret >= (std::uint64_t{1} << 47))
      continue;
    if (chains++ % 3 == 0) {
      std::memcpy(bytes.data() + at + 16, &kBogus, 8);
      ++patched;
    }
  }
  ASSERT_GE(patched, 100u) << "user callchains in the recording";
  const auto bad = (dir.path() / "bad.data").string();
  std::ofstream(bad, std::ios::binary) << bytes;
  const auto [ours, theirs] = replay_and_script(bad);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  ASSERT_EQ(theirs.exit_code, 0);
  const auto a = text_lines(ours.out, false), b = text_lines(theirs.out, false);
  // perf prints the sample line of a dropped callchain and its blank line, no frame.
  std::size_t bare = 0;
  for (std::size_t i = 0; i + 1 < b.size(); ++i)
    bare += !b[i].empty() && !b[i].starts_with("\t") && b[i + 1].empty() ? 1 : 0;
  EXPECT_GE(bare, patched) << "perf script drops the patched callchains";
  ASSERT_EQ(a.size(), b.size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool plt_quirk =
        a[i].find("@plt+0x") != std::string::npos && b[i].find(" _init+0x") != std::string::npos;
    if (a[i] != b[i] && !plt_quirk && differ++ < 5)
      ADD_FAILURE() << "line " << i + 1 << ": tracer '" << a[i] << "', perf '" << b[i] << "'";
  }
  EXPECT_EQ(differ, 0u);
}

// C++ frames as perf script prints them: the function's name without its parameters or return
// type ("shop::Cache::get+0x..", "shop::twice<int>+0x.."; tracer printed "shop::Cache::get(int)"
// and "int shop::twice<int>(int)"). Met when the two test slots put another test's perf (which
// links the C++ libopencsd) in a system-wide recording.
TEST(Stacks, ReplayNamesCxxFramesAsPerfScriptDoes) {
  REQUIRE_PERF();
  TempDir dir;
  const auto data = (dir.path() / "cxx.data").string();
  const auto rec = shell(fmt::format("perf record -q -g -e cpu-clock -c 20000 -o {} -- {} 300000",
                                     data, TRACER_CXX_TARGET));
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto [ours, theirs] = replay_and_script(data);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  ASSERT_EQ(theirs.exit_code, 0);
  const auto shop_frames = [](const std::string& text) {
    std::vector<std::string> out;
    for (auto& line : text_lines(text, true)) {
      if (line.find(" shop::") != std::string::npos || line.find("twice<") != std::string::npos)
        out.push_back(line);
    }
    return out;
  };
  const auto a = shop_frames(ours.out), b = shop_frames(theirs.out);
  ASSERT_GE(b.size(), 20u) << theirs.out.substr(0, 2000);
  EXPECT_EQ(a, b);
  for (const auto& line : a) {
    EXPECT_EQ(line.find("(int"), std::string::npos) << "a parameter list: " << line;
    EXPECT_EQ(line.find("(std::"), std::string::npos) << "a parameter list: " << line;
  }
}

// A BPF program running in the recorded workload's system calls (tracer's own in-kernel count,
// system-wide, beside perf record -g): perf record writes a KSYMBOL record for each program, and
// perf script names the program's frames "bpf_prog_<tag>_<name>+0x.. (bpf_prog_<tag>_<name>)".
// tracer replay --perf names them from the same records (it printed "[unknown]" there).
TEST(Stacks, ReplayNamesBpfProgramFramesFromTheFilesKsymbolRecords) {
  REQUIRE_PERF();
  TempDir dir;
  const auto recipe = write_recipe(dir, R"([recipe]
name = "beside"
placement = "kernel"
[[probe]]
name = "g"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
)");
  const auto out = dir.path() / "b.out", err = dir.path() / "b.err";
  const pid_t t = tracer::testing::spawn_tracer_ready({"run", recipe.string(), "--json"}, out, err);
  ASSERT_GT(t, 0) << slurp(err);
  const auto data = (dir.path() / "g.data").string();
  const auto rec =
      shell(fmt::format("perf record -q -g -e cpu-clock -c 20000 -o {} -- {} getppid "
                        "400000",
                        data, TRACER_SYSCALLER_PATH));
  ::kill(t, SIGINT);
  ASSERT_TRUE(tracer::testing::exited_ok(t)) << slurp(err);
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto theirs = shell(fmt::format("perf script -i {} 2>/dev/null", data));
  const auto ours = shell(fmt::format("{} replay --perf {}", TRACER_CLI_PATH, data));
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  // The frames at the BPF program's addresses (ffffffffc...), line for line (the user frames
  // are another test's, with perf's PLT quirk).
  const auto bpf_lines = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.starts_with("\tffffffffc"))
        lines.push_back(line);
    }
    return lines;
  };
  const auto a = bpf_lines(ours.out), b = bpf_lines(theirs.out);
  std::size_t named = 0;
  for (const auto& l : b)
    named += l.find(" bpf_prog_") != std::string::npos ? 1 : 0;
  if (named == 0)
    GTEST_SKIP() << "no sample fell in the BPF program (perf script names none)";
  EXPECT_EQ(a, b);
  EXPECT_EQ(ours.out.find("[unknown] ([kernel.kallsyms])"), std::string::npos);
}

}  // namespace
