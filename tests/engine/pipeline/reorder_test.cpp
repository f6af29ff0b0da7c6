// Reorder: records of several rings merged in time order at rounds, late ones counted, memory
// bounded; and the pipeline's use of it (pairing, comm at event time).
#include "tracer/reorder.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "support/stage_batches.hpp"
#include "support/stage_harness.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/pipeline.hpp"

namespace tracer {
namespace {

using testing::ev;
using testing::FakeEvent;
using testing::Records;

struct Seen {
  std::vector<std::uint64_t> times;
  std::vector<std::int32_t> nrs;
  BatchHandler handler() {
    return [this](const Batch& b) {
      for (const auto& r : b.records) {
        const auto* s = std::get_if<perf::Sample>(&r.record.body);
        ASSERT_NE(s, nullptr);
        times.push_back(s->time);
        std::int32_t nr = 0;
        std::memcpy(&nr, s->raw.data() + 8, 4);  // the fake format's `nr`
        nrs.push_back(nr);
      }
    };
  }
};

TEST(Reorder, RoundsReleaseWhatIsSafeInTimeOrder) {
  const ProbeInfo enter = testing::fake_probe(0, "enter");
  const ProbeInfo exit = testing::fake_probe(1, "exit");
  Records recs;
  // Round 1 reads exit's ring first (times 20, 40), then enter's (10, 30).
  recs.event(exit, ev(20), 1, 1, 20, 1);
  recs.event(exit, ev(40), 1, 1, 40, 1);
  recs.event(enter, ev(10), 1, 1, 10, 0);
  recs.event(enter, ev(30), 1, 1, 30, 0);
  Reorder order;
  Seen seen;
  const auto out = seen.handler();
  for (const auto& r : recs.refs())
    order.push(r, r.probe == 0 ? enter.layout : exit.layout, out);
  order.round(out);  // nothing was seen before this round: nothing is safe yet
  EXPECT_TRUE(seen.times.empty());
  recs.clear();
  recs.event(enter, ev(50), 1, 1, 50, 0);
  recs.event(exit, ev(35), 1, 1, 35, 1);  // written before round 1 ended
  for (const auto& r : recs.refs())
    order.push(r, r.probe == 0 ? enter.layout : exit.layout, out);
  order.round(out);  // releases up to 40, the largest time of round 1
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 30, 35, 40}));
  EXPECT_EQ(seen.nrs, (std::vector<std::int32_t>{10, 20, 30, 35, 40}));
  EXPECT_EQ(order.stats().late, 0u);
  recs.clear();
  recs.event(exit, ev(39), 1, 1, 39, 1);  // older than what was released: late
  order.push(recs.refs()[0], exit.layout, out);
  EXPECT_EQ(order.stats().late, 1u);
  order.flush_all(out);
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 30, 35, 40, 39, 50}));
  EXPECT_EQ(order.stats().released, 7u);
  EXPECT_EQ(order.queued(), 0u);
}

// A pass that was no round (Engine::on_pass false: it left records in a ring) releases nothing
// new: resume() goes on with what the last round made safe, and a round after it releases what
// the round before it saw. A round's release that runs out of its time says so (releasing())
// and resume() finishes it.
TEST(Reorder, APassThatIsNoRoundReleasesOnlyWhatTheLastRoundMadeSafe) {
  const ProbeInfo p = testing::fake_probe(0, "p");
  Reorder order({.max_bytes = std::size_t{64} << 20, .max_batch = 2});
  Seen seen;
  const auto out = seen.handler();
  const auto push = [&](std::initializer_list<std::uint64_t> times) {
    Records recs;
    for (const std::uint64_t t : times)
      recs.event(p, ev(static_cast<std::int32_t>(t)), 1, 1, t, 0);
    for (const auto& r : recs.refs())
      order.push(r, p.layout, out);
  };
  push({10, 20, 30});
  order.round(out);  // nothing safe yet; 30 is seen
  push({40, 50});
  order.resume(out);  // no round: 30 is not safe yet (a ring may still hold 25)
  EXPECT_TRUE(seen.times.empty());
  push({25});
  order.round(out);  // up to 30
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 25, 30}));
  push({60});
  order.resume(out);  // 50 was seen by the last round, and is not safe before the next
  EXPECT_EQ(seen.times.size(), 4U);
  EXPECT_FALSE(order.releasing());
  // A round whose time is out after its first batch (2 records): the rest stays queued, in
  // order, and resume() hands it on without passing the round's bound.
  push({45, 47});  // late for no one: nothing past 30 was released
  order.round(out, std::chrono::steady_clock::now() - std::chrono::seconds(1));  // up to 50
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 25, 30, 40, 45}));
  EXPECT_TRUE(order.releasing());
  order.resume(out);
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 25, 30, 40, 45, 47, 50}));
  EXPECT_FALSE(order.releasing());
  EXPECT_EQ(order.stats().late, 0U);
  order.flush_all(out);
  EXPECT_EQ(seen.times, (std::vector<std::uint64_t>{10, 20, 25, 30, 40, 45, 47, 50, 60}));
}

