// The one explicit table of built-in stages (no static-initialiser self-registration).
// StageRegistry::from_table() checks it for duplicate names at startup.
#include "tracer/ext/stages.hpp"

#include "bpf_map.hpp"
#include "counters.hpp"
#include "csv.hpp"
#include "filter.hpp"
#include "flamegraph.hpp"
#include "folded.hpp"
#include "hist.hpp"
#include "jsonl.hpp"
#include "latency.hpp"
#include "lhist.hpp"
#include "otlp.hpp"
#include "perf_data.hpp"
#include "perfmon.hpp"
#include "plugin_stage.hpp"
#include "print.hpp"
#include "quantiles.hpp"
#include "scalar.hpp"
#include "stats.hpp"

namespace tracer {

namespace {
using namespace stages;  // NOLINT(google-build-using-namespace): the table reads better
constexpr StageEntry kAllStages[] = {
    stage<Filter>(),   stage<Count>(),  stage<Sum>(),        stage<Min>(),         stage<Max>(),
    stage<Avg>(),      stage<Hist>(),   stage<Lhist>(),      stage<Quantiles>(),   stage<Rate>(),
    stage<Latency>(),  stage<Print>(),  stage<Jsonl>(),      stage<Csv>(),         stage<BpfMap>(),
    stage<PerfData>(), stage<Folded>(), stage<Flamegraph>(), stage<PluginStage>(), stage<Perfmon>(),
    stage<Counters>(), stage<Otlp>(),   stage<Stats>(),
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
