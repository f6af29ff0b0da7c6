// The stage API against hand-built batches: the registry, options, field binding, the comm
// cache, record routing, undecoded samples, an embedder's stage, and an allocation-free steady
// state.
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
#include "support/scratch_path.hpp"
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
// Registry and options

TEST(StageRegistry, BuiltinsAreListedOnceWithSpecs) {
  auto reg = builtin_stage_registry();
  for (std::string_view name :
       {"filter",    "count",      "sum",     "min",     "max",      "avg",  "hist",    "lhist",
        "quantiles", "rate",       "latency", "print",   "jsonl",    "csv",  "bpf-map", "perf-data",
        "folded",    "flamegraph", "plugin",  "perfmon", "counters", "otlp", "stats"}) {
    EXPECT_NE(reg.find(name), nullptr) << name;
    EXPECT_NE(reg.make(name), nullptr) << name;
  }
  EXPECT_EQ(reg.specs().size(), 23u);
  const StageSpec* count = reg.find("count");
  ASSERT_NE(count, nullptr);
  std::map<std::string, OptionSpec::Type> types;
  for (const auto& o : count->options)
    types[o.name] = o.type;
  EXPECT_EQ(types.at("by"), OptionSpec::Type::kFieldList);
  EXPECT_EQ(types.at("top"), OptionSpec::Type::kInt);
  EXPECT_EQ(types.at("every"), OptionSpec::Type::kDuration);
  EXPECT_EQ(reg.make("nope"), nullptr);
  EXPECT_EQ(reg.suggest("cont"), "count");
}

TEST(StageRegistry, EmbedderStagesAndDuplicates) {
  auto reg = builtin_stage_registry();
  struct Mine : Stage {
    void configure(const ConfigValue&, Diagnostics&) override {}
    void bind(BindContext&, Diagnostics&) override {}
    void on_events(std::span<Event* const>) noexcept override {}
  };
  reg.register_stage({.name = "mine", .summary = "x", .options = {}},
                     [] { return std::make_unique<Mine>(); });
  EXPECT_NE(reg.make("mine"), nullptr);
  EXPECT_THROW(reg.register_stage({.name = "count", .summary = "", .options = {}},
                                  [] { return std::make_unique<Mine>(); }),
               Error);
}

// What is fixed per stage type is declared in its spec (StageSpec::needs); the roles are reached
// through the capability accessors.
TEST(StageRegistry, NeedsAndRolesAreDeclaredPerStageType) {
  const auto& reg = stage_registry();
  const KindMask samples = kind_bit(RecordKind::kSample);
  for (std::string_view name : {"filter", "count", "hist", "print", "jsonl", "csv"}) {
    EXPECT_EQ(reg.find(name)->needs.kinds, samples) << name;  // `kinds` options decide at bind
    EXPECT_FALSE(reg.find(name)->needs.time_order) << name;   // outputs: per-event, at bind
  }
  EXPECT_EQ(reg.find("perf-data")->needs.kinds, kAllKinds);
  EXPECT_TRUE(reg.find("perf-data")->needs.task_records);
  EXPECT_EQ(reg.find("bpf-map")->needs.kinds, 0u);
  EXPECT_TRUE(reg.find("latency")->needs.time_order);

  for (std::string_view name : {"count", "sum", "hist", "lhist", "quantiles", "rate", "bpf-map"}) {
    auto st = reg.make(name);
    EXPECT_NE(st->aggregation(), nullptr) << name;
    EXPECT_EQ(st->output(), nullptr) << name;
  }
  for (std::string_view name : {"print", "jsonl", "csv"}) {
    auto st = reg.make(name);
    EXPECT_EQ(st->aggregation(), nullptr) << name;
    ASSERT_NE(st->output(), nullptr) << name;
    EXPECT_TRUE(st->output()->takes_tables()) << name;
  }
  auto perf_data = reg.make("perf-data");
  ASSERT_NE(perf_data->output(), nullptr);
  EXPECT_FALSE(perf_data->output()->takes_tables());  // records only
  for (std::string_view name : {"filter", "latency"}) {
    auto st = reg.make(name);
    EXPECT_EQ(st->aggregation(), nullptr) << name;
    EXPECT_EQ(st->output(), nullptr) << name;
  }
}

