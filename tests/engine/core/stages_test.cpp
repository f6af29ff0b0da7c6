// Pipeline stages against hand-built batches: registry, options, field binding, comm cache,
// filter expressions, every aggregation, latency pairing, outputs, intervals, and allocation-free
// steady state.
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
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"
#include "tracer/stages.hpp"

namespace tracer {
namespace {

using stages::FilterError;
using stages::FilterExpr;
using testing::cv;
using testing::cv_list;
using testing::cv_table;
using testing::fake_probe;
using testing::FakeEvent;
using ::testing::HasSubstr;
using testing::Records;

using namespace std::chrono_literals;

// A pipeline writing to a string, with stages from the global registry.
struct Harness {
  std::string out;
  Sink sink = Sink::to_string(&out);
  Pipeline pipeline;
  Diagnostics diags;
  std::vector<ProbeInfo> probes;

  explicit Harness(std::vector<ProbeInfo> p, PipelineOptions o = {})
      : pipeline(sink, std::move(o)), probes(std::move(p)) {}
  Harness& add(std::string_view use, ConfigTable options = {}) {
    pipeline.add(stage_registry(), use, cv_table(std::move(options)), diags);
    return *this;
  }
  void bind() {
    pipeline.bind(probes, diags);
    pipeline.start(0ns);
  }
  std::string errors() const { return diags.format(); }
};

FakeEvent ev(std::int32_t nr,
             std::string path = "/tmp/x",
             std::int64_t bytes = 0,
             std::string name = "n") {
  FakeEvent e;
  e.nr = nr;
  e.path = std::move(path);
  e.bytes = bytes;
  e.name = std::move(name);
  return e;
}

// ---------------------------------------------------------------------------------------------
// A small strict JSON checker (RFC 8259) that also decodes top-level string members.

class Json {
 public:
  explicit Json(std::string_view s) : s_(s) {}
  bool valid() {
    ws();
    if (!value(0))
      return false;
    ws();
    return i_ == s_.size();
  }
  std::map<std::string, std::string> strings;  // top-level "key": "string" members, decoded

