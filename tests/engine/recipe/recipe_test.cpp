// Recipe loading: tests/recipes/valid/*.toml load to exact models; every
// tests/recipes/invalid/*.toml fails with exactly the diagnostics of its sibling .err file (a
// sibling .set file holds --set arguments, one a line); check_system() against the live kernel.
#include "tracer/recipe.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"
#include "tracer/error.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Type = OptionSpec::Type;

const fs::path kRecipesDir = fs::path(TRACER_TEST_DATA_DIR) / ".." / "recipes";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// A fixed catalog standing in for the stage registry.
std::vector<StageSpec> catalog() {
  return {
      {.name = "count",
       .summary = "count events by fields",
       .options = {{.name = "by", .type = Type::kFieldList, .required = false, .help = {}},
                   {.name = "top", .type = Type::kInt, .required = false, .help = {}},
                   {.name = "every", .type = Type::kDuration, .required = false, .help = {}}}},
      {.name = "filter",
       .summary = "keep matching events",
       .options = {{.name = "expr",
                    .type = Type::kExpression,
                    .required = true,
                    .help = "events that match are kept"}}},
      {.name = "hist",
       .summary = "histogram of a field",
       .options = {{.name = "field", .type = Type::kString, .required = true, .help = {}},
                   {.name = "buckets", .type = Type::kInt, .required = false, .help = {}},
                   {.name = "options", .type = Type::kAny, .required = false, .help = {}}}},
      {.name = "print",
       .summary = "print events",
       .options = {{.name = "limit", .type = Type::kInt, .required = false, .help = {}}}},
      {.name = "jsonl",
       .summary = "JSON lines",
       .options = {{.name = "path", .type = Type::kString, .required = true, .help = {}},
                   {.name = "max_size", .type = Type::kSize, .required = false, .help = {}}}},
  };
}

Recipe load_valid(std::string_view name, std::vector<std::string> sets = {}) {
  const std::string rel = fmt::format("valid/{}.toml", name);
  return Recipe::load_string(read_file(kRecipesDir / rel), rel,
                             {.sets = std::move(sets), .stages = catalog()});
}

std::string at(const SourceRegion& r) {
  return fmt::format("{}:{}:{}", r.path, r.line, r.column);
}

/// Every value of a ConfigValue with its line:column, for exact comparisons.
std::string dump(const ConfigValue& v) {
  std::string s;
  if (const auto* t = v.table()) {
    s += "{";
    for (std::size_t i = 0; i < t->size(); ++i)
      s += fmt::format("{}{}={}", i != 0 ? ", " : "", (*t)[i].first, dump((*t)[i].second));
    s += "}";
  } else if (const auto* a = v.array()) {
    s += "[";
    for (std::size_t i = 0; i < a->size(); ++i)
      s += fmt::format("{}{}", i != 0 ? ", " : "", dump((*a)[i]));
    s += "]";
  } else if (const auto* str = v.string()) {
    s += fmt::format("\"{}\"", *str);
  } else if (const auto* i = v.integer()) {
    s += std::to_string(*i);
  } else if (v.is_bool()) {
    s += std::get<bool>(v.value) ? "true" : "false";
  } else {
    s += fmt::format("{}", std::get<double>(v.value));
  }
  return s + fmt::format("@{}:{}", v.where.line, v.where.column);
}

void expect_probe(const RecipeProbe& p, const ProbeOptions& e) {
  SCOPED_TRACE("probe " + e.name);
  const ProbeOptions& a = p.options;
  EXPECT_EQ(a.name, e.name);
  EXPECT_EQ(a.kind, e.kind);
  EXPECT_EQ(a.spec, e.spec);
  EXPECT_EQ(a.period, e.period);
  EXPECT_EQ(a.freq, e.freq);
  EXPECT_EQ(a.counting, e.counting);
  EXPECT_EQ(a.extra_sample_type, e.extra_sample_type);
  EXPECT_EQ(a.sample_regs_user, e.sample_regs_user);
  EXPECT_EQ(a.sample_stack_user, e.sample_stack_user);
  EXPECT_EQ(a.task_records, e.task_records);
  EXPECT_EQ(a.context_switches, e.context_switches);
  EXPECT_EQ(a.filter, e.filter);
  EXPECT_EQ(a.bpf_program, e.bpf_program);
  EXPECT_EQ(a.ring_pages, e.ring_pages);
  EXPECT_EQ(a.wakeup.events, e.wakeup.events);
  EXPECT_EQ(a.wakeup.watermark_bytes, e.wakeup.watermark_bytes);
  EXPECT_EQ(a.aux_bytes, e.aux_bytes);
  EXPECT_EQ(a.aux_snapshot, e.aux_snapshot);
}

