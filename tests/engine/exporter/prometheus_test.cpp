// The Prometheus exposition of tables (tracer serve's /metrics): names, escaping, histograms
// with exact cumulative buckets, summaries, counters, relabeling and the label budget.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "support/stage_batches.hpp"
#include "tracer/exporter/prometheus.hpp"
#include "tracer/exporter/session_metrics.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/ext/stages.hpp"

namespace tracer::exporter {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string text_of(const Table& t, TableNaming naming = {.base = "tracer_t"}) {
  std::vector<Family> out;
  (void)table_families(t, naming, out);
  return exposition(std::move(out));
}

HistBucket bucket(std::int64_t lo, std::int64_t hi, std::uint64_t n) {
  return {.lo = lo, .hi = hi, .count = n, .label = {}};
}

TEST(PrometheusText, NamesLabelsAndValuesAreValid) {
  EXPECT_EQ(metric_name("sched.wakeup-latency"), "sched_wakeup_latency");
  EXPECT_EQ(metric_name("9lives"), "_9lives");
  EXPECT_EQ(metric_name("a:b"), "a:b");
  EXPECT_EQ(label_name("a:b"), "a_b");
  EXPECT_EQ(label_name("__name"), "x__name");
  EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(escape_help("x\\y\nz"), "x\\\\y\\nz");
  EXPECT_EQ(format_value(12495000), "12495000");
  EXPECT_EQ(format_value(0.25), "0.25");
  EXPECT_EQ(format_value(1.0 / 0.0), "+Inf");
  std::string out;
  render(std::vector<Family>{{.name = "m_total",
                              .help = "h",
                              .type = MetricType::kCounter,
                              .samples = {{.suffix = "",
                                           .labels = {{.name = "comm", .value = "a \"b\""}},
                                           .value = 3}}}},
         out);
  EXPECT_EQ(out, "# HELP m_total h\n# TYPE m_total counter\nm_total{comm=\"a \\\"b\\\"\"} 3\n");
}

TEST(PrometheusText, HistogramBucketsAreCumulativeWithExactIntegerBounds) {
  Table t;
  t.stage = "hist";
  t.title = "hist of offset by pid";
  t.field = "offset";
  t.key_names = {"pid"};
  t.value_names = {"offset", "sum"};
  t.histogram = true;
  TableRow r;
  r.keys = {std::int64_t{42}};
  r.values = {std::uint64_t{7}, std::int64_t{20}};
  // 0 once, [1,2) once, [4,8) five times (a gap at [2,4)).
  r.buckets = {bucket(0, 1, 1), bucket(1, 2, 1), bucket(2, 4, 0), bucket(4, 8, 5)};
  t.rows.push_back(r);
  const std::string text = text_of(t);
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset histogram\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_bucket{pid=\"42\",le=\"0\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_bucket{pid=\"42\",le=\"1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_bucket{pid=\"42\",le=\"3\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_bucket{pid=\"42\",le=\"7\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_bucket{pid=\"42\",le=\"+Inf\"} 7\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_sum{pid=\"42\"} 20\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_count{pid=\"42\"} 7\n"));
}

TEST(PrometheusText, QuantilesBecomeASummaryWithMinAndMaxGauges) {
  Table t;
  t.stage = "quantiles";
  t.summary = true;
  t.title = "quantiles of duration";
  t.field = "duration";
  t.value_names = {"count", "min", "p50", "p99", "max", "sum"};
  t.quantiles = {0.5, 0.99};
  TableRow r;
  r.values = {std::uint64_t{4}, std::uint64_t{1}, std::uint64_t{2},
              std::uint64_t{9}, std::uint64_t{9}, std::int64_t{15}};
  t.rows.push_back(r);
  const std::string text = text_of(t);
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_duration summary\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration{quantile=\"0.5\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration{quantile=\"0.99\"} 9\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration_sum 15\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration_count 4\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration_min 1\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_duration_max 9\n"));
}

// The stats stage's table, from the values its kernel part left on two CPUs (1 and 3 on one,
// 10 on the other): its count and sum are counters, the rest gauges, by the kinds the stage
// gives its columns.
TEST(PrometheusText, StatsAreCountersAndGaugesByTheirKinds) {
  auto stage = stage_registry().make("stats");
  Diagnostics diags;
  stage->configure(
      testing::cv_table({{"field", testing::cv("offset")}, {"by", testing::cv_list({"pid"})}}),
      diags);
  ASSERT_TRUE(diags.empty()) << diags.format();
  const auto enc_min = [](std::int64_t v) {
    return static_cast<std::uint64_t>(v) ^ 0x7fffffffffffffffULL;
  };
  const auto enc_max = [](std::int64_t v) {
    return static_cast<std::uint64_t>(v) ^ 0x8000000000000000ULL;
  };
  // count, sum, vmin, vmax, the sum of squares (low, high): CPU 0, then CPU 1.
  const std::array<std::uint64_t, 12> values{2, 4,  enc_min(1),  enc_max(3),  10,  0,
                                             1, 10, enc_min(10), enc_max(10), 100, 0};
  KernelRow row{.keys = {std::int64_t{7}}, .bytes = {}, .stride = 48, .values = 2};
  row.bytes.resize(sizeof values);
  std::memcpy(row.bytes.data(), values.data(), sizeof values);
  stage->in_kernel()->absorb({row});
  Table t;
  stage->aggregation()->snapshot(t, true);
  ASSERT_EQ(t.rows.size(), 1U);
  const std::string text = text_of(t);
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset_count_total counter\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_count_total{pid=\"7\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset_sum_total counter\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_sum_total{pid=\"7\"} 14\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset_min gauge\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_min{pid=\"7\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_max{pid=\"7\"} 10\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset_mean gauge\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_mean{pid=\"7\"} 4.666666666666667\n"));
  // sqrt((3 * 110 - 14^2) / 9)
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_offset_stddev gauge\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_offset_stddev{pid=\"7\"} 3.858612300930075\n"));
}

