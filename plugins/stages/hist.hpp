// hist: a power-of-two histogram of a field per key, rendered like bpftrace's hist().
// Buckets: (..., 0) for negatives, [0], [1], then [2^k, 2^(k+1)) for k = 1..63.
#pragma once

#include <array>
#include <memory>

#include "aggregate.hpp"
#include "tracer/common/buckets.hpp"

namespace tracer::stages {

class Hist : public AggregateStage, public InPlace, public InKernel {
 public:
  [[nodiscard]] InPlace* in_place() noexcept override { return this; }
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  static constexpr std::size_t kBuckets = detail::kLog2Buckets;  // tracer/common/buckets.hpp
  [[nodiscard]] static StageSpec spec();
  /// The bucket of `v` (0: negative, 1: zero, 2: one, 2 + k: [2^k, 2^(k+1))).
  [[nodiscard]] static std::size_t bucket(std::int64_t v) noexcept;
  /// bpftrace's label of 2^power: 1, 2, ... 512, 1K, 2K, ... 1M, ... 16E.
  [[nodiscard]] static std::string power_label(unsigned power);

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] bool takes(std::uint32_t probe) const noexcept override {
    return reads_in_place(probe, value_);
  }
  void on_samples(std::span<const InPlaceSample> samples) noexcept override;
  void snapshot(Table& out, bool reset) override;
  [[nodiscard]] KernelForm kernel_form() const override { return kernel_base(kernel()); }
  void absorb(const std::vector<KernelRow>& rows) override;

 private:
  /// on_events and on_delivered: an Event* or a InPlaceSample each.
  template <typename Sample>
  void add(std::span<Sample> events) noexcept;
  /// Its kernel part: the log2 buckets' counts and the sum.
  [[nodiscard]] static std::shared_ptr<const DistributionKernel> kernel();
  struct State {
    std::array<std::uint64_t, kBuckets> counts{};
    std::uint64_t total = 0;
    std::int64_t sum = 0;  // of the values (wrapping, as the kernel's)
  };
  std::optional<FieldRef> value_;
  KeyedStates<State> states_;

 protected:
  [[nodiscard]] std::uint64_t keys_dropped() const noexcept override { return states_.dropped(); }
};

}  // namespace tracer::stages
