// The oracle on the paths around the tables: [bpf] programs, the CLI (exit status, stat,
// folded stacks, notes, --set), probe filter aliases, in-kernel draining, what the audit
// counts, and targets whose leader exits first.
#include "oracle_harness.hpp"

namespace tracer {
namespace {

using namespace oracle;
namespace fs = std::filesystem;

TEST(OracleBpf, OwnProgramsSeeOnlyTheTarget) {
  testing::TempDir dir;
  make_workload_files(dir.path());
  const auto out = dir.path() / "opens.txt";
  const std::string work = tree_args() + " " + dir.path().string();
  // Another process opens the same files all along: system-wide programs would see it.
  const pid_t noise = spawn(
      {"/bin/sh", "-c",
       "while :; do cat " + (dir.path() / "oracle-a").string() + " >/dev/null; sleep 0.01; done"},
      dir.path() / "n.out", dir.path() / "n.err");
  const auto r = shell(kTracer + " run " + std::string(TRACER_CONFIGS_DIR) + "/opens.toml -o " +
                       out.string() + " -- " + work);
  ::kill(noise, SIGKILL);
  wait_code(noise);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream in(slurp(out));
  long a = 0, b = 0, lines = 0;
  std::string others;
  for (std::string line; std::getline(in, line);) {
    if (line.empty())
      continue;
    ++lines;
    if (line.find(" oracle_workload ") == std::string::npos)
      others += line + "\n";
    a += line.ends_with("/oracle-a") ? 1 : 0;
    b += line.ends_with("/oracle-b") ? 1 : 0;
  }
  EXPECT_EQ(a, kW * (kN / 100));
  EXPECT_EQ(b, 2 * kW * (kN / 100));
  EXPECT_EQ(others, "") << lines << " lines";
}

// Frictions that made right numbers look wrong.

// `tracer run -- CMD` ends with the command's exit status, as `tracer stat` and a shell do.
TEST(OracleCli, RunReturnsTheCommandsExitStatus) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << recipe_text(shapes()[0]);
  const auto r = shell(kTracer + " run " + recipe.string() + " -- /bin/sh -c 'exit 3'");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("the command exited with status 3"), std::string::npos) << r.err;
  const auto ok = shell(kTracer + " run " + recipe.string() + " -- " + tree_args());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// `tracer stat -a -- CMD` counts every CPU for the command's life (it counted 0), and -I takes
// milliseconds as perf stat's does (it took seconds and printed no interval).
TEST(OracleCli, StatAllCpusWithACommandAndIntervalsInMilliseconds) {
  const auto all = shell(kTracer + " stat -a -e syscalls:sys_enter_lseek -- " + tree_args());
  ASSERT_EQ(all.exit_code, 0) << all.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(all.err, m, std::regex(R"(([0-9]+)\s+syscalls:sys_enter_lseek)")))
      << all.err;
  EXPECT_GE(std::stoll(m[1]), kCalls) << all.err;  // the workload's, and any other process's
  const auto interval = shell(kTracer + " stat -e task-clock -I 100 -- sleep 0.55");
  ASSERT_EQ(interval.exit_code, 0) << interval.err;
  // perf stat's interval lines: the time since the start, then the count (or "<not counted>"
  // for an interval the sleeping command never ran in).
  long intervals = 0;
  double last = 0;
  const std::regex line(R"(^\s*([0-9]+\.[0-9]{9})\s+([0-9.]+|<not counted>) msec\s+task-clock)");
  std::istringstream lines(interval.err);
  for (std::string l; std::getline(lines, l);) {
    if (std::smatch t; std::regex_search(l, t, line)) {
      ++intervals;
      last = std::stod(t[1]);
    }
  }
  EXPECT_GE(intervals, 3) << interval.err;
  // One line per 100 ms of the run, and the last (partial) one: however long the command took
  // to start and end on a busy machine (0.79 s for a sleep of 0.55 under TCG).
  EXPECT_GE(last, 0.55) << interval.err;
  EXPECT_LE(intervals, static_cast<long>(last / 0.1) + 2) << interval.err;
}

