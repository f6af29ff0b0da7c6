// Counting events as perf stat does: event names in perf's syntax (generic software and
// hardware events, tracepoints, modifiers) resolved to attrs, counters opened system-wide, for a
// process or for a command started here, read at intervals and at the end, and summarized over
// repeated runs. What `tracer stat` does; it prints.
//
// Usage:
//   std::atomic<bool> stop{false};                 // a signal handler sets it
//   auto r = core::count_events({.events = {"page-faults:u"}, .command = argv}, stop,
//                               [](const core::StatInterval& i) { ... print i.deltas ... });
//   print r.values[i] (mean, +- %) per r.counters[i]; r.exit_code is the command's
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tracer/perf/event_attr.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {

/// An event named as perf stat -e names it (tracer::resolve_event_name, event_names.hpp).
[[nodiscard]] perf::EventAttr resolve_stat_event(const std::string& text,
                                                 std::optional<tracefs::Tracefs>& fs);

struct StatOptions {
  /// perf's -e lists (tracer::parse_event_list): "a,b" counts each alone, "{a,b}:u" as a
  /// group (scheduled onto the PMU together, read at once), "{a,b}:W" a weak group.
  std::vector<std::string> events{};
  bool all_cpus = false;      // every CPU, also with a pid or a command
  std::vector<pid_t> pids{};  // -p: processes (every thread, and the children they start)
  std::vector<pid_t> tids{};  // -t: threads (each alone)
  /// -G: a cgroup v2 directory (a path, or a name under /sys/fs/cgroup): only its tasks are
  /// counted, on every CPU (or -C's).
  std::string cgroup{};
  bool per_cpu = false;                  // -A: a value per CPU (system-wide), not summed
  bool per_thread = false;               // --per-thread: a value per thread of -p/-t, not summed
  std::vector<std::string> command{};    // argv of a command started and counted (enable_on_exec)
  std::chrono::nanoseconds duration{0};  // 0: until the command or process ends, or `stop`
  std::chrono::nanoseconds interval{0};  // > 0: on_interval every interval
  unsigned repeat = 1;                   // runs of the measurement (stops early on `stop`)
  /// -C: the CPUs a system-wide count is on (empty: every online CPU).
  std::vector<int> cpus{};
  /// -i: a process's or command's children are not counted (no inherit).
  bool no_inherit = false;
  /// Called once, when the first run's counters are open and counting (a command then starts).
  std::function<void()> on_counting{};

  /// Counters on every CPU (or -C's) for every task: -a, -C, or neither a pid nor a command.
  [[nodiscard]] bool system_wide() const noexcept {
    return all_cpus || !cpus.empty() || !cgroup.empty() ||
           (command.empty() && pids.empty() && tids.empty());
  }
};

struct StatCounter {
  std::string name;  // as given
  std::string unit;  // "ns" for the software clocks, "" otherwise
  /// False: this machine cannot count it (no hardware PMU, a modifier refused), the reason in
  /// `why`; the other events count (perf stat's "<not supported>" row).
  bool supported = true;
  std::string why{};
  /// The {group} it was counted in, as written ("" when alone), and whether that group was
  /// counted as one (false: a weak group that did not fit, counted as separate events).
  std::string group{};
  bool grouped = false;
};

/// What the kernel says of a counter's reading besides its value: how long it ran on the PMU
/// (summed over its CPUs), and that as a share of the time it was enabled (below 100 when the
/// kernel multiplexed it; the value is then scaled up by the inverse).
struct StatRuntime {
  std::uint64_t running_ns = 0;
  double pct = 100.0;
};

/// One counter's value over the runs: the mean, and perf stat's "+- x%": the standard
/// deviation of the mean relative to the mean (tools/perf/util/stat.c stddev_stats).
struct StatSummary {
  double mean = 0;
  std::optional<double> rel_stddev_pct;  // with two runs or more
};
[[nodiscard]] StatSummary summarize(const std::vector<double>& runs);

/// The counts of one interval.
struct StatInterval {
  const std::vector<StatCounter>& counters;
  double elapsed_s = 0;                // since the counters started
  double interval_s = 0;               // the interval's length
  std::vector<double> deltas{};        // per counter, since the previous interval
  std::vector<StatRuntime> runtime{};  // per counter, over the interval
  /// With per_cpu or per_thread: [counter][slot] deltas (slot_labels names the slots).
  const std::vector<std::string>& slot_labels;
  std::vector<std::vector<double>> slot_deltas{};
};

struct StatResult {
  std::vector<StatCounter> counters;
  std::vector<StatSummary> values;  // per counter, over the runs
  StatSummary seconds;              // the runs' elapsed times
  std::size_t runs = 0;
  std::vector<StatRuntime> runtime;  // per counter, in the last run
  int exit_code = 0;                 // the command's in the last run, as a shell reports it (128+N)
  bool target_exited = false;        // the pid target exited (the count ended with it)
  /// A command's CPU time in user and in kernel mode (its rusage, with its children's), over the
  /// runs: perf stat's "seconds user" and "seconds sys" lines.
  std::optional<StatSummary> user_s, sys_s;
  /// With per_cpu or per_thread: what each slot (a CPU "CPU0", a thread "comm-tid") counted in
  /// the last run, [counter][slot], and its run time.
  std::vector<std::string> slot_labels;
  std::vector<std::vector<double>> slot_values;
  std::vector<std::vector<StatRuntime>> slot_runtime;
};

/// Runs the measurement `options.repeat` times (fewer when `stop` is set): opens a counter per
/// event (per CPU when system-wide), starts the command if any, and counts until the duration
/// passes, the command or process ends, or `stop` is set; calls `on_interval` every interval.
/// An event this machine lacks (no hardware PMU) or whose modifier it refuses is a counter with
/// `supported` false while the others count; when none can count, that is the error.
/// Throws tracer::Error: what resolve_stat_event throws; kUnsupported when no event can be
/// counted here; kPermission; kRuntime for a command that cannot be run (with exec's errno).
[[nodiscard]] StatResult count_events(const StatOptions& options,
                                      const std::atomic<bool>& stop,
                                      const std::function<void(const StatInterval&)>& on_interval);

}  // namespace tracer::core