Table count_by_comm_pid() {
  Table t;
  t.stage = "count";
  t.title = "count by comm, pid";
  t.key_names = {"comm", "pid"};
  t.value_names = {"count"};
  for (auto [comm, pid, n] : {std::tuple{"bash", 1, 10}, {"bash", 2, 5}, {"kworker/0:1", 3, 7}}) {
    TableRow r;
    r.keys = {std::string(comm), std::int64_t{pid}};
    r.values = {std::uint64_t(n)};
    t.rows.push_back(r);
  }
  return t;
}

TEST(PrometheusText, CountsAreCountersAndRelabelingMergesWhatItJoins) {
  const Table t = count_by_comm_pid();
  EXPECT_THAT(text_of(t), HasSubstr("tracer_t_count_total{comm=\"bash\",pid=\"2\"} 5\n"));
  RecipeExport rules;
  rules.relabel = {{.action = RecipeRelabel::Action::kLabelDrop, .label = "pid"},
                   {.action = RecipeRelabel::Action::kDrop, .label = "comm", .regex = "kworker.*"},
                   {.action = RecipeRelabel::Action::kRename, .label = "comm", .to = "process"}};
  const std::string text = text_of(t, {.base = "tracer_t", .rules = &rules});
  EXPECT_THAT(text, HasSubstr("tracer_t_count_total{process=\"bash\"} 15\n"));  // 10 + 5
  EXPECT_THAT(text, Not(HasSubstr("kworker")));
  EXPECT_THAT(text, Not(HasSubstr("pid=")));
  RecipeExport keep;
  keep.relabel = {{.action = RecipeRelabel::Action::kKeep, .label = "comm", .regex = "kw.*"}};
  const std::string kept = text_of(t, {.base = "tracer_t", .rules = &keep});
  EXPECT_THAT(kept, HasSubstr("tracer_t_count_total{comm=\"kworker/0:1\",pid=\"3\"} 7\n"));
  EXPECT_THAT(kept, Not(HasSubstr("bash")));
}

TEST(PrometheusText, MergedRowsLeaveOutWhatCannotBeMerged) {
  Table t;
  t.stage = "avg";
  t.title = "avg of size by comm, pid";
  t.field = "size";
  t.key_names = {"comm", "pid"};
  t.value_names = {"avg"};
  for (auto [pid, v] : {std::pair{1, 2.0}, {2, 4.0}, {3, 8.0}}) {
    TableRow r;
    r.keys = {std::string(pid == 3 ? "sh" : "bash"), std::int64_t{pid}};
    r.values = {v};
    t.rows.push_back(r);
  }
  RecipeExport rules;
  rules.relabel = {{.action = RecipeRelabel::Action::kLabelDrop, .label = "pid"}};
  const std::string text = text_of(t, {.base = "tracer_t", .rules = &rules});
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_t_size_avg gauge\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_size_avg{comm=\"sh\"} 8\n"));
  // Two averages of unknown weights: no average of them is made up.
  EXPECT_THAT(text, Not(HasSubstr("comm=\"bash\"")));
}

TEST(PrometheusText, TheLabelBudgetKeepsTheFirstRowsAndSaysHowManyWentOut) {
  const Table t = count_by_comm_pid();
  std::vector<Family> out;
  const auto made = table_families(t, {.base = "tracer_t", .budget = 2}, out);
  ASSERT_EQ(made.size(), 1U);
  EXPECT_EQ(made[0].first, "tracer_t_count_total");
  EXPECT_EQ(made[0].second, 1U);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].samples.size(), 2U);
}

TEST(PrometheusText, CountersStageRowsAreCountersWithTheirUnitAndMetricsGauges) {
  Table t;
  t.stage = "counters";
  t.title = "counters cpu (total)";
  t.key_names = {"group", "counter"};
  t.value_names = {"value", "unit", "raw", "enabled_ns", "running_ns", "pct"};
  TableRow c;
  c.keys = {std::string("cpu"), std::string("page-faults")};
  c.values = {std::uint64_t{300}, std::string(""),  std::uint64_t{300},
              std::uint64_t{1},   std::uint64_t{1}, 100.0};
  TableRow m;
  m.keys = {std::string("cpu"), std::string("faults_per_s")};
  m.values = {1.5,  std::string("metric"), std::monostate{}, std::monostate{}, std::monostate{},
              100.0};
  t.rows = {c, m};
  const std::string text = text_of(t);
  EXPECT_THAT(text, HasSubstr("tracer_t_total{group=\"cpu\",counter=\"page-faults\"} 300\n"));
  EXPECT_THAT(text, HasSubstr("tracer_t_metric{group=\"cpu\",counter=\"faults_per_s\"} 1.5\n"));
}

TEST(PrometheusText, FamiliesOfOneNameFromSeveralRecipesComeTogether) {
  std::vector<Family> fs = {
      {.name = "a", .help = "x", .type = MetricType::kGauge, .samples = {{.value = 1}}},
      {.name = "b", .help = "y", .type = MetricType::kGauge, .samples = {{.value = 2}}},
      {.name = "a",
       .help = "x",
       .type = MetricType::kGauge,
       .samples = {{.labels = {{.name = "r", .value = "2"}}, .value = 3}}},
  };
  EXPECT_EQ(exposition(fs),
            "# HELP a x\n# TYPE a gauge\na 1\na{r=\"2\"} 3\n# HELP b y\n# TYPE b gauge\nb 2\n");
}

}  // namespace
}  // namespace tracer::exporter
