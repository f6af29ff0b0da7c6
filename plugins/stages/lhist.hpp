// lhist: a linear histogram of a field per key (bpftrace lhist(value, min, max, step)).
// Buckets: (..., min), [min, min+step), ... , [max, ...).
#pragma once

#include <memory>

#include "aggregate.hpp"

namespace tracer::stages {

class Lhist : public AggregateStage, public InPlace, public InKernel {
 public:
  [[nodiscard]] InPlace* in_place() noexcept override { return this; }
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  static constexpr std::int64_t kMaxBuckets = 100000;
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] bool takes(std::uint32_t probe) const noexcept override {
    return reads_in_place(probe, value_);
  }
  void on_samples(std::span<const InPlaceSample> samples) noexcept override;
  void snapshot(Table& out, bool reset) override;
  [[nodiscard]] KernelForm kernel_form() const override;
  void absorb(const std::vector<KernelRow>& rows) override;
  /// Its kernel part: a count per bucket of bucket(), and the sum.
  [[nodiscard]] std::shared_ptr<const DistributionKernel> kernel() const;

  /// Index of `v`: 0 below min, 1 + (v - min) / step inside, last at or above max.
  [[nodiscard]] std::size_t bucket(std::int64_t v) const noexcept;

 private:
  /// on_events and on_delivered: an Event* or a InPlaceSample each.
  template <typename Sample>
  void add(std::span<Sample> events) noexcept;
  struct State {
    std::vector<std::uint64_t> counts;
    std::uint64_t total = 0;
    std::int64_t sum = 0;  // of the values (wrapping, as the kernel's)
  };
  std::int64_t min_ = 0, max_ = 100, step_ = 10;
  std::size_t inner_ = 10;  // buckets between min and max
  std::optional<FieldRef> value_;
  KeyedStates<State> states_;

 protected:
  [[nodiscard]] std::uint64_t keys_dropped() const noexcept override { return states_.dropped(); }
};

}  // namespace tracer::stages
