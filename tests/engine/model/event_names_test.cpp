// Event names in perf's -e syntax (tracer/event_names.hpp) and the metric expressions of counter
// groups (tracer/counter_expr.hpp): what `tracer stat -e`, `-M`, [[counter]] and a probe's
// `read` accept, and what they refuse with the place of the problem.
#include "tracer/event_names.hpp"

#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <string>
#include <vector>

#include "tracer/counter_expr.hpp"
#include "tracer/error.hpp"

namespace tracer {
namespace {

TEST(EventList, GroupsModifiersAndPmuTermsSplitAsPerfSplitsThem) {
  auto g = parse_event_list(
      "{task-clock,page-faults}:u,context-switches,{sched:sched_switch,"
      "cpu-clock}:kW,software/config=2,config1=0/:u");
  ASSERT_EQ(g.size(), 4u);
  EXPECT_TRUE(g[0].grouped);
  EXPECT_FALSE(g[0].weak);
  EXPECT_EQ(g[0].events, (std::vector<std::string>{"task-clock:u", "page-faults:u"}));
  EXPECT_EQ(g[0].text, "{task-clock,page-faults}:u");
  EXPECT_FALSE(g[1].grouped);
  EXPECT_EQ(g[1].events, (std::vector<std::string>{"context-switches"}));
  EXPECT_TRUE(g[2].grouped);
  EXPECT_TRUE(g[2].weak);  // W makes it weak and is not a member's modifier
  EXPECT_EQ(g[2].events, (std::vector<std::string>{"sched:sched_switch:k", "cpu-clock:k"}));
  EXPECT_EQ(g[3].events, (std::vector<std::string>{"software/config=2,config1=0/:u"}));
  for (const char* bad : {"{a,b", "a}", "{a,{b}}", "{a,,b}", ""}) {
    EXPECT_THROW((void)parse_event_list(bad), Error) << bad;
  }
}

TEST(EventList, NamesResolveToTheirAttrsWithModifiers) {
  std::optional<tracefs::Tracefs> fs;
  auto a = resolve_event_name("page-faults:u", fs);
  EXPECT_EQ(a.type(), PERF_TYPE_SOFTWARE);
  EXPECT_EQ(a.config(), static_cast<std::uint64_t>(PERF_COUNT_SW_PAGE_FAULTS));
  EXPECT_TRUE(a.has(perf::Flag::kExcludeKernel));
  EXPECT_FALSE(a.has(perf::Flag::kExcludeUser));
  auto raw = resolve_event_name("r01c2", fs);
  EXPECT_EQ(raw.type(), PERF_TYPE_RAW);
  EXPECT_EQ(raw.config(), 0x1c2u);
  // The software PMU's sysfs directory with the builtin config term: page-faults again.
  auto pmu = resolve_event_name("software/config=2/:k", fs);
  EXPECT_EQ(pmu.type(), PERF_TYPE_SOFTWARE);
  EXPECT_EQ(pmu.config(), 2u);
  EXPECT_TRUE(pmu.has(perf::Flag::kExcludeUser));
  EXPECT_THROW((void)resolve_event_name("nosuchpmu/config=1/", fs), Error);
  EXPECT_THROW((void)resolve_event_name("page-faults:q", fs), Error);
  EXPECT_EQ(event_base_name("sched:sched_switch:k"), "sched:sched_switch");
  EXPECT_EQ(event_unit("task-clock:u"), "ns");
  EXPECT_EQ(event_unit("page-faults"), "");
  EXPECT_FALSE(check_event_name("software/config=2/"));
  EXPECT_FALSE(check_event_name("syscalls:sys_enter_read:u"));
  const auto typo = check_event_name("page-fault");
  ASSERT_TRUE(typo);
  EXPECT_NE(typo->hint.find("page-faults"), std::string::npos) << typo->hint;
}

TEST(CounterExprTest, ArithmeticOverCountersAndSeconds) {
  const std::vector<std::string> names = {"task-clock", "page-faults", "sched:sched_switch"};
  auto e = CounterExpr::parse("page-faults / seconds", names);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(*e->eval(std::vector<double>{0, 500, 0}, 0.5), 1000.0);
  EXPECT_EQ(e->inputs(), (std::vector<std::size_t>{1}));
  e = CounterExpr::parse("(page-faults - sched:sched_switch) * 2 + -1", names);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_EQ(*e->eval(std::vector<double>{0, 10, 4}, 1), 11.0);
  e = CounterExpr::parse("task-clock / (seconds * 1e9)", names);
  ASSERT_TRUE(e) << e.error().message;
  EXPECT_NEAR(*e->eval(std::vector<double>{2e9, 0, 0}, 1), 2.0, 1e-12);
  // Division by zero: no value.
  e = CounterExpr::parse("page-faults / sched:sched_switch", names);
  ASSERT_TRUE(e);
  EXPECT_FALSE(e->eval(std::vector<double>{0, 3, 0}, 1));
  // Errors name their column.
  auto bad = CounterExpr::parse("page-faults / nope", names);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("column 15"), std::string::npos) << bad.error().message;
  EXPECT_NE(bad.error().hint.find("page-faults"), std::string::npos);
  EXPECT_FALSE(CounterExpr::parse("(page-faults", names));
  EXPECT_FALSE(CounterExpr::parse("page-faults page-faults", names));
  EXPECT_FALSE(CounterExpr::parse("", names));
  EXPECT_FALSE(CounterExpr::parse(std::string(100, '(') + "1" + std::string(100, ')'), names));
}

}  // namespace
}  // namespace tracer