 private:
  bool value(int depth) {
    ws();
    if (i_ >= s_.size())
      return false;
    const char c = s_[i_];
    if (c == '{')
      return object(depth);
    if (c == '[')
      return array(depth);
    if (c == '"') {
      std::string ignored;
      return string(ignored);
    }
    if (s_.substr(i_, 4) == "true" || s_.substr(i_, 4) == "null") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "false") {
      i_ += 5;
      return true;
    }
    return number();
  }
  bool object(int depth) {
    ++i_;
    ws();
    if (peek() == '}') {
      ++i_;
      return true;
    }
    while (true) {
      ws();
      std::string key;
      if (!string(key))
        return false;
      ws();
      if (peek() != ':')
        return false;
      ++i_;
      ws();
      if (depth == 0 && peek() == '"') {
        std::string v;
        if (!string(v))
          return false;
        strings[key] = v;
      } else if (!value(depth + 1)) {
        return false;
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        return true;
      }
      return false;
    }
  }
  bool array(int depth) {
    ++i_;
    ws();
    if (peek() == ']') {
      ++i_;
      return true;
    }
    while (true) {
      if (!value(depth + 1))
        return false;
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == ']') {
        ++i_;
        return true;
      }
      return false;
    }
  }
  bool string(std::string& out) {
    if (peek() != '"')
      return false;
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"')
        return true;
      if (c < 0x20)
        return false;
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      if (i_ >= s_.size())
        return false;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
        case 'f':
          out.push_back(' ');
          break;
        case 'u': {
          if (i_ + 4 > s_.size())
            return false;
          const auto hex = std::string(s_.substr(i_, 4));
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            return false;
          const auto cp = std::stoul(hex, nullptr, 16);
          out.push_back(cp < 0x80 ? static_cast<char>(cp) : '?');
          i_ += 4;
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool number() {
    const std::size_t start = i_;
    if (peek() == '-')
      ++i_;
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      return false;
    if (peek() == '0')
      ++i_;
    else
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    if (peek() == '.') {
      ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return false;
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-')
        ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return false;
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    }
    return i_ > start;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < s.size()) {
    auto end = s.find('\n', start);
    if (end == std::string::npos)
      end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Registry and options

TEST(StageRegistry, BuiltinsAreListedOnceWithSpecs) {
  auto reg = builtin_stage_registry();
  for (std::string_view name :
       {"filter", "count", "sum", "min", "max", "avg", "hist", "lhist", "quantiles", "rate",
        "latency", "print", "jsonl", "csv", "bpf-map", "perf-data", "folded", "flamegraph"}) {
    EXPECT_NE(reg.find(name), nullptr) << name;
    EXPECT_NE(reg.make(name), nullptr) << name;
  }
  EXPECT_EQ(reg.specs().size(), 18u);
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

// bpf-map over a fake MapSource: rows from key/value bytes by their BTF fields (signed, unsigned,
// char arrays), ordered by `sort`, cut to `top`; a misspelt map or field is a diagnostic.
class FakeMaps final : public MapSource {
 public:
  FakeMaps() {
    schema_.map = "counts";
    schema_.key.fields = {{.name = "pid",
                           .type_name = "__u32",
                           .offset = 0,
                           .size = 4,
                           .kind = bpf::FieldKind::kUnsigned},
                          {.name = "comm",
                           .type_name = "char[8]",
                           .offset = 4,
                           .size = 8,
                           .kind = bpf::FieldKind::kString,
                           .element_size = 1,
                           .count = 8}};
    schema_.key.size = 12;
    schema_.value.fields = {{.name = "calls",
                             .type_name = "__u64",
                             .offset = 0,
                             .size = 8,
                             .kind = bpf::FieldKind::kUnsigned},
                            {.name = "delta",
                             .type_name = "__s32",
                             .offset = 8,
                             .size = 4,
                             .kind = bpf::FieldKind::kSigned}};
    schema_.value.size = 16;
    add(10, "bash", 5, -3);
    add(20, "top", 50, 7);
    add(30, "cat", 20, 0);
  }
  [[nodiscard]] std::vector<std::string> map_names() const override { return {"counts"}; }
  [[nodiscard]] Result<bpf::MapSchema> schema(std::string_view map) const override {
    if (map != "counts")
      return fail(ENOENT, fmt::format("no map '{}'", map));
    return schema_;
  }
  [[nodiscard]] Result<MapSnapshot> read(std::string_view map, bool clear) const override {
    TRACER_ASSIGN_OR_RETURN(auto s, schema(map));
    reads_cleared += clear ? 1 : 0;
    return MapSnapshot{.schema = std::move(s), .entries = entries_};
  }
  mutable int reads_cleared = 0;

 private:
  void add(std::uint32_t pid, std::string_view comm, std::uint64_t calls, std::int32_t delta) {
    std::vector<std::byte> k(12), v(16);
    std::memcpy(k.data(), &pid, 4);
    std::memcpy(k.data() + 4, comm.data(), comm.size());
    std::memcpy(v.data(), &calls, 8);
    std::memcpy(v.data() + 8, &delta, 4);
    entries_.emplace_back(std::move(k), std::move(v));
  }
  bpf::MapSchema schema_;
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> entries_;
};

TEST(BpfMapStage, RowsFromBtfFieldsSortedAndCut) {
  FakeMaps maps;
  std::string out;
  Sink sink = Sink::to_string(&out);
  Pipeline pipeline(sink);
  Diagnostics diags;
  pipeline.add(stage_registry(), "bpf-map",
               cv_table({{"map", cv("counts")},
                         {"sort", cv("calls")},
                         {"top", cv(2)},
                         {"clear", ConfigValue{.value = true, .where = {}}}}),
               diags);
  const std::vector<ProbeInfo> probes = {fake_probe(0, "p")};
  pipeline.bind(probes, diags, {}, &maps);
  ASSERT_EQ(diags.format(), "");
  pipeline.start(0ns);
  pipeline.stop(1s);
  EXPECT_EQ(out,
            "map counts:\n"
            "pid  comm  calls  delta\n"
            " 20  top      50      7\n"
            " 30  cat      20      0\n\n")
      << out;
  EXPECT_EQ(maps.reads_cleared, 1);

  Pipeline bad(sink);
  Diagnostics d2;
  bad.add(stage_registry(), "bpf-map", cv_table({{"map", cv("countz", 3, 7)}}), d2);
  bad.bind(probes, d2, {}, &maps);
  EXPECT_THAT(d2.format(), HasSubstr("r.toml:3:7")) << d2.format();
  EXPECT_THAT(d2.format(), HasSubstr("did you mean 'counts'")) << d2.format();
  Pipeline bad2(sink);
  Diagnostics d3;
  bad2.add(stage_registry(), "bpf-map",
           cv_table({{"map", cv("counts")}, {"keys", cv_list({"pid", "tgid"}, 4)}}), d3);
  bad2.bind(probes, d3, {}, &maps);
  EXPECT_THAT(d3.format(), HasSubstr("no key field 'tgid'")) << d3.format();
  EXPECT_THAT(d3.format(), HasSubstr("pid (__u32), comm (char[8])")) << d3.format();
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
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("comm-{}", getpid());
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

// ---------------------------------------------------------------------------------------------
// Filter

std::string parse_dump(std::string_view text) {
  FilterError err;
  auto e = FilterExpr::parse(text, err);
  return e ? e->dump() : fmt::format("error@{}: {}", err.column, err.message);
}

TEST(FilterParse, PrecedenceParenthesesAndLiterals) {
  EXPECT_EQ(parse_dump("a == 1 || b == 2 && c == 3"), "(|| (== a 1) (&& (== b 2) (== c 3)))");
  EXPECT_EQ(parse_dump("(a == 1 || b == 2) && c == 3"), "(&& (|| (== a 1) (== b 2)) (== c 3))");
  EXPECT_EQ(parse_dump("!a && !(b < -5)"), "(&& (! a) (! (< b -5)))");
  EXPECT_EQ(parse_dump("comm == \"ba*\" || x >= 0x10"), "(|| (== comm \"ba*\") (>= x 0x10))");
  EXPECT_EQ(parse_dump("args[1] != 'it''"), "error@16: unterminated string literal");
  EXPECT_EQ(parse_dump("pid <= tid"), "(<= pid tid)");
}

TEST(FilterParse, ErrorsCarryColumns) {
  EXPECT_EQ(parse_dump("pid = 1"), "error@5: '=' is not an operator: use '==' to compare");
  EXPECT_EQ(parse_dump("(pid == 1"),
            "error@10: expected ')' to close the '(' at column 1, found 'end of expression'");
  EXPECT_EQ(parse_dump("pid == "),
            "error@8: expected a field, a number or a string, found 'end "
            "of expression'");
  EXPECT_EQ(parse_dump("pid == 1 )"), "error@10: unexpected ')' after the expression");
  EXPECT_EQ(parse_dump("pid == 99999999999999999999"), "error@8: integer literal out of range");
  EXPECT_EQ(parse_dump("pid == 1 $"), "error@10: unexpected character '$'");
}

TEST(FilterGlob, Patterns) {
  using stages::glob_match;
  EXPECT_TRUE(glob_match("ba*", "bash"));
  EXPECT_TRUE(glob_match("*sh", "bash"));
  EXPECT_TRUE(glob_match("b?sh", "bash"));
  EXPECT_TRUE(glob_match("[a-c]ash", "bash"));
  EXPECT_FALSE(glob_match("[!b]ash", "bash"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_FALSE(glob_match("ba", "bash"));
  EXPECT_TRUE(glob_match("kworker/*:*", "kworker/3:1"));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob_match("a*b*c", "axxbyy"));
}

std::uint64_t count_kept(const std::string& expr, Diagnostics* diags_out = nullptr) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p}, {.max_events = 512, .comm = {.capacity = 64, .proc_root = "/nonexistent"}});
  h.add("filter", {{"expr", cv(expr, 1, 8)}});
  h.add("count", {});
  h.bind();
  if (diags_out != nullptr)
    *diags_out = h.diags;
  if (!h.diags.empty())
    return UINT64_MAX;
  Records r;
  r.comm(p, 1, 1, "bash");
  r.comm(p, 2, 2, "zsh");
  for (int i = 0; i < 10; ++i)
    r.event(p, ev(i, i % 2 == 0 ? "/etc/a" : "/tmp/b", std::int64_t{i} * 100), 1 + (i % 2),
            1 + (i % 2), 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);  // a filter on comm is ordered: its events are released at stop
  const std::uint64_t samples = 10;
  return samples - (h.pipeline.stats().dropped);
}

TEST(Filter, EvaluatesOnEvents) {
  EXPECT_EQ(count_kept("nr >= 5"), 5u);
  EXPECT_EQ(count_kept("nr >= 5 && comm == \"bash\""), 2u);    // 6, 8
  EXPECT_EQ(count_kept("comm == \"*sh\" && !(nr < 8)"), 2u);   // 8, 9
  EXPECT_EQ(count_kept("path == \"/tmp/*\" || nr == 0"), 6u);  // odd + 0
  EXPECT_EQ(count_kept("comm != 'bash'"), 5u);
  EXPECT_EQ(count_kept("bytes > nr"), 9u);                // field-to-field: not 0 > 0
  EXPECT_EQ(count_kept("bytes == nr * 1"), UINT64_MAX);   // '*' is no operator
  EXPECT_EQ(count_kept("nr > -1 && bytes < 0x100"), 3u);  // 0, 100, 200
  EXPECT_EQ(count_kept("nr"), 9u);                        // truth test
}

TEST(Filter, BindErrorsPointAtTheOperand) {
  Diagnostics d;
  EXPECT_EQ(count_kept("nr == 1 && comm == 5", &d), UINT64_MAX);
  ASSERT_EQ(d.items().size(), 1u) << d.format();
  EXPECT_EQ(d.items()[0].message, "cannot compare string 'comm' with int '5'");
  EXPECT_EQ(d.items()[0].where.column, 8u + 20u);
  Diagnostics d2;
  EXPECT_EQ(count_kept("nx == 1", &d2), UINT64_MAX);
  ASSERT_EQ(d2.items().size(), 1u);
  EXPECT_EQ(d2.items()[0].message, "unknown field 'nx'");
  EXPECT_EQ(d2.items()[0].where.column, 9u);
  EXPECT_THAT(d2.items()[0].hint, HasSubstr("did you mean 'nr'?"));
  Diagnostics d3;
  EXPECT_EQ(count_kept("nr == (1", &d3), UINT64_MAX);
  ASSERT_EQ(d3.items().size(), 1u);
  EXPECT_EQ(d3.items()[0].where.column, 8u + 7u);
}

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
  EXPECT_EQ(h.out,
            R"({"stage":"hist","interval":0,"time":1000000000,"keys":{},"count":2,"buckets":[)"
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

// ---------------------------------------------------------------------------------------------
// Outputs and routing

TEST(StageJsonl, EventsAreValidJsonWithEscapes) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("jsonl", {{"fields", cv_list({"probe", "pid", "path", "name", "nr"})}});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  const std::string nasty = "a\"b\\c\n\t\x01\xff\xc3\xa9/\xe2\x82";
  r.event(p, ev(-5, nasty, 0, "q\"uote"), 7, 7, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  const auto l = lines(h.out);
  ASSERT_EQ(l.size(), 1u);
  Json j(l[0]);
  ASSERT_TRUE(j.valid()) << l[0];
  EXPECT_EQ(j.strings["name"], "q\"uote");
  EXPECT_EQ(j.strings["path"], "a\"b\\c\n\t\x01?\xc3\xa9/??");
  EXPECT_EQ(l[0], R"({"probe":"p","pid":7,"path":"a\"b\\c\n\t\u0001\u00ff)"
                  "\xc3\xa9"
                  R"(/\u00e2\u0082","name":"q\"uote","nr":-5})");
}

TEST(StageCsv, QuotesFieldsPerRfc4180) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("csv", {{"fields", cv_list({"nr", "path", "name"})}});
  h.bind();
  Records r;
  r.event(p, ev(1, "a,b", 0, "say \"hi\""), 1, 1, 1);
  r.event(p, ev(2, "line\nbreak", 0, " pad"), 1, 1, 1);
  r.event(p, ev(3, "plain", 0, "x"), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.stop(1s);
  EXPECT_EQ(h.out,
            "nr,path,name\r\n1,\"a,b\",\"say \"\"hi\"\"\"\r\n2,\"line\nbreak\",\" pad\"\r\n"
            "3,plain,x\r\n");
}

TEST(StagePrint, FormatLinesAndAlignedTables) {
  const ProbeInfo p = fake_probe(0, "p");
  Harness h({p});
  h.add("print", {{"format", cv("{name} read {bytes} bytes from {path} {{ok}}")}});
  h.bind();
  ASSERT_TRUE(h.diags.empty()) << h.errors();
  Records r;
  r.event(p, ev(0, "/etc/hosts", 12, "cat"), 1, 1, 1);
  h.pipeline.on_batch(r.batch());
  h.pipeline.round();  // per-event lines are in time order: the second round after a record
  EXPECT_EQ(h.out, "");
  h.pipeline.round();  // releases it
  EXPECT_EQ(h.out, "cat read 12 bytes from /etc/hosts {ok}\n");

  Table t{.stage = "count",
          .title = "count by comm, pid",
          .key_names = {"comm", "pid"},
          .value_names = {"count"},
          .histogram = false,
          .rows = {{.keys = {std::string("bash"), std::int64_t{1}},
                    .values = {std::uint64_t{12345}},
                    .buckets = {}},
                   {.keys = {std::string("systemd-journal"), std::int64_t{4321}},
                    .values = {std::uint64_t{7}},
                    .buckets = {}}},
          .rest = {},
          .since = {},
          .time = {},
          .interval = 0,
          .note = {}};
  EXPECT_EQ(stages::Print::render(t),
            "count by comm, pid:\n"
            "comm              pid  count\n"
            "bash                1  12345\n"
            "systemd-journal  4321      7\n\n");

  Diagnostics d;
  Harness bad({p});
  bad.add("print", {{"format", cv("{name} {oops", 2, 10)}});
  ASSERT_EQ(bad.diags.items().size(), 1u);
  EXPECT_EQ(bad.diags.items()[0].where.column, 10u + 8u);
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
