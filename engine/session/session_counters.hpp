// A session's [[counter]] groups: a perf::CounterSet per group on the recipe's target (every
// CPU, a cgroup on every CPU, every thread of a process with its children, a command from its
// exec), read by the `counters` stages through tracer::CounterSource. Private to
// engine/session.
#pragma once

#include <chrono>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "tracer/counter_source.hpp"
#include "tracer/probe.hpp"
#include "tracer/recipe.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer {

class SessionCounters final : public CounterSource {
 public:
  explicit SessionCounters(std::vector<RecipeCounter> groups) : groups_(std::move(groups)) {}

  /// Opens every group on `target` (disabled; a command's start at its exec: `command_pid` is
  /// its pid, held before exec). Throws tracer::Error (kRecipe) at the position of what cannot
  /// be counted: an unknown event or tracepoint, an event this machine lacks, per_cpu of a
  /// task target; kPermission / kRuntime as the kernel says.
  void open(const Target& target, pid_t command_pid);
  /// Starts the counting (not needed for a command: its exec starts it); started() is now.
  void enable();
  void close() noexcept;

  [[nodiscard]] std::span<const RecipeCounter> groups() const noexcept override { return groups_; }
  [[nodiscard]] CounterGroupReading read(std::size_t group) const override;
  [[nodiscard]] std::chrono::nanoseconds started() const noexcept override { return started_; }
  [[nodiscard]] bool empty() const noexcept { return groups_.empty(); }

 private:
  std::vector<RecipeCounter> groups_;
  std::vector<std::optional<perf::CounterSet>> sets_;
  std::vector<int> cpus_;  // the slots' CPUs when per CPU (system-wide, cgroup)
  UniqueFd cgroup_fd_;
  std::chrono::nanoseconds started_{};
};

}  // namespace tracer
