#include "ring_budget.hpp"

#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <fstream>
#include <optional>

#include "tracer/perf/event.hpp"

namespace tracer::core {
namespace {

constexpr int kCapIpcLock = 14;
constexpr std::uint64_t kPage = 4096;
constexpr std::uint32_t kUnlimitedRingPages = 1024;           // 4 MiB
constexpr std::uint64_t kUnlimitedTotalBytes = 256ULL << 20;  // all rings together
constexpr std::uint32_t kMinRingPages = 1;

std::optional<long long> read_number(const char* path) {
  std::ifstream in(path);
  long long v = 0;
  if (in >> v)
    return v;
  return std::nullopt;
}

std::uint32_t pow2_floor(std::uint64_t n) {
  if (n == 0)
    return 0;
  return static_cast<std::uint32_t>(std::bit_floor(std::min<std::uint64_t>(n, 1U << 30)));
}

}  // namespace

MlockBudget mlock_budget() {
  MlockBudget b;
  const long paranoid =
      static_cast<long>(read_number("/proc/sys/kernel/perf_event_paranoid").value_or(2));
  // perf_mmap(): past the per-user perf allowance, the rest counts against RLIMIT_MEMLOCK
  // "if (locked > lock_limit && perf_is_paranoid() && !capable(CAP_IPC_LOCK))" -> EPERM.
  if (perf::has_capability(kCapIpcLock).value_or(false) || paranoid < 0) {
    b.unlimited = true;
    return b;
  }
  const long long kb = read_number("/proc/sys/kernel/perf_event_mlock_kb").value_or(516);
  const long cpus = std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
  b.perf_bytes =
      static_cast<std::uint64_t>(std::max(0LL, kb)) * 1024 * static_cast<std::uint64_t>(cpus);
  rlimit rl{};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    if (rl.rlim_cur == RLIM_INFINITY)
      b.unlimited = true;
    else
      b.rlimit_bytes = rl.rlim_cur;
  }
  return b;
}

RingPlan plan_rings(std::size_t rings, const MlockBudget& budget) {
  RingPlan p;
  rings = std::max<std::size_t>(1, rings);
  if (budget.unlimited) {
    const std::uint64_t share = kUnlimitedTotalBytes / rings;
    p.data_pages = std::clamp<std::uint32_t>(pow2_floor(share / kPage), 8, kUnlimitedRingPages);
    p.why = fmt::format(
        "{} rings x {} KiB: no locked-memory limit applies (CAP_IPC_LOCK or "
        "perf_event_paranoid -1); up to {} KiB per ring, {} MiB in all",
        rings, p.data_pages * kPage / 1024, kUnlimitedRingPages * kPage / 1024,
        kUnlimitedTotalBytes >> 20);
    return p;
  }
  const std::uint64_t total = budget.perf_bytes + budget.rlimit_bytes;
  const std::uint64_t share = total / rings;
  const std::uint64_t data = share > kPage ? share - kPage : 0;  // the metadata page
  p.data_pages =
      std::clamp<std::uint32_t>(pow2_floor(data / kPage), kMinRingPages, kUnlimitedRingPages);
  p.why = fmt::format(
      "{} rings x {} KiB: locked-memory budget {} KiB (perf_event_mlock_kb x CPUs {} KiB + "
      "RLIMIT_MEMLOCK {} KiB) shared equally; more with CAP_IPC_LOCK or a larger "
      "kernel.perf_event_mlock_kb",
      rings, p.data_pages * kPage / 1024, total / 1024, budget.perf_bytes / 1024,
      budget.rlimit_bytes / 1024);
  return p;
}

}  // namespace tracer::core
