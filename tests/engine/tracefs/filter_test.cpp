// filter_fields(): the fields of a tracefs filter, in the kernel's grammar.
#include "tracer/tracefs/filter.hpp"

#include <gtest/gtest.h>

#include "tracer/ext/filter_tree.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace tracer::tracefs {
namespace {

std::vector<std::pair<std::string, std::size_t>> fields(std::string_view f) {
  std::vector<std::pair<std::string, std::size_t>> out;
  for (const auto& ff : filter_fields(f))
    out.emplace_back(ff.name, ff.offset);
  return out;
}

using V = std::vector<std::pair<std::string, std::size_t>>;

TEST(TracefsFilter, PredicatesJoinedAndGrouped) {
  EXPECT_EQ(fields("prev_pid == 1"), (V{{"prev_pid", 0}}));
  EXPECT_EQ(fields("prev_pid>1&&next_pid<=2"), (V{{"prev_pid", 0}, {"next_pid", 12}}));
  EXPECT_EQ(fields("!(a != 1 || (b & 4)) && c >= -3"), (V{{"a", 2}, {"b", 13}, {"c", 24}}));
  EXPECT_EQ(fields(R"(comm ~ "ba*" && prev_comm == 'x y' || cpu == 0)"),
            (V{{"comm", 0}, {"prev_comm", 16}, {"cpu", 38}}));
  EXPECT_EQ(fields("cpumask & CPUS{0-1} && x == 1"), (V{{"cpumask", 0}, {"x", 23}}));
  EXPECT_EQ(fields("call_site.function == kfree && bytes_req > 8"),
            (V{{"call_site", 0}, {"bytes_req", 31}}));
}

TEST(TracefsFilter, StopsWhereTheGrammarEnds) {
  EXPECT_EQ(fields(""), V{});
  EXPECT_EQ(fields("== 1"), V{});
  EXPECT_EQ(fields("a == 1 && "), (V{{"a", 0}}));
  EXPECT_EQ(fields("a 1 && b == 2"), (V{{"a", 0}}));  // no operator: the kernel judges the rest
  EXPECT_EQ(fields(R"(a == "unterminated && b == 1)"), (V{{"a", 0}}));
}

TEST(TracefsFilter, TheFieldsAreTheTreesOperandsWhereTheTreeHasAForm) {
  // One reader: where the in-kernel tree reads a filter, its field operands are the fields.
  for (const char* f : {"prev_pid == 1", "!(a != 1 || b > 4) && c >= -3",
                        R"(comm ~ "ba*" && prev_comm == 'x y' || cpu == 0)", "x && !y"}) {
    FilterError error;
    const auto tree = parse_filter(f, FilterGrammar::kTracefs, error);
    ASSERT_TRUE(tree) << f << ": " << error.message;
    V from_tree;
    for (const auto& n : tree->nodes) {
      for (const auto* o : {&n.a, &n.b}) {
        if (o->kind == OperandKind::kField && n.kind != FilterNodeKind::kOr &&
            n.kind != FilterNodeKind::kAnd && n.kind != FilterNodeKind::kNot)
          from_tree.emplace_back(o->text, o->column - 1);
      }
    }
    std::ranges::sort(from_tree, {}, &std::pair<std::string, std::size_t>::second);
    EXPECT_EQ(fields(f), from_tree) << f;
  }
}

TEST(TracefsFilter, GenericFields) {
  for (const char* f : {"cpu", "CPU", "common_cpu", "comm", "COMM", "stacktrace"})
    EXPECT_TRUE(is_generic_filter_field(f)) << f;
  EXPECT_FALSE(is_generic_filter_field("pid"));
  EXPECT_FALSE(is_generic_filter_field("common_pid"));  // a format field, not a generic one
}

}  // namespace
}  // namespace tracer::tracefs
