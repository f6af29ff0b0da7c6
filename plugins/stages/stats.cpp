#include "stats.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <type_traits>
#include <utility>

namespace tracer::stages {

namespace {

// The extremes as the kernel keeps them: v ^ kMinXor and v ^ kMaxXor (aggregate.hpp). A key with
// events whose encoding is 0 had INT64_MAX (min) or INT64_MIN (max).

/// The square of |v| in 128 bits.
unsigned __int128 square(std::int64_t v) noexcept {
  const std::uint64_t m =
      v < 0 ? ~static_cast<std::uint64_t>(v) + 1 : static_cast<std::uint64_t>(v);
  return static_cast<unsigned __int128>(m) * m;
}

/// The kernel part of stats: `struct tr_val { count, sum, vmin, vmax, sq_lo, sq_hi }`, 48 bytes.
/// The square of each value is built from the 32-bit halves of its magnitude (m = a 2^32 + b:
/// m^2 = a^2 2^64 + a b 2^33 + b^2) and added to the 128-bit sum with the low word's carry.
class StatsKernel final : public KernelAgg {
 public:
  [[nodiscard]] std::string_view name() const noexcept override { return "stats"; }
  [[nodiscard]] std::uint32_t value_size() const noexcept override { return 48; }
  void emit_value(KernelCode& c) const override {
    c.line("__u64 count;");
    c.line("__s64 sum;");
    c.line("__u64 vmin; /* v ^ 0x7fff...: the largest wins, 0 is none */");
    c.line("__u64 vmax; /* v ^ 0x8000...: the largest wins, 0 is none */");
    c.line("__u64 sq_lo; /* the sum of the squares, 128 bits */");
    c.line("__u64 sq_hi;");
  }
  void emit_update(KernelCode& c) const override {
    c.count("&p->count");
    c.add("p->sum", "v");
    c.line(fmt::format("__u64 e_min = (__u64)v ^ {:#x}ULL, e_max = (__u64)v ^ {:#x}ULL;", kMinXor,
                       kMaxXor));
    emit_raise_block(c, "p->vmin", "e_min");
    emit_raise_block(c, "p->vmax", "e_max");
    c.line("__u64 m = v < 0 ? -(__u64)v : (__u64)v;");
    c.line("__u64 ha = m >> 32, hb = m & 0xffffffffULL;");
    c.line("__u64 mid = ha * hb;");
    c.line("__u64 lo1 = hb * hb, lo2 = mid << 33, hi = ha * ha + (mid >> 31);");
    c.add_carry("p->sq_lo", "lo1", "hi");
    c.add_carry("p->sq_lo", "lo2", "hi");
    c.add("p->sq_hi", "hi");
  }
  [[nodiscard]] bool same(const KernelAgg& other) const override {
    return dynamic_cast<const StatsKernel*>(&other) != nullptr;
  }

