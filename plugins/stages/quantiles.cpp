#include "quantiles.hpp"

#include <fmt/format.h>

#include <bit>
#include <cmath>

namespace tracer::stages {

StageSpec Quantiles::spec() {
  return field_aggregation_spec(
      "quantiles", "p50/p90/p99/p999 of a field per key (relative error < 1/128)",
      {{.name = "quantiles",
        .type = OptionSpec::Type::kAny,
        .required = false,
        .help = "which: quantiles = [0.5, 0.99] or [\"p50\", \"p999\"] (default p50 p90 p99 "
                "p999)"}});
}

std::size_t Quantiles::bucket(std::uint64_t v) noexcept {
  return detail::quantile_bucket_of(v);
}

std::uint64_t Quantiles::representative(std::size_t b) noexcept {
  if (b < kExact)
    return b;
  const std::size_t j = b - kExact;
  const unsigned shift = static_cast<unsigned>(j >> kSubBits) + 1;
  const std::uint64_t mant = (std::uint64_t{1} << kSubBits) + (j & ((1U << kSubBits) - 1));
  const std::uint64_t lower = mant << shift;
  const std::uint64_t width = std::uint64_t{1} << shift;
  return lower + (width - 1) / 2;
}

void Quantiles::configure(const ConfigValue& options, Diagnostics& diags) {
  stage_name_ = "quantiles";
  StageOptions opts(spec(), options, diags);
  configure_common(opts);
  if (const auto* v = opts.get("quantiles")) {
    std::vector<const ConfigValue*> items;
    if (const auto* a = v->array()) {
      for (const auto& e : *a)
        items.push_back(&e);
    } else {
      items.push_back(v);
    }
    qs_.clear();
    for (const auto* item : items) {
      std::optional<double> q;
      if (const auto* d = std::get_if<double>(&item->value)) {
        q = *d;
      } else if (const auto* s = item->string(); s != nullptr && s->size() > 1 && (*s)[0] == 'p') {
        // "p50" -> 0.5, "p999" -> 0.999: the digits after the first two are decimals.
        const std::string digits = s->substr(1);
        if (digits.find_first_not_of("0123456789") == std::string::npos) {
          const std::string text =
              digits.size() <= 2 ? digits : digits.substr(0, 2) + "." + digits.substr(2);
          q = std::stod(text) / 100.0;
        }
      }
      if (!q || !(*q > 0.0 && *q <= 1.0)) {
        diags.add(item->where, R"(a quantile must be a number in (0, 1] or "pNN" ("p99"))");
        continue;
      }
      qs_.push_back(*q);
    }
  }
  names_.clear();
  for (double q : qs_) {
    std::string n = fmt::format("{:.6g}", q * 100);
    std::erase(n, '.');
    names_.push_back("p" + n);
  }
}

void Quantiles::bind(BindContext& ctx, Diagnostics& diags) {
  bind_distribution(ctx, diags, value_, states_, 256);
}

void Quantiles::on_events(std::span<Event* const> events) noexcept {
  add(events);
}

void Quantiles::on_samples(std::span<const InPlaceSample> samples) noexcept {
  add(samples);
}

template <typename Sample>
void Quantiles::add(std::span<Sample> events) noexcept {
  accumulate(
      events, value_, states_,
      [] { return State{.counts = std::vector<std::uint64_t>(kBuckets), .total = 0}; },
      [](State& s, const Value& v) {
        const std::int64_t i = to_int(v).value_or(0);
        const std::uint64_t u = i < 0 ? 0 : static_cast<std::uint64_t>(i);
        ++s.counts[bucket(u)];
        ++s.total;
        s.sum = wrapping_add(s.sum, i);
        s.min = std::min(s.min, u);
        s.max = std::max(s.max, u);
      });
}

namespace {

/// The kernel part of quantiles: the log-linear buckets' counts, then the exact extremes
/// (`vmin` = ~min and `vmax` = max + 1 of the values clamped at 0, under which the largest wins
/// and 0 is none), then the sum. ~30 KiB a key: a per-CPU value fits the per-CPU allocator's unit
/// (32 KiB); the shared hash allocates keys as they come, not max_keys of them up front.
class QuantilesKernel final : public DistributionKernel {
 public:
  QuantilesKernel()
      : DistributionKernel("quantiles",
                           static_cast<std::uint32_t>(Quantiles::kBuckets),
                           "tr_quantile_bucket(v)") {}
  [[nodiscard]] bool no_prealloc() const noexcept override { return true; }
  /// The extremes of a row over its CPUs: {min, max}, or nullopt without a value.
  [[nodiscard]] std::optional<std::pair<std::uint64_t, std::uint64_t>> extremes(
      const KernelRow& r) const noexcept {
    std::uint64_t min_enc = 0, max_enc = 0;
    for (std::uint32_t i = 0; i < r.values; ++i) {
      const std::byte* v = r.value(i) + (8 * std::size_t{buckets()});
      min_enc = std::max(min_enc, kernel_u64(v));
      max_enc = std::max(max_enc, kernel_u64(v + 8));
    }
    if (max_enc == 0)
      return std::nullopt;
    return std::pair{~min_enc, max_enc - 1};
  }