TEST(StageOptions, UnknownWrongTypeAndMissingWithPositions) {
  Harness h({fake_probe(0, "p")});
  h.add("hist", {{"bye", cv_list({"comm"}, 3)}, {"top", cv("ten", 4, 7)}});
  const auto& items = h.diags.items();
  ASSERT_EQ(items.size(), 3u) << h.errors();
  EXPECT_EQ(items[0].message, "unknown option 'bye' for stage 'hist'");
  EXPECT_EQ(items[0].where.line, 3u);
  EXPECT_THAT(items[0].hint, HasSubstr("did you mean 'by'?"));
  EXPECT_EQ(items[1].message,
            "wrong type for option 'top' of stage 'hist': expected integer, got string");
  EXPECT_EQ(items[1].hint, "write top = 10");
  EXPECT_EQ(items[1].where.line, 4u);
  EXPECT_EQ(items[1].where.column, 7u);
  EXPECT_EQ(items[2].message, "stage 'hist' needs option 'field'");
}

// The recipe loader and StageOptions share one validator: one message for one mistake.
TEST(StageOptions, SameDiagnosticsAsTheRecipeLoader) {
  const std::string text =
      "[recipe]\nname = \"x\"\n[[probe]]\nname = \"p\"\nsoftware = \"cpu-clock\"\n"
      "[[stage]]\nuse = \"hist\"\ntop = 1.5\nbye = [\"comm\"]\nevery = \"soon\"\n";
  std::string loader;
  try {
    (void)Recipe::load_string(text, "r.toml", {.sets = {}, .stages = stage_catalog()});
  } catch (const Error& e) {
    loader = e.what();
  }
  ASSERT_THAT(loader, HasSubstr("r.toml:8:7: wrong type for option 'top' of stage 'hist': "
                                "expected integer, got float\n  hint: write top = 10"));
  // Without the catalog the loader leaves the options to the stage.
  const Recipe unchecked = Recipe::load_string(text, "r.toml");
  Diagnostics diags;
  const StageSpec* hist = nullptr;
  for (const auto* spec : stage_registry().specs()) {
    if (spec->name == "hist")
      hist = spec;
  }
  ASSERT_NE(hist, nullptr);
  const StageOptions opts(*hist, unchecked.pipelines.at(0).stages.at(0).options, diags);
  EXPECT_EQ(diags.format(), loader + "\n");
}

TEST(StageOptions, BadDurationAndUnknownStage) {
  Harness h({fake_probe(0, "p")});
  h.add("count", {{"every", cv("soon", 2, 9)}});
  h.add("coutn", {});
  ASSERT_EQ(h.diags.items().size(), 2u) << h.errors();
  EXPECT_EQ(h.diags.items()[0].where.line, 2u);
  EXPECT_THAT(h.diags.items()[0].message, HasSubstr("option 'every'"));
  EXPECT_EQ(h.diags.items()[1].message, "unknown stage 'coutn'");
  EXPECT_EQ(h.diags.items()[1].hint, "did you mean 'count'?");
}

// ---------------------------------------------------------------------------------------------
// Field binding

