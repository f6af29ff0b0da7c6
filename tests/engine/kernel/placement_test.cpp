// Placement of a stage by its kernel form alone: a stage placed in the kernel brings its own
// kernel part (KernelForm::agg: its map value and its update), so the planner and the generator
// name no aggregation; an aggregation defined outside the stage library runs there as the
// built-in ones do, and one without a kernel part keeps its pipeline in user space with the
// reason.
#include "tracer/kernel/placement.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "codegen_harness.hpp"
#include "support/stage_batches.hpp"
#include "tracer/ext/stage.hpp"

namespace tracer::kernel {
namespace {

/// A kernel part written here, outside the stage library and the kernel layer: the largest
/// value per key (+ 1, so that 0 is none), raised plainly or atomically as the program needs.
class LargestKernel final : public KernelAgg {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "largest"; }
  [[nodiscard]] std::uint32_t value_size() const noexcept override { return 8; }
  void emit_value(KernelCode& c) const override {
    c.line("__u64 top; /* the largest value + 1: 0 is none */");
  }
  void emit_update(KernelCode& c) const override {
    c.line("__u64 e = (__u64)v + 1;");
    c.raise("p->top", "e");
  }
  [[nodiscard]] bool same(const KernelAgg& other) const override {
    return dynamic_cast<const LargestKernel*>(&other) != nullptr;
  }
};

/// A kernel part whose configuration the kernel cannot hold.
class TooWideKernel final : public KernelAgg {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "too-wide"; }
  [[nodiscard]] std::uint32_t value_size() const noexcept override { return 8; }
  [[nodiscard]] std::optional<std::string> check(std::uint32_t /*max*/) const override {
    return "too-wide: its buckets do not fit";
  }
  void emit_value(KernelCode& c) const override { c.line("__u64 n;"); }
  void emit_update(KernelCode& c) const override { c.count("&p->n"); }
  [[nodiscard]] bool same(const KernelAgg& other) const override {
    return dynamic_cast<const TooWideKernel*>(&other) != nullptr;
  }
};

/// An aggregation stage defined here, outside the stage library: by pid, over `bytes`, in the
/// kernel as its kernel part `agg` (none: it has no kernel form to offer).
class OwnAggregation : public Stage, public InKernel {
 public:
  explicit OwnAggregation(std::shared_ptr<const KernelAgg> agg) : agg_(std::move(agg)) {}
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  void configure(const ConfigValue& /*options*/, Diagnostics& /*diags*/) override {}
  void bind(BindContext& /*ctx*/, Diagnostics& /*diags*/) override {}
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  [[nodiscard]] KernelForm kernel_form() const override {
    return {.kind = KernelForm::Kind::kAggregate, .agg = agg_, .by = {"pid"}, .value = "bytes"};
  }

 private:
  std::shared_ptr<const KernelAgg> agg_;
};

struct Placed {
  std::string text;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  std::vector<PipelinePlace> places;
};

Placed place_one(std::unique_ptr<Stage> stage, Sink& out) {
  Placed r;
  r.pipelines.push_back(std::make_unique<Pipeline>(out));
  r.pipelines.back()->add(std::move(stage), "own");
  const std::vector<ProbeInfo> probes{testing::fake_probe(0, "p")};
  Diagnostics diags;
  r.pipelines.back()->bind(probes, diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
  r.places = place(r.pipelines, probes, {true}, Placement::kAuto, false);
  return r;
}

TEST(Placement, AStageBringsItsKernelPartAndTheGeneratorWritesIt) {
  std::string text;
  Sink out = Sink::to_string(&text);
  using gen::harness::agg_of;
  using testing::cv;
  // Every built-in stage's kernel part, and one written here: none is known to the kernel layer
  // by name.
  const std::vector<std::shared_ptr<const KernelAgg>> parts{
      agg_of("count"),
      agg_of("sum"),
      agg_of("min"),
      agg_of("max"),
      agg_of("avg"),
      agg_of("hist"),
      agg_of("lhist", {{"min", cv(-8)}, {"max", cv(8)}, {"step", cv(2)}}),
      agg_of("quantiles"),
      std::make_shared<const LargestKernel>()};
  for (const auto& agg : parts) {
    SCOPED_TRACE(agg->name());
    Placed p = place_one(std::make_unique<OwnAggregation>(agg), out);
    ASSERT_EQ(p.places.size(), 1u);
    ASSERT_TRUE(p.places[0].plan.has_value()) << describe(p.places);
    EXPECT_EQ(p.places[0].plan->aggregation.agg, agg);
    EXPECT_EQ(p.places[0].plan->aggregation.kind(), agg->name());
    EXPECT_TRUE(p.places[0].stages[0].kernel);
    const auto prog = gen::generate(*p.places[0].plan, 2);
    ASSERT_TRUE(prog.has_value()) << prog.error().message;
    EXPECT_EQ(prog->layout.value_size, agg->value_size());
    EXPECT_NE(prog->source.find("struct tr_val"), std::string::npos);
  }
  Placed own = place_one(std::make_unique<OwnAggregation>(parts.back()), out);
  const auto prog = gen::generate(*own.places[0].plan, 2);
  ASSERT_TRUE(prog.has_value());
  EXPECT_NE(prog->source.find("__u64 top; /* the largest value + 1: 0 is none */"),
            std::string::npos);
  EXPECT_NE(prog->source.find("__u64 e = (__u64)v + 1;"), std::string::npos) << prog->source;
}

TEST(Placement, AnAggregationWithoutAKernelPartStaysInUserSpaceWithTheReason) {
  std::string text;
  Sink out = Sink::to_string(&text);
  Placed p = place_one(std::make_unique<OwnAggregation>(nullptr), out);
  ASSERT_EQ(p.places.size(), 1u);
  EXPECT_FALSE(p.places[0].plan.has_value());
  EXPECT_FALSE(p.places[0].stages[0].kernel);
  EXPECT_NE(p.places[0].stages[0].why.find("the aggregation has no kernel part"), std::string::npos)
      << p.places[0].stages[0].why;
  // What the kernel part refuses keeps it in user space too, with its words.
  Placed bad = place_one(std::make_unique<OwnAggregation>(std::make_shared<TooWideKernel>()), out);
  ASSERT_EQ(bad.places.size(), 1u);
  EXPECT_FALSE(bad.places[0].plan.has_value());
  EXPECT_NE(bad.places[0].stages[0].why.find("too-wide: its buckets do not fit"), std::string::npos)
      << bad.places[0].stages[0].why;
}

}  // namespace
}  // namespace tracer::kernel