/// "key@line:column" of every value of a probe, in key order.
std::string positions(const SourceMap& m) {
  std::string s;
  for (const auto& [k, r] : m)
    s += fmt::format("{}{}@{}:{}", s.empty() ? "" : " ", k, r.line, r.column);
  return s;
}

TEST(Recipe, MinimalLoadsExactly) {
  const Recipe r = load_valid("minimal");
  EXPECT_EQ(r.path, "valid/minimal.toml");
  EXPECT_EQ(r.name, "openat-by-process");
  EXPECT_EQ(r.description, "");
  EXPECT_EQ(r.duration, std::chrono::nanoseconds(10s));
  EXPECT_EQ(positions(r.value_where), "duration@4:12 name@3:8");
  EXPECT_TRUE(r.params.empty());
  EXPECT_FALSE(r.bpf);
  ASSERT_EQ(r.probes.size(), 1U);
  expect_probe(r.probes[0], {.name = "openat",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_openat",
                             .filter = "dfd == -100"});
  EXPECT_EQ(at(r.probes[0].where), "valid/minimal.toml:6:1");
  EXPECT_EQ(positions(r.probes[0].value_where), "filter@9:10 name@7:8 tracepoint@8:14");
  EXPECT_EQ(at(r.probes[0].where_of("period")), "valid/minimal.toml:6:1");
  ASSERT_EQ(r.pipelines.size(), 1U);
  const auto& pl = r.pipelines[0];
  EXPECT_EQ(pl.name, "main");
  EXPECT_EQ(at(pl.where), "valid/minimal.toml:11:1");
  ASSERT_EQ(pl.stages.size(), 2U);
  EXPECT_EQ(pl.stages[0].use, "count");
  EXPECT_EQ(at(pl.stages[0].where), "valid/minimal.toml:11:1");
  EXPECT_EQ(dump(pl.stages[0].options),
            "{by=[\"comm\"@13:7, \"filename\"@13:15]@13:6, top=10@14:7, every=\"1s\"@15:9}@11:1");
  EXPECT_EQ(pl.stages[1].use, "print");
  EXPECT_EQ(dump(pl.stages[1].options), "{}@17:1");
}

TEST(Recipe, EveryProbeKindLoadsExactly) {
  const Recipe r = load_valid("all_kinds");
  EXPECT_EQ(r.name, "all-kinds");
  EXPECT_EQ(r.description, "every probe kind the engine knows");
  EXPECT_FALSE(r.duration);
  EXPECT_TRUE(r.pipelines.empty());
  ASSERT_EQ(r.probes.size(), 11U);
  expect_probe(
      r.probes[0],
      {.name = "exec", .kind = ProbeKind::kTracepoint, .spec = "sched:sched_process_exec"});
  expect_probe(r.probes[1], {.name = "open", .kind = ProbeKind::kKprobe, .spec = "do_sys_openat2"});
  expect_probe(r.probes[2],
               {.name = "open_ret", .kind = ProbeKind::kKretprobe, .spec = "do_sys_openat2"});
  expect_probe(r.probes[3],
               {.name = "readline", .kind = ProbeKind::kUprobe, .spec = "/usr/bin/bash:readline"});
  expect_probe(r.probes[4], {.name = "readline_ret",
                             .kind = ProbeKind::kUretprobe,
                             .spec = "/usr/bin/bash:readline+0x4"});
  expect_probe(r.probes[5],
               {.name = "clock", .kind = ProbeKind::kSoftware, .spec = "cpu-clock", .freq = 99});
  expect_probe(
      r.probes[6],
      {.name = "cycles", .kind = ProbeKind::kHardware, .spec = "cycles", .period = 1000000});
  expect_probe(r.probes[7], {.name = "l1d",
                             .kind = ProbeKind::kCache,
                             .spec = "L1-dcache-load-misses",
                             .counting = true});
  expect_probe(r.probes[8],
               {.name = "raw", .kind = ProbeKind::kRawPmu, .spec = "cpu/event=0x3c,umask=0x00/"});
  expect_probe(r.probes[9],
               {.name = "watch", .kind = ProbeKind::kBreakpoint, .spec = "0x1000:rw:8"});
  expect_probe(r.probes[10], {.name = "pt",
                              .kind = ProbeKind::kAux,
                              .spec = "intel_pt/cyc=1/",
                              .aux_bytes = 8ULL << 20,
                              .aux_snapshot = true});
  EXPECT_EQ(at(r.probes[10].where_of("aux")), "valid/all_kinds.toml:51:7");
  EXPECT_EQ(at(r.probes[10].where_of("aux_size")), "valid/all_kinds.toml:52:12");
}