// A round's rings are ascending runs: a few are merged, many sorted (Reorder::sort_keys); both
// give one sorted stream.
class ReorderRings : public ::testing::TestWithParam<std::size_t> {};

TEST_P(ReorderRings, ManyRingsMergeIntoOneSortedStreamWithEqualTimesInRingOrder) {
  const ProbeInfo p = testing::fake_probe(0, "p");
  const std::size_t ring_count = GetParam();
  std::mt19937 rng(7);
  Reorder order({.max_bytes = std::size_t{64} << 20, .max_batch = 7});
  Seen seen;
  const auto out = seen.handler();
  std::uint64_t clock = 1000;
  std::int32_t nr = 0;
  for (int round = 0; round < 50; ++round) {
    Records recs;
    // The rings, each in its own time order, read one after the other.
    std::vector<std::vector<std::uint64_t>> rings(ring_count);
    for (int i = 0; i < 200; ++i)
      rings[rng() % ring_count].push_back(clock += rng() % 3);  // equal times happen
    for (std::size_t c = 0; c < rings.size(); ++c) {
      for (auto t : rings[c])
        recs.event(p, ev(nr++), 1, 1, t, static_cast<std::int32_t>(c));
    }
    for (const auto& r : recs.refs())
      order.push(r, p.layout, out);
    order.round(out);
  }
  order.flush_all(out);
  ASSERT_EQ(seen.times.size(), 50u * 200u);
  EXPECT_TRUE(std::is_sorted(seen.times.begin(), seen.times.end()));
  EXPECT_EQ(order.stats().late, 0u);
  // Equal times keep arrival order (a ring's own order).
  for (std::size_t i = 1; i < seen.times.size(); ++i) {
    if (seen.times[i] == seen.times[i - 1]) {
      EXPECT_LT(seen.nrs[i - 1], seen.nrs[i]) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Rings, ReorderRings, ::testing::Values(1, 2, 4, 15, 40));

TEST(Reorder, OverBudgetReleasesTheOlderHalfAndCountsWhatComesLate) {
  const ProbeInfo p = testing::fake_probe(0, "p");
  Reorder order({.max_bytes = 4096, .max_batch = 512});
  Seen seen;
  const auto out = seen.handler();
  Records recs;
  for (std::uint64_t t = 1; t <= 200; ++t)
    recs.event(p, ev(static_cast<std::int32_t>(t)), 1, 1, t * 10);
  for (const auto& r : recs.refs())
    order.push(r, p.layout, out);
  EXPECT_GT(order.stats().forced_flushes, 0u);
  EXPECT_FALSE(seen.times.empty());
  EXPECT_TRUE(std::is_sorted(seen.times.begin(), seen.times.end()));
  recs.clear();
  recs.event(p, ev(0), 1, 1, 5);  // older than what was forced out
  order.push(recs.refs()[0], p.layout, out);
  order.flush_all(out);
  EXPECT_EQ(order.stats().late, 1u);
  EXPECT_EQ(seen.times.size(), 201u);  // nothing dropped
}

/// An entry probe ("enter") and its exit ("exit"), for a latency stage.
std::vector<ProbeInfo> enter_exit_probes() {
  return {testing::fake_probe(0, "enter"), testing::fake_probe(1, "exit")};
}

/// A latency stage pairing enter_exit_probes(): it orders the pipeline.
void add_latency(Pipeline& pipeline, Diagnostics& diags) {
  pipeline.add(stage_registry(), "latency",
               testing::cv_table({{"entry", testing::cv("enter")}, {"exit", testing::cv("exit")}}),
               diags);
}

// A pipeline with a latency stage pairs exits that its batches deliver before their entries.
TEST(Reorder, PipelinePairsExitsDeliveredBeforeTheirEntries) {
  const std::vector<ProbeInfo> probes = enter_exit_probes();
  std::string text;
  Sink sink = Sink::to_string(&text);
  Pipeline pipeline(sink);
  Diagnostics diags;
  add_latency(pipeline, diags);
  pipeline.add(stage_registry(), "count", testing::cv_table({}), diags);
  pipeline.bind(probes, diags);
  ASSERT_TRUE(diags.empty()) << diags.format();
  ASSERT_TRUE(pipeline.ordered());
  pipeline.start(std::chrono::nanoseconds(0));
  constexpr int kCalls = 1000;
  std::uint64_t t = 100;
  for (int batch = 0; batch < kCalls / 100; ++batch) {
    Records exits, entries;
    for (int i = 0; i < 100; ++i) {
      const std::uint32_t tid = 10 + static_cast<std::uint32_t>(i % 7);
      entries.event(probes[0], {}, tid, tid, t += 10, 0);
      exits.event(probes[1], {}, tid, tid, t += 10, 1);
    }
    pipeline.on_batch(exits.batch());  // the exit ring is drained first
    pipeline.on_batch(entries.batch());
    pipeline.round();
  }
  pipeline.stop(std::chrono::nanoseconds(t));
  std::uint64_t paired = 0, unmatched = 0;
  for (const auto& [name, value] : pipeline.counters()) {
    if (name == "latency.paired")
      paired = value;
    if (name == "latency.unmatched_exits" || name == "latency.unmatched_entries")
      unmatched += value;
  }
  EXPECT_EQ(paired, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(unmatched, 0u);
}

// Records still in the merge when the stop's time (Pipeline::kStopBudget) runs out, behind
// stages slower than the events, are counted (order.unprocessed) and said in warnings(), which
// every path reports (the summary of `run` and `serve`, a Session's stats): an OTLP run under
// ASan left 910 there, counted, and said nothing (take_warnings() said it, and only `tracer run`
// read that, and not when its stop failed).
TEST(Reorder, RecordsTheStopsTimeCutAreCountedAndSaidInEveryPathsWarnings) {
  struct Slow : Stage {
    void configure(const ConfigValue&, Diagnostics&) override {}
    void bind(BindContext&, Diagnostics&) override {}
    void on_events(std::span<Event* const> events) noexcept override {
      seen += events.size();
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    std::uint64_t seen = 0;
  };
  const std::vector<ProbeInfo> probes = enter_exit_probes();
  std::string text;
  Sink sink = Sink::to_string(&text);
  Pipeline pipeline(sink);
  Diagnostics diags;
  // The slow stage first: latency (which orders the pipeline) hands on only the exits.
  auto slow = std::make_unique<Slow>();
  const Slow& s = *slow;
  pipeline.add(std::move(slow), "slow", {});
  add_latency(pipeline, diags);
  pipeline.bind(probes, diags);
  ASSERT_TRUE(diags.empty()) << diags.format();
  ASSERT_TRUE(pipeline.ordered());
  pipeline.start(std::chrono::nanoseconds(0));
  // 40 batches of the merge's 512 at 25 ms each: a second of work for a 200 ms stop.
  constexpr std::uint64_t kRecords = std::uint64_t{40} * 512;
  std::uint64_t t = 100;
  Records entries, exits;
  for (std::uint64_t i = 0; i < kRecords / 2; ++i) {
    entries.event(probes[0], {}, 10, 10, t += 10, 0);
    exits.event(probes[1], {}, 10, 10, t += 10, 1);
  }
  pipeline.on_batch(entries.batch());
  pipeline.on_batch(exits.batch());
  EXPECT_TRUE(pipeline.warnings().empty());
  pipeline.stop(std::chrono::nanoseconds(t));
  std::uint64_t unprocessed = 0;
  for (const auto& [name, value] : pipeline.counters()) {
    if (name == "order.unprocessed")
      unprocessed = value;
  }
  EXPECT_GT(unprocessed, 0U);
  EXPECT_GT(s.seen, 0U);
  EXPECT_EQ(s.seen + unprocessed, kRecords);
  const auto warnings = pipeline.warnings();
  ASSERT_FALSE(warnings.empty());
  EXPECT_EQ(warnings.front().rfind(std::to_string(unprocessed) +
                                       " records were still queued for the stages when the "
                                       "stop's time (200 ms) ran out",
                                   0),
            0U)
      << warnings.front();
  EXPECT_TRUE(pipeline.take_warnings().empty()) << "said once, in warnings()";
}

// comm at event time: a sample before a COMM record keeps the old name, one after gets the new
// one, even within one batch; a forked child inherits its parent's name; tid 0 is swapper.
TEST(Reorder, CommIsTheNameAtTheEventsTime) {
  const std::vector<ProbeInfo> probes = {testing::fake_probe(0, "p")};
  std::string text;
  Sink sink = Sink::to_string(&text);
  Pipeline pipeline(sink, {.comm = {.read_proc = false}});
  Diagnostics diags;
  pipeline.add(stage_registry(), "print",
               testing::cv_table({{"format", testing::cv("{tid} {comm} {nr}")}}), diags);
  pipeline.bind(probes, diags);
  ASSERT_TRUE(diags.empty()) << diags.format();
  pipeline.start(std::chrono::nanoseconds(0));
  Records recs;
  recs.comm(probes[0], 7, 7, "bash");
  recs.event(probes[0], ev(1), 7, 7, 100);
  recs.comm(probes[0], 7, 7, "python3");
  recs.event(probes[0], ev(2), 7, 7, 300);
  recs.event(probes[0], ev(3), 0, 0, 400);
  pipeline.on_batch(recs.batch());
  pipeline.stop(std::chrono::nanoseconds(1000));
  EXPECT_NE(text.find("7 bash 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("7 python3 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("0 swapper 3\n"), std::string::npos) << text;
}

}  // namespace
}  // namespace tracer
