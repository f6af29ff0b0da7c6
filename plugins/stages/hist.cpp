#include "hist.hpp"

#include "tracer/common/buckets.hpp"

#include <fmt/format.h>

#include <bit>

namespace tracer::stages {

StageSpec Hist::spec() {
  return field_aggregation_spec("hist",
                                "power-of-two histogram of a field per key (bpftrace hist)");
}

std::size_t Hist::bucket(std::int64_t v) noexcept {
  return detail::log2_bucket_of(v);  // 1 -> 2, [2,4) -> 3, ...
}

std::string Hist::power_label(unsigned power) {
  return detail::power_label(power);
}

void Hist::configure(const ConfigValue& options, Diagnostics& diags) {
  stage_name_ = "hist";
  StageOptions opts(spec(), options, diags);
  configure_common(opts);
}

void Hist::bind(BindContext& ctx, Diagnostics& diags) {
  bind_distribution(ctx, diags, value_, states_, 1024);
}

template <typename Sample>
void Hist::add(std::span<Sample> events) noexcept {
  accumulate(
      events, value_, states_, [] { return State{}; },
      [](State& s, const Value& v) {
        const std::int64_t i = to_int(v).value_or(0);
        ++s.counts[bucket(i)];
        ++s.total;
        s.sum = wrapping_add(s.sum, i);
      });
}

void Hist::on_events(std::span<Event* const> events) noexcept {
  add(events);
}

void Hist::on_samples(std::span<const InPlaceSample> samples) noexcept {
  add(samples);
}

std::shared_ptr<const DistributionKernel> Hist::kernel() {
  static const auto k = std::make_shared<const DistributionKernel>(
      "hist", static_cast<std::uint32_t>(kBuckets), "tr_log2_bucket(v)");
  return k;
}

void Hist::absorb(const std::vector<KernelRow>& rows) {
  absorb_buckets(rows, *kernel(), states_, [] { return State{}; });
}

void Hist::snapshot(Table& out, bool reset) {
  describe(out, fmt::format("hist of {}", value_name_));
  out.histogram = true;
  out.value_names = {value_name_, "sum"};
  out.value_kinds = {ValueKind::kCount, ValueKind::kSum};
  snapshot_rows(
      out, states_, reset,
      [](const State& s, TableRow& row) {
        append_buckets(row, s.counts, [](std::size_t b, HistBucket& hb) {
          auto bb = detail::log2_bucket(b);
          hb.lo = bb.lo, hb.hi = bb.hi;
          hb.lo_unbounded = bb.lo_unbounded, hb.hi_unbounded = bb.hi_unbounded;
          hb.label = std::move(bb.label);
        });
        row.values.emplace_back(s.total);
        row.values.emplace_back(s.sum);
      },
      [](State& s) { s = State{}; });
}

}  // namespace tracer::stages
