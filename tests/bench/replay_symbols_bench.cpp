// Symbolized replay speed (issue #19): records a system-wide profile with callchains (`perf
// record -a -g`, a few hundred thousand samples) of two workloads, steady (a system-call loop
// and a busy loop) and churn (the same and a shell starting short processes: each exec and mmap
// changes a process's maps, and each process has its own addresses), then for each in
// the same run, rounds alternated, on the same warm file:
//   (a) `tracer replay --perf FILE`   perf script's lines, every frame symbolized
//   (b) `perf script -i FILE`         the reference
//   (c) `tracer replay FILE configs/profile.toml`   the profile recipe: stacks aggregated, then
//       symbolized once per distinct stack
// Both outputs of (a) and (b) are compared line by line first: the ratio only counts with
// identical symbols. Prints medians, frames per second and the ratios.
// Usage: tracer_bench_replay_symbols [SECONDS [ROUNDS]] (default 10 s, 5 rounds).
#include <fmt/core.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
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

std::vector<std::string> lines_of(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line))
    out.push_back(std::move(line));
  return out;
}

/// Records `seconds` of `workload` system-wide and prints the three timings; false when the
/// outputs of (a) and (b) differ.
bool measure(const fs::path& dir,
             const char* label,
             const std::vector<std::string>& workload,
             int seconds,
             int rounds) {
  std::string start, pids;
  for (std::size_t i = 0; i < workload.size(); ++i) {
    start += fmt::format("{} & p{}=$!; ", workload[i], i);
    pids += fmt::format(" $p{}", i);
  }
  const auto file = (dir / "profile.data").string();
  fmt::print("\n{}: recording {} s of cpu-clock every 100 us on every CPU with callchains ...\n",
             label, seconds);
  (void)seconds_of(
      fmt::format("({0}sleep {1}; kill{3}; wait) >/dev/null 2>&1 & perf record -q -g -e cpu-clock "
                  "-c 100000 -a -o {2} -- sleep {1} >/dev/null 2>&1; wait",
                  start, seconds, file, pids));
  (void)seconds_of("cat " + file + " > /dev/null");  // warm the page cache
  // Identical symbols first.
  const auto ours_txt = dir / "ours.txt", perf_txt = dir / "perf.txt";
  (void)seconds_of(fmt::format("{} replay --perf {} > {} 2>/dev/null", TRACER_CLI_PATH, file,
                               ours_txt.string()));
  (void)seconds_of(fmt::format("perf script -i {} > {} 2>/dev/null", file, perf_txt.string()));
  const auto a = lines_of(ours_txt), b = lines_of(perf_txt);
  std::size_t frames = 0, samples = 0, differ = 0;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string& x = i < a.size() ? a[i] : std::string();
    const std::string& y = i < b.size() ? b[i] : std::string();
    if (y.starts_with("\t"))
      ++frames;
    else if (!y.empty())
      ++samples;
    // perf's known PLT quirk (see tests/cmd/stacks_test.cpp): "_init+0x.." for a PLT entry.
    const bool plt_quirk =
        x.find("@plt+0x0 (") != std::string::npos && y.find(" _init+0x") != std::string::npos;
    if (x != y && !plt_quirk && differ++ < 3)
      fmt::print("  differs at line {}:\n    tracer: {}\n    perf:   {}\n", i + 1, x, y);
  }
  fmt::print("{} samples, {} frames; {} of {} lines differ\n", samples, frames, differ, b.size());

  std::vector<double> ta, tb, tc;
  for (int r = 0; r < rounds; ++r) {
    ta.push_back(
        seconds_of(fmt::format("{} replay --perf {} > /dev/null 2>&1", TRACER_CLI_PATH, file)));
    tb.push_back(seconds_of(fmt::format("perf script -i {} > /dev/null 2>&1", file)));
    tc.push_back(seconds_of(fmt::format("{} replay {} {}/profile.toml > /dev/null 2>&1",
                                        TRACER_CLI_PATH, file, TRACER_CONFIGS_DIR)));
  }
  const double ma = median(ta), mb = median(tb), mc = median(tc);
  fmt::print("\n{:<52} {:>9} {:>14}\n", "median of " + std::to_string(rounds) + " rounds",
             "seconds", "Mframes/s");
  fmt::print("{:<52} {:>9.3f} {:>14.2f}\n", "(a) tracer replay --perf FILE", ma,
             static_cast<double>(frames) / ma / 1e6);
  fmt::print("{:<52} {:>9.3f} {:>14.2f}\n", "(b) perf script -i FILE", mb,
             static_cast<double>(frames) / mb / 1e6);
  fmt::print("{:<52} {:>9.3f} {:>14.2f}\n", "(c) tracer replay FILE profile.toml (aggregated)", mc,
             static_cast<double>(frames) / mc / 1e6);
  fmt::print("(b)/(a) = {:.2f}x, (b)/(c) = {:.2f}x{}\n", mb / ma, mb / mc,
             differ == 0 ? "" : "  (outputs differ: see above)");
  return differ == 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 10;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
  char tmpl[] = "/tmp/tracer-symbols-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return 1;
  const fs::path dir = tmpl;
  std::vector<std::string> workload = {fmt::format("{} getppid 1000000000", TRACER_SYSCALLER_PATH),
                                       fmt::format("{} {}", TRACER_BUSY_LOOP, seconds * 1000)};
  bool same = measure(dir, "steady: a system-call loop and a busy loop", workload, seconds, rounds);
  workload.emplace_back("sh -c 'while :; do /bin/true; done'");
  same = measure(dir, "churn: the same and a shell starting short processes", workload, seconds,
                 rounds) &&
         same;
  fs::remove_all(dir);
  return same ? 0 : 1;
}