// Folded stacks hold every sample whatever the table's `top` keeps on the terminal.
TEST(OracleCli, FoldedStacksHoldEveryRowNotOnlyTheTop) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "profile-top1"
[[probe]]
name = "cpu"
software = "cpu-clock"
freq = 999
callchain = true
[[stage]]
use = "count"
by = ["comm", "callchain"]
top = 1
)";
  const auto folded = dir.path() / "out.folded";
  const auto r = shell(kTracer + " run " + recipe.string() + " --json --folded " + folded.string() +
                       " -- /bin/sh -c '" + TRACER_BUSY_LOOP + " 300 & " + TRACER_BUSY_LOOP_NOFP +
                       " 300; wait'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const long long events = json_number(r.out, "events");
  ASSERT_GT(events, 100) << r.out;
  std::istringstream in(slurp(folded));
  long long total = 0, lines = 0;
  for (std::string line; std::getline(in, line);) {
    ++lines;
    total += std::stoll(line.substr(line.rfind(' ') + 1));
  }
  EXPECT_GT(lines, 1);
  EXPECT_EQ(total, events);
}

// A probe whose events happen outside the traced process (a block I/O completion in interrupt
// context) is pointed out by `check` and at the start of `run`, with the reason.
TEST(OracleCli, EventsOutsideTheTargetAreNamed) {
  const std::string recipe = std::string(TRACER_CONFIGS_DIR) + "/block-io-latency.toml";
  const auto check = shell(kTracer + " check " + recipe + " -- /bin/true");
  ASSERT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("note: probe 'complete' (block:block_rq_complete): a request "
                           "completes in interrupt context, outside the traced process"),
            std::string::npos)
      << check.out;
  const auto wide = shell(kTracer + " check " + recipe);
  EXPECT_EQ(wide.out.find("outside the traced process"), std::string::npos) << wide.out;
  const auto run = shell(kTracer + " run " + recipe + " -- /bin/true");
  EXPECT_NE(run.err.find("tracer: warning: probe 'complete'"), std::string::npos) << run.err;
}

// A shipped recipe's stage options change from the command line (--set stage.USE.KEY or
// stage.N.KEY); the traced command's stdout never mixes into tracer's; `--json -o FILE` puts the
// summary in FILE with the tables.
TEST(OracleCli, SetStageOptionsSeparateStdoutAndJsonSummaryInTheOutputFile) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << recipe_text(shapes()[7]);  // count by pid: kW rows
  const auto top = shell(kTracer + " run " + recipe.string() +
                         " --json --set stage.count.top=2 -- " + tree_args());
  ASSERT_EQ(top.exit_code, 0) << top.err;
  EXPECT_EQ(outcome(top.out, "", 0).rows.size(), 2U) << top.out;
  const auto by_place =
      shell(kTracer + " run " + recipe.string() + " --json --set stage.1.top=3 -- " + tree_args());
  EXPECT_EQ(outcome(by_place.out, "", 0).rows.size(), 3U) << by_place.out;
  const auto bad = shell(kTracer + " run " + recipe.string() + " --set stage.count.top=x -- true");
  EXPECT_EQ(bad.exit_code, 2) << bad.err;

  const auto text = shell(kTracer + " run " + recipe.string() + " -- /bin/echo HELLO-FROM-CMD");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("HELLO-FROM-CMD"), std::string::npos) << text.out;
  EXPECT_NE(text.err.find("HELLO-FROM-CMD"), std::string::npos) << text.err;

  const auto file = dir.path() / "out.jsonl";
  const auto json = shell(kTracer + " run " + recipe.string() + " --json -o " + file.string() +
                          " -- " + tree_args());
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_EQ(json.out, "");
  const auto o = outcome(slurp(file), "", 0);
  EXPECT_EQ(o.rows.size(), static_cast<std::size_t>(kW));
  EXPECT_EQ(json_number(o.summary, "events"), kCalls) << slurp(file);
}