TEST(FieldRef, SampleTracefsArrayAndUnknownFields) {
  const ProbeInfo p = fake_probe(0, "openat", PERF_SAMPLE_IP | PERF_SAMPLE_CALLCHAIN);
  CommCache comm({.capacity = 16, .proc_root = "/nonexistent", .read_proc = true});
  Schema schema(std::span(&p, 1), {}, comm);
  Diagnostics d;
  Records r;
  testing::SampleSpec s;
  s.pid = 10;
  s.tid = 11;
  s.time = 12345;
  s.ip = 0xffffffff81000000;
  s.callchain = {0xfffffffffffffe00ULL /* PERF_CONTEXT_KERNEL */, 0x1000, 0x2000};
  FakeEvent e = ev(-7, "/etc/passwd", 4096, "worker");
  e.args[0] = 3;
  e.args[1] = 0xdeadbeef;
  s.raw = testing::fake_raw(e);
  r.sample(p, s, 3);
  Event event{.ref = &r.refs()[0],
              .sample = std::get_if<perf::Sample>(&r.refs()[0].record.body),
              .kind = RecordKind::kSample};
  const auto read = [&](std::string_view name) {
    auto f = schema.bind(name, {}, d);
    EXPECT_TRUE(f.has_value()) << name << d.format();
    return f ? f->read(event) : Value{};
  };
  EXPECT_EQ(std::get<std::int64_t>(read("pid")), 10);
  EXPECT_EQ(std::get<std::int64_t>(read("tid")), 11);
  EXPECT_EQ(std::get<std::int64_t>(read("cpu")), 3);
  EXPECT_EQ(std::get<std::uint64_t>(read("time")), 12345u);
  EXPECT_EQ(std::get<std::uint64_t>(read("ip")), 0xffffffff81000000u);
  EXPECT_EQ(std::get<std::string_view>(read("probe")), "openat");
  EXPECT_EQ(std::get<std::int64_t>(read("nr")), -7);
  EXPECT_EQ(std::get<std::string_view>(read("path")), "/etc/passwd");  // __data_loc
  EXPECT_EQ(std::get<std::int64_t>(read("bytes")), 4096);
  EXPECT_EQ(std::get<std::string_view>(read("name")), "worker");  // char[16]
  EXPECT_EQ(std::get<std::uint64_t>(read("args[1]")), 0xdeadbeefu);
  EXPECT_EQ(std::get<IpList>(read("args")).ips.size, 2u);
  EXPECT_EQ(std::get<IpList>(read("callchain")).ips.size, 3u);
  EXPECT_EQ(std::get<std::string_view>(read("comm")), "");  // no COMM, no /proc entry
  EXPECT_TRUE(d.empty());

  EXPECT_FALSE(schema.bind("filenme", {.path = "r.toml", .line = 5, .column = 3}, d));
  EXPECT_FALSE(schema.bind("args[2]", {}, d));  // past the fixed array
  ASSERT_EQ(d.items().size(), 2u);
  EXPECT_EQ(d.items()[0].message, "unknown field 'filenme'");
  EXPECT_EQ(d.items()[0].where.line, 5u);
  EXPECT_THAT(d.items()[0].hint, HasSubstr("probe 'openat' (fake:fake_event) has: pid, tid, comm"));
  EXPECT_THAT(d.items()[0].hint, HasSubstr("nr, path, bytes, name, args"));
  EXPECT_THAT(d.items()[0].hint, Not(HasSubstr("common_pid")));
}

// A char array read as two key words gives read_string()'s bytes zero-padded and its length,
// for every size up to 16, every NUL position, and garbage after the NUL (a tracefs char array
// may hold anything there), in the header and in raw data near its end.
TEST(IntReader, StringWordsAreTheStringZeroPadded) {
  std::mt19937_64 rng(7);
  for (std::uint8_t size = 1; size <= 16; ++size) {
    for (int trial = 0; trial < 2000; ++trial) {
      std::array<std::byte, sizeof(DeliveredHeader) + 16> rec{};
      for (auto& b : rec)  // bytes of every value, NULs among them
        b = static_cast<std::byte>(rng() % 4 == 0 ? 0 : rng() & 0xFF);
      const auto at = static_cast<std::uint32_t>(sizeof(DeliveredHeader) + 16 - size);
      const InPlaceSample s(rec.data(), 0, sizeof(DeliveredHeader), 16);
      const IntReader r{.offset = at, .size = size, .is_string = true};
      std::string_view want;
      ASSERT_TRUE(r.read_string(s, want));
      std::array<std::uint64_t, 2> w{~0ULL, ~0ULL};
      const int len = r.read_string_words(s, w.data());
      ASSERT_EQ(len, static_cast<int>(want.size())) << int{size};
      std::array<char, 16> padded{};
      std::memcpy(padded.data(), want.data(), want.size());
      std::array<std::uint64_t, 2> expect{};
      std::memcpy(expect.data(), padded.data(), 16);
      ASSERT_EQ(w, expect) << "size " << int{size} << " length " << len;
    }
  }
  // Past the end of a short record: no value, as read_string().
  std::array<std::byte, sizeof(DeliveredHeader) + 8> rec{};
  const InPlaceSample s(rec.data(), 0, sizeof(DeliveredHeader), 8);
  const IntReader r{.offset = sizeof(DeliveredHeader), .size = 16, .is_string = true};
  std::array<std::uint64_t, 2> w{};
  EXPECT_EQ(r.read_string_words(s, w.data()), -1);
  EXPECT_EQ(IntReader{}.read_string_words(s, w.data()), -1);
}

