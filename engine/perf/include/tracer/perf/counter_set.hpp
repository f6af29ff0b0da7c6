// CounterSet: counting events opened as perf groups (a leader and its members, scheduled onto
// the PMU as a unit), one group per CPU or per task, read with one read(2) of the leader
// (PERF_FORMAT_GROUP) and scaled where the kernel multiplexed them. What `[[counter]]` groups
// of a recipe and `tracer stat` both count with.
//
// Usage:
//   perf::CounterSetOptions o;
//   o.events = {{"task-clock", attr1}, {"page-faults", attr2}};
//   o.slots = {{.pid = child, .cpu = -1}};          // or one per CPU with pid -1 (system-wide)
//   o.inherit = true;                                // the task's children count too
//   auto set = perf::CounterSet::open(o);            // Result<CounterSet>
//   set->enable();  ...  auto r = set->read();       // r.counters[i].scaled, .pct()
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tracer/perf/event.hpp"
#include "tracer/perf/event_attr.hpp"
#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

struct CounterSetEvent {
  std::string name;  // as the user wrote it
  EventAttr attr;    // type and config (and modifiers' exclude bits); the set adds the rest
};

/// Where one copy of the group counts: a task (pid > 0, cpu -1 or a CPU), every task on a CPU
/// (pid -1), or a cgroup (pid = the cgroup directory's fd, with PERF_FLAG_PID_CGROUP).
struct CounterSlot {
  pid_t pid = -1;
  int cpu = -1;
  unsigned long flags = 0;
};

struct CounterSetOptions {
  std::vector<CounterSetEvent> events{};  // the first leads the group
  std::vector<CounterSlot> slots{};       // at least one
  /// true: one perf group (exact ratios, one read). false: each event on its own (perf stat's
  /// default for -e a,b: each is multiplexed on its own).
  bool group = true;
  /// A group that cannot be opened as one (it does not fit the PMU, a member refuses to be
  /// grouped) falls back to separate events (perf's `:W` weak groups); fell_back() says it.
  bool weak = false;
  bool pinned = false;     // the group stays on the PMU or is in error (never multiplexed)
  bool exclusive = false;  // the group is alone on the PMU while it runs
  bool inherit = false;    // a task's children (threads and processes made after open) count
  /// The events start disabled and are enabled by the task's exec (a command held until its
  /// counters exist); else they start disabled and enable() starts them.
  bool enable_on_exec = false;
};

/// One event's reading, summed over the slots.
struct CounterReading {
  std::uint64_t raw = 0;      // what the PMU counted
  double scaled = 0;          // raw * enabled / running, per slot, summed
  std::uint64_t enabled = 0;  // ns the event was enabled (summed over the slots)
  std::uint64_t running = 0;  // ns it was on the PMU
  /// Whether it ran at all (perf stat's "<not counted>" when not).
  [[nodiscard]] bool counted() const noexcept { return running > 0; }
  /// The share of its enabled time it ran, in percent (below 100: the kernel multiplexed it and
  /// `scaled` estimates the whole).
  [[nodiscard]] double pct() const noexcept {
    return enabled == 0 ? 100.0
                        : 100.0 * static_cast<double>(running) / static_cast<double>(enabled);
  }
  /// The interval between two readings of the same event in one slot: the raw count, the
  /// times, and the count scaled by the interval's own times (as perf stat -I scales), so that
  /// an interval the kernel did not multiplex is exact whatever came before.
  [[nodiscard]] CounterReading since(const CounterReading& earlier) const noexcept;
};

struct CounterSetReading {
  std::vector<CounterReading> counters;               // per event, summed over the slots
  std::vector<std::vector<CounterReading>> per_slot;  // [slot][event]
  /// The interval since `earlier` (a reading of the same set): per slot (each scaled by its
  /// own times), and summed over the slots.
  [[nodiscard]] CounterSetReading since(const CounterSetReading& earlier) const;
};

/// The threads of process `pid` now (/proc/PID/task): what a count of the process opens one
/// event per (inherit adds the threads and processes made later). ESRCH when it has none.
[[nodiscard]] Result<std::vector<pid_t>> process_threads(pid_t pid);

class CounterSet {
 public:
  /// Opens the events on every slot: as one group per slot (PERF_FORMAT_GROUP read), or each
  /// alone when !group or when a weak group had to fall back. Disabled until enable() (or the
  /// task's exec with enable_on_exec).
  /// @return the set, or the Failure of the first event that could not be opened (its message
  /// names the event); a task slot whose task exited since it was listed (ESRCH) is skipped
  /// unless it is the only one.
  [[nodiscard]] static Result<CounterSet> open(const CounterSetOptions& options);

  [[nodiscard]] Status enable() const;
  [[nodiscard]] Status disable() const;
  [[nodiscard]] Status reset() const;
  /// Every event's counts now (one read(2) per group and slot). Events of a slot that cannot
  /// be read (its task gone) keep reading 0 there.
  [[nodiscard]] CounterSetReading read() const;

  [[nodiscard]] std::size_t size() const noexcept { return names_.size(); }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  [[nodiscard]] const std::vector<CounterSlot>& slots() const noexcept { return slots_; }
  /// Opened as one group per slot.
  [[nodiscard]] bool grouped() const noexcept { return grouped_; }
  /// A weak group that did not fit and was opened as separate events, and why.
  [[nodiscard]] bool fell_back() const noexcept { return !fallback_reason_.empty(); }
  [[nodiscard]] const std::string& fallback_reason() const noexcept { return fallback_reason_; }
  /// The perf event fds of the set (tests: count them; all closed with the set).
  [[nodiscard]] std::size_t fd_count() const noexcept;

 private:
  struct SlotEvents {
    std::vector<Event> events;  // leader first when grouped
  };
  std::vector<std::string> names_;
  std::vector<CounterSlot> slots_;
  std::vector<SlotEvents> per_slot_;
  bool grouped_ = false;
  std::string fallback_reason_;
};

}  // namespace tracer::perf

#pragma GCC visibility pop
