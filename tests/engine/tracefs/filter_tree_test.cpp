// parse_filter(): one parser for the filter stage's expression and a probe's tracefs filter
// (tracer/ext/filter_tree.hpp, the tracefs layer): the trees both grammars give, and their
// errors with columns.
#include "tracer/ext/filter_tree.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tracer {
namespace {

/// The tree as an s-expression: (&& (== comm "bash") (! (> pid 5))); a glob string as ~"x*".
std::string dump(const FilterTree& t, int n) {
  const auto& node = t.nodes.at(static_cast<std::size_t>(n));
  const auto operand = [](const FilterTree::Operand& o) -> std::string {
    switch (o.kind) {
      case OperandKind::kField:
        return o.text;
      case OperandKind::kString:
        return (o.glob ? "~\"" : "\"") + o.text + "\"";
      case OperandKind::kInt:
        return std::to_string(o.ival);
      case OperandKind::kUint:
        return std::to_string(o.uval) + "u";
    }
    return "?";
  };
  static constexpr const char* kCmp[] = {"==", "!=", "<", "<=", ">", ">="};
  switch (node.kind) {
    case FilterNodeKind::kOr:
      return "(|| " + dump(t, node.lhs) + " " + dump(t, node.rhs) + ")";
    case FilterNodeKind::kAnd:
      return "(&& " + dump(t, node.lhs) + " " + dump(t, node.rhs) + ")";
    case FilterNodeKind::kNot:
      return "(! " + dump(t, node.lhs) + ")";
    case FilterNodeKind::kCmp:
      return std::string("(") + kCmp[static_cast<int>(node.op)] + " " + operand(node.a) + " " +
             operand(node.b) + ")";
    case FilterNodeKind::kTruth:
      return operand(node.a);
  }
  return "?";
}

std::string parse(std::string_view text, FilterGrammar g) {
  FilterError error;
  const auto tree = parse_filter(text, g, error);
  if (!tree)
    return "error at " + std::to_string(error.column) + ": " + error.message;
  return dump(*tree, tree->root);
}

TEST(FilterTree, TheFilterStagesGrammar) {
  constexpr auto g = FilterGrammar::kTracer;
  EXPECT_EQ(parse(R"(comm == "bash" && !(pid > 5) || ret < -1)", g),
            R"((|| (&& (== comm "bash") (! (> pid 5))) (< ret -1)))");
  EXPECT_EQ(parse(R"(comm == 'ba*' && args[0] != 0x10)", g),
            R"((&& (== comm ~"ba*") (!= args[0] 16)))");
  EXPECT_EQ(parse("18446744073709551615 == addr", g), "(== 18446744073709551615u addr)");
  EXPECT_EQ(parse("ret", g), "ret");
  // What is tracefs' only: a bare word on the right is a field, `~` is no operator.
  EXPECT_EQ(parse("comm == bash", g), "(== comm bash)");
  EXPECT_EQ(parse(R"(comm ~ "b*")", g), "error at 6: unexpected character '~'");
}

TEST(FilterTree, ATracefsFilter) {
  constexpr auto g = FilterGrammar::kTracefs;
  EXPECT_EQ(parse("comm == bash && prev_pid != 0", g), R"((&& (== comm "bash") (!= prev_pid 0)))");
  EXPECT_EQ(parse(R"(comm ~ "ba*" || cpu == 1)", g), R"((|| (== comm ~"ba*") (== cpu 1)))");
  // `==` compares whole strings: a literal with * is not a glob unless `~` says so.
  EXPECT_EQ(parse(R"(comm == "ba*")", g), R"((== comm "ba*"))");
  // An unquoted pattern is not read (the message says to quote it): such a probe's program has
  // no form of its filter, and the pipeline says so and stays in user space.
  EXPECT_EQ(parse("comm ~ ba*", g), "error at 10: unexpected character '*'");
  EXPECT_EQ(parse("comm ~ 5", g),
            "error at 8: '~' matches a string field against a glob: quote the pattern");
  EXPECT_EQ(parse("flags & 4", g),
            "error at 7: the bitwise '&' of a tracefs filter has no form in the probe's "
            "in-kernel program");
}

TEST(FilterTree, ErrorsNameTheirColumnAndTheTreeIsBounded) {
  constexpr auto g = FilterGrammar::kTracer;
  EXPECT_EQ(parse("pid = 1", g), "error at 5: '=' is not an operator: use '==' to compare");
  EXPECT_EQ(parse("(pid == 1", g),
            "error at 10: expected ')' to close the '(' at column 1, "
            "found 'end of expression'");
  EXPECT_EQ(parse(R"(comm == "x)", g), "error at 9: unterminated string literal");
  EXPECT_EQ(parse("pid == 99999999999999999999", g), "error at 8: integer literal out of range");
  EXPECT_EQ(parse("pid == 1 )", g), "error at 10: unexpected ')' after the expression");
  EXPECT_EQ(parse(std::string(70, '!') + "x", g), "error at 66: expression nested too deeply");
  std::string wide = "a";
  for (int i = 0; i < 1100; ++i)
    wide += " || a";
  EXPECT_NE(parse(wide, g).find("an expression of more than 1024 terms"), std::string::npos);
}

}  // namespace
}  // namespace tracer