TEST(FieldRef, UprobeRegistersAndPayloadSchema) {
#if defined(__x86_64__)
  // rdi (5), rsi (4) and rax (0): the kernel writes registers in bit order: ax, si, di.
  const std::uint64_t mask = (1ULL << 0) | (1ULL << 4) | (1ULL << 5);
  ProbeInfo p = fake_probe(0, "up", PERF_SAMPLE_REGS_USER, mask, ProbeKind::kUprobe);
  p.format.reset();
  const PayloadSchema payload = {
      {.name = "count", .offset = 0, .size = 4, .kind = PayloadField::Kind::kUint},
      {.name = "delta", .offset = 4, .size = 4, .kind = PayloadField::Kind::kInt},
      {.name = "task", .offset = 8, .size = 8, .kind = PayloadField::Kind::kString},
  };
  CommCache comm;
  Schema schema(std::span(&p, 1), std::span(&payload, 1), comm);
  Records r;
  testing::SampleSpec s;
  s.regs_user_abi = 2;  // PERF_SAMPLE_REGS_ABI_64
  s.regs_user = {static_cast<std::uint64_t>(-2), 0x22, 0x11};
  s.raw.resize(16);
  const std::uint32_t count = 9;
  const std::int32_t delta = -3;
  std::memcpy(s.raw.data(), &count, 4);
  std::memcpy(s.raw.data() + 4, &delta, 4);
  std::memcpy(s.raw.data() + 8, "kworker", 7);
  r.sample(p, s);
  Event e{.ref = &r.refs()[0],
          .sample = std::get_if<perf::Sample>(&r.refs()[0].record.body),
          .kind = RecordKind::kSample};
  Diagnostics d;
  EXPECT_EQ(std::get<std::uint64_t>(schema.bind("arg0", {}, d)->read(e)), 0x11u);
  EXPECT_EQ(std::get<std::uint64_t>(schema.bind("arg1", {}, d)->read(e)), 0x22u);
  EXPECT_EQ(std::get<std::int64_t>(schema.bind("retval", {}, d)->read(e)), -2);
  EXPECT_EQ(std::get<std::uint64_t>(schema.bind("count", {}, d)->read(e)), 9u);
  EXPECT_EQ(std::get<std::int64_t>(schema.bind("delta", {}, d)->read(e)), -3);
  EXPECT_EQ(std::get<std::string_view>(schema.bind("task", {}, d)->read(e)), "kworker");
  EXPECT_FALSE(schema.bind("arg2", {}, d));  // rdx not sampled
  EXPECT_EQ(d.items().size(), 1u);
#else
  GTEST_SKIP() << "argument registers are mapped for x86-64 only";
#endif
}

// ---------------------------------------------------------------------------------------------
// comm

TEST(CommCache, FromCommRecordsEvenWithoutCommField) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p}, {.max_events = 512, .comm = {.capacity = 64, .proc_root = "/nonexistent"}});
  h.add("count", {{"by", cv_list({"comm"})}});
  h.bind();
  Records r;
  r.comm(p, 100, 101, "bash");
  r.event(p, ev(1), 100, 101, 1);
  r.event(p, ev(1), 100, 101, 2);
  r.event(p, ev(1), 200, 201, 3);  // no COMM and no /proc entry: ""
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out, "count by comm:\ncomm  count\nbash      2\n          1\n\n") << h.out;
}

