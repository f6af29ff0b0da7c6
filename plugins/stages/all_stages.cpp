// The one explicit table of built-in stages (no static-initialiser self-registration).
// StageRegistry::from_table() checks it for duplicate names at startup.
#include "tracer/stages.hpp"

#include "plugins/stages/bpf_map.hpp"
#include "plugins/stages/csv.hpp"
#include "plugins/stages/filter.hpp"
#include "plugins/stages/flamegraph.hpp"
#include "plugins/stages/folded.hpp"
#include "plugins/stages/hist.hpp"
#include "plugins/stages/jsonl.hpp"
#include "plugins/stages/latency.hpp"
#include "plugins/stages/lhist.hpp"
#include "plugins/stages/perf_data.hpp"
#include "plugins/stages/print.hpp"
#include "plugins/stages/quantiles.hpp"
#include "plugins/stages/scalar.hpp"

namespace tracer {

namespace {
using namespace stages;  // NOLINT(google-build-using-namespace): the table reads better
constexpr StageEntry kAllStages[] = {
    stage<Filter>(),   stage<Count>(),  stage<Sum>(),        stage<Min>(),       stage<Max>(),
    stage<Avg>(),      stage<Hist>(),   stage<Lhist>(),      stage<Quantiles>(), stage<Rate>(),
    stage<Latency>(),  stage<Print>(),  stage<Jsonl>(),      stage<Csv>(),       stage<BpfMap>(),
    stage<PerfData>(), stage<Folded>(), stage<Flamegraph>(),
};
}  // namespace

std::span<const StageEntry> builtin_stages() noexcept {
  return kAllStages;
}

StageRegistry builtin_stage_registry() {
  return StageRegistry::from_table(builtin_stages());
}

StageRegistry& stage_registry() {
  static StageRegistry registry = builtin_stage_registry();
  return registry;
}

void register_stage(StageSpec spec, StageFactory factory) {
  stage_registry().register_stage(std::move(spec), std::move(factory));
}

}  // namespace tracer
