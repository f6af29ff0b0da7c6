// A Session's tables and health as metric families (see session_metrics.hpp).
#include "tracer/exporter/session_metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <regex>
#include <unordered_map>

#include "tracer/ext/stage.hpp"

namespace tracer::exporter {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Whether a value of kind `k` adds up across intervals and merged rows (a count, a sum).
bool additive(ValueKind k) {
  return k == ValueKind::kCount || k == ValueKind::kSum;
}

/// Kind `v` of `kinds` (a gauge past its end).
ValueKind kind_at(const std::vector<ValueKind>& kinds, std::size_t v) {
  return v < kinds.size() ? kinds[v] : ValueKind::kGauge;
}

/// A row as labels and numbers.
struct Row {
  std::vector<Label> labels;
  std::vector<std::optional<double>> values;
  std::vector<std::pair<double, double>> buckets;  // le -> count in that bucket, by le
  std::string unit;                                // the counters stage's unit column
  bool merged = false;
};

/// The upper bound of a bucket of integers [lo, hi): every value in it is <= hi - 1, every
/// value of the buckets after it is above.
double le_of(const HistBucket& b) {
  return b.hi_unbounded ? kInf : static_cast<double>(b.hi) - 1;
}

void add_buckets(std::vector<std::pair<double, double>>& into,
                 const std::vector<std::pair<double, double>>& from) {
  for (const auto& [le, n] : from) {
    auto it = std::lower_bound(into.begin(), into.end(), le,
                               [](const auto& p, double x) { return p.first < x; });
    if (it != into.end() && it->first == le)
      it->second += n;
    else
      into.insert(it, {le, n});
  }
}

/// Row `from` merged into `into` (same labels): counts, sums and buckets added, min and max of
/// both, anything else left out.
void merge_into(Row& into, const Row& from, const std::vector<ValueKind>& kinds) {
  into.merged = true;
  for (std::size_t v = 0; v < into.values.size() && v < from.values.size(); ++v) {
    auto& a = into.values[v];
    const auto& b = from.values[v];
    const ValueKind k = kind_at(kinds, v);
    // Counts and sums add, min and max compare; a quantile, an average or a rate of merged
    // rows is not made up (nor a value one of them lacks).
    const bool mergeable = additive(k) || k == ValueKind::kMin || k == ValueKind::kMax;
    if (!a.has_value() || !b.has_value() || !mergeable) {
      a = std::nullopt;
      continue;
    }
    if (additive(k))
      a = a.value() + b.value();
    else if (k == ValueKind::kMin)
      a = std::min(a.value(), b.value());
    else
      a = std::max(a.value(), b.value());
  }
  add_buckets(into.buckets, from.buckets);
}

struct CompiledRule {
  const RecipeRelabel* rule;
  std::optional<std::regex> re;
};

std::vector<CompiledRule> compile(const RecipeExport* rules) {
  std::vector<CompiledRule> out;
  if (rules == nullptr)
    return out;
  for (const auto& r : rules->relabel) {
    CompiledRule c{.rule = &r, .re = std::nullopt};
    if (!r.regex.empty()) {
      try {
        c.re.emplace(r.regex, std::regex::ECMAScript);
      } catch (const std::regex_error&) {
        c.re.reset();  // Recipe::load checked it; a rule that does not compile matches nothing
      }
    }
    out.push_back(std::move(c));
  }
  return out;
}

/// Applies the rules to one row's labels. @return false when the row is dropped.
bool relabel(std::vector<Label>& labels, const std::vector<CompiledRule>& rules, bool& removed) {
  for (const auto& c : rules) {
    const RecipeRelabel& r = *c.rule;
    auto it = std::find_if(labels.begin(), labels.end(),
                           [&](const Label& l) { return l.name == r.label; });
    switch (r.action) {
      case RecipeRelabel::Action::kDrop:
      case RecipeRelabel::Action::kKeep: {
        // A row without the label matches as the empty string (as Prometheus's).
        // A long value (a folded stack) is matched by its first 4 KiB: std::regex matches by
        // recursion, and the stack of a root tool is not the input's to exhaust.
        constexpr std::size_t kMaxMatched = 4096;
        const std::string value =
            it != labels.end() ? it->value.substr(0, kMaxMatched) : std::string();
        const bool match = c.re && std::regex_match(value, *c.re);
        if (match == (r.action == RecipeRelabel::Action::kDrop))
          return false;
        break;
      }
      case RecipeRelabel::Action::kLabelDrop:
        if (it != labels.end()) {
          labels.erase(it);
          removed = true;
        }
        break;
      case RecipeRelabel::Action::kRename:
        if (it != labels.end())
          it->name = r.to;
        break;
    }
  }
  return true;
}

std::vector<Label> with(std::vector<Label> labels, std::string name, std::string value) {
  labels.push_back({.name = std::move(name), .value = std::move(value)});
  return labels;
}

/// The rows of `t` relabeled, merged where their labels became equal, and cut to the budget.
std::vector<Row> rows_of(const Table& t, const TableNaming& naming, std::uint64_t& dropped) {
  const auto rules = compile(naming.rules);
  const std::vector<ValueKind> kinds = value_kinds_of(t);
  std::vector<std::string> names;
  names.reserve(t.key_names.size());
  for (const auto& k : t.key_names)
    names.push_back(label_name(k));
  std::vector<Row> rows;
  std::map<std::vector<Label>, std::size_t> index;
  bool removed = false;
  for (const auto* part : {&t.rows, &t.rest}) {
    for (const TableRow& tr : *part) {
      Row row;
      row.labels = naming.const_labels;
      for (std::size_t k = 0; k < tr.keys.size() && k < names.size(); ++k)
        row.labels.push_back({.name = names[k], .value = to_text(tr.keys[k])});
      if (!relabel(row.labels, rules, removed))
        continue;
      for (std::size_t v = 0; v < t.value_names.size(); ++v) {
        row.values.push_back(v < tr.values.size() ? to_number(tr.values[v]) : std::nullopt);
        if (v < tr.values.size() && kind_at(kinds, v) == ValueKind::kLabel) {
          if (const auto* s = std::get_if<std::string>(&tr.values[v]))
            row.unit = *s;
        }
      }
      std::vector<std::pair<double, double>> buckets;
      for (const auto& b : tr.buckets)
        buckets.emplace_back(le_of(b), static_cast<double>(b.count));
      add_buckets(row.buckets, buckets);
      if (removed) {  // labels were removed: rows may meet
        auto sorted = row.labels;
        std::sort(sorted.begin(), sorted.end());
        auto [it, fresh] = index.try_emplace(std::move(sorted), rows.size());
        if (!fresh) {
          merge_into(rows[it->second], row, kinds);
          continue;
        }
      }
      rows.push_back(std::move(row));
    }
  }
  if (rows.size() > naming.budget) {
    dropped = rows.size() - naming.budget;
    rows.resize(naming.budget);
  }
  return rows;
}

/// The first value of kind `k`.
std::optional<std::size_t> value_index(const std::vector<ValueKind>& kinds, ValueKind k) {
  for (std::size_t v = 0; v < kinds.size(); ++v)
    if (kinds[v] == k)
      return v;
  return std::nullopt;
}

void sample(Family& f, std::string suffix, std::vector<Label> labels, double v) {
  f.samples.push_back({.suffix = std::move(suffix), .labels = std::move(labels), .value = v});
}
void sample(Family& f,
            std::string suffix,
            std::vector<Label> labels,
            const std::optional<double>& v) {
  if (v.has_value())
    sample(f, std::move(suffix), std::move(labels), v.value());
}

void histogram_samples(Family& f, const std::vector<ValueKind>& kinds, const Row& row) {
  double cumulative = 0;
  bool inf = false;
  for (const auto& [le, n] : row.buckets) {
    cumulative += n;
    inf = inf || std::isinf(le);
    sample(f, "_bucket", with(row.labels, "le", format_value(le)), cumulative);
  }
  double count = cumulative;
  if (auto c = value_index(kinds, ValueKind::kCount); c && *c < row.values.size())
    count = row.values[*c].value_or(count);
  if (!inf)
    sample(f, "_bucket", with(row.labels, "le", "+Inf"), count);
  if (auto s = value_index(kinds, ValueKind::kSum); s && *s < row.values.size())
    sample(f, "_sum", row.labels, row.values[*s]);
  sample(f, "_count", row.labels, count);
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> table_families(const Table& t,
                                                                  const TableNaming& naming,
                                                                  std::vector<Family>& out) {
  std::uint64_t dropped = 0;
  const std::vector<Row> rows = rows_of(t, naming, dropped);
  const std::string help = naming.help.empty() ? t.title : naming.help;
  const std::string field = t.field.empty() ? std::string() : metric_name(t.field);
  const std::size_t first = out.size();
  const std::vector<ValueKind> kinds = value_kinds_of(t);

  if (t.histogram) {
    Family f{
        .name = naming.base + "_" +
                (field.empty() ? metric_name(t.value_names.empty() ? "value" : t.value_names[0])
                               : field),
        .help = help,
        .type = MetricType::kHistogram};
    for (const Row& row : rows)
      histogram_samples(f, kinds, row);
    out.push_back(std::move(f));
  } else if (t.summary) {
    const std::string name = naming.base + "_" + (field.empty() ? "value" : field);
    Family s{.name = name, .help = help, .type = MetricType::kSummary};
    Family lo{.name = name + "_min", .help = "smallest value: " + help, .type = MetricType::kGauge};
    Family hi{.name = name + "_max", .help = "largest value: " + help, .type = MetricType::kGauge};
    const auto count = value_index(kinds, ValueKind::kCount);
    const auto sum = value_index(kinds, ValueKind::kSum);
    const auto vmin = value_index(kinds, ValueKind::kMin);
    const auto vmax = value_index(kinds, ValueKind::kMax);
    for (const Row& row : rows) {
      std::size_t q = 0;
      for (std::size_t v = 0; v < kinds.size() && v < row.values.size(); ++v) {
        if (kinds[v] != ValueKind::kQuantile)
          continue;
        if (q < t.quantiles.size())
          sample(s, "", with(row.labels, "quantile", format_value(t.quantiles[q])), row.values[v]);
        ++q;
      }
      if (sum)
        sample(s, "_sum", row.labels, row.values[*sum]);
      if (count)
        sample(s, "_count", row.labels, row.values[*count]);
      if (vmin)
        sample(lo, "", row.labels, row.values[*vmin]);
      if (vmax)
        sample(hi, "", row.labels, row.values[*vmax]);
    }
    out.push_back(std::move(s));
    out.push_back(std::move(lo));
    out.push_back(std::move(hi));
  } else if (t.stage == "counters") {
    Family c{.name = naming.base + "_total", .help = help, .type = MetricType::kCounter};
    Family m{.name = naming.base + "_metric",
             .help = "derived metric: " + help,
             .type = MetricType::kGauge};
    for (const Row& row : rows) {
      if (row.values.empty())
        continue;
      const std::optional<double>& value = row.values.front();
      if (!value.has_value())
        continue;
      const double v = *value;
      if (row.unit == "metric")
        sample(m, "", row.labels, v);
      else
        sample(c, "", row.unit.empty() ? row.labels : with(row.labels, "unit", row.unit), v);
    }
    out.push_back(std::move(c));
    out.push_back(std::move(m));
  } else {
    for (std::size_t v = 0; v < t.value_names.size(); ++v) {
      if (kind_at(kinds, v) == ValueKind::kLabel)
        continue;
      const bool counter = additive(kind_at(kinds, v));
      std::string name = naming.base;
      if (!field.empty())
        name += "_" + field;
      name += "_" + metric_name(t.value_names[v]);
      if (counter)
        name += "_total";
      Family f{.name = std::move(name),
               .help = help,
               .type = counter ? MetricType::kCounter : MetricType::kGauge};
      for (const Row& row : rows)
        sample(f, "", row.labels, v < row.values.size() ? row.values[v] : std::nullopt);
      out.push_back(std::move(f));
    }
  }
  std::vector<std::pair<std::string, std::uint64_t>> made;
  for (std::size_t i = first; i < out.size(); ++i)
    made.emplace_back(out[i].name, dropped);
  return made;
}

std::string exposition(std::vector<Family> families) {
  std::vector<Family> merged;
  std::unordered_map<std::string, std::size_t> at;
  for (auto& f : families) {
    auto [it, fresh] = at.try_emplace(f.name, merged.size());
    if (fresh) {
      merged.push_back(std::move(f));
      continue;
    }
    auto& into = merged[it->second].samples;
    into.insert(into.end(), std::make_move_iterator(f.samples.begin()),
                std::make_move_iterator(f.samples.end()));
  }
  std::string out;
  render(merged, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// SessionMetrics

/// What an aggregation with `every` exported so far: each interval's rows added up.
struct Accumulated {
  Table shape;  // names of the keys and values, stage, field (rows unused)
  std::map<std::vector<std::string>, TableRow> rows;  // by the keys' text
  /// When each row last had events (the end of its last interval with any).
  std::map<std::vector<std::string>, std::chrono::nanoseconds> seen;
  std::uint64_t over_budget = 0;  // keys not added up (past accumulated_keys)
};

struct SessionMetrics::Impl {
  Session* session;
  Recipe recipe;
  ExportOptions options;
  /// By pipeline name, then stage index.
  std::map<std::pair<std::string, std::size_t>, Accumulated> acc;

  [[nodiscard]] std::string pipeline_name(std::size_t i) const {
    return i < recipe.pipelines.size() ? recipe.pipelines[i].name : fmt::format("{}", i);
  }
  [[nodiscard]] std::uint32_t budget() const {
    return recipe.exporting && recipe.exporting->label_budget ? *recipe.exporting->label_budget
                                                              : options.label_budget;
  }
  /// The keys an aggregation's intervals are added up for: the budget cuts the largest of them
  /// at each scrape.
  [[nodiscard]] std::size_t accumulated_keys() const {
    return std::max<std::size_t>(options.accumulated_keys, std::size_t{16} * budget());
  }
  [[nodiscard]] std::string prefix() const {
    if (recipe.exporting && !recipe.exporting->prefix.empty())
      return recipe.exporting->prefix;
    return "tracer_" + metric_name(recipe.name.empty() ? "recipe" : recipe.name);
  }

  /// The aggregation's stage, when it adds up intervals (`every`, no total of its own).
  [[nodiscard]] bool accumulates(std::size_t pipeline, std::size_t stage) const {
    const auto pipelines = session->pipelines();
    if (pipeline >= pipelines.size() || stage >= pipelines[pipeline]->size())
      return false;
    const Aggregation* a = pipelines[pipeline]->stage(stage).aggregation();
    return a != nullptr && a->every() && !a->total_at_stop();
  }

  static void add_row(Accumulated& a,
                      const Table& t,
                      const TableRow& row,
                      std::size_t cap,
                      bool record_seen = false) {
    std::vector<std::string> key;
    key.reserve(row.keys.size());
    for (const auto& k : row.keys)
      key.push_back(to_text(k));
    auto it = a.rows.find(key);
    if (it == a.rows.end()) {
      if (a.rows.size() >= cap) {
        ++a.over_budget;  // (not remembered as seen either: memory stays bounded)
        return;
      }
      if (record_seen)
        a.seen[key] = t.time;
      a.rows.emplace(std::move(key), row);
      return;
    }
    if (record_seen)
      a.seen[key] = t.time;
    TableRow& into = it->second;
    const std::vector<ValueKind> kinds = value_kinds_of(t);
    for (std::size_t v = 0; v < into.values.size() && v < row.values.size(); ++v) {
      const ValueKind k = kind_at(kinds, v);
      if (k == ValueKind::kMin || k == ValueKind::kMax) {  // the extreme since the start
        const auto x = to_number(into.values[v]), y = to_number(row.values[v]);
        if (x && y && ((k == ValueKind::kMin) == (*y < *x)))
          into.values[v] = row.values[v];
        continue;
      }
      if (!additive(k)) {
        into.values[v] = row.values[v];  // the latest interval's
        continue;
      }
      const auto a1 = std::get_if<std::uint64_t>(&into.values[v]);
      const auto b1 = std::get_if<std::uint64_t>(&row.values[v]);
      const auto a2 = std::get_if<std::int64_t>(&into.values[v]);
      const auto b2 = std::get_if<std::int64_t>(&row.values[v]);
      if (a1 != nullptr && b1 != nullptr)
        *a1 += *b1;
      else if (a2 != nullptr && b2 != nullptr)
        *a2 = static_cast<std::int64_t>(static_cast<std::uint64_t>(*a2) +
                                        static_cast<std::uint64_t>(*b2));
      else if (auto x = to_number(into.values[v]), y = to_number(row.values[v]); x && y)
        into.values[v] = *x + *y;
    }
    for (const auto& b : row.buckets) {
      auto same = std::find_if(into.buckets.begin(), into.buckets.end(), [&](const HistBucket& h) {
        return h.lo == b.lo && h.hi == b.hi && h.lo_unbounded == b.lo_unbounded &&
               h.hi_unbounded == b.hi_unbounded;
      });
      if (same != into.buckets.end())
        same->count += b.count;
      else
        into.buckets.push_back(b);
    }
  }

  void on_interval(const TableUpdate& u) {
    if (u.final || !accumulates(u.pipeline, u.stage))
      return;
    Accumulated& a = acc[{pipeline_name(u.pipeline), u.stage}];
    a.shape.stage = u.table.stage;
    a.shape.title = u.table.title;
    a.shape.field = u.table.field;
    a.shape.quantiles = u.table.quantiles;
    a.shape.key_names = u.table.key_names;
    a.shape.value_names = u.table.value_names;
    a.shape.value_kinds = u.table.value_kinds;
    a.shape.histogram = u.table.histogram;
    a.shape.summary = u.table.summary;
    for (const auto* part : {&u.table.rows, &u.table.rest})
      for (const auto& row : *part)
        add_row(a, u.table, row, accumulated_keys(), true);
    // Rows without events for options.idle leave the export (their series go stale in
    // Prometheus, as a finished process's should): memory follows the live keys, not every key
    // a run of hours saw.
    for (auto it = a.seen.begin(); it != a.seen.end();) {
      if (u.table.time - it->second > options.idle) {
        a.rows.erase(it->first);
        it = a.seen.erase(it);
      } else {
        ++it;
      }
    }
  }

  /// `now` (rows since the last interval) on top of what the intervals before it added up.
  [[nodiscard]] Table since_start(const Accumulated& a, const Table& now) const {
    Accumulated sum = a;
    Table t = now.value_names.empty() ? a.shape : now;
    if (!now.value_names.empty()) {
      for (const auto* part : {&now.rows, &now.rest})
        for (const auto& row : *part)
          add_row(sum, now, row, accumulated_keys());
    }
    t.rows.clear();
    t.rest.clear();
    for (auto& [key, row] : sum.rows)
      t.rows.push_back(std::move(row));
    // The largest first, as the stages order their rows (the budget keeps those).
    const auto score = [&](const TableRow& r) {
      return r.values.empty() ? 0.0 : to_number(r.values[0]).value_or(0.0);
    };
    // (std::sort with the keys' order as the tie-break: the map gave them in that order.)
    std::vector<std::pair<double, std::size_t>> order;
    order.reserve(t.rows.size());
    for (std::size_t i = 0; i < t.rows.size(); ++i)
      order.emplace_back(-score(t.rows[i]), i);
    std::sort(order.begin(), order.end());
    std::vector<TableRow> sorted;
    sorted.reserve(t.rows.size());
    for (const auto& [s, i] : order)
      sorted.push_back(std::move(t.rows[i]));
    t.rows = std::move(sorted);
    return t;
  }

  void health(std::vector<Family>& out) const;
};

SessionMetrics::SessionMetrics(Session& session, const Recipe& recipe, ExportOptions options)
    : impl_(std::make_unique<Impl>(
          Impl{.session = &session, .recipe = recipe, .options = options, .acc = {}})) {
  session.on_table([impl = impl_.get()](const TableUpdate& u) { impl->on_interval(u); });
}

SessionMetrics::~SessionMetrics() = default;

void SessionMetrics::reload(const Recipe& recipe, const RecipeChanges& changes) {
  auto& s = *impl_;
  s.recipe = recipe;
  const auto forget = [&](std::string name) {
    if (auto cut = name.find(" ("); cut != std::string::npos)
      name.resize(cut);  // "name (why)"
    std::erase_if(s.acc, [&](const auto& e) { return e.first.first == name; });
  };
  for (const auto& n : changes.pipelines_removed)
    forget(n);
  for (const auto& n : changes.pipelines_restarted)
    forget(n);
  for (const auto& n : changes.pipelines_added)
    forget(n);
}

void SessionMetrics::collect(std::vector<Family>& out) {
  auto& s = *impl_;
  const std::string prefix = s.prefix();
  const auto pipelines = s.session->pipelines();
  // How many aggregations each pipeline has: an index in the name only when it needs one.
  std::vector<std::size_t> aggregations(pipelines.size());
  for (std::size_t i = 0; i < pipelines.size(); ++i)
    for (std::size_t k = 0; k < pipelines[i]->size(); ++k)
      aggregations[i] += pipelines[i]->stage(k).aggregation() != nullptr ? 1 : 0;
  Family dropped{.name = "tracer_export_label_sets_dropped",
                 .help = "label sets of a metric left out of this scrape by its label budget",
                 .type = MetricType::kGauge};
  const Label recipe_label{.name = "recipe", .value = s.recipe.name};
  s.session->collect([&](const TableUpdate& u) {
    std::string base = prefix;
    const std::string pname = s.pipeline_name(u.pipeline);
    if (pname != "main")
      base += "_" + metric_name(pname);
    if (u.pipeline < aggregations.size() && aggregations[u.pipeline] > 1)
      base += fmt::format("_{}", u.stage + 1);
    TableNaming naming{
        .base = std::move(base),
        .help = fmt::format("{} (recipe {}, pipeline {})", u.table.title, s.recipe.name, pname),
        .rules = s.recipe.exporting ? &*s.recipe.exporting : nullptr,
        .budget = s.budget(),
        .const_labels = {}};
    std::vector<std::pair<std::string, std::uint64_t>> made;
    const auto it = s.acc.find({pname, u.stage});
    if (it != s.acc.end() || s.accumulates(u.pipeline, u.stage)) {
      static const Accumulated kNone{};
      const Accumulated& a = it != s.acc.end() ? it->second : kNone;
      made = table_families(s.since_start(a, u.table), naming, out);
      for (auto& m : made)
        m.second += a.over_budget;  // keys the intervals could not keep
    } else {
      made = table_families(u.table, naming, out);
    }
    for (const auto& [metric, n] : made) {
      if (n != 0)
        sample(dropped, "", {recipe_label, {.name = "metric", .value = metric}},
               static_cast<double>(n));
    }
  });
  out.push_back(std::move(dropped));
  s.health(out);
}

void SessionMetrics::Impl::health(std::vector<Family>& out) const {
  const SessionStats st = session->stats();
  const Label rl{.name = "recipe", .value = recipe.name};
  const auto probe_cpu = [&](const std::string& probe, int cpu) {
    return std::vector<Label>{
        rl, {.name = "probe", .value = probe}, {.name = "cpu", .value = std::to_string(cpu)}};
  };
  const auto probe_only = [&](const std::string& probe) {
    return std::vector<Label>{rl, {.name = "probe", .value = probe}};
  };
  Family samples{.name = "tracer_probe_samples_total",
                 .help = "samples read from the probe's ring on each CPU",
                 .type = MetricType::kCounter};
  Family hits{.name = "tracer_probe_kernel_hits_total",
              .help = "times the kernel ran the probe on each CPU (where counted)",
              .type = MetricType::kCounter};
  Family bytes{.name = "tracer_probe_ring_bytes_total",
               .help = "record bytes read from the probe's ring on each CPU",
               .type = MetricType::kCounter};
  Family lost{.name = "tracer_probe_lost_total",
              .help =
                  "events lost, by kind: ring (PERF_RECORD_LOST), lost_samples "
                  "(PERF_RECORD_LOST_SAMPLES), aux_truncated, aux_lost, unprocessed (left at a "
                  "stop), missed (hits that reached neither the ring nor a LOST count), "
                  "output_drops (failed BPF output calls), map_full and stacks_lost "
                  "(in-kernel aggregations)",
              .type = MetricType::kCounter};
  Family skipped{.name = "tracer_probe_bpf_skipped_total",
                 .help =
                     "hits the kernel ran no BPF program for (another program was running "
                     "on the CPU)",
                 .type = MetricType::kCounter};
  Family targets{.name = "tracer_probe_targets_dropped_total",
                 .help = "processes an in-kernel program's target map had no room for",
                 .type = MetricType::kCounter};
  Family truncated{.name = "tracer_probe_keys_truncated_total",
                   .help = "string keys cut to the key's bytes in the kernel",
                   .type = MetricType::kCounter};
  Family faults{.name = "tracer_probe_string_faults_total",
                .help = "strings an in-kernel program could not read (page not in memory)",
                .type = MetricType::kCounter};
  for (const ProbeStats& p : st.engine.probes) {
    for (const auto& [cpu, r] : p.per_cpu) {
      sample(samples, "", probe_cpu(p.name, cpu), static_cast<double>(r.samples));
      if (r.kernel_hits != 0)
        sample(hits, "", probe_cpu(p.name, cpu), static_cast<double>(r.kernel_hits));
      sample(bytes, "", probe_cpu(p.name, cpu), static_cast<double>(r.bytes));
      const std::pair<const char*, std::uint64_t> kinds[] = {{"ring", r.lost},
                                                             {"lost_samples", r.lost_samples},
                                                             {"aux_truncated", r.aux_truncated},
                                                             {"aux_lost", r.aux_lost},
                                                             {"unprocessed", r.unprocessed},
                                                             {"missed", r.missed}};
      for (const auto& [kind, n] : kinds)
        sample(lost, "", with(probe_cpu(p.name, cpu), "kind", kind), static_cast<double>(n));
    }
    const auto l = p.losses();
    const std::pair<const char*, std::uint64_t> kinds[] = {
        {"output_drops", l.output_drops}, {"map_full", l.map_full}, {"stacks_lost", l.stacks_lost}};
    for (const auto& [kind, n] : kinds)
      sample(lost, "", with(probe_only(p.name), "kind", kind), static_cast<double>(n));
    sample(skipped, "", probe_only(p.name), static_cast<double>(p.bpf_skipped));
    sample(targets, "", probe_only(p.name), static_cast<double>(p.targets_dropped));
    sample(truncated, "", probe_only(p.name), static_cast<double>(p.keys_truncated));
    sample(faults, "", probe_only(p.name), static_cast<double>(p.string_faults));
  }
  Family fill{.name = "tracer_ring_peak_fill_ratio",
              .help =
                  "the fullest each perf ring was when a drain began (published, unread "
                  "bytes over its data area): near 1, records are about to be lost",
              .type = MetricType::kGauge};
  for (const ProbeStats& p : st.engine.probes) {
    for (const auto& [cpu, r] : p.per_cpu) {
      if (r.ring_size != 0)
        sample(fill, "", probe_cpu(p.name, cpu),
               static_cast<double>(r.peak_fill) / static_cast<double>(r.ring_size));
    }
  }
  for (auto* f : {&samples, &hits, &bytes, &lost, &skipped, &targets, &truncated, &faults, &fill})
    out.push_back(std::move(*f));
  // The drain's latency: each pass over the rings (reading, the stages, the round).
  Family pass{.name = "tracer_drain_pass_seconds",
              .help =
                  "how long each pass over the rings took (reading them, the stages, the "
                  "round)",
              .type = MetricType::kHistogram};
  double cumulative = 0;
  const auto& b = st.engine.pass_us_log2;
  std::size_t last = 0;
  for (std::size_t i = 0; i < b.size(); ++i)
    last = b[i] != 0 ? i : last;
  for (std::size_t i = 0; i <= last && i + 1 < b.size(); ++i) {
    cumulative += static_cast<double>(b[i]);
    // Bucket i: passes of bit_width(µs) == i, under 2^i µs.
    sample(pass, "_bucket",
           {rl, {.name = "le", .value = format_value(std::ldexp(1e-6, static_cast<int>(i)))}},
           cumulative);
  }
  double passes_n = 0;
  for (const auto n : b)
    passes_n += static_cast<double>(n);
  sample(pass, "_bucket", {rl, {.name = "le", .value = "+Inf"}}, passes_n);
  sample(pass, "_sum", {rl}, static_cast<double>(st.engine.pass_ns) / 1e9);
  sample(pass, "_count", {rl}, passes_n);
  out.push_back(std::move(pass));

  // Counts since the stage began (a pipeline a reload restarts begins again: a counter reset).
  Family stage{.name = "tracer_stage_counter_total",
               .help =
                   "the stages' own accounting (latency pairs, unmatched entries, late "
                   "records, ...), as `tracer run` prints it at the end",
               .type = MetricType::kCounter};
  for (const auto& [name, v] : st.counters)
    sample(stage, "", {rl, {.name = "counter", .value = name}}, static_cast<double>(v));
  out.push_back(std::move(stage));
  Family delivered{.name = "tracer_delivered_records_total",
                   .help = "records handed to the recipe's pipelines",
                   .type = MetricType::kCounter};
  sample(delivered, "", {rl}, static_cast<double>(st.delivered));
  out.push_back(std::move(delivered));
  Family passes{
      .name = "tracer_drain_passes_total",
      .help =
          "passes over every ring, by what started them (wakeup, timer) and those "
          "that read nothing because the stages were behind (held) or ended no time-order "
          "round, a ring not yet read to its head at the last round (cut)",
      .type = MetricType::kCounter};
  sample(passes, "", {rl, {.name = "by", .value = "wakeup"}},
         static_cast<double>(st.engine.passes - st.engine.timer_passes));
  sample(passes, "", {rl, {.name = "by", .value = "timer"}},
         static_cast<double>(st.engine.timer_passes));
  sample(passes, "", {rl, {.name = "by", .value = "held"}},
         static_cast<double>(st.engine.held_passes));
  sample(passes, "", {rl, {.name = "by", .value = "cut"}},
         static_cast<double>(st.engine.partial_passes));
  out.push_back(std::move(passes));
  Family up{.name = "tracer_recipe_up",
            .help = "1 while the recipe's session runs",
            .type = MetricType::kGauge};
  sample(up, "", {rl}, session->running() ? 1.0 : 0.0);
  out.push_back(std::move(up));
  Family secs{.name = "tracer_recipe_seconds",
              .help = "seconds since the recipe's session started",
              .type = MetricType::kGauge};
  sample(secs, "", {rl}, st.seconds);
  out.push_back(std::move(secs));
}

}  // namespace tracer::exporter
