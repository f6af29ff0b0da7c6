// count, rate, sum, min, max, avg: one number per `by` key. They share one implementation (the
// op differs); each has its own name and spec in the stage table.
#pragma once

#include "aggregate.hpp"

namespace tracer::stages {

enum class ScalarOp : std::uint8_t { kCount, kRate, kSum, kMin, kMax, kAvg };

class ScalarAggregate : public AggregateStage, public InPlace, public InKernel {
 public:
  [[nodiscard]] InPlace* in_place() noexcept override { return this; }
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  explicit ScalarAggregate(ScalarOp op) : op_(op) {}
  [[nodiscard]] static StageSpec spec_for(ScalarOp op);

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] bool takes(std::uint32_t probe) const noexcept override;
  void on_samples(std::span<const InPlaceSample> samples) noexcept override;
  void snapshot(Table& out, bool reset) override;
  [[nodiscard]] KernelForm kernel_form() const override;
  void absorb(const std::vector<KernelRow>& rows) override;

 private:
  struct State {
    std::uint64_t count = 0;
    std::int64_t isum = 0;
    double dsum = 0;
    std::int64_t imin = INT64_MAX, imax = INT64_MIN;
    double dmin = 0, dmax = 0;
  };
  /// One event (an Event or a InPlaceSample) into its key's state.
  template <typename Sample>
  void add(const Sample& e) noexcept;

  ScalarOp op_;
  std::optional<FieldRef> value_;
  bool is_float_ = false;
  KeyedStates<State> states_;

 protected:
  [[nodiscard]] std::uint64_t keys_dropped() const noexcept override { return states_.dropped(); }
};

/// count: events per key. Options: by, top, every.
class Count : public ScalarAggregate {
 public:
  Count() : ScalarAggregate(ScalarOp::kCount) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kCount); }
};
/// rate: events per second per key over each interval. Options: by, top, every.
class Rate : public ScalarAggregate {
 public:
  Rate() : ScalarAggregate(ScalarOp::kRate) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kRate); }
};
/// sum of a field per key. Options: field (required), by, top, every.
class Sum : public ScalarAggregate {
 public:
  Sum() : ScalarAggregate(ScalarOp::kSum) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kSum); }
};
class Min : public ScalarAggregate {
 public:
  Min() : ScalarAggregate(ScalarOp::kMin) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kMin); }
};
class Max : public ScalarAggregate {
 public:
  Max() : ScalarAggregate(ScalarOp::kMax) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kMax); }
};
class Avg : public ScalarAggregate {
 public:
  Avg() : ScalarAggregate(ScalarOp::kAvg) {}
  [[nodiscard]] static StageSpec spec() { return spec_for(ScalarOp::kAvg); }
};

}  // namespace tracer::stages
