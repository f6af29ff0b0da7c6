// Self-monitoring: a thread counting its own code regions with a perf counter it reads without
// a system call where the kernel allows it (the perf counters document's "a process reading its
// own counters"; perf_event.h's perf_event_mmap_page). The counter's first page is mapped; a read
// takes the page's values under its seqlock and, when the counter is on a hardware PMU and the
// kernel lets user space read it (cap_user_rdpmc), the PMU's value with rdpmc, and extends the
// times enabled and running to now from the TSC (cap_user_time: time_offset, time_mult,
// time_shift; cap_user_time_short: time_cycles, time_mask). Anything else (a software event, a
// counter not on the PMU now, no rdpmc) is read with read(): one system call.
//
// Usage:
//   auto c = tracer::perf::SelfCounter::open(attr_of("page-faults"));   // this thread, enabled
//   const auto before = c->read();
//   work();
//   const std::uint64_t faults = c->read().value - before.value;
#pragma once

#include <linux/perf_event.h>

#include <cstdint>
#include <optional>

#include "tracer/perf/event.hpp"
#include "tracer/perf/event_attr.hpp"
#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

/// One reading of a counter.
struct SelfReading {
  std::uint64_t value = 0;         // as counted, not scaled
  std::uint64_t time_enabled = 0;  // ns the counter was enabled
  std::uint64_t time_running = 0;  // ns it was on the PMU (less when the kernel multiplexed it)
  bool user_space = false;         // read from the user page and rdpmc: no system call
  /// value * time_enabled / time_running (the count had it run all the time), as perf scales.
  [[nodiscard]] std::uint64_t scaled() const noexcept;
};

/// The fields of a user page one pass of its seqlock loop read.
struct UserPageValues {
  std::uint32_t index = 0;  // the PMU counter + 1; 0: not on a PMU counter now
  std::int64_t offset = 0;
  std::uint64_t time_enabled = 0, time_running = 0;
  bool cap_user_rdpmc = false, cap_user_time = false, cap_user_time_short = false;
  std::uint16_t pmc_width = 0;
  std::uint16_t time_shift = 0;
  std::uint32_t time_mult = 0;
  std::uint64_t time_offset = 0, time_cycles = 0, time_mask = 0;
};

/// perf_event.h's arithmetic on what the loop read: the count is `offset` plus `pmc` (the
/// rdpmc value) sign-extended from pmc_width bits; with cap_user_time, the time since the page's
/// last update (from `cycles`, the TSC read in the loop, corrected for a short clock with
/// cap_user_time_short) is added to time_enabled, and to time_running when the counter runs.
/// nullopt when the page cannot give the count (index 0, or no cap_user_rdpmc): read() then.
[[nodiscard]] std::optional<SelfReading> reading_from(const UserPageValues& page,
                                                      std::uint64_t pmc,
                                                      std::uint64_t cycles) noexcept;

/// The seqlock loop over `page`: reads its fields, `rdpmc(index - 1)` and `rdtsc()` inside
/// the loop, again until the page's lock did not change meanwhile (at most `max_tries` passes),
/// then reading_from(). nullopt as reading_from(), or when the page kept changing.
using ReadPmc = std::uint64_t (*)(std::uint32_t counter);
using ReadTsc = std::uint64_t (*)();
[[nodiscard]] std::optional<SelfReading> read_user_page(const perf_event_mmap_page& page,
                                                        ReadPmc rdpmc,
                                                        ReadTsc rdtsc,
                                                        int max_tries = 1000) noexcept;

/// The machine's rdpmc and rdtsc (x86-64; elsewhere rdpmc is never used and rdtsc gives 0).
[[nodiscard]] std::uint64_t machine_rdpmc(std::uint32_t counter) noexcept;
[[nodiscard]] std::uint64_t machine_rdtsc() noexcept;

/// A counter of the calling thread, for reading its own code regions.
class SelfCounter {
 public:
  /// Counts `attr` for the calling thread (pid 0, cpu -1, not inherited) from now on, enabled,
  /// its user page mapped read-only; time_enabled and time_running are asked for.
  /// @return the counter, or perf_event_open's or mmap's errno (ENOENT: no such event here,
  /// e.g. a hardware event without a PMU).
  [[nodiscard]] static Result<SelfCounter> open(EventAttr attr);

  SelfCounter(SelfCounter&& other) noexcept;
  SelfCounter& operator=(SelfCounter&& other) noexcept;
  SelfCounter(const SelfCounter&) = delete;
  SelfCounter& operator=(const SelfCounter&) = delete;
  ~SelfCounter();

  /// The count now: from the user page and rdpmc when the page allows it (only on the thread
  /// that opened it: rdpmc reads this CPU's PMU for the current task), else one read().
  [[nodiscard]] SelfReading read() const noexcept;
  /// read() through the system call always (what the user page saves).
  [[nodiscard]] SelfReading read_syscall() const noexcept;
  /// The user page's capabilities now: whether read() can take the no-syscall path.
  [[nodiscard]] bool user_readable() const noexcept;
  [[nodiscard]] int fd() const noexcept { return event_.fd(); }

 private:
  SelfCounter(Event event, void* page) : event_(std::move(event)), page_(page) {}
  Event event_;
  void* page_ = nullptr;  // the mapped perf_event_mmap_page
};

}  // namespace tracer::perf

#pragma GCC visibility pop
