#include "counters.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "tracer/event_names.hpp"

namespace tracer::stages {

StageSpec Counters::spec() {
  return {.name = "counters",
          .summary = "the counts of a [[counter]] group per interval and in total, with metrics",
          .options = {{.name = "group",
                       .type = OptionSpec::Type::kString,
                       .help = "the [[counter]] group (needed when the recipe has several)"},
                      {.name = "every",
                       .type = OptionSpec::Type::kDuration,
                       .help = "a table of each interval's counts (default: the group's every)"}},
          .needs = {.kinds = 0}};
}

void Counters::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  if (auto g = opts.string("group")) {
    group_name_ = *g;
    group_where_ = opts.where("group");
  }
  if (opts.get("every") != nullptr) {
    every_ = opts.duration("every");
    every_set_ = true;
  }
}

void Counters::bind(BindContext& ctx, Diagnostics& diags) {
  ctx.kinds = 0;  // no records: the counters are read where they count
  source_ = ctx.counters;
  if (source_ == nullptr) {
    if (!ctx.dry_run) {
      diags.add(ctx.where, "the counters stage reads a [[counter]] group, and this run has none",
                "add a [[counter]] group with name and events");
    }
    return;
  }
  const auto groups = source_->groups();
  if (groups.empty()) {
    diags.add(ctx.where, "the counters stage reads a [[counter]] group, and the recipe has none",
              "add a [[counter]] group with name and events");
    return;
  }
  if (group_name_.empty()) {
    if (groups.size() > 1) {
      diags.add(ctx.where, "the recipe has several [[counter]] groups: name one",
                fmt::format("group = \"{}\"", groups.front().name));
      return;
    }
    group_ = 0;
  } else {
    const auto it = std::find_if(groups.begin(), groups.end(),
                                 [&](const RecipeCounter& g) { return g.name == group_name_; });
    if (it == groups.end()) {
      std::string known;
      for (const auto& g : groups)
        known += (known.empty() ? "'" : ", '") + g.name + "'";
      diags.add(group_where_, fmt::format("no [[counter]] group '{}'", group_name_),
                fmt::format("the groups: {}", known));
      return;
    }
    group_ = static_cast<std::size_t>(it - groups.begin());
  }
  const RecipeCounter& g = groups[group_];
  if (!every_set_)
    every_ = g.every;
  names_ = g.events;
  units_.clear();
  for (const auto& e : names_)
    units_.emplace_back(event_unit(e) == "ns" ? "msec" : "");
  metrics_.clear();
  for (const auto& m : g.metrics) {
    auto e = CounterExpr::parse(m.expr, names_);
    if (!e) {
      diags.add(m.where, fmt::format("metric '{}': {}", m.name, e.error().message), e.error().hint);
      continue;
    }
    metrics_.emplace_back(m.name, std::move(*e));
  }
}

void Counters::snapshot(Table& out, bool reset) {
  if (source_ == nullptr || group_ >= source_->groups().size())
    return;
  const RecipeCounter& g = source_->groups()[group_];
  const CounterGroupReading now = source_->read(group_);
  const std::chrono::nanoseconds since = out.total || !prev_ ? source_->started() : prev_->time;
  const double seconds = std::max(0.0, std::chrono::duration<double>(now.time - since).count());
  out.stage = "counters";
  out.title = fmt::format("counters {}{}{}", g.name, out.total ? " (total)" : "",
                          now.grouped ? "" : " (a weak group counted as separate events)");
  // The group is a key: a JSON line or CSV row of any group says which it is.
  out.key_names = g.per_cpu ? std::vector<std::string>{"group", "cpu", "counter"}
                            : std::vector<std::string>{"group", "counter"};
  out.value_names = {"value", "unit", "raw", "enabled_ns", "running_ns", "pct"};
  // The counted value adds up; the unit is the row's label; the rest describe the reading.
  out.value_kinds = {ValueKind::kCount, ValueKind::kLabel, ValueKind::kGauge,
                     ValueKind::kGauge, ValueKind::kGauge, ValueKind::kGauge};
  const bool from_start = out.total || !prev_;

  // The interval since the last table (each slot scaled by its own times), or the whole run.
  const perf::CounterSetReading counts = from_start ? now.counts : now.counts.since(prev_->counts);

  // One block of rows: each counter's interval (or total), then each metric over them.
  const auto block = [&](const std::vector<perf::CounterReading>& cur, std::optional<int> cpu) {
    std::vector<double> values(cur.size());
    std::vector<double> pcts(cur.size());
    for (std::size_t i = 0; i < cur.size() && i < names_.size(); ++i) {
      const perf::CounterReading& d = cur[i];
      // A clock counts nanoseconds: shown in milliseconds, as perf stat shows it.
      const bool clock = units_[i] == "msec";
      values[i] = d.scaled;
      pcts[i] = d.counted() ? d.pct() : 0.0;
      TableRow row;
      row.keys.emplace_back(g.name);
      if (cpu)
        row.keys.emplace_back(static_cast<std::int64_t>(*cpu));
      row.keys.emplace_back(names_[i]);
      if (!d.counted() && d.raw == 0)
        row.values.emplace_back(std::monostate{});
      else if (clock)
        row.values.emplace_back(d.scaled / 1e6);
      else
        row.values.emplace_back(static_cast<std::uint64_t>(std::llround(d.scaled)));
      row.values.emplace_back(units_[i]);
      row.values.emplace_back(d.raw);
      row.values.emplace_back(d.enabled);
      row.values.emplace_back(d.running);
      row.values.emplace_back(std::round(pcts[i] * 100) / 100);
      out.rows.push_back(std::move(row));
    }
    for (const auto& [name, expr] : metrics_) {
      TableRow row;
      row.keys.emplace_back(g.name);
      if (cpu)
        row.keys.emplace_back(static_cast<std::int64_t>(*cpu));
      row.keys.emplace_back(name);
      double pct = 100.0;
      for (std::size_t in : expr.inputs())
        pct = std::min(pct, in < pcts.size() ? pcts[in] : 0.0);
      if (auto v = expr.eval(values, seconds))
        row.values.emplace_back(*v);
      else
        row.values.emplace_back(std::monostate{});
      row.values.emplace_back(std::string("metric"));
      row.values.emplace_back(std::monostate{});
      row.values.emplace_back(std::monostate{});
      row.values.emplace_back(std::monostate{});
      row.values.emplace_back(std::round(pct * 100) / 100);
      out.rows.push_back(std::move(row));
    }
  };
  if (g.per_cpu) {
    for (std::size_t c = 0; c < counts.per_slot.size(); ++c)
      block(counts.per_slot[c], c < now.cpus.size() ? now.cpus[c] : -1);
  } else {
    block(counts.counters, std::nullopt);
  }
  if (reset && !out.total)
    prev_ = now;
}

}  // namespace tracer::stages
