// Placement: which stages of a pipeline run in the kernel. A pipeline whose stages, up to and
// including its aggregation, all have a kernel form (Stage::kernel_form) over fields every probe
// can read in a BPF program becomes one generated program per probe (tracer/kernel/codegen.hpp);
// the stages after the aggregation (outputs of its tables) stay in user space and see the same
// tables, the aggregation absorbing the kernel's rows (Aggregation::absorb).
//
// Usage (Session's):
//   auto places = session::place(pipelines, probes, sampling, recipe.placement);
//   for each p with places[i].plan: set its tgids, generate, compile, load, attach per probe
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracer/kernel/codegen.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"

namespace tracer::kernel {

struct StagePlace {
  std::string use;
  bool kernel = false;
  std::string why;  // what the kernel computes, or why the stage stays in user space
};

struct PipelinePlace {
  std::vector<StagePlace> stages;               // one per stage of the pipeline
  std::optional<kernel::gen::KernelPlan> plan;  // set: the pipeline runs in the kernel
  std::vector<std::uint32_t> probes;            // plan->probes[i] is engine probe probes[i]
  std::size_t aggregation = 0;                  // the aggregation stage (absorbs the rows)
  std::optional<std::size_t> latency;           // a latency stage before it (absorbs counters)
  /// No plan: the stage that keeps the pipeline in user space, where one stage does (its
  /// recipe position is where a forced kernel placement's error points).
  std::optional<std::size_t> blocking_stage;
};

/// Decides every pipeline's placement against the resolved probes (`sampling[i]`: probe i
/// delivers events; counting probes do not). `mode` kUser keeps everything in user space;
/// kKernel is the same decision as kAuto (Session turns a user placement into an error).
/// `task_target`: a pid or command target (probe-PMU kprobes/uprobes then stay in user space:
/// their per-task events are inherited, and an inherited event's exit detaches its program).
/// `filters[i]`: probe i's tracefs filter ("" or absent: none). It gates only the perf event's
/// samples, so a probe program compiles it in; a filter that has no in-kernel form keeps the
/// pipeline in user space (where the tracefs filter applies), with the reason.
[[nodiscard]] std::vector<PipelinePlace> place(std::span<const std::unique_ptr<Pipeline>> pipelines,
                                               std::span<const ProbeInfo> probes,
                                               const std::vector<bool>& sampling,
                                               Placement mode,
                                               bool task_target,
                                               std::span<const std::string> filters = {});

/// A `by` key of a pipeline that stays in user space naming a `char *` tracepoint field: there
/// its value would be the pointer, never the string (an error, not a silent integer).
struct UserFieldProblem {
  std::size_t pipeline = 0, stage = 0;
  std::string message, hint;
};
[[nodiscard]] std::optional<UserFieldProblem> check_user_fields(
    std::span<const std::unique_ptr<Pipeline>> pipelines,
    std::span<const PipelinePlace> places,
    std::span<const ProbeInfo> probes);

/// The placement as `tracer check --plan` prints it: a line per stage.
[[nodiscard]] std::string describe(std::span<const PipelinePlace> places);

}  // namespace tracer::kernel
