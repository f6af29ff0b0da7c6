// Symbolizer throughput: 100k user addresses spread over the code of libc and of this program,
// symbolized by a new Symbolizer per iteration (cold: /proc/PID/maps read, files opened, symbol
// tables built and demangled) and by one that has seen them all (warm: results cached).
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tracer/symbols/symbols.hpp"

namespace {

constexpr std::size_t kAddresses = 100'000;

/// Executable mappings of this process: libc's and the benchmark program's own.
std::vector<std::pair<std::uint64_t, std::uint64_t>> code_ranges() {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  std::ifstream maps("/proc/self/maps");
  std::string line;
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  const std::string self = n > 0 ? std::string(exe, static_cast<std::size_t>(n)) : "";
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, off, dev, inode, path;
    in >> range >> perms >> off >> dev >> inode >> path;
    if (perms.size() < 3 || perms[2] != 'x' ||
        (path != self && path.find("/libc.so") == std::string::npos))
      continue;
    const auto dash = range.find('-');
    out.emplace_back(std::stoull(range.substr(0, dash), nullptr, 16),
                     std::stoull(range.substr(dash + 1), nullptr, 16));
  }
  return out;
}

const std::vector<std::uint64_t>& addresses() {
  static const std::vector<std::uint64_t> ips = [] {
    const auto ranges = code_ranges();
    std::vector<std::uint64_t> out;
    if (ranges.empty())
      return out;
    std::uint64_t x = 0x9e3779b97f4a7c15ULL;  // xorshift: the same addresses every run
    for (std::size_t i = 0; i < kAddresses; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const auto& [start, end] = ranges[i % ranges.size()];
      out.push_back(start + x % (end - start));
    }
    return out;
  }();
  return ips;
}

std::size_t symbolize_all(tracer::symbols::Symbolizer& sym) {
  const auto pid = static_cast<std::uint32_t>(::getpid());
  std::size_t named = 0;
  for (const std::uint64_t ip : addresses())
    named += sym.symbolize_user(pid, ip).front().symbol.empty() ? 0 : 1;
  return named;
}

void BM_SymbolizeCold(benchmark::State& state) {
  if (addresses().empty()) {
    state.SkipWithError("no executable mapping of libc or of this program in /proc/self/maps");
    return;
  }
  std::size_t named = 0;
  for (auto _ : state) {
    tracer::symbols::Symbolizer sym;
    named = symbolize_all(sym);
    benchmark::DoNotOptimize(named);
  }
  state.counters["named_%"] = 100.0 * static_cast<double>(named) / kAddresses;
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kAddresses));
}
BENCHMARK(BM_SymbolizeCold)->Unit(benchmark::kMillisecond);

void BM_SymbolizeWarm(benchmark::State& state) {
  if (addresses().empty()) {
    state.SkipWithError("no executable mapping of libc or of this program in /proc/self/maps");
    return;
  }
  tracer::symbols::Symbolizer sym;
  std::size_t named = symbolize_all(sym);
  for (auto _ : state) {
    named = symbolize_all(sym);
    benchmark::DoNotOptimize(named);
  }
  state.counters["named_%"] = 100.0 * static_cast<double>(named) / kAddresses;
  state.counters["files"] = static_cast<double>(sym.stats().files_opened);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kAddresses));
}
BENCHMARK(BM_SymbolizeWarm)->Unit(benchmark::kMillisecond);

}  // namespace