// An engine with decode_samples = false hands samples on undecoded: the pipeline decodes them
// with the probe's layout and every stage sees the same fields.
TEST(Pipeline, UndecodedSamplesGiveTheSameResultsAsDecodedOnes) {
  const ProbeInfo p = fake_probe(0, "p");
  const auto run = [&](bool decoded) {
    Harness h({p}, {.max_events = 4, .comm = {.capacity = 64, .proc_root = "/nonexistent"}});
    h.add("filter", {{"expr", cv("nr > 1")}}).add("count", {{"by", cv_list({"comm", "path"})}});
    h.bind();
    EXPECT_EQ(h.errors(), "");
    Records r;
    r.comm(p, 100, 101, "bash");
    for (int i = 0; i < 10; ++i)
      r.event(p, ev(i, i % 2 == 0 ? "/even" : "/odd"), 100, 101, static_cast<std::uint64_t>(i));
    const auto refs = decoded ? r.refs() : r.undecoded();
    h.pipeline.on_batch(Batch{refs});  // 11 records through a 4-event pipeline: in chunks
    h.pipeline.stop(1s);
    EXPECT_EQ(h.pipeline.stats().decode_errors, 0U);
    EXPECT_EQ(h.pipeline.stats().records, 11U);
    return h.out;
  };
  const std::string decoded = run(true);
  EXPECT_EQ(decoded,
            "count by comm, path:\ncomm  path   count\nbash  /even      4\nbash  /odd       4\n\n")
      << decoded;
  EXPECT_EQ(run(false), decoded);
}

TEST(Pipeline, AnUndecodableSampleIsCountedAndSkipped) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p}, {.max_events = 8, .comm = {.capacity = 64, .proc_root = "/nonexistent"}});
  h.add("count");
  h.bind();
  Records r;
  r.event(p, ev(1), 100, 101, 1);
  r.event(p, ev(2), 100, 101, 2);
  auto refs = r.undecoded();
  refs[1].record.bytes = refs[1].record.bytes.first(16);  // cut inside the fixed fields
  h.pipeline.on_batch(Batch{refs});
  h.pipeline.stop(1s);
  EXPECT_EQ(h.pipeline.stats().decode_errors, 1U);
  EXPECT_EQ(h.pipeline.stats().records, 1U);
  EXPECT_THAT(h.out, HasSubstr("1")) << h.out;
}

TEST(CommCache, ReadsProcOnMissAndIsBounded) {
  const auto dir = tracer::testing::scratch_path(fmt::format("comm-{}", getpid()));
  std::filesystem::create_directories(dir / "4242");
  std::ofstream(dir / "4242" / "comm") << "fromproc\n";
  CommCache c({.capacity = 8, .proc_root = dir.string(), .read_proc = true});
  EXPECT_EQ(c.lookup(4242), "fromproc");
  EXPECT_EQ(c.lookup(4242), "fromproc");
  EXPECT_EQ(c.proc_reads(), 1u);  // cached
  c.update(4242, "renamed-by-exec-long-name");
  EXPECT_EQ(c.lookup(4242), "renamed-by-exec-");  // TASK_COMM_LEN bytes kept
  for (std::uint32_t t = 1; t <= 100; ++t)
    c.update(100000 + t, "x");
  EXPECT_GT(c.evictions(), 0u);
  std::filesystem::remove_all(dir);

  CommCache real;
  std::ifstream self("/proc/self/comm");
  std::string expect;
  std::getline(self, expect);
  EXPECT_EQ(real.lookup(static_cast<std::uint32_t>(gettid())), expect);
}

TEST(Pipeline, RoutesRecordKindsToStagesThatAsked) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("count", {{"by", cv_list({"kind"})}});  // samples only (the default)
  h.add("jsonl", {{"kinds", cv_list({"lost", "comm"})},
                  {"fields", cv_list({"kind", "lost", "comm"})},
                  {"events", ConfigValue{.value = true, .where = {}}}});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  r.comm(p, 5, 5, "sleep");
  r.event(p, ev(0), 5, 5, 1);
  r.lost(p, 17);
  r.event(p, ev(0), 5, 5, 2);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out,
            "{\"kind\":\"comm\",\"comm\":\"sleep\"}\n"
            "{\"kind\":\"lost\",\"lost\":17,\"comm\":\"\"}\n"
            "{\"stage\":\"count\",\"interval\":0,\"time\":1000000000,\"keys\":{\"kind\":"
            "\"sample\"},\"count\":2}\n");
  EXPECT_EQ(h.pipeline.stats().by_kind[static_cast<std::size_t>(RecordKind::kLost)], 1u);
  EXPECT_EQ(h.pipeline.stats().by_kind[static_cast<std::size_t>(RecordKind::kSample)], 2u);
}

