// perf.data read speed: records a file of a few hundred MB with `perf record` (a tracepoint with
// fields on a syscall loop), then times, in the same run and on the same warm file:
//   (a) perfdata::Reader::next over every record (decode included), in process
//   (b) `tracer replay FILE count-recipe` (reader + pipeline: count by comm)
//   (c) `perf script -i FILE > /dev/null`
// and prints records/s and the ratios. Usage: tracer_bench_replay [CALLS] (default 3,000,000).
#include <fmt/core.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "tracer/perfdata/reader.hpp"

#include "bench_shell.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::bench::seconds_of;

}  // namespace

int main(int argc, char** argv) {
  const long calls = argc > 1 ? std::atol(argv[1]) : 3000000;
  char tmpl[] = "/tmp/tracer-replay-bench-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr)
    return 1;
  const fs::path dir = tmpl;
  const auto file = (dir / "bench.data").string();
  const auto recipe = (dir / "count.toml").string();
  std::ofstream(recipe) << "[recipe]\nname = \"count\"\n[[probe]]\nname = \"lseek\"\n"
                           "tracepoint = \"syscalls:sys_enter_lseek\"\n[[stage]]\nuse = "
                           "\"count\"\nby = [\"comm\"]\n";
  fmt::print("recording {} lseek calls with perf record ...\n", calls);
  const double rec = seconds_of(fmt::format(
      "perf record -q -m 8M -e syscalls:sys_enter_lseek -o {} -- {} lseek {} >/dev/null 2>&1", file,
      TRACER_SYSCALLER_PATH, calls));
  const auto bytes = fs::file_size(file);
  fmt::print("  {:.1f} MB in {:.1f} s\n", static_cast<double>(bytes) / 1e6, rec);
  (void)seconds_of("cat " + file + " > /dev/null");  // warm the page cache

  // (a) the reader alone.
  std::uint64_t records = 0, samples = 0;
  double reader_s = 1e30;
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    auto reader = tracer::perfdata::Reader::open(file);
    if (!reader) {
      fmt::print(stderr, "{}\n", reader.error().message);
      return 1;
    }
    tracer::perfdata::Item item;
    std::uint64_t n = 0;
    while (reader->next(item))
      ++n;
    if (reader->error()) {
      fmt::print(stderr, "{}\n", reader->error()->describe());
      return 1;
    }
    reader_s = std::min(
        reader_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    records = n;
    samples = reader->stats().samples;
  }
  // (b), (c): best of 3 each, alternated.
  double replay_s = 1e30, script_s = 1e30;
  for (int round = 0; round < 3; ++round) {
    replay_s = std::min(replay_s, seconds_of(fmt::format("{} replay {} {} > /dev/null",
                                                         TRACER_CLI_PATH, file, recipe)));
    script_s = std::min(script_s, seconds_of("perf script -i " + file + " > /dev/null 2>&1"));
  }
  const auto rate = [&](double s) { return static_cast<double>(records) / s / 1e6; };
  fmt::print("\n{} records ({} samples), {:.1f} MB\n", records, samples,
             static_cast<double>(bytes) / 1e6);
  fmt::print("{:<44} {:>9} {:>14}\n", "", "seconds", "Mrecords/s");
  fmt::print("{:<44} {:>9.3f} {:>14.2f}\n", "(a) perfdata::Reader::next (decode)", reader_s,
             rate(reader_s));
  fmt::print("{:<44} {:>9.3f} {:>14.2f}\n", "(b) tracer replay FILE count-by-comm", replay_s,
             rate(replay_s));
  fmt::print("{:<44} {:>9.3f} {:>14.2f}\n", "(c) perf script -i FILE > /dev/null", script_s,
             rate(script_s));
  fmt::print("tracer replay is {:.1f}x faster than perf script\n", script_s / replay_s);
  fs::remove_all(dir);
  return 0;
}
