// Recipe -> pipelines, shared by `tracer run`, `tracer check` and `tracer replay`.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tracer/diagnostics.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/stage_spec.hpp"

namespace tracer::cli {

/// The specs of every registered stage (what Recipe::load checks stages against).
std::vector<StageSpec> catalog();

/// Builds the recipe's pipelines, writing to `out`. In `json` mode print stages become jsonl and
/// an aggregation without an output gets a jsonl stage, so stdout is JSON lines only. A recipe
/// without stages gets one pipeline that prints every event. `perf_data` adds a pipeline with a
/// perf-data sink that receives every record (and no default print pipeline). Problems go to
/// `diags`.
std::vector<std::unique_ptr<Pipeline>> make_pipelines(const Recipe& recipe,
                                                      Sink& out,
                                                      bool json,
                                                      Diagnostics& diags,
                                                      const PipelineOptions& base = {},
                                                      const std::string& perf_data = {});

}  // namespace tracer::cli
