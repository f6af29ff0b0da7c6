// Every aggregation against hand-built batches (exact counts, sums, bucket boundaries, quantile
// bounds, rates, intervals) and latency pairing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "plugins/stages/filter.hpp"
#include "plugins/stages/hist.hpp"
#include "plugins/stages/latency.hpp"
#include "plugins/stages/print.hpp"
#include "plugins/stages/quantiles.hpp"
#include "support/alloc_counter.hpp"
#include "support/stage_batches.hpp"
#include "support/stage_harness.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

using namespace testing;  // tracer::testing: Harness, ev, Json, fake probes and records
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------------------------
// Aggregations

TEST(StageCount, ExactCountsByKeyAndTopOrder) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("count", {{"by", cv_list({"name", "nr"})}, {"top", cv(3)}});
  h.add("jsonl", {});
  h.bind();
  Records r;
  const std::pair<const char*, int> keys[] = {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}};
  const int n[] = {5, 9, 1, 7};
  for (int k = 0; k < 4; ++k) {
    for (int i = 0; i < n[k]; ++i)
      r.event(p, ev(keys[k].second, "/", 0, keys[k].first), 1, 1, 1);
  }
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  const auto l = lines(h.out);
  ASSERT_EQ(l.size(), 3u) << h.out;
  EXPECT_EQ(
      l[0],
      R"({"stage":"count","interval":0,"time":1000000000,"keys":{"name":"b","nr":2},"count":9})");
  EXPECT_EQ(
      l[1],
      R"({"stage":"count","interval":0,"time":1000000000,"keys":{"name":"d","nr":4},"count":7})");
  EXPECT_EQ(
      l[2],
      R"({"stage":"count","interval":0,"time":1000000000,"keys":{"name":"a","nr":1},"count":5})");
}

TEST(StageSum, SumMinMaxAvgByKey) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  for (const char* s : {"sum", "min", "max", "avg"})
    h.add(s, {{"field", cv("bytes")}, {"by", cv_list({"name"})}});
  h.add("csv", {});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  for (std::int64_t b : {10, -4, 30})
    r.event(p, ev(0, "/", b, "x"), 1, 1, 1);
  r.event(p, ev(0, "/", 5, "y"), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out,
            "stage,interval,name,sum\r\nsum,0,x,36\r\nsum,0,y,5\r\n"
            "stage,interval,name,min\r\nmin,0,y,5\r\nmin,0,x,-4\r\n"
            "stage,interval,name,max\r\nmax,0,x,30\r\nmax,0,y,5\r\n"
            "stage,interval,name,avg\r\navg,0,x,12\r\navg,0,y,5\r\n");
}

TEST(StageHist, Log2BucketBoundaries) {
  using stages::Hist;
  EXPECT_EQ(Hist::bucket(-1), 0u);
  EXPECT_EQ(Hist::bucket(0), 1u);
  EXPECT_EQ(Hist::bucket(1), 2u);
  EXPECT_EQ(Hist::bucket(2), 3u);
  EXPECT_EQ(Hist::bucket(3), 3u);
  EXPECT_EQ(Hist::bucket(4), 4u);
  EXPECT_EQ(Hist::bucket(1023), 11u);
  EXPECT_EQ(Hist::bucket(1024), 12u);
  EXPECT_EQ(Hist::bucket(INT64_MAX), 64u);  // [2^62, 2^63)
  EXPECT_EQ(Hist::power_label(9), "512");
  EXPECT_EQ(Hist::power_label(10), "1K");
  EXPECT_EQ(Hist::power_label(21), "2M");
  EXPECT_EQ(Hist::power_label(64), "16E");
}