TEST(Recipe, SamplingOptionsMapToProbeOptions) {
  const Recipe r = load_valid("sampling");
  ASSERT_EQ(r.probes.size(), 2U);
  const ProbeOptions& clock = r.probes[0].options;
  EXPECT_NE(clock.sample_regs_user, 0U);
  expect_probe(r.probes[0], {.name = "clock",
                             .kind = ProbeKind::kSoftware,
                             .spec = "cpu-clock",
                             .period = 100000,
                             .extra_sample_type = PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER |
                                                  PERF_SAMPLE_STACK_USER,
                             .sample_regs_user = clock.sample_regs_user,
                             .sample_stack_user = 8192,
                             .task_records = true,
                             .context_switches = true,
                             .ring_pages = 64,
                             .wakeup = {.events = 16, .watermark_bytes = 0}});
#if defined(__x86_64__)
  EXPECT_EQ(clock.sample_regs_user, 0xff0fffULL);  // perf's PERF_REGS_MASK: no DS/ES/FS/GS
#endif
  expect_probe(r.probes[1], {.name = "faults",
                             .kind = ProbeKind::kSoftware,
                             .spec = "page-faults",
                             .ring_pages = 256,
                             .wakeup = {.events = 0, .watermark_bytes = 65536}});
  ASSERT_EQ(r.pipelines.size(), 1U);
  EXPECT_EQ(dump(r.pipelines[0].stages[0].options), "{field=\"period\"@25:9}@23:1");
}

TEST(Recipe, ParamsDefaultsAreSubstituted) {
  const Recipe r = load_valid("params");
  ASSERT_EQ(r.params.size(), 4U);
  EXPECT_EQ(r.params[0].name, "pid");
  EXPECT_EQ(dump(r.params[0].value), "1@8:7");
  EXPECT_EQ(r.params[1].name, "comm");
  EXPECT_EQ(dump(r.params[1].value), "\"bash\"@9:8");
  EXPECT_EQ(r.params[2].name, "top");
  EXPECT_EQ(r.params[3].name, "stacks");
  EXPECT_EQ(dump(r.params[3].value), "false@11:10");
  ASSERT_EQ(r.probes.size(), 2U);
  expect_probe(r.probes[0], {.name = "openat",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_openat",
                             .filter = "common_pid == 1 && dfd == -100"});
  EXPECT_EQ(at(r.probes[0].where_of("filter")), "valid/params.toml:16:10");
  expect_probe(r.probes[1],
               {.name = "readline", .kind = ProbeKind::kUprobe, .spec = "/usr/bin/bash:readline"});
  ASSERT_EQ(r.pipelines.size(), 1U);
  ASSERT_EQ(r.pipelines[0].stages.size(), 2U);
  EXPECT_EQ(dump(r.pipelines[0].stages[0].options),
            "{expr=\"comm == \"bash\" && cost > ${literal}\"@25:8}@23:1");
  // "${top}" alone takes the param's type: an integer, which the count stage's `top` wants.
  EXPECT_EQ(dump(r.pipelines[0].stages[1].options), "{by=[\"comm\"@29:7]@29:6, top=5@30:7}@27:1");
}

