// The code generator (engine/kernel/codegen*.cpp) and its reader, without a workload: what
// cannot run in the kernel is named, every shape compiles and loads, the same text compiles
// once, and the buckets' labels are the stages'. The live half is codegen_live_test.cpp.
#include "codegen_harness.hpp"

namespace tracer::kernel::gen {
namespace {

using namespace harness;
using namespace std::chrono_literals;

TEST(BpfCodegen, CheckNamesWhatCannotRunInTheKernel) {
  EXPECT_EQ(check(simple_plan()), std::nullopt);
  const auto reason = [](auto edit) {
    KernelPlan plan = simple_plan();
    edit(plan);
    return check(plan).value_or("(runs in the kernel)");
  };
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].filter = {{cmp(fld(Field::comm()), Cmp::kLt, str("m"))}, 0};
            }).find("orders strings"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].filter = {{cmp(fld(Field::comm()), Cmp::kEq, str("ba?h", true))}, 0};
            }).find("glob"),
            std::string::npos);
  // A prefix glob runs in the kernel.
  EXPECT_EQ(reason([](KernelPlan& p) {
              p.probes[0].filter = {{cmp(fld(Field::comm()), Cmp::kEq, str("bas*", true))}, 0};
            }),
            "(runs in the kernel)");
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].keys = {Field::tp_int("common_pid", 4, 4, true)};
            }).find("common fields"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) { p.probes[0].keys = {Field::arg(0)}; }).find("arguments"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].kind = ProbeKind::kUprobe;
              p.probes[0].keys = {Field::retval()};
            }).find("retval"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              // 100,002 buckets: a value of 800 KB per key, the stage's kernel part says so.
              p.aggregation = {
                  .agg = agg_of("lhist", {{"min", cv(0)}, {"max", cv(100000)}, {"step", cv(1)}}),
                  .key_names = {"pid"},
                  .value_name = "x"};
              p.probes[0].value = Field::tp_int("x", 8, 8, true);
            }).find("lhist: 100002 buckets per key"),
            std::string::npos);
  // The generator knows no aggregation: a plan without its stage's kernel part is refused.
  EXPECT_EQ(reason([](KernelPlan& p) { p.aggregation.agg = nullptr; }),
            "the aggregation has no kernel part");
  EXPECT_NE(reason([](KernelPlan& p) {
              p.aggregation = {.agg = agg_of("sum"), .key_names = {"pid"}, .value_name = "comm"};
              p.probes[0].value = Field::comm();
            }).find("a string"),
            std::string::npos);
  EXPECT_NE(
      reason([](KernelPlan& p) {
        p.probes.push_back({.name = "q", .kind = ProbeKind::kTracepoint, .keys = {Field::comm()}});
      }).find("different types"),
      std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].filter = {{cmp(fld(Field::comm()), Cmp::kEq, num(3))}, 0};
            }).find("string with a number"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              FilterNode loop{.kind = FilterNode::Kind::kNot, .lhs = 1};
              FilterNode back{.kind = FilterNode::Kind::kNot, .lhs = 0};
              p.probes[0].filter = {{loop, back}, 0};
            }).find("loops"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].record_size = 12;
              p.probes[0].keys = {Field::tp_int("x", 16, 8, false)};
            }).find("past the record"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.probes[0].filter = {{cmp(fld(Field::ustack()), Cmp::kEq, num(0))}, 0};
            }).find("reads a stack"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.aggregation = {.agg = agg_of("sum"), .key_names = {"pid"}, .value_name = "kstack"};
              p.probes[0].value = Field::kstack();
            }).find("a stack"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) {
              p.aggregation.key_names = {"stack"};
              p.probes[0].keys = {Field::kstack()};
              p.probes.push_back(
                  {.name = "q", .kind = ProbeKind::kTracepoint, .keys = {Field::ustack()}});
            }).find("different stack"),
            std::string::npos);
  EXPECT_NE(reason([](KernelPlan& p) { p.aggregation.stack_depth = 0; }).find("stack depth"),
            std::string::npos);
  auto gen = generate([] {
    KernelPlan p = simple_plan();
    p.probes[0].keys = {Field::arg(1)};
    return p;
  }());
  ASSERT_FALSE(gen.has_value());
  EXPECT_EQ(gen.error().errno_value(), EINVAL);
}

// ---------------------------------------------------------------------------------------------
// Every shape compiles, and the verifier accepts it

