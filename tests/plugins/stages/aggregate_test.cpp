// The aggregations' fixed-width keys (FixedKey, FixedKeyIndex, KeyedStates by FixedKey) against
// the encoded path (set_fixed_keys_enabled(false)): the same tables from the same events, kernel
// rows and intervals, with the keys' types kept.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "plugins/stages/aggregate.hpp"
#include "plugins/stages/scalar.hpp"
#include "support/stage_batches.hpp"
#include "tracer/ext/stages.hpp"

namespace tracer::stages {
namespace {

using namespace std::chrono_literals;
using testing::cv;
using testing::cv_list;
using testing::cv_table;
using testing::fake_probe;
using testing::FakeEvent;
using testing::Records;

// ---------------------------------------------------------------------------------------------
// FixedKey and FixedKeyIndex

FixedKey key_of(std::initializer_list<Value> values) {
  FixedKey k;
  std::size_t i = 0;
  for (const Value& v : values)
    EXPECT_TRUE(k.set(i++, v));
  return k;
}

TEST(FixedKeyIndex, GrowsPastItsInitialSizeAndFindsEveryKey) {
  FixedKeyIndex index;
  std::vector<FixedKey> keys;
  for (std::uint32_t i = 0; i < 5000; ++i) {
    // pid-like values (negative ones too) and a small second field: many near-collisions.
    keys.push_back(key_of({std::int64_t{i * 7919LL - 20000}, std::uint64_t{i % 3}}));
    ASSERT_EQ(index.find(keys.back()), FixedKeyIndex::kAbsent) << i;
    index.insert(keys.back(), i);
  }
  EXPECT_EQ(index.size(), 5000u);
  EXPECT_GE(index.capacity(), 2 * index.size());  // at most half full
  for (std::uint32_t i = 0; i < keys.size(); ++i)
    ASSERT_EQ(index.find(keys[i]), i);
  EXPECT_EQ(index.find(keys[17]), 17u);  // the last key found, again
}

TEST(FixedKeyIndex, TypesAndLengthsKeepKeysApart) {
  FixedKeyIndex index;
  const FixedKey minus_one = key_of({std::int64_t{-1}});
  const FixedKey all_ones = key_of({std::numeric_limits<std::uint64_t>::max()});
  const FixedKey missing = key_of({Value{}});
  const FixedKey none = key_of({});
  const FixedKey zero = key_of({std::int64_t{0}});
  const FixedKey zero_zero = key_of({std::int64_t{0}, std::int64_t{0}});
  index.insert(minus_one, 0);
  EXPECT_EQ(index.find(all_ones), FixedKeyIndex::kAbsent);  // same bits, unsigned
  index.insert(all_ones, 1);
  for (const FixedKey* k : {&missing, &none, &zero, &zero_zero})
    EXPECT_EQ(index.find(*k), FixedKeyIndex::kAbsent);
  index.insert(none, 2);
  index.insert(zero, 3);
  index.insert(missing, 4);
  index.insert(zero_zero, 5);
  EXPECT_EQ(index.find(minus_one), 0u);
  EXPECT_EQ(index.find(all_ones), 1u);
  EXPECT_EQ(index.find(none), 2u);
  EXPECT_EQ(index.find(zero), 3u);
  EXPECT_EQ(index.find(missing), 4u);
  EXPECT_EQ(index.find(zero_zero), 5u);
}

// What does not fit four words refuses: a double, a stack, a string past 16 bytes, a fourth
// field's word or a string's second; a short string fits in two.
// max_keys in user space: keys past the limit share one spill state (never a row) whose events
// are reported; an interval's reset keeps a small key set and lets a large one go.
TEST(KeyedStatesLimit, KeysPastTheLimitSpillAndAreCountedByEvents) {
  struct State {
    std::uint64_t count = 0;
  };
  KeyedStates<State> states;
  states.limit(4);
  const auto make = [] { return State{}; };
  for (std::uint64_t k = 0; k < 10; ++k) {
    FixedKey key;
    ASSERT_TRUE(key.set(0, Value{static_cast<std::int64_t>(k)}));
    states.get(key, make).count += 3;
    states.get(std::string("s") + std::to_string(k), make).count += 1;
  }
  EXPECT_EQ(states.size(), 4U);
  // 2 fixed keys and 2 string keys fit; the other 8 + 8 calls spilled.
  EXPECT_EQ(states.dropped(), 8U * 3 + 8U * 1);
  states.reset([](State& s) { s = State{}; });  // 4 keys > half the limit: they go
  EXPECT_EQ(states.size(), 0U);
  states.get(std::string("a"), make).count = 1;
  states.reset([](State& s) { s = State{}; });  // 1 key: kept, zeroed
  EXPECT_EQ(states.size(), 1U);
  EXPECT_EQ(states.state(0).count, 0U);
}

TEST(FixedKey, RefusesWhatDoesNotFit) {
  FixedKey k;
  EXPECT_FALSE(k.set(0, Value{1.5}));
  EXPECT_FALSE(k.set(0, Value{IpList{}}));
  EXPECT_FALSE(k.set(0, Value{std::string_view("seventeen-bytes-x")}));
  EXPECT_TRUE(k.set(0, Value{std::string_view("sixteen-bytes-xx")}));
  EXPECT_TRUE(k.set(1, Value{std::int64_t{1}}));
  EXPECT_FALSE(k.set(2, Value{std::string_view("a")})) << "a string past the fourth word";
  EXPECT_TRUE(k.set(2, Value{std::uint64_t{2}}));
  FixedKey four;
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_TRUE(four.set(i, Value{std::int64_t{1}}));
  FixedKey strings;
  EXPECT_TRUE(strings.set(0, Value{std::string_view("bash")}));
  EXPECT_TRUE(strings.set(1, Value{std::string_view("")}));
}

TEST(FixedKey, EncodesAsKeyEncoderDoes) {
  const std::vector<std::vector<Value>> tuples = {
      {},
      {std::int64_t{-5}},
      {std::numeric_limits<std::uint64_t>::max()},
      {Value{}, std::int64_t{7}},
      {std::int64_t{1234}, std::uint64_t{3},
       std::int64_t{std::numeric_limits<std::int64_t>::min()}},
      {std::string_view("bash"), std::int64_t{42}},
      {std::string_view(""), std::string_view("sixteen-bytes-xx")},
      {std::int64_t{-1}, std::string_view("a\0b", 3), Value{}},
  };
  for (const auto& t : tuples) {
    KeyEncoder enc;
    FixedKey k;
    for (std::size_t i = 0; i < t.size(); ++i) {
      enc.add(t[i]);
      ASSERT_TRUE(k.set(i, t[i]));
    }
    EXPECT_EQ(encode_fixed(k), enc.bytes());
  }
  const auto cells = decode_key(
      encode_fixed(key_of({std::int64_t{-5}, std::numeric_limits<std::uint64_t>::max(), Value{}})));
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(std::get<std::int64_t>(cells[0]), -5);
  EXPECT_EQ(std::get<std::uint64_t>(cells[1]), std::numeric_limits<std::uint64_t>::max());
  EXPECT_TRUE(std::holds_alternative<std::monostate>(cells[2]));
}

// ---------------------------------------------------------------------------------------------
// Stages: the fixed-width path and the encoded path on the same input

// The fake format with `nr` a char array: a probe where a `by` field that is an int elsewhere
// gives strings.
constexpr std::string_view kStringNrFormat =
    "name: fake_event\n"
    "ID: 901\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:char nr[4];\toffset:8;\tsize:4;\tsigned:0;\n"
    "\tfield:long bytes;\toffset:16;\tsize:8;\tsigned:1;\n"
    "\n"
    "print fmt: \"nr=%s\", REC->nr\n";
// Without `nr`: its events have no value for it.
constexpr std::string_view kNoNrFormat =
    "name: fake_event\n"
    "ID: 902\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:long bytes;\toffset:16;\tsize:8;\tsigned:1;\n"
    "\n"
    "print fmt: \"bytes=%ld\", REC->bytes\n";

ProbeInfo probe_with(std::uint32_t index, std::string name, std::string_view format) {
  ProbeInfo p = fake_probe(index, std::move(name));
  p.format = *tracefs::parse_format(format, "fake", "fake_event");
  return p;
}

// One aggregation stage, bound against `probes`, fed events directly.
class StageRun {
 public:
  StageRun(std::vector<ProbeInfo> probes, std::string_view use, ConfigTable options, bool fixed)
      : probes_(std::move(probes)), schema_(probes_, {}, comm_) {
    set_fixed_keys_enabled(fixed);
    stage_ = stage_registry().make(use);
    stage_->configure(cv_table(std::move(options)), diags_);
    BindContext ctx{.schema = schema_, .out = sink_};
    stage_->bind(ctx, diags_);
    set_fixed_keys_enabled(true);
    EXPECT_TRUE(diags_.empty()) << diags_.format();
  }
  void feed(const Records& r) {
    std::vector<Event> events(r.size());
    std::vector<Event*> ptrs;
    for (std::size_t i = 0; i < r.size(); ++i) {
      const RecordRef& ref = r.refs()[i];
      events[i] = Event{.ref = &ref,
                        .sample = std::get_if<perf::Sample>(&ref.record.body),
                        .kind = RecordKind::kSample};
      ptrs.push_back(&events[i]);
    }
    stage_->on_events(ptrs);
  }
  /// The samples in place, in batches of 256 as the engine hands them on (the stage takes
  /// each probe's samples in place).
  void feed_in_place(std::span<const InPlaceSample> samples) {
    InPlace* in_place = stage_->in_place();
    ASSERT_NE(in_place, nullptr);
    for (const auto& s : samples)
      ASSERT_TRUE(in_place->takes(s.probe())) << s.probe();
    for (std::size_t i = 0; i < samples.size(); i += 256)
      in_place->on_samples(samples.subspan(i, std::min<std::size_t>(256, samples.size() - i)));
  }
  Table snapshot(bool reset, std::chrono::nanoseconds since, std::chrono::nanoseconds time) {
    Table t;
    t.since = since;
    t.time = time;
    stage_->aggregation()->snapshot(t, reset);
    return t;
  }
  Stage& stage() { return *stage_; }

