#include "pipelines.hpp"

#include "tracer/stage.hpp"

namespace tracer::cli {

std::vector<StageSpec> catalog() {
  std::vector<StageSpec> specs;
  for (const auto* s : StageRegistry::global().specs())
    specs.push_back(*s);
  return specs;
}

std::vector<std::unique_ptr<Pipeline>> make_pipelines(const Recipe& recipe,
                                                      Sink& out,
                                                      bool json,
                                                      Diagnostics& diags,
                                                      const PipelineOptions& base,
                                                      const std::string& perf_data) {
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  const auto& registry = StageRegistry::global();
  auto options = [&](bool implicit_print) {
    PipelineOptions o = base;
    o.implicit_print = implicit_print;
    return o;
  };
  for (const auto& rp : recipe.pipelines) {
    auto p = std::make_unique<Pipeline>(out, options(!json));
    for (const auto& st : rp.stages) {
      if (json && st.use == "print") {
        ConfigValue empty{.value = ConfigTable{}, .where = st.where};
        p->add(registry, "jsonl", empty, diags);
      } else {
        p->add(registry, st.use, st.options, diags);
      }
    }
    if (json && (p->size() == 0 || !p->stage(p->size() - 1).outputs())) {
      p->add(registry, "jsonl", ConfigValue{.value = ConfigTable{}, .where = rp.where}, diags);
    }
    pipelines.push_back(std::move(p));
  }
  if (pipelines.empty() && perf_data.empty()) {  // no stages: every event as a line
    auto p = std::make_unique<Pipeline>(out, options(false));
    p->add(registry, json ? "jsonl" : "print", ConfigValue{.value = ConfigTable{}}, diags);
    pipelines.push_back(std::move(p));
  }
  if (!perf_data.empty()) {
    auto p = std::make_unique<Pipeline>(out, options(false));
    const SourceRegion where{.path = "--perf-data", .line = 0, .column = 0};
    ConfigTable table{{"path", ConfigValue{.value = perf_data, .where = where}}};
    p->add(registry, "perf-data", ConfigValue{.value = std::move(table), .where = where}, diags);
    pipelines.push_back(std::move(p));
  }
  return pipelines;
}

}  // namespace tracer::cli