  /// A row's values over its CPUs, as a State (integers).
  [[nodiscard]] static Stats::State merge(const KernelRow& r) noexcept {
    Stats::State s;
    std::uint64_t min_enc = 0, max_enc = 0;
    for (std::uint32_t i = 0; i < r.values; ++i) {
      const std::byte* v = r.value(i);
      if (kernel_u64(v) == 0)
        continue;  // this CPU saw no event of the key
      s.count += kernel_u64(v);
      s.sum = wrapping_add(s.sum, static_cast<std::int64_t>(kernel_u64(v + 8)));
      min_enc = std::max(min_enc, kernel_u64(v + 16));
      max_enc = std::max(max_enc, kernel_u64(v + 24));
      s.squares += (static_cast<unsigned __int128>(kernel_u64(v + 40)) << 64) | kernel_u64(v + 32);
    }
    s.min = static_cast<std::int64_t>(min_enc ^ kMinXor);
    s.max = static_cast<std::int64_t>(max_enc ^ kMaxXor);
    return s;
  }
};

}  // namespace

StageSpec Stats::spec() {
  return field_aggregation_spec(
      "stats", "count, sum, min, max, mean and standard deviation of a field per key");
}

void Stats::configure(const ConfigValue& options, Diagnostics& diags) {
  stage_name_ = "stats";
  StageOptions opts(spec(), options, diags);
  configure_common(opts);
}

void Stats::bind(BindContext& ctx, Diagnostics& diags) {
  bind_keys(ctx, diags);
  if (!value_name_.empty()) {
    value_ = bind_value(ctx, diags);
    is_float_ = value_ && value_->type() == FieldType::kDouble;
  }
  states_.reserve(std::min<std::size_t>(1024, key_limit_));
  states_.limit(key_limit_);
}

template <typename Sample>
void Stats::add(const Sample& e) noexcept {
  if (!value_)
    return;
  const Value v = value_->read(e);
  if (is_none(v))
    return;  // this probe lacks the field
  State& s = state_of(e, states_, [] { return State{}; });
  const bool first = s.count == 0;
  ++s.count;
  if (is_float_) {
    const double d = to_double(v).value_or(0);
    s.dsum += d;
    s.dsquares += d * d;
    s.dmin = first ? d : std::min(s.dmin, d);
    s.dmax = first ? d : std::max(s.dmax, d);
    return;
  }
  const std::int64_t i = to_int(v).value_or(0);
  s.sum = wrapping_add(s.sum, i);
  s.squares += square(i);
  s.min = std::min(s.min, i);
  s.max = std::max(s.max, i);
}

void Stats::on_events(std::span<Event* const> events) noexcept {
  for (const Event* e : events)
    add(*e);
}

void Stats::on_samples(std::span<const InPlaceSample> samples) noexcept {
  for (const InPlaceSample& s : samples)
    add(s);
}

KernelForm Stats::kernel_form() const {
  return kernel_base(std::make_shared<const StatsKernel>());
}

void Stats::absorb(const std::vector<KernelRow>& rows) {
  for (const auto& r : rows) {
    const State k = StatsKernel::merge(r);
    if (k.count == 0)
      continue;
    State& s = state_of(r, states_, [] { return State{}; });
    s.count += k.count;
    s.sum = wrapping_add(s.sum, k.sum);
    s.squares += k.squares;
    s.min = std::min(s.min, k.min);
    s.max = std::max(s.max, k.max);
  }
}

double Stats::stddev(const State& s) noexcept {
  if (s.count == 0)
    return 0;
  // n^2 var = n sum(x^2) - sum(x)^2, in long double from the exact integers (the sum as the
  // signed value it is).
  const auto n = static_cast<long double>(s.count);
  const auto sum = static_cast<long double>(s.sum);
  const auto squares = static_cast<long double>(s.squares);
  const long double var = ((n * squares) - (sum * sum)) / (n * n);
  return var > 0 ? static_cast<double>(std::sqrt(var)) : 0.0;
}

void Stats::snapshot(Table& out, bool reset) {
  describe(out, fmt::format("stats of {}", value_name_));
  out.value_names = {"count", "sum", "min", "max", "mean", "stddev"};
  out.value_kinds = {ValueKind::kCount, ValueKind::kSum,   ValueKind::kMin,
                     ValueKind::kMax,   ValueKind::kGauge, ValueKind::kGauge};
  std::vector<double> scores;
  for (std::size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_.state(i);
    if (s.count == 0)
      continue;
    TableRow row;
    row.keys = decode(states_.key(i));
    const auto n = static_cast<double>(s.count);
    row.values.emplace_back(s.count);
    if (is_float_) {
      const double mean = s.dsum / n;
      const double var = std::max(0.0, (s.dsquares / n) - (mean * mean));
      row.values.emplace_back(s.dsum);
      row.values.emplace_back(s.dmin);
      row.values.emplace_back(s.dmax);
      row.values.emplace_back(mean);
      row.values.emplace_back(std::sqrt(var));
    } else {
      row.values.emplace_back(s.sum);
      row.values.emplace_back(s.min);
      row.values.emplace_back(s.max);
      row.values.emplace_back(static_cast<double>(s.sum) / n);
      row.values.emplace_back(stddev(s));
    }
    out.rows.push_back(std::move(row));
    scores.push_back(n);
  }
  order(out, scores);
  if (reset)
    states_.reset([](State& s) { s = State{}; });
}

}  // namespace tracer::stages
