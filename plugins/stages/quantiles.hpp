// quantiles: p50/p90/p99/p999 (or any list) of a field per key.
//
// Error bound: values go to a log-linear histogram (HDR-style) with 64 sub-buckets per power of
// two; values below 128 have a bucket each (exact). A quantile is the nearest-rank sample's
// bucket, reported at the bucket's midpoint and clamped to the exact [min, max]; so the reported
// value r for a true nearest-rank value v satisfies |r - v| < v / 128 (0.79 %), and r == v for
// v < 128. Values are integers (doubles are truncated; negatives count as 0). Memory: 3776
// counters (30 KiB) per key.
#pragma once

#include "aggregate.hpp"
#include "tracer/common/buckets.hpp"

namespace tracer::stages {

class Quantiles : public AggregateStage, public InPlace, public InKernel {
 public:
  [[nodiscard]] InPlace* in_place() noexcept override { return this; }
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  // The buckets of tracer/common/buckets.hpp (shared with the in-kernel form).
  static constexpr unsigned kSubBits = detail::kQuantileSubBits;  // 64 sub-buckets per octave
  static constexpr std::size_t kExact = detail::kQuantileExact;   // 128
  static constexpr std::size_t kBuckets = detail::kQuantileBuckets;
  /// The relative error bound stated above (1/128).
  static constexpr double kRelativeError = 1.0 / static_cast<double>(kExact);

  [[nodiscard]] static StageSpec spec();
  [[nodiscard]] static std::size_t bucket(std::uint64_t v) noexcept;
  /// The midpoint of bucket `b` (its exact value below 128).
  [[nodiscard]] static std::uint64_t representative(std::size_t b) noexcept;

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] bool takes(std::uint32_t probe) const noexcept override {
    return reads_in_place(probe, value_);
  }
  void on_samples(std::span<const InPlaceSample> samples) noexcept override;
  void snapshot(Table& out, bool reset) override;
  /// In the kernel: the same log-linear buckets and exact min/max in a BPF map
  /// (engine/kernel/codegen*.cpp), so placed in the kernel or not the table is the same.
  [[nodiscard]] KernelForm kernel_form() const override;
  void absorb(const std::vector<KernelRow>& rows) override;

 private:
  /// on_events and on_delivered: an Event* or a InPlaceSample each.
  template <typename Sample>
  void add(std::span<Sample> events) noexcept;
  struct State {
    std::vector<std::uint64_t> counts;
    std::uint64_t total = 0;
    std::uint64_t min = UINT64_MAX, max = 0;
    std::int64_t sum = 0;  // of the values (wrapping, as the kernel's)
  };
  std::vector<double> qs_ = {0.5, 0.9, 0.99, 0.999};
  std::vector<std::string> names_;
  std::optional<FieldRef> value_;
  KeyedStates<State> states_;

 protected:
  [[nodiscard]] std::uint64_t keys_dropped() const noexcept override { return states_.dropped(); }
};

}  // namespace tracer::stages