// The kernel's names for the generic fields (COMM, CPU, common_comm, common_cpu) in a probe
// filter mean the same in the in-kernel program as in the tracefs filter.
TEST(OracleFilters, KernelAliasesOfGenericFields) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "aliases"
[[probe]]
name = "p"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345 && COMM == \"oracle_workload\""
[[stage]]
use = "count"
)";
  for (const auto& [name, flags] : kTaskPaths) {
    SCOPED_TRACE(name);
    const auto o = run_command(recipe, flags, tree_args());
    ASSERT_EQ(o.exit_code, 0) << o.err;
    EXPECT_EQ(o.rows,
              std::vector<std::string>{row("count", "", R"("count":)" + std::to_string(kCalls))});
  }
}

// Cheap draining: a count kept in the kernel is read when an output is due (here only at the
// end), in batches, so 10,000 keys cost tracer a few calls, not three per key at each tick (the
// old drain: 30,000 calls every 250 ms). The count is still exact, and -v shows the calls.
TEST(OracleDrain, AKernelCountIsReadWhenItsOutputIsDueInBatches) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "by-offset"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["offset"]
top = 20000
)";
  constexpr long kRuns = 60, kKeys = 10000;
  const auto r = shell(kTracer + " run " + recipe.string() +
                       " --json -v -- sh -c 'for i in $(seq " + std::to_string(kRuns) + "); do " +
                       kWorkload + " leaf " + std::to_string(kKeys) + "; done'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto o = outcome(r.out, r.err, r.exit_code);
  EXPECT_EQ(json_number(o.summary, "lost"), 0) << o.summary;
  ASSERT_EQ(o.rows.size(), static_cast<std::size_t>(kKeys));
  for (const auto& row : o.rows)
    ASSERT_EQ(json_number(row, "count"), kRuns) << row;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(own syscalls: (\d+) in)"))) << r.err;
  // Measured: about 100 calls for this run; the reads themselves are a handful of batches.
  EXPECT_LT(std::stoll(m[1]), 3000) << r.err;
}

// A map that may fill before the output is due is read early: 8,000 keys (pid, offset) over a
// run of about 2 s go through a map of 4,096 with no key lost, where reading only at the end
// would drop half of them.
TEST(OracleDrain, AFillingMapIsReadBeforeItIsFull) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "by-pid-offset"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["pid", "offset"]
max_keys = 4096
top = 20000
)";
  constexpr long kRuns = 40, kKeys = 200;
  const auto r = shell(kTracer + " run " + recipe.string() + " --json -- sh -c 'for i in $(seq " +
                       std::to_string(kRuns) + "); do " + kWorkload + " leaf " +
                       std::to_string(kKeys) + "; sleep 0.05; done'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto o = outcome(r.out, r.err, r.exit_code);
  EXPECT_EQ(json_number(o.summary, "lost"), 0) << o.summary;
  EXPECT_EQ(o.rows.size(), static_cast<std::size_t>(kRuns * kKeys)) << o.summary;
  for (const auto& row : o.rows)
    ASSERT_EQ(json_number(row, "count"), 1) << row;
}

// The audit: every counter a BPF program keeps reaches the JSON summary, forced one by one on a
// workload whose answer is known, and what was counted plus what was lost is the answer.
struct Audit {
  Outcome o;
  long long events = -1, lost = -1;
  long long part(const std::string& key) const { return json_number(o.summary, key); }
  long long counted() const {  // the sum of the table's counts
    long long n = 0;
    for (const auto& r : o.rows)
      n += std::max(0LL, json_number(r, "count"));
    return n;
  }
};

Audit audit(const std::string& recipe_body, const std::string& flags, const std::string& command) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << "[recipe]\nname = \"audit\"\n[[probe]]\nname = \"p\"\n" << recipe_body;
  Audit a;
  a.o = run_command(recipe, flags, command);
  a.events = json_number(a.o.summary, "events");
  a.lost = json_number(a.o.summary, "lost");
  return a;
}

// A tiny aggregation map: the events of keys it had no room for are map_full, and lost.
TEST(OracleAudit, MapFullIsLost) {
  const auto a = audit(kLseek +
                           "\n[[stage]]\nuse = \"count\"\nby = [\"offset\"]\nmax_keys = 64\n"
                           "top = 2000\n",
                       "--placement kernel", kWorkload + " leaf 1000");
  ASSERT_EQ(a.o.exit_code, 0) << a.o.err;
  EXPECT_GT(a.part("map_full"), 0) << a.o.summary;
  EXPECT_EQ(a.lost, a.part("map_full")) << a.o.summary;
  EXPECT_EQ(a.counted() + a.part("map_full"), 1000) << a.o.summary;
  EXPECT_NE(a.o.err.find("keys the in-kernel map had no room for"), std::string::npos) << a.o.err;
}

