// The filter stage: expressions parsed with their columns, globs, evaluation on events, bind
// errors at the operand.
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

using stages::FilterError;
using stages::FilterExpr;
using namespace testing;  // tracer::testing: Harness, ev, Json, fake probes and records
using ::testing::HasSubstr;
using namespace std::chrono_literals;

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

}  // namespace
}  // namespace tracer