TEST(StageHist, AsciiHistogramGolden) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("hist", {{"field", cv("bytes")}, {"by", cv_list({"name"})}});
  h.bind();  // no output stage: the pipeline appends print
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  for (std::int64_t b : {0, 1, 2, 3, 5, 6, 7, 1024, 1500, -3})
    r.event(p, ev(0, "/", b, "x"), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out,
            "hist of bytes by name:\n"
            "@bytes[x]:\n"
            "(..., 0)               1 |@@@@@@@@@@@@@@@@@                                   |\n"
            "[0]                    1 |@@@@@@@@@@@@@@@@@                                   |\n"
            "[1]                    1 |@@@@@@@@@@@@@@@@@                                   |\n"
            "[2, 4)                 2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |\n"
            "[4, 8)                 3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|\n"
            "[8, 16)                0 |                                                    |\n"
            "[16, 32)               0 |                                                    |\n"
            "[32, 64)               0 |                                                    |\n"
            "[64, 128)              0 |                                                    |\n"
            "[128, 256)             0 |                                                    |\n"
            "[256, 512)             0 |                                                    |\n"
            "[512, 1K)              0 |                                                    |\n"
            "[1K, 2K)               2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |\n"
            "\n");
}

TEST(StageLhist, LinearBucketBoundaries) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("lhist", {{"field", cv("bytes")}, {"min", cv(0)}, {"max", cv(25)}, {"step", cv(10)}});
  h.add("csv", {});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  for (std::int64_t b : {-1, 0, 9, 10, 19, 20, 24, 25, 100})
    r.event(p, ev(0, "/", b), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out,
            "stage,interval,lo,hi,count\r\n"
            "lhist,0,,0,1\r\nlhist,0,0,10,2\r\nlhist,0,10,20,2\r\nlhist,0,20,25,2\r\n"
            "lhist,0,25,,2\r\n");
}