// A stack map of one stack: the events of the other call site's stack are stacks_lost.
TEST(OracleAudit, StacksLostAreLost) {
  const auto a =
      audit(kLseek +
                "\ncallchain = true\n[[stage]]\nuse = \"count\"\nby = [\"ustack\"]\n"
                "max_stacks = 1\n",
            "--placement kernel", "sh -c '" + kWorkload + " leaf 10; " + kWorkload + " tree 1 10'");
  ASSERT_EQ(a.o.exit_code, 0) << a.o.err;
  EXPECT_EQ(a.part("stacks_lost"), 10) << a.o.summary;  // one call site's 10 calls
  EXPECT_EQ(a.lost, 10) << a.o.summary;
  EXPECT_EQ(a.counted(), 10) << a.o.summary;
}

// A `char *` string whose page is not in memory at the event cannot be read by a tracepoint
// program (it cannot fault the page in): each such read is counted per probe and reported
// (string_faults), never a silent empty key. 500 openat() calls of a name in a fresh page: 500
// faults, and the 500 events counted under the empty name.
TEST(OracleAudit, StringsThatCannotBeReadAreCounted) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << R"([recipe]
name = "faults"
[[probe]]
name = "open"
tracepoint = "syscalls:sys_enter_openat"
[[stage]]
use = "count"
by = ["filename"]
)";
  const auto r = shell(kTracer + " run " + recipe.string() + " --json -- " + TRACER_SYSCALLER_PATH +
                       " coldopen 500");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = r.out.substr(r.out.find(R"({"type":"summary")"));
  EXPECT_EQ(json_number(summary, "string_faults"), 500) << summary;
  EXPECT_EQ(json_number(summary, "lost"), 0) << summary;
  EXPECT_NE(r.out.find(R"("keys":{"filename":""},"count":500})"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("500 `char *` strings could not be read"), std::string::npos) << r.err;
}

// A string key longer than the key's bytes (128): counted under the cut string, and reported.
TEST(OracleAudit, CutStringKeysAreReported) {
  testing::TempDir dir;
  const fs::path deep = dir.path() / std::string(150, 'd');
  fs::create_directory(deep);
  make_workload_files(deep);
  const auto a = audit(
      "tracepoint = \"syscalls:sys_enter_openat\"\n[[stage]]\nuse = \"count\"\n"
      "by = [\"filename\"]\n",
      "--placement kernel", kWorkload + " tree 1 1000 " + deep.string());
  ASSERT_EQ(a.o.exit_code, 0) << a.o.err;
  EXPECT_EQ(a.part("keys_truncated"), 30) << a.o.summary;  // 10 x (oracle-a, oracle-b twice)
  EXPECT_EQ(a.lost, 0) << a.o.summary;
  EXPECT_NE(a.o.err.find("string key longer than the key's bytes"), std::string::npos) << a.o.err;
}

// A probe ring of one page under a burst, nobody draining fast enough: LOST records, per CPU,
// and what arrived plus what was lost is the burst.
TEST(OracleAudit, RingLossIsLost) {
  const auto a = audit(kLseek + "\nring = \"4KiB\"\n[[stage]]\nuse = \"count\"\n",
                       "--placement user --delivery perf", kWorkload + " leaf 200000");
  ASSERT_EQ(a.o.exit_code, 0) << a.o.err;
  EXPECT_GT(a.part("ring"), 0) << a.o.summary;
  EXPECT_EQ(a.lost, a.part("ring")) << a.o.summary;
  // LOST counts every record the ring had no room for: the samples, and the side-band records
  // (the command's EXIT, a COMM) the same ring carries, a few at most.
  EXPECT_GE(a.counted() + a.lost, 200000) << a.o.summary;
  EXPECT_LE(a.counted() + a.lost, 200000 + 4) << a.o.summary;
}

}  // namespace
}  // namespace tracer
