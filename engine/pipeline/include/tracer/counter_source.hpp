// What a run's [[counter]] groups give the stages: each group's definition and, on request, a
// reading of its counters now (summed, and per CPU where the group counts per CPU). The
// session implements it over perf::CounterSet; the `counters` stage reads it at each interval
// and at the end.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "tracer/perf/counter_set.hpp"
#include "tracer/recipe.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct CounterGroupReading {
  /// The counts since the group was enabled: .counters per counter (summed over the slots),
  /// .per_slot [slot][counter]. An interval is counts.since(an earlier reading's counts).
  perf::CounterSetReading counts;
  /// Each slot's CPU (system-wide and cgroup groups; -1 for a task's slot).
  std::vector<int> cpus;
  /// Counted as one perf group (false: a weak group that did not fit, counted separately).
  bool grouped = true;
  /// When it was read (CLOCK_MONOTONIC).
  std::chrono::nanoseconds time{};
};

class CounterSource {
 public:
  virtual ~CounterSource() = default;
  /// The groups, as the recipe declares them.
  [[nodiscard]] virtual std::span<const RecipeCounter> groups() const noexcept = 0;
  /// Group `group`'s counters now (one read(2) per CPU or task, cheap enough per interval).
  [[nodiscard]] virtual CounterGroupReading read(std::size_t group) const = 0;
  /// When the counters began (CLOCK_MONOTONIC): the start of the first interval.
  [[nodiscard]] virtual std::chrono::nanoseconds started() const noexcept = 0;

 protected:
  CounterSource() = default;
  CounterSource(const CounterSource&) = default;
  CounterSource& operator=(const CounterSource&) = default;
};

}  // namespace tracer

#pragma GCC visibility pop
