// stats: the count, sum, min, max, mean and standard deviation of a field per key, in one
// table (bpftrace's stats() with the extremes and the spread). In the kernel as in user space:
// both keep the exact count, sum and sum of squares (128 bits) and the extremes, so both
// placements give the same numbers.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "aggregate.hpp"

namespace tracer::stages {

class Stats : public AggregateStage, public InPlace, public InKernel {
 public:
  [[nodiscard]] InPlace* in_place() noexcept override { return this; }
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] bool takes(std::uint32_t probe) const noexcept override {
    return value_.has_value() && reads_in_place(probe, value_);
  }
  void on_samples(std::span<const InPlaceSample> samples) noexcept override;
  void snapshot(Table& out, bool reset) override;
  [[nodiscard]] KernelForm kernel_form() const override;
  void absorb(const std::vector<KernelRow>& rows) override;

  /// One key's moments. Integers: exact (the sum wraps at 64 bits as the kernel's; the sum of
  /// squares is 128 bits, which holds 2^64 values of up to 2^32, or ~2^60 of durations up to 2
  /// s in nanoseconds). A double field: in doubles.
  struct State {
    std::uint64_t count = 0;
    std::int64_t sum = 0;
    unsigned __int128 squares = 0;
    std::int64_t min = INT64_MAX, max = INT64_MIN;
    double dsum = 0, dsquares = 0, dmin = 0, dmax = 0;
  };
  /// The population standard deviation of `s` (integers), from its exact moments.
  [[nodiscard]] static double stddev(const State& s) noexcept;

 private:
  template <typename Sample>
  void add(const Sample& e) noexcept;

  std::optional<FieldRef> value_;
  bool is_float_ = false;
  KeyedStates<State> states_;

 protected:
  [[nodiscard]] std::uint64_t keys_dropped() const noexcept override { return states_.dropped(); }
};

}  // namespace tracer::stages