// A stage whose stop() throws: the stages after it still stop, every final table is printed and
// the sink flushed, and the error reaches the caller once.
TEST(Pipeline, AStageThatThrowsAtStopCostsTheOthersNothing) {
  struct Failing : Stage {
    void configure(const ConfigValue&, Diagnostics&) override {}
    void bind(BindContext&, Diagnostics&) override {}
    void on_events(std::span<Event* const>) noexcept override {}
    void stop() override { throw std::runtime_error("failing stage: disk gone"); }
  };
  struct Last : Stage {
    void configure(const ConfigValue&, Diagnostics&) override {}
    void bind(BindContext&, Diagnostics&) override {}
    void on_events(std::span<Event* const>) noexcept override {}
    void stop() override { stopped = true; }
    bool stopped = false;
  };
  const ProbeInfo p = fake_probe(0, "p");
  Records r;
  r.event(p, ev(0), 5, 5, 1);
  r.event(p, ev(0), 5, 5, 2);
  Harness h({p});
  h.add("count");
  h.pipeline.add(std::make_unique<Failing>(), "failing", {});
  auto last = std::make_unique<Last>();
  Last& l = *last;
  h.pipeline.add(std::move(last), "last", {});
  h.add("count", {{"by", cv_list({"pid"})}});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  h.pipeline.on_batch(r.batch());
  EXPECT_THROW(h.pipeline.stop(1s), std::runtime_error);
  EXPECT_TRUE(l.stopped) << "the stage after the failing one stopped";
  // Both final tables, the one after the failing stage included, flushed to the sink.
  EXPECT_EQ(h.out, "count:\ncount\n    2\n\ncount by pid:\npid  count\n  5      2\n\n");
  EXPECT_NO_THROW(h.pipeline.stop(2s)) << "a second stop does nothing";
}

// An embedder's stage: the needs it declares at Pipeline::add, and the output role it implements,
// without a flag on the core interface.
TEST(Pipeline, AnEmbeddersOutputGetsWhatItDeclares) {
  struct Tap : Stage, Output {
    explicit Tap(bool tables) : tables_(tables) {}
    void configure(const ConfigValue&, Diagnostics&) override {}
    void bind(BindContext& ctx, Diagnostics&) override { upstream = ctx.upstream_aggregates; }
    void on_events(std::span<Event* const> events) noexcept override {
      for (const Event* e : events)
        kinds += std::string(to_string(e->kind)) + " ";
    }
    Output* output() noexcept override { return this; }
    bool takes_tables() const noexcept override { return tables_; }
    void on_table(const Table& t) override { titles += t.title + ";"; }
    void on_round() noexcept override { ++rounds; }
    void flush() override { ++flushes; }
    bool tables_;
    bool upstream = false;
    std::string kinds, titles;
    int rounds = 0, flushes = 0;
  };
  const ProbeInfo p = fake_probe(0, "p");
  Records r;
  r.comm(p, 5, 5, "sleep");
  r.event(p, ev(0), 5, 5, 1);
  r.lost(p, 17);
  {
    Harness h({p});
    h.add("count");
    auto tap = std::make_unique<Tap>(true);
    Tap& t = *tap;
    h.pipeline.add(
        std::move(tap), "tap",
        {.kinds = kind_bit(RecordKind::kSample) | kind_bit(RecordKind::kComm), .time_order = true});
    h.bind();
    ASSERT_TRUE(h.diags.empty()) << h.errors();
    EXPECT_EQ(h.pipeline.size(), 2u);  // an output of tables follows the count: no implicit print
    EXPECT_TRUE(h.pipeline.ordered());
    EXPECT_TRUE(t.upstream);
    h.pipeline.on_batch(r.batch());
    h.pipeline.round();
    h.pipeline.tick(1s);
    h.pipeline.stop(2s);
    EXPECT_EQ(t.kinds, "comm sample ");
    EXPECT_EQ(t.titles, "count;");
    EXPECT_EQ(t.rounds, 1);
    EXPECT_EQ(t.flushes, 1);
    EXPECT_EQ(h.out, "");
  }
  {
    Harness h({p});
    h.add("count");
    auto tap = std::make_unique<Tap>(false);
    Tap& t = *tap;
    h.pipeline.add(std::move(tap), "tap");  // default needs: samples, ring order
    h.bind();
    ASSERT_TRUE(h.diags.empty()) << h.errors();
    EXPECT_EQ(h.pipeline.size(), 3u);  // records only: the count's table gets a print
    EXPECT_FALSE(h.pipeline.ordered());
    h.pipeline.on_batch(r.batch());
    h.pipeline.stop(2s);
    EXPECT_EQ(t.kinds, "sample ");
    EXPECT_EQ(t.titles, "");
    EXPECT_THAT(h.out, HasSubstr("count"));
  }
}

