// A Session's tables and health as Prometheus metric families: what `tracer serve` exposes at
// /metrics, read when scraped (Session::collect), never on a timer of its own.
//
// Naming: the recipe's [export] prefix (default "tracer_" and the recipe's name), then the
// pipeline's name unless it is "main", then the aggregation's index in its pipeline when the
// pipeline has more than one. A table becomes:
//   hist, lhist      a histogram PREFIX_FIELD: cumulative `le` buckets (a bucket [lo, hi) of
//                    integers is le="hi-1"), _sum and _count exact
//   quantiles        a summary PREFIX_FIELD (quantile="0.5", ...), _sum and _count; gauges
//                    PREFIX_FIELD_min and _max
//   count, sum, rate counters PREFIX[_FIELD]_count_total, PREFIX_FIELD_sum_total
//   min, max, avg,   gauges PREFIX_FIELD_min, ...
//   per_s, others
//   counters         a counter PREFIX_total per counter (label `unit`), a gauge PREFIX_metric
//                    per derived metric
// The table's keys are the labels. An aggregation with `every` is exported since the start:
// the exporter adds each interval's counts, sums and buckets up (its min, max, averages and
// quantiles are the current interval's, or the last one's). [export] relabel rules then drop,
// keep, remove or rename labels (rows left with the same labels are merged: counts, sums and
// buckets added, min and max of both; a value that cannot be merged, such as a quantile or an
// average, is left out of a merged row rather than made up). A row of an `every` aggregation that
// had no events for ExportOptions::idle (5 minutes) leaves the export. At most `label_budget` label
// sets per metric, the first in the table's order (its largest): the others are counted in
// tracer_export_label_sets_dropped{metric}.
#pragma once

#include <utility>  // Boost 1.74's Asio (through session.hpp) needs it first (TOOLCHAIN.md)

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tracer/exporter/prometheus.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"
#include "tracer/table.hpp"

namespace tracer::exporter {

struct ExportOptions {
  /// Label sets kept per metric, unless the recipe's [export] label_budget says otherwise.
  std::uint32_t label_budget = 10000;
  /// An aggregation with `every`: a row without events for this long leaves the export.
  std::chrono::nanoseconds idle = std::chrono::minutes(5);
  /// An aggregation with `every`: the keys its intervals are added up for (at least 16 times the
  /// label budget), so that the budget keeps the largest series since the start, not the first
  /// seen; keys past it are counted in tracer_export_label_sets_dropped.
  std::uint32_t accumulated_keys = 262144;
};

/// How one table is exported.
struct TableNaming {
  std::string base{};                   // the metric names' start ("tracer_runqlat")
  std::string help{};                   // the table's description for HELP lines
  const RecipeExport* rules = nullptr;  // relabel rules (none when null)
  std::uint32_t budget = 10000;         // label sets kept per metric
  std::vector<Label> const_labels{};    // added to every sample (none by default)
};

/// Appends the families of `table` (rows and rest). @return the name of each family it made,
/// with the label sets its budget left out.
std::vector<std::pair<std::string, std::uint64_t>> table_families(const Table& table,
                                                                  const TableNaming& naming,
                                                                  std::vector<Family>& out);

/// Merges families of the same name (their samples in order, the first's HELP and TYPE), keeps
/// the first appearance's order, and renders them (render()).
[[nodiscard]] std::string exposition(std::vector<Family> families);

/// One recipe's session as metrics. Construct before Session::start() (it subscribes to the
/// tables each `every` emits); use on the session's executor.
class SessionMetrics {
 public:
  SessionMetrics(Session& session, const Recipe& recipe, ExportOptions options = {});
  ~SessionMetrics();
  SessionMetrics(const SessionMetrics&) = delete;
  SessionMetrics& operator=(const SessionMetrics&) = delete;

  /// After Session::apply(recipe): the new names and rules; what the exporter added up for a
  /// pipeline that went or began again is forgotten (its counters start again from 0, which
  /// Prometheus's rate() takes as a reset).
  void reload(const Recipe& recipe, const RecipeChanges& changes);
  /// Appends the session's families: its tables as of now (Session::collect) and its health
  /// (events, each kind of loss per probe and CPU, skipped programs, stage counters, ...).
  void collect(std::vector<Family>& out);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracer::exporter
