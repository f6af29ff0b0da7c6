#include "lhist.hpp"

#include "tracer/common/buckets.hpp"

#include <fmt/format.h>

namespace tracer::stages {

StageSpec Lhist::spec() {
  StageSpec s{.name = "lhist",
              .summary = "linear histogram of a field per key (bpftrace lhist)",
              .options = {
                  {.name = "field",
                   .type = OptionSpec::Type::kString,
                   .required = true,
                   .help = "the numeric field: field = \"len\""},
                  {.name = "min",
                   .type = OptionSpec::Type::kInt,
                   .required = true,
                   .help = "lower bound of the first bucket"},
                  {.name = "max",
                   .type = OptionSpec::Type::kInt,
                   .required = true,
                   .help = "values at or above go to [max, ...)"},
                  {.name = "step",
                   .type = OptionSpec::Type::kInt,
                   .required = true,
                   .help = "bucket width"},
              }};
  auto common = aggregate_options();
  s.options.insert(s.options.end(), common.begin(), common.end());
  return s;
}

void Lhist::configure(const ConfigValue& options, Diagnostics& diags) {
  stage_name_ = "lhist";
  StageOptions opts(spec(), options, diags);
  configure_common(opts);
  min_ = opts.integer("min").value_or(0);
  max_ = opts.integer("max").value_or(100);
  step_ = opts.integer("step").value_or(10);
  if (step_ <= 0) {
    diags.add(opts.where("step"), "option 'step' must be positive");
    step_ = 1;
  }
  if (max_ <= min_) {
    diags.add(opts.where("max"),
              fmt::format("option 'max' ({}) must be above 'min' ({})", max_, min_));
    max_ = min_ + step_;
  }
  const std::size_t n = detail::linear_inner(min_, max_, step_);
  if (n > kMaxBuckets) {
    diags.add(opts.where("step"),
              fmt::format("lhist would have {} buckets (at most {})", n, kMaxBuckets),
              "raise 'step' or narrow [min, max)");
    // (In 128 bits: max - min may not fit an int64.)
    const auto span = static_cast<unsigned __int128>(static_cast<__int128>(max_) - min_);
    step_ = static_cast<std::int64_t>((span + kMaxBuckets - 1) / kMaxBuckets);
  }
  inner_ = detail::linear_inner(min_, max_, step_);
}

std::shared_ptr<const DistributionKernel> Lhist::kernel() const {
  // Below min, [min + i*step, ...) for the inner buckets, at or above max: as bucket().
  return std::make_shared<const DistributionKernel>(
      "lhist", static_cast<std::uint32_t>(inner_ + 2),
      fmt::format("tr_linear_bucket(v, {}LL, {}LL, {}ULL, {})", min_, max_,
                  static_cast<std::uint64_t>(step_), inner_));
}

KernelForm Lhist::kernel_form() const {
  return kernel_base(kernel());
}

void Lhist::absorb(const std::vector<KernelRow>& rows) {
  absorb_buckets(rows, *kernel(), states_, [this] {
    return State{.counts = std::vector<std::uint64_t>(inner_ + 2), .total = 0};
  });
}

void Lhist::bind(BindContext& ctx, Diagnostics& diags) {
  bind_distribution(ctx, diags, value_, states_, 1024);
}

std::size_t Lhist::bucket(std::int64_t v) const noexcept {
  return detail::linear_bucket_of(v, min_, max_, step_, inner_);
}

void Lhist::on_events(std::span<Event* const> events) noexcept {
  add(events);
}

void Lhist::on_samples(std::span<const InPlaceSample> samples) noexcept {
  add(samples);
}

template <typename Sample>
void Lhist::add(std::span<Sample> events) noexcept {
  accumulate(
      events, value_, states_,
      [this] { return State{.counts = std::vector<std::uint64_t>(inner_ + 2), .total = 0}; },
      [this](State& s, const Value& v) {
        const std::int64_t i = to_int(v).value_or(0);
        ++s.counts[bucket(i)];
        ++s.total;
        s.sum = wrapping_add(s.sum, i);
      });
}

void Lhist::snapshot(Table& out, bool reset) {
  describe(out, fmt::format("lhist of {}", value_name_));
  out.histogram = true;
  out.value_names = {value_name_, "sum"};
  out.value_kinds = {ValueKind::kCount, ValueKind::kSum};
  snapshot_rows(
      out, states_, reset,
      [this](const State& s, TableRow& row) {
        append_buckets(row, s.counts, [this](std::size_t b, HistBucket& hb) {
          auto bb = detail::linear_bucket(b, min_, max_, step_, inner_);
          hb.lo = bb.lo, hb.hi = bb.hi;
          hb.lo_unbounded = bb.lo_unbounded, hb.hi_unbounded = bb.hi_unbounded;
          hb.label = std::move(bb.label);
        });
        row.values.emplace_back(s.total);
        row.values.emplace_back(s.sum);
      },
      [](State& s) {
        std::fill(s.counts.begin(), s.counts.end(), 0);
        s.total = 0;
        s.sum = 0;
      });
}

}  // namespace tracer::stages