TEST(Pipeline, LongBatchesAreChunked) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p}, {.max_events = 7, .comm = {}});
  h.add("count", {});
  h.add("csv", {});
  h.bind();
  Records r;
  for (int i = 0; i < 100; ++i)
    r.event(p, ev(0), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out, "stage,interval,count\r\ncount,0,100\r\n");
}

// ---------------------------------------------------------------------------------------------
// Allocation-free steady state

TEST(Pipeline, SteadyStateDoesNotAllocate) {
  const ProbeInfo enter = fake_probe(0, "enter", PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_IP);
  const ProbeInfo exit = fake_probe(1, "exit", PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_IP);
  std::FILE* devnull = std::fopen("/dev/null", "we");
  ASSERT_NE(devnull, nullptr);
  Sink sink = Sink::to_file(devnull);
  Pipeline pipeline(sink);
  Diagnostics diags;
  auto& reg = stage_registry();
  const auto add = [&](std::string_view use, ConfigTable t) {
    pipeline.add(reg, use, cv_table(std::move(t)), diags);
  };
  add("filter", {{"expr", cv(R"(comm == "w*" && nr >= 0 || path == "/x")")}});
  add("count", {{"by", cv_list({"comm", "nr", "callchain"})}});
  add("sum", {{"field", cv("bytes")}, {"by", cv_list({"path"})}});
  add("latency", {{"entry", cv("enter")}, {"exit", cv("exit")}});
  add("hist", {{"field", cv("duration")}, {"by", cv_list({"comm"})}});
  add("lhist", {{"field", cv("duration")}, {"min", cv(0)}, {"max", cv(1000)}, {"step", cv(100)}});
  add("quantiles", {{"field", cv("duration")}, {"by", cv_list({"tid"})}});
  add("rate", {{"by", cv_list({"cpu"})}});
  add("print", {{"format", cv("{comm} {tid} {duration} {path}")}});
  add("jsonl", {{"events", ConfigValue{.value = true, .where = {}}}});
  add("csv", {{"events", ConfigValue{.value = true, .where = {}}}});
  const std::vector<ProbeInfo> probes = {enter, exit};
  pipeline.bind(probes, diags);
  ASSERT_TRUE(diags.empty()) << diags.format();
  pipeline.start(0ns);

  Records r;
  for (std::uint32_t t = 1; t <= 8; ++t)
    r.comm(enter, t, t, fmt::format("w{}", t));
  std::uint64_t time = 1;
  for (int i = 0; i < 64; ++i) {
    const std::uint32_t tid = 1 + static_cast<std::uint32_t>(i % 8);
    testing::SampleSpec s;
    s.pid = s.tid = tid;
    s.ip = 0x400000 + tid;
    s.callchain = {0x1000, 0x2000 + tid};
    s.time = time++;
    s.raw = testing::fake_raw(ev(static_cast<int>(tid % 3), tid % 2 ? "/a" : "/x", i));
    r.sample(enter, s);
    s.time = time += std::uint64_t{50} * tid;
    r.sample(exit, s);
  }
  // As the engine drives it: a round after each pass (the time-order merge releases there).
  for (int warm = 0; warm < 4; ++warm) {  // warm-up: keys, buffers, the merge's queues
    pipeline.on_batch(r.batch());
    pipeline.round();
  }
  testing::alloc_count_start();
  for (int round = 0; round < 50; ++round) {
    pipeline.on_batch(r.batch());
    pipeline.round();
  }
  EXPECT_EQ(testing::alloc_count_stop(), 0u);
  pipeline.stop(1s);
  EXPECT_TRUE(pipeline.ordered());
  EXPECT_EQ(pipeline.stats().records, 54u * r.size());
  std::fclose(devnull);
}

}  // namespace
}  // namespace tracer
