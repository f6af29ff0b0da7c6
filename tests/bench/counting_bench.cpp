// A counting group's cost on a workload (issue #30), in one run: the same command alone, under
// `perf stat -e '{GROUP}'`, under `tracer stat -e '{GROUP}'` and under `tracer run` of a recipe
// with the same [[counter]] group. Each timing is the median of ROUNDS runs, the tools
// alternated; printed as seconds and as ratios to the bare command and to perf stat.
// Usage: tracer_bench_counting [CALLS] [ROUNDS] (defaults 2,000,000 lseek calls, 7 rounds).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "bench_shell.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::bench::seconds_of;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  char tmpl[] = "/tmp/tracer-counting-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return 1;
  const fs::path dir = tmpl;
  const std::string group = "task-clock,page-faults,context-switches,syscalls:sys_enter_lseek";
  const auto recipe = (dir / "counters.toml").string();
  std::ofstream(recipe) << "[recipe]\nname = \"bench\"\n[[counter]]\nname = \"g\"\nevents = "
                           "[\"task-clock\", \"page-faults\", \"context-switches\", "
                           "\"syscalls:sys_enter_lseek\"]\n";
  // Two processes, one per CPU, each making CALLS/2 lseek calls.
  const std::string work = fmt::format("/bin/sh -c '{0} lseek {1} 0 & {0} lseek {1} 1; wait'",
                                       TRACER_SYSCALLER_PATH, calls / 2);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"bare command", work},
      {"perf stat -e '{group}'", fmt::format("perf stat -x, -e '{{{}}}' -- {}", group, work)},
      {"tracer stat -e '{group}'",
       fmt::format("{} stat -x, -e '{{{}}}' -- {}", TRACER_CLI_PATH, group, work)},
      {"tracer run [[counter]] recipe",
       fmt::format("{} run {} -- {}", TRACER_CLI_PATH, recipe, work)},
  };
  std::vector<std::vector<double>> times(cases.size());
  (void)seconds_of(work + " > /dev/null");  // warm up
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t c = 0; c < cases.size(); ++c)
      times[c].push_back(seconds_of(cases[c].second + " > /dev/null 2>&1"));
  }
  std::vector<double> med;
  for (const auto& t : times)
    med.push_back(median(t));
  fmt::print("{} lseek calls in 2 processes, median of {} runs each\n", calls, rounds);
  fmt::print("{:<34} {:>9} {:>12} {:>12}\n", "", "seconds", "vs bare", "vs perf stat");
  for (std::size_t c = 0; c < cases.size(); ++c) {
    fmt::print("{:<34} {:>9.3f} {:>11.3f}x {:>11.3f}x\n", cases[c].first, med[c], med[c] / med[0],
               med[c] / med[1]);
  }
  fs::remove_all(dir);
  return 0;
}