TEST(Recipe, SetOverridesParamsAndRecipeValues) {
  const Recipe r = load_valid(
      "params", {"pid=42", "comm=zsh", "stacks=true", "recipe.duration=5s", "probe.openat.period=7",
                 "probe.readline.filter=arg0 > ${top}", "top=3"});
  EXPECT_EQ(r.duration, std::chrono::nanoseconds(5s));
  EXPECT_EQ(at(r.value_where.at("duration")), "--set:4:17");
  EXPECT_EQ(dump(r.params[0].value), "42@1:5");
  EXPECT_EQ(r.params[0].value.where.path, "--set");
  EXPECT_EQ(dump(r.params[1].value), "\"zsh\"@2:6");
  EXPECT_EQ(dump(r.params[3].value), "true@3:8");
  expect_probe(r.probes[0], {.name = "openat",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_openat",
                             .period = 7,
                             .extra_sample_type = PERF_SAMPLE_CALLCHAIN,
                             .filter = "common_pid == 42 && dfd == -100"});
  EXPECT_EQ(at(r.probes[0].where_of("period")), "--set:5:21");
  expect_probe(r.probes[1], {.name = "readline",
                             .kind = ProbeKind::kUprobe,
                             .spec = "/usr/bin/zsh:readline",
                             .filter = "arg0 > 3"});
  EXPECT_EQ(dump(r.pipelines[0].stages[1].options), "{by=[\"comm\"@29:7]@29:6, top=3@30:7}@27:1");
}

// A list option is set as TOML writes an array; a lone word is not taken for a one-element
// list (the stage refuses a string where its schema wants an array, with the array form).
TEST(Recipe, SetWritesAStageArrayAsTomlWritesIt) {
  const Recipe r = load_valid("params", {R"(stage.count.by=["comm", "pid"])"});
  EXPECT_EQ(dump(r.pipelines[0].stages[1].options),
            R"({by=["comm"@1:16, "pid"@1:16]@1:16, top=5@30:7}@27:1)");
  try {
    (void)load_valid("params", {"stage.count.by=[comm"});
    FAIL() << "an array that is not TOML was taken";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("--set:1:16: --set stage.count.by: '[comm' is not a TOML array"),
        std::string::npos)
        << e.what();
  }
}

TEST(Recipe, BpfSourceIsRelativeToTheRecipe) {
  const Recipe r = load_valid("bpf_source");
  ASSERT_TRUE(r.bpf);
  EXPECT_EQ(r.bpf->source, fs::path("valid/openat.bpf.c"));
  EXPECT_TRUE(r.bpf->object.empty());
  EXPECT_EQ(r.bpf->builtin, "");
  EXPECT_EQ(r.bpf->output, "open_events");
  EXPECT_EQ(r.bpf->payload_struct, "open_event");
  EXPECT_EQ(at(r.bpf->where), "valid/bpf_source.toml:10:1");
  EXPECT_EQ(positions(r.bpf->value_where), "output@12:10 source@11:10 struct@13:10");
  expect_probe(r.probes[0], {.name = "openat",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_openat",
                             .bpf_program = "drop_self"});
}

TEST(Recipe, BpfObjectAndBuiltin) {
  const Recipe obj = load_valid("bpf_object");
  ASSERT_TRUE(obj.bpf);
  EXPECT_EQ(obj.bpf->object, fs::path("/usr/lib/tracer/exec.bpf.o"));
  EXPECT_TRUE(obj.bpf->source.empty());
  EXPECT_EQ(obj.bpf->output, "events");
  EXPECT_EQ(obj.bpf->payload_struct, "");
  EXPECT_EQ(obj.probes[0].options.bpf_program, "on_exec");
  EXPECT_TRUE(obj.pipelines.empty());

  const Recipe builtin = load_valid("bpf_builtin");
  ASSERT_TRUE(builtin.bpf);
  EXPECT_EQ(builtin.bpf->builtin, "offcpu");
  EXPECT_TRUE(builtin.bpf->source.empty());
  EXPECT_TRUE(builtin.bpf->object.empty());
  expect_probe(builtin.probes[0], {.name = "switch",
                                   .kind = ProbeKind::kTracepoint,
                                   .spec = "sched:sched_switch",
                                   .bpf_program = "offcpu"});
}

TEST(Recipe, SeveralPipelines) {
  const Recipe r = load_valid("pipelines");
  EXPECT_EQ(r.duration, std::chrono::nanoseconds(1min));
  ASSERT_EQ(r.probes.size(), 2U);
  ASSERT_EQ(r.pipelines.size(), 2U);
  EXPECT_EQ(r.pipelines[0].name, "counts");
  EXPECT_EQ(at(r.pipelines[0].where), "valid/pipelines.toml:14:1");
  ASSERT_EQ(r.pipelines[0].stages.size(), 2U);
  EXPECT_EQ(r.pipelines[0].stages[0].use, "count");
  EXPECT_EQ(dump(r.pipelines[0].stages[0].options),
            "{by=[\"comm\"@19:7, \"probe\"@19:15]@19:6, every=\"5s\"@20:9}@17:1");
  EXPECT_EQ(r.pipelines[0].stages[1].use, "print");
  EXPECT_EQ(r.pipelines[1].name, "sizes");
  ASSERT_EQ(r.pipelines[1].stages.size(), 1U);
  EXPECT_EQ(dump(r.pipelines[1].stages[0].options),
            "{field=\"count\"@30:9, buckets=32@31:11, "
            "options={log2=true@32:20, unit=\"bytes\"@32:33}@32:11}@28:1");
}