TEST(StageQuantiles, WithinTheStatedBound) {
  using stages::Quantiles;
  // Bucket math: exact below 128, each bucket's width < 1/64 of its lower bound.
  for (std::uint64_t v : {0ULL, 1ULL, 127ULL, 128ULL, 129ULL, 1000ULL, 123456789ULL, ~0ULL}) {
    const auto b = Quantiles::bucket(v);
    ASSERT_LT(b, Quantiles::kBuckets);
    const auto rep = Quantiles::representative(b);
    const double err = std::fabs(static_cast<double>(rep) - static_cast<double>(v));
    if (v < 128) {
      EXPECT_EQ(rep, v);
    } else {
      EXPECT_LT(err, static_cast<double>(v) * Quantiles::kRelativeError) << v;
    }
  }
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("quantiles", {{"field", cv("bytes")}});
  h.add("jsonl", {});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  // A skewed distribution: 100000 samples of floor(exp(U * 16)).
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> u(0, 16);
  std::vector<std::int64_t> values;
  Records r;
  for (int i = 0; i < 100000; ++i) {
    values.push_back(static_cast<std::int64_t>(std::exp(u(rng))));
    r.event(p, ev(0, "/", values.back()), 1, 1, 1);
    if (r.size() == 4096) {
      h.pipeline.on_batch(r.batch());
      r.clear();
    }
  }
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  std::sort(values.begin(), values.end());
  const auto exact = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
    return static_cast<double>(values[std::max<std::size_t>(rank, 1) - 1]);
  };
  const std::string& line = h.out;
  for (auto [name, q] : {std::pair{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p999", 0.999}}) {
    const auto at = line.find(fmt::format("\"{}\":", name));
    ASSERT_NE(at, std::string::npos) << line;
    const double got = std::stod(line.substr(at + std::strlen(name) + 3));
    EXPECT_LE(std::fabs(got - exact(q)), exact(q) * Quantiles::kRelativeError)
        << name << " got " << got << " exact " << exact(q);
  }
  EXPECT_THAT(line, HasSubstr("\"count\":100000"));
  EXPECT_TRUE(Json(lines(line)[0]).valid());
}

TEST(StageRate, PerSecondOverTheInterval) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("rate", {{"every", cv("2s")}});
  h.add("csv", {});
  h.bind();
  Records r;
  for (int i = 0; i < 10; ++i)
    r.event(p, ev(0), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.tick(1s);  // not yet
  EXPECT_EQ(h.out, "");
  h.pipeline.tick(2s);
  EXPECT_EQ(h.out, "stage,interval,count,per_s\r\nrate,0,10,5\r\n");
}

TEST(StageCount, EveryIntervalResetsAndSkipsQuietIntervals) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("count", {{"by", cv_list({"nr"})}, {"every", cv("1s")}});
  h.add("csv", {});
  h.bind();
  Records r;
  r.event(p, ev(1), 1, 1, 1);
  r.event(p, ev(1), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.tick(500ms);
  h.pipeline.tick(1000ms);  // interval 0: nr=1 x2
  h.pipeline.tick(2500ms);  // quiet interval: nothing
  r.clear();
  r.event(p, ev(2), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.tick(3000ms);  // interval 1: nr=2 x1
  h.pipeline.stop(3200ms);  // nothing left
  EXPECT_EQ(h.out, "stage,interval,nr,count\r\ncount,0,1,2\r\ncount,1,2,1\r\n");
}

// ---------------------------------------------------------------------------------------------
// Latency

TEST(StageLatency, PairsByTidAndCountsMisses) {
  const ProbeInfo enter = fake_probe(0, "enter"), exit = fake_probe(1, "exit");
  const ProbeInfo other = fake_probe(2, "other");
  Harness h({enter, exit, other});
  h.add("latency", {{"entry", cv("enter")}, {"exit", cv("exit")}});
  h.add("hist", {{"field", cv("duration")}});
  h.add("jsonl", {});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  r.event(enter, ev(0), 1, 10, 1000);
  r.event(enter, ev(0), 1, 11, 1000);
  r.event(exit, ev(0), 1, 10, 1003);   // 3 ns
  r.event(other, ev(0), 1, 10, 1004);  // passes through, no duration
  r.event(exit, ev(0), 1, 12, 1005);   // no entry for tid 12
  r.event(enter, ev(0), 1, 13, 2000);
  r.event(enter, ev(0), 1, 13, 2100);  // entry without exit (replaced)
  r.event(exit, ev(0), 1, 13, 2200);   // 100 ns
  r.event(enter, ev(0), 1, 14, 5000);
  r.event(exit, ev(0), 1, 14, 4000);  // older than its entry: the pipeline puts it first
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  auto& lat = dynamic_cast<stages::Latency&>(h.pipeline.stage(0));
  EXPECT_TRUE(h.pipeline.ordered());
  EXPECT_EQ(lat.stats().paired, 2u);
  EXPECT_EQ(lat.stats().missing_entry, 2u);  // tid 12, and tid 14's exit (in time order first)
  // tid 13's first entry; tid 11 and tid 14 pending at stop
  EXPECT_EQ(lat.stats().missing_exit, 3u);
  EXPECT_EQ(lat.stats().pending_at_stop, 2u);
  EXPECT_EQ(lat.stats().out_of_order, 0u);
  EXPECT_EQ(
      h.out,
      R"({"stage":"hist","interval":0,"time":1000000000,"keys":{},"count":2,"sum":103,"buckets":[)"
      R"({"lo":2,"hi":4,"count":1},{"lo":4,"hi":8,"count":0},{"lo":8,"hi":16,"count":0},)"
      R"({"lo":16,"hi":32,"count":0},{"lo":32,"hi":64,"count":0},)"
      R"({"lo":64,"hi":128,"count":1}]})"
      "\n");
}

TEST(StageLatency, UnknownProbeAndMissingKey) {
  Harness h({fake_probe(0, "enter"), fake_probe(1, "exit")});
  h.add("latency", {{"entry", cv("entr", 4, 9)}, {"exit", cv("exit")}});
  h.bind();
  ASSERT_EQ(h.diags.items().size(), 1u) << h.errors();
  EXPECT_EQ(h.diags.items()[0].message, "latency: no probe named 'entr'");
  EXPECT_EQ(h.diags.items()[0].where.line, 4u);
  EXPECT_EQ(h.diags.items()[0].hint, "probes: enter, exit");
}

}  // namespace
}  // namespace tracer
