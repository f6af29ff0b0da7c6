// The differential oracle: one right answer on every path. A catalogue of recipe shapes (probe
// filters, filter stages, each kind of aggregation, fixed keys, comm, syscall names, string
// globs) runs on a workload whose answer is known before it runs (tests/programs/
// oracle_workload.c: W children on both CPUs, N lseek calls each with known offsets), for every
// target (a command with children, a pid attached with -p, system-wide, a storm of more than
// 10,000 short-lived descendants) and every path (in-kernel placement, user space through the
// BPF ring buffer, through perf rings, sampled by the tracepoint's perf events). Each table must
// equal the known answer and every other path's table row for row, and lose nothing; strace,
// perf stat and bpftrace answer the same questions on the same workload and must agree.
#include "oracle_harness.hpp"

namespace tracer {
namespace {

using namespace oracle;
namespace fs = std::filesystem;

class Oracle : public ::testing::TestWithParam<Shape> {};

// A command and its children: every path gives the known table.
TEST_P(Oracle, CommandWithChildren) {
  const Shape& s = GetParam();
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << recipe_text(s);
  std::map<std::string, Outcome> by_path;
  for (const auto& [name, flags] : kTaskPaths) {
    by_path[name] = run_command(recipe, flags_for(s, flags), tree_args());
    expect_answer(s, by_path[name], name);
  }
  if (!s.pids) {  // (the pids of two runs differ)
    for (const auto& [name, o] : by_path)
      EXPECT_EQ(o.rows, by_path["kernel"].rows) << name;
  }
}

// A running process attached with -p (its children started after the attach are followed).
TEST_P(Oracle, PidWithChildren) {
  const Shape& s = GetParam();
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << recipe_text(s);
  std::map<std::string, Outcome> by_path;
  for (const auto& [name, flags] : kTaskPaths) {
    const pid_t w = spawn({kWorkload, "gate", "tree", std::to_string(kW), std::to_string(kN)},
                          dir.path() / "w.out", dir.path() / "w.err");
    const auto out = dir.path() / (name + ".out"), err = dir.path() / (name + ".err");
    std::vector<std::string> argv = {kTracer, "run", recipe.string(),  "--json",
                                     "-v",    "-p",  std::to_string(w)};
    for (auto& f : split_flags(flags_for(s, flags)))
      argv.push_back(f);
    const pid_t t = spawn(argv, out, err);
    const bool ready = wait_for_text(err, "tracer: rings:");
    ::kill(w, SIGUSR1);
    EXPECT_EQ(wait_code(w), 0);
    const int code = wait_code(t);
    ASSERT_TRUE(ready) << slurp(err);
    by_path[name] = outcome(slurp(out), slurp(err), code);
    expect_answer(s, by_path[name], name);
    // Per event, a probe without a tracefs filter of its own goes through the delivery program.
    if (name == "user-ringbuf" && std::string_view(s.probe).find("filter") == std::string::npos) {
      EXPECT_NE(by_path[name].err.find("tracepoints through a BPF ring buffer"), std::string::npos)
          << by_path[name].err;
    }
  }
  if (!s.pids) {  // (the pids of two runs differ)
    for (const auto& [name, o] : by_path)
      EXPECT_EQ(o.rows, by_path["kernel"].rows) << name;
  }
}

// System-wide: every path runs at once over one run of the workload; only the workload makes
// lseek calls with its fd (this test's own: another copy of the workload or the suite beside it
// uses another).
TEST_P(Oracle, SystemWide) {
  const Shape& s = GetParam();
  if (!s.system_wide)
    GTEST_SKIP() << "shape '" << s.name << "' counts every process's calls system-wide";
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << with_own_fd(recipe_text(s));
  std::vector<std::pair<std::string, pid_t>> runs;
  for (const auto& [name, flags] : kSystemPaths) {
    std::vector<std::string> argv = {kTracer, "run", recipe.string(), "--json", "-v"};
    for (auto& f : split_flags(flags_for(s, flags)))
      argv.push_back(f);
    runs.emplace_back(name,
                      spawn(argv, dir.path() / (name + ".out"), dir.path() / (name + ".err")));
  }
  for (const auto& [name, pid] : runs)
    ASSERT_TRUE(wait_for_text(dir.path() / (name + ".err"), "tracer: rings:"))
        << name << ": " << slurp(dir.path() / (name + ".err"));
  const auto w = shell(own_tree_args());
  EXPECT_EQ(w.exit_code, 0) << w.err;
  for (const auto& [name, pid] : runs)
    ::kill(pid, SIGINT);
  std::map<std::string, Outcome> by_path;
  for (const auto& [name, pid] : runs) {
    const int code = wait_code(pid);
    by_path[name] =
        outcome(slurp(dir.path() / (name + ".out")), slurp(dir.path() / (name + ".err")), code);
    expect_answer(s, by_path[name], name);
  }
  for (const auto& [name, o] : by_path)
    EXPECT_EQ(o.rows, by_path["kernel"].rows) << name;
}

INSTANTIATE_TEST_SUITE_P(Shapes, Oracle, ::testing::ValuesIn(shapes()), [](const auto& param) {
  return std::string(param.param.name);
});

}  // namespace
}  // namespace tracer
