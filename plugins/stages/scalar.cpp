#include "scalar.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <type_traits>

namespace tracer::stages {

namespace {
constexpr std::string_view kNames[] = {"count", "rate", "sum", "min", "max", "avg"};
constexpr std::string_view kSummaries[] = {
    "count events per key",       "events per second per key",  "sum of a field per key",
    "minimum of a field per key", "maximum of a field per key", "average of a field per key",
};
bool needs_field(ScalarOp op) {
  return op != ScalarOp::kCount && op != ScalarOp::kRate;
}

// Min and max keep TR_ORDER(v) = (u64)v ^ kMinXor / kMaxXor (aggregate.hpp).

/// The kernel part of count, rate, sum, min, max and avg: `__u64 count`, then (but for count and
/// rate, which count per interval alike) `v`, the sum or the extreme as TR_ORDER(v).
class ScalarKernel final : public KernelAgg {
 public:
  explicit ScalarKernel(ScalarOp op) : op_(op == ScalarOp::kRate ? ScalarOp::kCount : op) {}
  [[nodiscard]] std::string_view name() const noexcept override {
    return kNames[static_cast<std::size_t>(op_)];
  }
  [[nodiscard]] bool needs_value() const noexcept override { return needs_field(op_); }
  [[nodiscard]] std::uint32_t value_size() const noexcept override {
    return needs_value() ? 16 : 8;
  }
  void emit_value(KernelCode& c) const override {
    c.line("__u64 count;");
    if (order_xor() != 0)
      c.line(
          fmt::format("__u64 v; /* the {} as TR_ORDER(v): the largest wins, 0 is none */", name()));
    else if (needs_value())
      c.line("__s64 v; /* the sum */");
  }
  void emit_defines(KernelCode& c) const override {
    if (order_xor() == 0)
      return;
    c.line(
        "/* min: INT64_MAX -> 0 ... INT64_MIN -> ~0; max: INT64_MIN -> 0 ... INT64_MAX -> ~0 "
        "(plugins/stages/scalar.cpp decodes). */");
    c.line(fmt::format("#define TR_ORDER(v) ((__u64)(v) ^ {:#x}ULL)", order_xor()));
  }
  void emit_update(KernelCode& c) const override {
    if (order_xor() != 0) {
      c.line("__u64 e = TR_ORDER(v);");
      c.raise("p->v", "e");
      c.count("&p->count");
      return;
    }
    c.count("&p->count");
    if (needs_value())
      c.add("p->v", "v");
  }
  [[nodiscard]] bool same(const KernelAgg& other) const override {
    const auto* o = dynamic_cast<const ScalarKernel*>(&other);
    return o != nullptr && o->op_ == op_;
  }

  /// One key's value over its CPUs: events, and the sum (wrapping, as the kernel's) or the
  /// extreme; nullopt for no event.
  struct Merged {
    std::uint64_t count = 0;
    std::int64_t v = 0;
  };
  [[nodiscard]] std::optional<Merged> merge(const KernelRow& r) const noexcept {
    Merged m;
    bool any = false;
    for (std::uint32_t i = 0; i < r.values; ++i) {
      const std::byte* p = r.value(i);
      const std::uint64_t c = kernel_u64(p);
      if (c == 0)
        continue;  // this CPU saw no event of the key
      m.count += c;
      if (order_xor() != 0) {
        const auto x = static_cast<std::int64_t>(kernel_u64(p + 8) ^ order_xor());
        m.v = !any ? x : op_ == ScalarOp::kMin ? std::min(m.v, x) : std::max(m.v, x);
      } else if (needs_value()) {
        m.v = wrapping_add(m.v, static_cast<std::int64_t>(kernel_u64(p + 8)));
      }
      any = true;
    }
    if (!any)
      return std::nullopt;
    return m;
  }