TEST(Recipe, EmptyCatalogChecksNoStages) {
  const std::string text =
      "[recipe]\nname = \"x\"\n[[probe]]\nname = \"p\"\nsoftware = \"cpu-clock\"\n"
      "[[stage]]\nuse = \"anything\"\nwhatever = [1, \"two\"]\n";
  const Recipe r = Recipe::load_string(text, "inline.toml");
  ASSERT_EQ(r.pipelines.size(), 1U);
  EXPECT_EQ(r.pipelines[0].stages[0].use, "anything");
  EXPECT_EQ(dump(r.pipelines[0].stages[0].options), "{whatever=[1@8:13, \"two\"@8:16]@8:12}@6:1");
}

TEST(Recipe, LoadReadsAFileAndReportsItAsGiven) {
  const Recipe r = Recipe::load(kRecipesDir / "valid/bpf_source.toml", {.sets = {}, .stages = {}});
  EXPECT_EQ(r.path, (kRecipesDir / "valid/bpf_source.toml").string());
  EXPECT_EQ(r.bpf->source, kRecipesDir / "valid/openat.bpf.c");
  try {
    (void)Recipe::load(kRecipesDir / "valid/nonexistent.toml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kNotFound);
    EXPECT_EQ(e.code(), std::errc::no_such_file_or_directory);
  }
}

TEST(Recipe, ErrorCarriesCategoryAndFirstPosition) {
  try {
    (void)Recipe::load_string("[recipe]\nname = 1\n[[probe]]\nname = \"p\"\nsoftware = \"x\"\n",
                              "e.toml");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
    EXPECT_EQ(e.exit_code(), 2);
    ASSERT_TRUE(e.where());
    EXPECT_EQ(at(*e.where()), "e.toml:2:8");
    EXPECT_EQ(std::string(e.what()),
              "e.toml:2:8: wrong type for 'name': expected string, got integer\n"
              "  hint: put the value in double quotes: name = \"...\"");
  }
}

TEST(Recipe, ToEngineOptions) {
  const Recipe r = load_valid("pipelines");
  const EngineOptions o = r.to_engine_options({.kind = Target::Kind::kPid, .pid = 42});
  EXPECT_EQ(o.target.kind, Target::Kind::kPid);
  EXPECT_EQ(o.target.pid, 42);
  ASSERT_EQ(o.probes.size(), 2U);
  EXPECT_EQ(o.probes[0].name, "read");
  EXPECT_EQ(o.probes[1].spec, "syscalls:sys_enter_write");
}

// --- invalid recipes -------------------------------------------------------------------------

std::vector<std::string> invalid_cases() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kRecipesDir / "invalid")) {
    if (e.path().extension() == ".toml")
      names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

class InvalidRecipe : public ::testing::TestWithParam<std::string> {};

TEST_P(InvalidRecipe, FailsWithTheExpectedDiagnostics) {
  const fs::path dir = kRecipesDir / "invalid";
  const std::string rel = "invalid/" + GetParam() + ".toml";
  ASSERT_TRUE(fs::exists(dir / (GetParam() + ".err"))) << "no .err for " << rel;
  const std::string expected = read_file(dir / (GetParam() + ".err"));
  std::vector<std::string> sets;
  if (fs::exists(dir / (GetParam() + ".set"))) {
    std::istringstream in(read_file(dir / (GetParam() + ".set")));
    for (std::string line; std::getline(in, line);)
      sets.push_back(line);
  }
  try {
    (void)Recipe::load_string(read_file(kRecipesDir / rel), rel,
                              {.sets = sets, .stages = catalog()});
    FAIL() << rel << " loaded without error";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
    EXPECT_EQ(std::string(e.what()) + "\n", expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Recipe,
                         InvalidRecipe,
                         ::testing::ValuesIn(invalid_cases()),
                         [](const auto& param_info) { return param_info.param; });

TEST(Recipe, AtLeastThirtyInvalidCases) {
  EXPECT_GE(invalid_cases().size(), 30U);
}

// --- check_system (live) ---------------------------------------------------------------------

#define REQUIRE_TRACEPOINT(sys, event)                                                 \
  do {                                                                                 \
    auto tfs_ = tracefs::Tracefs::open();                                              \
    if (!tfs_)                                                                         \
      GTEST_SKIP() << "tracefs unavailable: " << tfs_.error().describe();              \
    if (!tfs_->format({sys, event}))                                                   \
      GTEST_SKIP() << "no tracepoint " sys ":" event " on this kernel (or no access)"; \
  } while (0)

TEST(RecipeCheckSystem, MisspelledTracepointIsReportedAtItsValue) {
  REQUIRE_TRACEPOINT("syscalls", "sys_enter_openat");
  const Recipe r = Recipe::load_string(
      "[recipe]\nname = \"x\"\n\n[[probe]]\nname = \"openat\"\n"
      "tracepoint = \"syscalls:sys_enter_opnat\"\n",
      "typo.toml");
  Diagnostics d;
  r.check_system(d);
  ASSERT_EQ(d.items().size(), 1U) << d.format();
  EXPECT_EQ(at(d.items()[0].where), "typo.toml:6:14");
  EXPECT_EQ(d.items()[0].message, "unknown tracepoint 'syscalls:sys_enter_opnat'");
  EXPECT_NE(d.items()[0].hint.find("sys_enter_openat"), std::string::npos) << d.items()[0].hint;
}

TEST(RecipeCheckSystem, GoodRecipePasses) {
  REQUIRE_TRACEPOINT("syscalls", "sys_enter_openat");
  testing::TempDir dir;
  dir.write("prog.bpf.c", "// empty\n");
  dir.write("r.toml", fmt::format("[recipe]\nname = \"good\"\n\n"
                                  "[[probe]]\nname = \"openat\"\n"
                                  "tracepoint = \"syscalls:sys_enter_openat\"\n\n"
                                  "[[probe]]\nname = \"fn\"\nuprobe = \"{}:tracer_test_fn\"\n\n"
                                  "[[probe]]\nname = \"clock\"\nsoftware = \"cpu-clock\"\n\n"
                                  "[bpf]\nsource = \"prog.bpf.c\"\n",
                                  TRACER_UPROBE_TARGET));
  const Recipe r = Recipe::load(dir.path() / "r.toml");
  Diagnostics d;
  r.check_system(d);
  EXPECT_TRUE(d.empty()) << d.format();
}

TEST(RecipeCheckSystem, MissingBinarySymbolAndBpfFile) {
  testing::TempDir dir;
  dir.write("r.toml", fmt::format("[recipe]\nname = \"bad\"\n\n"
                                  "[[probe]]\nname = \"a\"\nuprobe = \"/nonexistent/bin:main\"\n\n"
                                  "[[probe]]\nname = \"b\"\nuretprobe = \"{}:tracer_test_fnn\"\n\n"
                                  "[bpf]\nobject = \"missing.bpf.o\"\n",
                                  TRACER_UPROBE_TARGET));
  const Recipe r = Recipe::load(dir.path() / "r.toml");
  Diagnostics d;
  r.check_system(d);
  ASSERT_EQ(d.items().size(), 3U) << d.format();
  EXPECT_EQ(d.items()[0].where.line, 6U);
  EXPECT_EQ(d.items()[0].where.column, 10U);
  EXPECT_EQ(d.items()[1].where.line, 10U);
  EXPECT_NE(d.items()[1].hint.find("tracer_test_fn"), std::string::npos) << d.format();
  EXPECT_EQ(d.items()[2].where.line, 13U);
  EXPECT_NE(d.items()[2].message.find("missing.bpf.o"), std::string::npos) << d.format();
}

// A library's recipe string with RecipeLoadOptions::check_kernel: what the kernel alone answers
// fails where the string is loaded, in the shape of the text's own problems (positions,
// subjects, hints), not at start. What needs more than the kernel (a binary, a [bpf] file) is
// left to check_system; without the option the same string loads.
constexpr const char* kKernelTypos =
    "[recipe]\nname = \"x\"\n\n"
    "[[probe]]\nname = \"typo\"\ntracepoint = \"syscalls:sys_enter_opnat\"\n\n"  // lines 4-6
    "[[probe]]\nname = \"opens\"\ntracepoint = \"syscalls:sys_enter_openat\"\n"  // 8-10
    "filter = \"flags == 0 && filenme ~ \\\"/etc/*\\\"\"\n\n"                    // 11
    "[[probe]]\nname = \"fn\"\nuprobe = \"/nonexistent/bin:main\"\n\n"           // 13-15
    "[bpf]\nobject = \"missing.bpf.o\"\n";

TEST(RecipeCheckSystem, ALoadThatChecksTheKernelThrowsWhatTheKernelAnswersAtItsPositions) {
  REQUIRE_TRACEPOINT("syscalls", "sys_enter_openat");
  EXPECT_NO_THROW((void)Recipe::load_string(kKernelTypos, "lib.toml"));
  try {
    (void)Recipe::load_string(kKernelTypos, "lib.toml", {.check_kernel = true});
    FAIL() << "a load that checks the kernel did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
    ASSERT_EQ(e.problems().size(), 2U) << e.what();
    const Problem& tp = e.problems()[0];
    ASSERT_TRUE(tp.where.has_value());
    EXPECT_EQ(at(*tp.where), "lib.toml:6:14");
    EXPECT_EQ(tp.message, "unknown tracepoint 'syscalls:sys_enter_opnat'");
    EXPECT_NE(tp.hint.find("sys_enter_openat"), std::string::npos) << tp.hint;
    EXPECT_EQ(tp.subject.recipe_probe, 0U);
    const Problem& field = e.problems()[1];
    ASSERT_TRUE(field.where.has_value());
    EXPECT_EQ(field.where->line, 11U);
    EXPECT_NE(field.message.find("no field 'filenme'"), std::string::npos) << field.message;
    EXPECT_EQ(field.hint, "did you mean 'filename'?");
    EXPECT_EQ(field.subject.recipe_probe, 1U);
    EXPECT_EQ(field.subject.option, "filter");
    // The first problem's fields are the error's, and what() says every one.
    EXPECT_EQ(e.where(), tp.where);
    EXPECT_EQ(e.hint(), tp.hint);
    const std::string what = e.what();
    EXPECT_NE(what.find("lib.toml:6:14: unknown tracepoint"), std::string::npos) << what;
    EXPECT_NE(what.find("lib.toml:11:"), std::string::npos) << what;
    EXPECT_EQ(what.find("/nonexistent"), std::string::npos) << "a binary is not the kernel's";
    EXPECT_EQ(what.find("missing.bpf.o"), std::string::npos) << "a file is not the kernel's";
  }
}

TEST(RecipeCheckSystem, ALoadThatChecksTheKernelGathersIntoProblemsAndPassesAGoodRecipe) {
  REQUIRE_TRACEPOINT("syscalls", "sys_enter_openat");
  Diagnostics problems;
  const Recipe r =
      Recipe::load_string(kKernelTypos, "lib.toml", {.problems = &problems, .check_kernel = true});
  EXPECT_EQ(r.probes.size(), 3U);
  ASSERT_EQ(problems.size(), 2U) << problems.format();
  EXPECT_EQ(problems.items()[0].where.line, 6U);
  EXPECT_EQ(problems.items()[1].where.line, 11U);
  // The same recipe, spelt right, loads. A recipe whose text has a problem of its own is not
  // taken to the kernel (a recipe half read would name tracepoints it does not mean): its
  // kernel typos are not reported beside the text's.
  std::string good = kKernelTypos;
  good.replace(good.find("opnat"), 5, "openat");
  good.replace(good.find("filenme"), 7, "filename");
  EXPECT_NO_THROW((void)Recipe::load_string(good, "lib.toml", {.check_kernel = true}));
  std::string bad_text = kKernelTypos;
  bad_text.replace(bad_text.find("name = \"typo\""), 13, "nmae = \"typo\"");
  try {
    (void)Recipe::load_string(bad_text, "lib.toml", {.check_kernel = true});
    FAIL() << "an unknown key did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("lib.toml:5:1: unknown key 'nmae'"), std::string::npos) << what;
    EXPECT_EQ(what.find("unknown tracepoint"), std::string::npos) << what;
    EXPECT_EQ(what.find("filenme"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace tracer