TEST(BpfCodegen, EveryShapeCompilesAndLoads) {
  struct Shape {
    std::string what;
    KernelPlan plan;
  };
  std::vector<Shape> shapes;
  const Field offset = Field::tp_int("offset", 24, 8, false);
  const Field path = Field::tp_data_loc("filename", 8);
  const auto tp = [](std::vector<Field> keys, Field value = {}) {
    return ProbePlan{.name = "tp",
                     .kind = ProbeKind::kTracepoint,
                     .keys = std::move(keys),
                     .value = std::move(value),
                     .record_size = 40};
  };
  for (const std::string_view kind :
       {"count", "sum", "min", "max", "avg", "hist", "lhist", "quantiles"}) {
    for (int keys = 0; keys < 3; ++keys) {
      KernelPlan plan;
      std::vector<Field> k;
      if (keys == 1)
        k = {Field::pid()};
      if (keys == 2)
        k = {Field::comm(), Field::cpu(), Field::tp_int("whence", 32, 8, false), Field::uid(),
             Field::cgroup()};
      plan.probes.push_back(tp(k, offset));
      plan.aggregation = {.agg = agg_of(kind), .value_name = "offset"};
      for (const auto& f : k)
        plan.aggregation.key_names.push_back(f.name);
      plan.tgids = keys == 1 ? std::vector<std::uint32_t>{1} : std::vector<std::uint32_t>{1, 2};
      shapes.push_back({fmt::format("agg {} keys {}", kind, keys), plan});
    }
  }
  {  // __data_loc string key and filters on every operand kind
    KernelPlan plan;
    ProbePlan p{.name = "exec",
                .kind = ProbeKind::kTracepoint,
                .keys = {path, Field::comm()},
                .record_size = 20};
    p.filter.nodes = {
        cmp(fld(path), Cmp::kEq, str("/bin/true")),                      // 0
        cmp(fld(Field::comm()), Cmp::kNe, str("bash*", true)),           // 1
        {.kind = FilterNode::Kind::kOr, .lhs = 0, .rhs = 1},             // 2
        cmp(fld(Field::tp_int("pid", 12, 4, true)), Cmp::kGe, num(-1)),  // 3
        cmp(fld(Field::uid()), Cmp::kLt, num(-1)),                       // 4 (mixed signs)
        {.kind = FilterNode::Kind::kNot, .lhs = 4},                      // 5
        {.kind = FilterNode::Kind::kAnd, .lhs = 3, .rhs = 5},            // 6
        {.kind = FilterNode::Kind::kAnd, .lhs = 2, .rhs = 6},            // 7
        {.kind = FilterNode::Kind::kTruth, .a = fld(path)},              // 8
        {.kind = FilterNode::Kind::kAnd, .lhs = 7, .rhs = 8},            // 9
    };
    p.filter.root = 9;
    plan.probes.push_back(p);
    plan.aggregation = {.agg = agg_of("count"), .key_names = {"filename", "comm"}};
    plan.follow_children = ForkTracepoint{};
    plan.tgids = {1};
    shapes.push_back({"data_loc key and filters, shared map, fork follower", plan});
  }
  {  // kprobe/kretprobe latency with a uprobe beside it, keyed by probe
    KernelPlan plan;
    plan.probes.push_back({.name = "entry", .kind = ProbeKind::kKprobe});
    plan.probes.push_back({.name = "exit",
                           .kind = ProbeKind::kKretprobe,
                           .keys = {Field::probe(), Field::retval()},
                           .value = Field::duration()});
    plan.probes.push_back({.name = "up",
                           .kind = ProbeKind::kUprobe,
                           .keys = {Field::probe(), Field::missing("retval")},
                           .value = Field::arg(0)});
    plan.latency = Latency{.entry_probe = 0, .exit_probe = 1};
    plan.aggregation = {
        .agg = agg_of("hist"), .key_names = {"probe", "retval"}, .value_name = "duration"};
    shapes.push_back({"latency + uprobe", plan});
    plan.aggregation.agg = agg_of("min");
    shapes.push_back({"latency + uprobe, min", plan});
  }
  {  // stack keys on every program kind: a tracepoint, a uprobe (the guarded scratch buffer)
     // and a perf event (BPF_PROG_TYPE_PERF_EVENT), the depth kept small
    KernelPlan plan;
    plan.probes.push_back(tp({Field::comm(), Field::callchain()}));
    plan.probes.push_back(
        {.name = "up", .kind = ProbeKind::kUprobe, .keys = {Field::comm(), Field::callchain()}});
    plan.probes.push_back(
        {.name = "cpu", .kind = ProbeKind::kSoftware, .keys = {Field::comm(), Field::callchain()}});
    plan.aggregation = {.agg = agg_of("count"),
                        .key_names = {"comm", "callchain"},
                        .max_stacks = 64,
                        .stack_depth = 32};
    shapes.push_back({"callchain keys on a tracepoint, a uprobe and a perf event", plan});
    plan.probes.resize(1);
    plan.probes[0].keys = {Field::kstack(), Field::ustack()};
    plan.aggregation.key_names = {"kstack", "ustack"};
    plan.aggregation.agg = agg_of("hist");
    plan.aggregation.value_name = "offset";
    plan.probes[0].value = offset;
    shapes.push_back({"kstack and ustack keys of a hist", plan});
  }
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.what);
    auto prog = generate(s.plan);
    ASSERT_TRUE(prog.has_value()) << prog.error().describe();
    auto obj = compile(*prog, {.cache_dir = cache_dir()});
    ASSERT_TRUE(obj.has_value()) << obj.error().describe() << "\n" << prog->source;
    if (!is_root())
      continue;
    auto st = load(*obj, *prog);
    ASSERT_TRUE(st.has_value()) << st.error().describe() << "\n" << prog->source;
  }
}

