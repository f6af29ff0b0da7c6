// Placement of a stage by its kernel form alone: the planner and the generator know an
// aggregation by the name its stage gives (KernelForm::agg), so a stage placed in the kernel
// needs nothing outside engine/kernel/ but its record; a name with no record keeps the pipeline
// in user space with the reason.
#include "tracer/kernel/placement.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "support/stage_batches.hpp"
#include "tracer/ext/stage.hpp"

namespace tracer::kernel {
namespace {

/// An aggregation stage defined here, outside the stage library: by pid, over `bytes`, in the
/// kernel as the aggregation named `agg`.
class NamedAggregation : public Stage, public InKernel {
 public:
  explicit NamedAggregation(std::string agg, AggParams params = {})
      : agg_(std::move(agg)), params_(std::move(params)) {}
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  void configure(const ConfigValue& /*options*/, Diagnostics& /*diags*/) override {}
  void bind(BindContext& /*ctx*/, Diagnostics& /*diags*/) override {}
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  [[nodiscard]] KernelForm kernel_form() const override {
    return {.kind = KernelForm::Kind::kAggregate,
            .agg = agg_,
            .params = params_,
            .by = {"pid"},
            .value = "bytes"};
  }

 private:
  std::string agg_;
  AggParams params_;
};

struct Placed {
  std::string text;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  std::vector<PipelinePlace> places;
};

Placed place_one(std::unique_ptr<Stage> stage, Sink& out) {
  Placed r;
  r.pipelines.push_back(std::make_unique<Pipeline>(out));
  r.pipelines.back()->add(std::move(stage), "named");
  const std::vector<ProbeInfo> probes{testing::fake_probe(0, "p")};
  Diagnostics diags;
  r.pipelines.back()->bind(probes, diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
  r.places = place(r.pipelines, probes, {true}, Placement::kAuto, false);
  return r;
}

TEST(Placement, AStageNamesItsKernelAggregationAndTheRecordDoesTheRest) {
  std::string text;
  Sink out = Sink::to_string(&text);
  // Every record the kernel layer has, named by a stage it has never seen.
  for (const std::string name :
       {"count", "sum", "min", "max", "avg", "hist", "lhist", "quantiles"}) {
    AggParams params;
    if (name == "lhist")
      params = {{{"min", -8}, {"max", 8}, {"step", 2}}};
    Placed p = place_one(std::make_unique<NamedAggregation>(name, params), out);
    ASSERT_EQ(p.places.size(), 1u);
    ASSERT_TRUE(p.places[0].plan.has_value()) << name << ": " << describe(p.places);
    EXPECT_EQ(p.places[0].plan->aggregation.kind, name);
    EXPECT_EQ(p.places[0].plan->aggregation.params, params);
    EXPECT_TRUE(p.places[0].stages[0].kernel);
    // It generates: the record lays out the value and writes its update.
    const auto prog = gen::generate(*p.places[0].plan, 2);
    ASSERT_TRUE(prog.has_value()) << name << ": " << prog.error().message;
    EXPECT_NE(prog->source.find("struct tr_val"), std::string::npos);
  }
}

TEST(Placement, AnAggregationTheKernelLayerLacksStaysInUserSpaceWithTheReason) {
  std::string text;
  Sink out = Sink::to_string(&text);
  Placed p = place_one(std::make_unique<NamedAggregation>("median"), out);
  ASSERT_EQ(p.places.size(), 1u);
  EXPECT_FALSE(p.places[0].plan.has_value());
  EXPECT_FALSE(p.places[0].stages[0].kernel);
  EXPECT_NE(p.places[0].stages[0].why.find("no in-kernel aggregation 'median'"), std::string::npos)
      << p.places[0].stages[0].why;
  // Its params are its record's to check: a bad one keeps it in user space too, with why.
  Placed bad = place_one(
      std::make_unique<NamedAggregation>("lhist", AggParams{{{"min", 5}, {"max", 5}}}), out);
  ASSERT_EQ(bad.places.size(), 1u);
  EXPECT_FALSE(bad.places[0].plan.has_value());
  EXPECT_NE(bad.places[0].stages[0].why.find("lhist: max must be above min"), std::string::npos)
      << bad.places[0].stages[0].why;
}

}  // namespace
}  // namespace tracer::kernel