 private:
  std::vector<ProbeInfo> probes_;
  CommCache comm_{{.capacity = 16, .proc_root = "/nonexistent", .read_proc = false}};
  Schema schema_;
  std::string out_;
  Sink sink_ = Sink::to_string(&out_);
  Diagnostics diags_;
  std::unique_ptr<Stage> stage_;
};

// Tables equal cell for cell, types included (std::variant's == compares the alternative).
void expect_same(const Table& a, const Table& b) {
  EXPECT_EQ(a.title, b.title);
  EXPECT_EQ(a.key_names, b.key_names);
  EXPECT_EQ(a.value_names, b.value_names);
  ASSERT_EQ(a.rows.size(), b.rows.size()) << a.title;
  for (std::size_t i = 0; i < a.rows.size(); ++i) {
    EXPECT_TRUE(a.rows[i].keys == b.rows[i].keys) << a.title << " row " << i;
    EXPECT_TRUE(a.rows[i].values == b.rows[i].values) << a.title << " row " << i;
    ASSERT_EQ(a.rows[i].buckets.size(), b.rows[i].buckets.size()) << a.title << " row " << i;
    for (std::size_t j = 0; j < a.rows[i].buckets.size(); ++j) {
      EXPECT_EQ(a.rows[i].buckets[j].label, b.rows[i].buckets[j].label);
      EXPECT_EQ(a.rows[i].buckets[j].count, b.rows[i].buckets[j].count);
    }
  }
}

// The events a count's table holds, all rows together.
std::uint64_t total_count(const Table& t) {
  std::uint64_t total = 0;
  for (const auto& row : t.rows)
    total += std::get<std::uint64_t>(row.values[0]);
  return total;
}

FakeEvent fake(std::int32_t nr, std::int64_t bytes, std::uint64_t arg0 = 0) {
  FakeEvent e;
  e.nr = nr;
  e.path = "/";
  e.bytes = bytes;
  e.name = "n";
  e.args[0] = arg0;
  return e;
}

// 3000 threads (well past the index's initial 64 slots) on 8 CPUs, thread i with i % 13 + 1
// events, nr and bytes negative for some.
Records many_keys(const ProbeInfo& p) {
  Records r;
  for (std::uint32_t i = 0; i < 3000; ++i) {
    for (std::uint32_t n = 0; n <= i % 13; ++n) {
      const auto nr = static_cast<std::int32_t>(i % 50) - 25;
      r.event(p, fake(nr, (static_cast<std::int64_t>(n) * 37) - 100, std::uint64_t{i} * 11),
              100 + i, 100 + i, (std::uint64_t{i} * 16) + n,
              static_cast<std::int32_t>((i + n) % 8));
    }
  }
  return r;
}

struct Case {
  std::string use;
  ConfigTable options;
};

std::vector<Case> cases() {
  return {
      {"count", {}},
      {"count", {{"by", cv_list({"pid"})}}},
      {"count", {{"by", cv_list({"pid", "cpu"})}}},
      {"count", {{"by", cv_list({"pid", "cpu"})}, {"top", cv(10)}}},
      {"count", {{"by", cv_list({"nr", "args[0]", "cpu"})}}},
      {"rate", {{"by", cv_list({"tid"})}}},
      {"sum", {{"field", cv("bytes")}, {"by", cv_list({"nr"})}}},
      {"min", {{"field", cv("bytes")}, {"by", cv_list({"cpu", "nr"})}}},
      {"max", {{"field", cv("bytes")}, {"by", cv_list({"pid"})}}},
      {"avg", {{"field", cv("bytes")}, {"by", cv_list({"cpu"})}}},
      {"hist", {{"field", cv("bytes")}, {"by", cv_list({"pid"})}}},
      {"lhist",
       {{"field", cv("bytes")},
        {"min", cv(-100)},
        {"max", cv(400)},
        {"step", cv(50)},
        {"by", cv_list({"cpu"})}}},
      {"quantiles", {{"field", cv("bytes")}, {"by", cv_list({"nr", "cpu"})}}},
      {"stats", {{"field", cv("bytes")}, {"by", cv_list({"pid", "cpu"})}}},
      {"count", {{"by", cv_list({"pid", "name"})}}},   // a short string: two words of the key
      {"count", {{"by", cv_list({"name", "path"})}}},  // two strings: four words
      {"count", {{"by", cv_list({"pid", "tid", "cpu", "nr"})}}},  // four: encoded in both
  };
}

TEST(AggregateFixedKeys, ChosenAtBindForAtMostThreeIntegerFields) {
  struct Exposed : Count {
    using AggregateStage::fixed_keys_;
  };
  const ProbeInfo p = fake_probe(0, "p");
  CommCache comm({.capacity = 16, .proc_root = "/nonexistent", .read_proc = false});
  Schema schema(std::span(&p, 1), {}, comm);
  std::string out;
  Sink sink = Sink::to_string(&out);
  const auto fixed_with = [&](std::vector<std::string> by, bool enabled = true) {
    Exposed s;
    Diagnostics d;
    s.configure(cv_table({{"by", cv_list(std::move(by))}}), d);
    set_fixed_keys_enabled(enabled);
    BindContext ctx{.schema = schema, .out = sink};
    s.bind(ctx, d);
    set_fixed_keys_enabled(true);
    EXPECT_TRUE(d.empty()) << d.format();
    return s.fixed_keys_;
  };
  EXPECT_TRUE(fixed_with({}));
  EXPECT_TRUE(fixed_with({"pid"}));
  EXPECT_TRUE(fixed_with({"pid", "cpu", "args[0]"}));
  EXPECT_FALSE(fixed_with({"pid"}, false));
  EXPECT_TRUE(fixed_with({"pid", "name"}));  // a string field: short values fit (FixedKey::set)
  EXPECT_TRUE(fixed_with({"comm", "pid"}));
  EXPECT_FALSE(fixed_with({"time", "pid", "tid", "cpu"}));
}

TEST(AggregateFixedKeys, SameTablesAsTheEncodedPath) {
  const ProbeInfo p = fake_probe(0, "p");
  const Records r = many_keys(p);
  for (const Case& c : cases()) {
    StageRun fixed({p}, c.use, c.options, true);
    StageRun encoded({p}, c.use, c.options, false);
    fixed.feed(r);
    encoded.feed(r);
    const Table a = fixed.snapshot(false, 0s, 2s);
    const Table b = encoded.snapshot(false, 0s, 2s);
    EXPECT_FALSE(a.rows.empty()) << a.title;
    expect_same(a, b);
  }
}

// Strings in fixed keys: up to 16 bytes they are two words of the key (their length in its type
// byte), longer ones and keys past four words take the encoded path; either way the table is
// the encoded path's, row for row, and no key is split between the two forms. Lengths around
// every boundary, NULs inside, and a string beside integers.
TEST(AggregateFixedKeys, StringKeysOfEveryLengthGiveTheEncodedTable) {
  const ProbeInfo p = fake_probe(0, "p");
  Records r;
  std::vector<std::string> paths = {"",
                                    "a",
                                    std::string("a\0b", 3),
                                    std::string(7, 'x'),
                                    std::string(8, 'x'),
                                    std::string(15, 'y'),
                                    std::string(16, 'y'),
                                    std::string(17, 'y'),
                                    std::string(16, 'y') + "z",
                                    std::string(40, 'q')};
  for (std::uint32_t i = 0; i < 400; ++i) {
    FakeEvent e = fake(static_cast<std::int32_t>(i % 3), 1);
    e.path = paths[i % paths.size()];
    e.name = i % 2 == 0 ? "sshd" : "a-name-of-15-ch";
    r.event(p, e, 100 + (i % 4), 100 + (i % 4), i);
  }
  for (const auto& by : std::vector<std::vector<std::string>>{{"path"},
                                                              {"path", "pid"},
                                                              {"name", "path"},
                                                              {"pid", "name", "nr"},
                                                              {"name", "path", "nr"}}) {
    StageRun fixed({p}, "count", {{"by", cv_list(by)}}, true);
    StageRun encoded({p}, "count", {{"by", cv_list(by)}}, false);
    fixed.feed(r);
    encoded.feed(r);
    const Table a = fixed.snapshot(false, 0s, 1s);
    expect_same(a, encoded.snapshot(false, 0s, 1s));
    EXPECT_EQ(total_count(a), 400U) << by.front();
  }
}

TEST(AggregateFixedKeys, SignedAndUnsignedKeysKeepTheirTypes) {
  const ProbeInfo p = fake_probe(0, "p");
  Records r;
  // nr -1 (int) and args[0] with the same 64 bits (uint): as keys, neither becomes the other.
  r.event(p, fake(-1, 0, ~0ULL), 1, 1, 1);
  r.event(p, fake(-1, 0, ~0ULL), 1, 1, 2);
  r.event(p, fake(5, 0, 5), 1, 1, 3);
  for (const bool fixed : {true, false}) {
    StageRun run({p}, "count", {{"by", cv_list({"nr", "args[0]"})}}, fixed);
    run.feed(r);
    const Table t = run.snapshot(false, 0s, 1s);
    ASSERT_EQ(t.rows.size(), 2u);
    EXPECT_EQ(std::get<std::int64_t>(t.rows[0].keys[0]), -1);
    EXPECT_EQ(std::get<std::uint64_t>(t.rows[0].keys[1]), ~0ULL);
    EXPECT_EQ(std::get<std::uint64_t>(t.rows[0].values[0]), 2u);
    EXPECT_EQ(std::get<std::int64_t>(t.rows[1].keys[0]), 5);
    EXPECT_EQ(std::get<std::uint64_t>(t.rows[1].keys[1]), 5u);
  }
}

TEST(AggregateFixedKeys, ProbesThatGiveAStringOrNothingForAnIntField) {
  // `nr` is an int on p, a string on s and absent on q: bound as an int (p comes first), the
  // stage keys s's events by their bytes and q's by a missing value.
  const ProbeInfo p = fake_probe(0, "p");
  const ProbeInfo s = probe_with(1, "s", kStringNrFormat);
  const ProbeInfo q = probe_with(2, "q", kNoNrFormat);
  Records r;
  for (int i = 0; i < 3; ++i) {
    r.event(p, fake(65, 1), 1, 1, 1);
    r.event(s, fake(65, 1), 1, 1, 1);  // "A"
    r.event(q, fake(65, 1), 1, 1, 1);
  }
  r.event(p, fake(66, 1), 1, 1, 1);
  const std::vector<ProbeInfo> probes = {p, s, q};
  StageRun fixed(probes, "count", {{"by", cv_list({"nr", "cpu"})}}, true);
  StageRun encoded(probes, "count", {{"by", cv_list({"nr", "cpu"})}}, false);
  fixed.feed(r);
  encoded.feed(r);
  const Table a = fixed.snapshot(false, 0s, 1s);
  expect_same(a, encoded.snapshot(false, 0s, 1s));
  ASSERT_EQ(a.rows.size(), 4u);  // ties (3 each) in the order of their key text
  EXPECT_EQ(a.rows[0].keys[0], Cell{std::monostate{}});
  EXPECT_EQ(a.rows[1].keys[0], Cell{std::int64_t{65}});
  EXPECT_EQ(a.rows[2].keys[0], Cell{std::string("A")});
  EXPECT_EQ(a.rows[3].keys[0], Cell{std::int64_t{66}});
}

// Keys read in place (count_runs: a header word alone, keys laid out word by word, integer
// words with a missing field, the cursor's layout for keys a missing string or two strings
// shape) give the table of the same events as Events, for runs of every length and probes that
// lack a field or give a string for an int; and short records (RAW cut before a field) give
// the encoded path's table read in place.
TEST(AggregateFixedKeys, InPlaceRunsGiveTheEventsTable) {
  const ProbeInfo p = fake_probe(0, "p");
  const ProbeInfo s = probe_with(1, "s", kStringNrFormat);
  const ProbeInfo q = probe_with(2, "q", kNoNrFormat);
  const std::vector<ProbeInfo> probes = {p, s, q};
  std::mt19937 rng(11);
  Records r;
  const std::vector<std::string> names = {"", "a", "sshd", std::string(15, 'n'),
                                          std::string(16, 'x')};
  for (int run = 0; run < 600; ++run) {  // runs of 1..12 events of one key
    const ProbeInfo& probe = probes[rng() % 10 < 7 ? 0 : 1 + (rng() % 2)];
    FakeEvent e = fake(static_cast<std::int32_t>(rng() % 4), 1);
    e.name = names[rng() % names.size()];
    e.path = rng() % 2 == 0 ? "/a" : std::string(20, 'p');
    const std::uint32_t pid = 100 + (rng() % 5);
    const auto cpu = static_cast<std::int32_t>(rng() % 2);
    for (unsigned n = 1 + (rng() % 12); n != 0; --n)
      r.event(probe, e, pid, pid, 1, cpu);
  }
  std::vector<InPlaceSample> whole, cut;
  for (std::size_t i = 0; i < r.size(); ++i) {
    whole.push_back(r.in_place(i));
    // Every 7th record's RAW cut inside `name` (offset 24): its name and args are missing.
    cut.push_back(i % 7 == 0 ? r.in_place(i, 30) : r.in_place(i));
  }
  for (const auto& by : std::vector<std::vector<std::string>>{{"pid"},
                                                              {"cpu"},
                                                              {"pid", "cpu"},
                                                              {"nr", "cpu"},
                                                              {"name"},
                                                              {"name", "pid"},
                                                              {"pid", "name", "cpu"},
                                                              {"nr", "name"},
                                                              {"name", "tid", "nr"},
                                                              {"name", "name", "pid"}}) {
    SCOPED_TRACE(by.front() + (by.size() > 1 ? "," + by[1] : ""));
    StageRun events(probes, "count", {{"by", cv_list(by)}}, true);
    StageRun in_place(probes, "count", {{"by", cv_list(by)}}, true);
    events.feed(r);
    in_place.feed_in_place(whole);
    const Table a = in_place.snapshot(false, 0s, 1s);
    expect_same(a, events.snapshot(false, 0s, 1s));
    EXPECT_EQ(total_count(a), r.size());
    StageRun fixed_cut(probes, "count", {{"by", cv_list(by)}}, true);
    StageRun encoded_cut(probes, "count", {{"by", cv_list(by)}}, false);
    fixed_cut.feed_in_place(cut);
    encoded_cut.feed_in_place(cut);
    expect_same(fixed_cut.snapshot(false, 0s, 1s), encoded_cut.snapshot(false, 0s, 1s));
  }
}

TEST(AggregateFixedKeys, EveryIntervalResetsTheSameWay) {
  const ProbeInfo p = fake_probe(0, "p");
  const Records first = many_keys(p);
  Records second;
  for (std::uint32_t i = 2990; i < 3100; ++i)  // 10 keys seen before, 100 new ones
    second.event(p, fake(1, 1), 100 + i, 100 + i, i, 1);
  for (const char* use : {"count", "hist"}) {
    ConfigTable options = {{"by", cv_list({"pid", "cpu"})}};
    if (std::string_view(use) == "hist")
      options.emplace_back("field", cv("bytes"));
    StageRun fixed({p}, use, options, true);
    StageRun encoded({p}, use, options, false);
    fixed.feed(first);
    encoded.feed(first);
    expect_same(fixed.snapshot(true, 0s, 1s), encoded.snapshot(true, 0s, 1s));
    expect_same(fixed.snapshot(true, 1s, 2s), encoded.snapshot(true, 1s, 2s));  // quiet
    EXPECT_TRUE(fixed.snapshot(true, 1s, 2s).rows.empty());
    fixed.feed(second);
    encoded.feed(second);
    const Table a = fixed.snapshot(true, 2s, 3s);
    expect_same(a, encoded.snapshot(true, 2s, 3s));
    EXPECT_EQ(a.rows.size(), 110u);
  }
}

TEST(AggregateFixedKeys, KernelRowsLandInTheStatesOfTheSameKeys) {
  // Placed in the kernel: rows absorbed at each read, and events of the same keys (a run that
  // fell back, or a replay) add to the same rows; a kernel run with max_keys = 16 hands on the
  // 16 rows that fit (the others are the probe's lost, not the stage's).
  const ProbeInfo p = fake_probe(0, "p");
  std::vector<KernelRow> rows;
  for (std::int64_t pid = 100; pid < 116; ++pid) {
    // The value as the scalar stages' kernel part lays it out: the events, then the sum.
    KernelRow row;
    row.keys = {pid, std::int64_t{pid % 2}};
    const std::array<std::int64_t, 2> value{pid, -pid};
    row.bytes.resize(sizeof value);
    std::memcpy(row.bytes.data(), value.data(), sizeof value);
    row.stride = sizeof value;
    row.values = 1;
    rows.push_back(row);
  }
  Records r;
  for (std::uint32_t pid = 110; pid < 120; ++pid)
    r.event(p, fake(0, 3), pid, pid, pid, static_cast<std::int32_t>(pid % 2));
  for (const char* use : {"count", "sum"}) {
    ConfigTable options = {{"by", cv_list({"pid", "cpu"})}, {"max_keys", cv(16)}};
    if (std::string_view(use) == "sum")
      options.emplace_back("field", cv("bytes"));
    StageRun fixed({p}, use, options, true);
    StageRun encoded({p}, use, options, false);
    EXPECT_EQ(kernel_form_of(fixed.stage()).max_keys, 16u);
    EXPECT_EQ(kernel_form_of(encoded.stage()).max_keys, 16u);
    for (StageRun* run : {&fixed, &encoded}) {
      run->stage().in_kernel()->absorb(rows);
      run->feed(r);
      run->stage().in_kernel()->absorb(rows);
    }
    const Table a = fixed.snapshot(false, 0s, 1s);
    expect_same(a, encoded.snapshot(false, 0s, 1s));
    EXPECT_EQ(a.rows.size(), 20u) << use;  // 100..119: pids 110..115 merged, not doubled
    if (std::string_view(use) == "count") {
      const auto it = std::find_if(a.rows.begin(), a.rows.end(), [](const TableRow& row) {
        return row.keys[0] == Cell{std::int64_t{112}};
      });
      ASSERT_NE(it, a.rows.end());
      EXPECT_EQ(std::get<std::uint64_t>(it->values[0]), 2 * 112u + 1);
    }
  }
}

}  // namespace
}  // namespace tracer::stages