TEST(BpfCodegen, TheSameTextIsCompiledOnce) {
  testing::TempDir dir;
  KernelPlan plan = simple_plan();
  plan.tgids = {4242};
  auto prog = generate(plan);
  ASSERT_TRUE(prog.has_value());
  const auto t0 = std::chrono::steady_clock::now();
  auto cold = compile(*prog, {.cache_dir = dir.path()});
  const auto t1 = std::chrono::steady_clock::now();
  auto warm = compile(*prog, {.cache_dir = dir.path()});
  const auto t2 = std::chrono::steady_clock::now();
  ASSERT_TRUE(cold.has_value()) << cold.error().describe();
  ASSERT_TRUE(warm.has_value()) << warm.error().describe();
  EXPECT_FALSE(cold->compile_info()->cache_hit);
  EXPECT_TRUE(warm->compile_info()->cache_hit);
  EXPECT_EQ(cold->compile_info()->object_path, warm->compile_info()->object_path);
  // Another target process is the same text: the pid is read-only data set at load
  // (gen::load), so a run for another command compiles nothing. Another shape is another text.
  plan.tgids = {4243};
  auto other = generate(plan);
  ASSERT_TRUE(other.has_value());
  EXPECT_EQ(other->hash, prog->hash);
  EXPECT_EQ(other->source.find("4243"), std::string::npos);
  EXPECT_EQ(prog->source.find("4242"), std::string::npos);
  auto again = compile(*other, {.cache_dir = dir.path()});
  ASSERT_TRUE(again.has_value()) << again.error().describe();
  EXPECT_TRUE(again->compile_info()->cache_hit);
  plan.tgids = {4243, 4244};
  auto two = generate(plan);
  ASSERT_TRUE(two.has_value());
  EXPECT_NE(two->hash, prog->hash);
  plan.tgids = {};
  plan.exclude_tgid = 99;
  auto wide = generate(plan);
  plan.exclude_tgid = 100;
  auto wide2 = generate(plan);
  ASSERT_TRUE(wide.has_value() && wide2.has_value());
  EXPECT_EQ(wide->hash, wide2->hash) << "tracer's own pid is not in the text either";
  EXPECT_NE(wide->hash, prog->hash);
  std::printf("[ measured ] generated program compile: cold %.1f ms, cached %.1f ms\n",
              std::chrono::duration<double, std::milli>(t1 - t0).count(),
              std::chrono::duration<double, std::milli>(t2 - t1).count());
}

// The generated maps hold the stages' buckets (tracer/common/buckets.hpp; the C that fills them
// is tests/engine/kernel/buckets_test.cpp's, and live: Aggregations/SamePlacement).
TEST(BpfCodegen, BucketCountsAreTheStages) {
  using Expected = std::pair<std::string_view, std::size_t>;
  for (const auto& [kind, buckets] :
       {Expected{"hist", detail::kLog2Buckets}, Expected{"quantiles", detail::kQuantileBuckets},
        Expected{"lhist", detail::linear_inner(0, 100, 10) + 2}}) {
    KernelPlan plan;
    plan.probes.push_back({.name = "p", .value = Field::pid()});
    plan.aggregation = {.agg = agg_of(kind), .value_name = "pid"};
    const auto prog = generate(plan, 2);
    ASSERT_TRUE(prog.has_value()) << prog.error().message;
    EXPECT_NE(prog->source.find(fmt::format("__u64 counts[{}];", buckets)), std::string::npos)
        << kind;
    EXPECT_NE(prog->source.find(fmt::format("if (b >= {})", buckets)), std::string::npos) << kind;
  }
}

// ---------------------------------------------------------------------------------------------
// Live

}  // namespace
}  // namespace tracer::kernel::gen
