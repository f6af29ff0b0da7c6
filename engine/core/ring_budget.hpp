// Default ring sizes from the locked-memory budget the kernel grants this process, so bursts
// are held without loss where the budget allows and a ring never fails to map for want of it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace tracer::core {

/// What perf_mmap() (kernel/events/core.c) will let this process lock for ring buffers.
struct MlockBudget {
  bool unlimited = false;          // CAP_IPC_LOCK, or perf_event_paranoid -1: no limit applies
  std::uint64_t perf_bytes = 0;    // kernel.perf_event_mlock_kb x online CPUs (per user)
  std::uint64_t rlimit_bytes = 0;  // RLIMIT_MEMLOCK beyond that (0 when unlimited or unknown)
};

/// The budget of the calling process (reads /proc/sys/kernel/perf_event_mlock_kb and
/// perf_event_paranoid, the capability set and RLIMIT_MEMLOCK).
[[nodiscard]] MlockBudget mlock_budget();

struct RingPlan {
  std::uint32_t data_pages = 0;  // per ring, a power of two
  std::string why;               // one line for -v: the budget and how it was shared
};

/// Data pages per ring for `rings` rings (every probe's per-CPU rings and the BPF output
/// channel's). Without a limit: 4 MiB per ring (at the ~45 MB/s a two-probe syscall burst
/// writes per CPU here, ~70 ms of a consumer kept off its CPU after its wakeup at a quarter),
/// less when many rings would pass 256 MiB in all. Within a budget: the budget shared equally, one
/// metadata page per ring taken off, rounded down to a power of two.
[[nodiscard]] RingPlan plan_rings(std::size_t rings, const MlockBudget& budget);

}  // namespace tracer::core
