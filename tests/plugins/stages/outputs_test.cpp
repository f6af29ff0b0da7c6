// Outputs: JSON lines, CSV, print's lines and tables, and the bpf-map stage over a fake map
// source.
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
          .field = {},
          .quantiles = {},
          .key_names = {"comm", "pid"},
          .value_names = {"count"},
          .value_kinds = {ValueKind::kCount},
          .histogram = false,
          .summary = false,
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

}  // namespace
}  // namespace tracer