 protected:
  [[nodiscard]] std::uint32_t extra_bytes() const noexcept override { return 16; }
  void emit_extra_value(KernelCode& c) const override {
    c.line("__u64 vmin; /* ~min: the largest wins, 0 is none */");
    c.line("__u64 vmax; /* max + 1: the largest wins, 0 is none */");
  }
  void emit_extra_update(KernelCode& c) const override {
    c.line("__u64 u = v < 0 ? 0 : (__u64)v;");
    c.line("__u64 e_min = ~u, e_max = u + 1;");
    emit_raise_block(c, "p->vmin", "e_min");
    emit_raise_block(c, "p->vmax", "e_max");
  }
};

}  // namespace

KernelForm Quantiles::kernel_form() const {
  return kernel_base(std::make_shared<const QuantilesKernel>());
}

void Quantiles::absorb(const std::vector<KernelRow>& rows) {
  const QuantilesKernel kernel;
  absorb_buckets(
      rows, kernel, states_,
      [] { return State{.counts = std::vector<std::uint64_t>(kBuckets), .total = 0}; },
      [&kernel](State& s, const KernelRow& r) {
        if (const auto e = kernel.extremes(r)) {
          s.min = std::min(s.min, e->first);
          s.max = std::max(s.max, e->second);
        }
      });
}

void Quantiles::snapshot(Table& out, bool reset) {
  describe(out, fmt::format("quantiles of {}", value_name_));
  out.value_names = {"count", "min"};
  out.value_names.insert(out.value_names.end(), names_.begin(), names_.end());
  out.value_names.emplace_back("max");
  out.value_names.emplace_back("sum");
  out.value_kinds = {ValueKind::kCount, ValueKind::kMin};
  out.value_kinds.insert(out.value_kinds.end(), names_.size(), ValueKind::kQuantile);
  out.value_kinds.push_back(ValueKind::kMax);
  out.value_kinds.push_back(ValueKind::kSum);
  out.summary = true;
  out.quantiles = qs_;
  out.note = "quantiles within 1/128 (0.79%) of the exact nearest-rank value";
  snapshot_rows(
      out, states_, reset,
      [this](const State& s, TableRow& row) {
        row.values.emplace_back(s.total);
        row.values.emplace_back(s.min);
        for (double q : qs_) {
          // Nearest rank: the smallest value with at least ceil(q * n) samples at or below it.
          const auto rank = std::max<std::uint64_t>(
              1, static_cast<std::uint64_t>(std::ceil(q * static_cast<double>(s.total))));
          std::uint64_t seen = 0;
          std::uint64_t value = s.max;
          for (std::size_t b = 0; b < kBuckets; ++b) {
            seen += s.counts[b];
            if (seen >= rank) {
              value = std::clamp(representative(b), s.min, s.max);
              break;
            }
          }
          row.values.emplace_back(value);
        }
        row.values.emplace_back(s.max);
        row.values.emplace_back(s.sum);
      },
      [](State& s) {
        std::fill(s.counts.begin(), s.counts.end(), 0);
        s.total = 0;
        s.sum = 0;
        s.min = UINT64_MAX;
        s.max = 0;
      });
}

}  // namespace tracer::stages