 private:
  [[nodiscard]] std::uint64_t order_xor() const noexcept {
    return op_ == ScalarOp::kMin ? kMinXor : op_ == ScalarOp::kMax ? kMaxXor : 0;
  }
  ScalarOp op_;
};
}  // namespace

StageSpec ScalarAggregate::spec_for(ScalarOp op) {
  const auto i = static_cast<std::size_t>(op);
  StageSpec s{.name = std::string(kNames[i]), .summary = std::string(kSummaries[i]), .options = {}};
  if (needs_field(op)) {
    s.options.push_back({.name = "field",
                         .type = OptionSpec::Type::kString,
                         .required = true,
                         .help = "the numeric field to aggregate: field = \"bytes\""});
  }
  auto common = aggregate_options();
  s.options.insert(s.options.end(), common.begin(), common.end());
  return s;
}

void ScalarAggregate::configure(const ConfigValue& options, Diagnostics& diags) {
  const StageSpec spec = spec_for(op_);
  stage_name_ = spec.name;
  StageOptions opts(spec, options, diags);
  configure_common(opts);
}

void ScalarAggregate::bind(BindContext& ctx, Diagnostics& diags) {
  bind_keys(ctx, diags);
  if (needs_field(op_) && !value_name_.empty()) {
    value_ = bind_value(ctx, diags);
    is_float_ = value_ && value_->type() == FieldType::kDouble;
  }
  states_.reserve(std::min<std::size_t>(1024, key_limit_));
  states_.limit(key_limit_);
}

template <typename Sample>
void ScalarAggregate::add(const Sample& e) noexcept {
  Value v;
  if (needs_field(op_)) {
    if (!value_)
      return;
    v = value_->read(e);
    if (is_none(v))
      return;  // this probe lacks the field
  }
  State& s = state_of(e, states_, [] { return State{}; });
  const bool first = s.count == 0;
  // A counter's reading stands for its count of events (count, rate); the other operations
  // take its fields once.
  if constexpr (std::is_same_v<Sample, Event>)
    s.count += needs_field(op_) ? 1 : e.weight;
  else
    ++s.count;
  if (!needs_field(op_))
    return;
  if (is_float_) {
    const double d = to_double(v).value_or(0);
    s.dsum += d;
    s.dmin = first ? d : std::min(s.dmin, d);
    s.dmax = first ? d : std::max(s.dmax, d);
  } else {
    const std::int64_t i = to_int(v).value_or(0);
    // Wrapping add: defined behaviour on overflow (two's complement, as the kernel's u64 sums).
    s.isum = static_cast<std::int64_t>(static_cast<std::uint64_t>(s.isum) +
                                       static_cast<std::uint64_t>(i));
    s.imin = std::min(s.imin, i);
    s.imax = std::max(s.imax, i);
  }
}

void ScalarAggregate::on_events(std::span<Event* const> events) noexcept {
  if (needs_field(op_) && !value_)
    return;
  for (const Event* e : events)
    add(*e);
}

bool ScalarAggregate::takes(std::uint32_t probe) const noexcept {
  return (!needs_field(op_) || value_) && reads_in_place(probe, value_);
}

void ScalarAggregate::on_samples(std::span<const InPlaceSample> samples) noexcept {
  if (needs_field(op_)) {
    for (const InPlaceSample& s : samples)
      add(s);
    return;
  }
  count_runs(
      samples, states_, [] { return State{}; }, [](State& s, std::uint64_t run) { s.count += run; },
      [this](const InPlaceSample& s) { add(s); });
}

KernelForm ScalarAggregate::kernel_form() const {
  return kernel_base(std::make_shared<ScalarKernel>(op_));
}

void ScalarAggregate::absorb(const std::vector<KernelRow>& rows) {
  const ScalarKernel kernel(op_);
  for (const auto& r : rows) {
    const auto m = kernel.merge(r);
    if (!m)
      continue;
    State& s = state_of(r, states_, [] { return State{}; });
    s.count += m->count;
    switch (op_) {
      case ScalarOp::kSum:
      case ScalarOp::kAvg:
        s.isum = wrapping_add(s.isum, m->v);
        break;
      case ScalarOp::kMin:
        s.imin = std::min(s.imin, m->v);
        break;
      case ScalarOp::kMax:
        s.imax = std::max(s.imax, m->v);
        break;
      default:
        break;
    }
  }
}

void ScalarAggregate::snapshot(Table& out, bool reset) {
  const auto name = kNames[static_cast<std::size_t>(op_)];
  describe(out, needs_field(op_) ? fmt::format("{} of {}", name, value_name_) : std::string(name));
  switch (op_) {
    case ScalarOp::kRate:
      out.value_names = {"count", "per_s"};
      out.value_kinds = {ValueKind::kCount, ValueKind::kGauge};
      break;
    default:
      out.value_names = {std::string(name)};
      out.value_kinds = {op_ == ScalarOp::kCount ? ValueKind::kCount
                         : op_ == ScalarOp::kSum ? ValueKind::kSum
                         : op_ == ScalarOp::kMin ? ValueKind::kMin
                         : op_ == ScalarOp::kMax ? ValueKind::kMax
                                                 : ValueKind::kGauge};
      break;
  }
  const double seconds = std::chrono::duration<double>(out.time - out.since).count();
  std::vector<double> scores;
  for (std::size_t i = 0; i < states_.size(); ++i) {
    const State& s = states_.state(i);
    if (s.count == 0)
      continue;
    TableRow row;
    row.keys = decode(states_.key(i));
    double score = 0;
    switch (op_) {
      case ScalarOp::kCount:
        row.values.emplace_back(s.count);
        score = static_cast<double>(s.count);
        break;
      case ScalarOp::kRate: {
        const double per_s = seconds > 0 ? static_cast<double>(s.count) / seconds : 0.0;
        row.values.emplace_back(s.count);
        row.values.emplace_back(per_s);
        score = static_cast<double>(s.count);
        break;
      }
      case ScalarOp::kSum:
        if (is_float_)
          row.values.emplace_back(s.dsum);
        else
          row.values.emplace_back(s.isum);
        score = is_float_ ? s.dsum : static_cast<double>(s.isum);
        break;
      case ScalarOp::kMin:
        if (is_float_)
          row.values.emplace_back(s.dmin);
        else
          row.values.emplace_back(s.imin);
        score = is_float_ ? s.dmin : static_cast<double>(s.imin);
        break;
      case ScalarOp::kMax:
        if (is_float_)
          row.values.emplace_back(s.dmax);
        else
          row.values.emplace_back(s.imax);
        score = is_float_ ? s.dmax : static_cast<double>(s.imax);
        break;
      case ScalarOp::kAvg: {
        const double sum = is_float_ ? s.dsum : static_cast<double>(s.isum);
        score = sum / static_cast<double>(s.count);
        row.values.emplace_back(score);
        break;
      }
    }
    out.rows.push_back(std::move(row));
    scores.push_back(score);
  }
  order(out, scores);
  if (reset)
    states_.reset([](State& s) { s = State{}; });
}

}  // namespace tracer::stages
