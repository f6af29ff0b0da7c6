// The filter grammars (tracer/ext/filter_tree.hpp): a recursive descent over a tokenizer, into
// a flat tree of bounded size.
#include "tracer/ext/filter_tree.hpp"

#include <fmt/format.h>

#include "tracer/tracefs/filter.hpp"

#include <cctype>
#include <charconv>
#include <climits>
#include <cstdint>

namespace tracer {
namespace {

class FilterParser {
 public:
  FilterParser(std::string_view text, FilterTree& out, FilterError& error, bool tracefs)
      : text_(text), out_(out), error_(error), tracefs_(tracefs) {}

  /// Reads the kernel's whole grammar, not only what has an in-kernel form (the bitwise '&',
  /// CPUS{list} values, a ".function" suffix), and records every field it reads in `fields`,
  /// those before an error too.
  void record_fields(std::vector<tracefs::FilterField>& fields) {
    fields_ = &fields;
    tracefs_ = true;
  }

  bool run() {
    next();
    const int root = parse_or(0);
    if (root < 0 || !error_.message.empty())
      return false;
    if (tok_ != Tok::kEnd)
      return fail(tok_start_, fmt::format("unexpected '{}' after the expression", tok_text_));
    out_.root = root;
    return true;
  }

 private:
  enum class Tok : std::uint8_t {
    kEnd,
    kIdent,
    kInt,
    kString,
    kCmp,
    kAnd,
    kOr,
    kNot,
    kMinus,
    kLParen,
    kRParen,
    kError
  };
  static constexpr int kMaxDepth = 64;
  static constexpr std::size_t kMaxNodes = 1024;

  bool fail(std::size_t at, std::string message) {
    if (error_.message.empty()) {
      error_.column = at + 1;
      error_.message = std::move(message);
    }
    return false;
  }

  void next() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
    tok_start_ = pos_;
    if (pos_ >= text_.size()) {
      tok_ = Tok::kEnd;
      tok_text_ = "end of expression";
      return;
    }
    const char c = text_[pos_];
    const auto two = text_.substr(pos_, 2);
    const auto set = [&](Tok t, std::size_t n) {
      tok_ = t;
      tok_text_ = std::string(text_.substr(pos_, n));
      pos_ += n;
    };
    if (two == "==" || two == "!=" || two == "<=" || two == ">=") {
      cmp_ = two == "=="   ? FilterCmp::kEq
             : two == "!=" ? FilterCmp::kNe
             : two == "<=" ? FilterCmp::kLe
                           : FilterCmp::kGe;
      return set(Tok::kCmp, 2);
    }
    if (two == "&&")
      return set(Tok::kAnd, 2);
    if (two == "||")
      return set(Tok::kOr, 2);
    if (tracefs_ && c == '~') {  // tracefs: a glob match of a string field
      cmp_ = FilterCmp::kEq;
      glob_op_ = true;
      return set(Tok::kCmp, 1);
    }
    if (tracefs_ && c == '&' && fields_ != nullptr) {  // bitwise and: its field is all we want
      cmp_ = FilterCmp::kEq;
      return set(Tok::kCmp, 1);
    }
    if (tracefs_ && c == '&') {
      tok_ = Tok::kError;
      fail(pos_,
           "the bitwise '&' of a tracefs filter has no form in the probe's in-kernel program");
      return;
    }
    switch (c) {
      case '<':
        cmp_ = FilterCmp::kLt;
        return set(Tok::kCmp, 1);
      case '>':
        cmp_ = FilterCmp::kGt;
        return set(Tok::kCmp, 1);
      case '!':
        return set(Tok::kNot, 1);
      case '-':
        return set(Tok::kMinus, 1);
      case '(':
        return set(Tok::kLParen, 1);
      case ')':
        return set(Tok::kRParen, 1);
      case '=':
        tok_ = Tok::kError;
        fail(pos_, "'=' is not an operator: use '==' to compare");
        return;
      case '"':
      case '\'':
        return lex_string(c);
      default:
        break;
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0)
      return lex_int();
    if (std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_')
      return lex_ident();
    tok_ = Tok::kError;
    fail(pos_, fmt::format("unexpected character '{}'", c));
  }

  void lex_string(char quote) {
    std::string s;
    std::size_t i = pos_ + 1;
    while (i < text_.size() && text_[i] != quote) {
      char c = text_[i];
      if (c == '\\' && i + 1 < text_.size()) {
        const char n = text_[++i];
        c = n == 'n' ? '\n' : n == 't' ? '\t' : n;
      }
      s.push_back(c);
      ++i;
    }
    if (i >= text_.size()) {
      tok_ = Tok::kError;
      fail(pos_, "unterminated string literal");
      return;
    }
    tok_ = Tok::kString;
    tok_text_ = std::move(s);
    pos_ = i + 1;
  }

  void lex_int() {
    std::size_t i = pos_;
    int base = 10;
    if (text_.substr(i, 2) == "0x" || text_.substr(i, 2) == "0X") {
      base = 16;
      i += 2;
    }
    const std::size_t digits = i;
    while (i < text_.size() && std::isalnum(static_cast<unsigned char>(text_[i])) != 0)
      ++i;
    std::uint64_t v = 0;
    const auto [p, ec] = std::from_chars(text_.data() + digits, text_.data() + i, v, base);
    if (ec != std::errc{} || p != text_.data() + i || digits == i) {
      tok_ = Tok::kError;
      fail(pos_, ec == std::errc::result_out_of_range
                     ? "integer literal out of range"
                     : fmt::format("bad integer literal '{}'", text_.substr(pos_, i - pos_)));
      return;
    }
    tok_ = Tok::kInt;
    tok_text_ = std::string(text_.substr(pos_, i - pos_));
    int_ = v;
    pos_ = i;
  }

  void lex_ident() {
    std::size_t i = pos_;
    while (i < text_.size() &&
           (std::isalnum(static_cast<unsigned char>(text_[i])) != 0 || text_[i] == '_'))
      ++i;
    if (i < text_.size() && text_[i] == '[') {
      const std::size_t close = text_.find(']', i);
      if (close == std::string_view::npos) {
        tok_ = Tok::kError;
        fail(i, "missing ']' after the array index");
        return;
      }
      i = close + 1;
    }
    std::size_t end = i;  // of the name
    if (fields_ != nullptr) {
      // A value CPUS{0-3,7}, a string to the parser; a field's suffix (call_site.function),
      // not part of its name.
      if (text_.substr(pos_, i - pos_) == "CPUS" && i < text_.size() && text_[i] == '{') {
        const std::size_t close = text_.find('}', i);
        i = end = close == std::string_view::npos ? text_.size() : close + 1;
      }
      while (i < text_.size() &&
             (text_[i] == '.' || std::isalnum(static_cast<unsigned char>(text_[i])) != 0 ||
              text_[i] == '_'))
        ++i;
    }
    tok_ = Tok::kIdent;
    tok_text_ = std::string(text_.substr(pos_, end - pos_));
    pos_ = i;
  }

  int add(FilterTree::Node n) {
    // Evaluation and code generation walk the tree: its size is bounded, with a position.
    if (out_.nodes.size() >= kMaxNodes) {
      fail(tok_start_, fmt::format("an expression of more than {} terms", kMaxNodes));
      return -1;
    }
    out_.nodes.push_back(std::move(n));
    return static_cast<int>(out_.nodes.size() - 1);
  }

  int parse_or(int depth) {
    int lhs = parse_and(depth);
    while (lhs >= 0 && tok_ == Tok::kOr) {
      next();
      const int rhs = parse_and(depth);
      if (rhs < 0)
        return -1;
      lhs = add({.kind = FilterTree::Node::Kind::kOr, .lhs = lhs, .rhs = rhs});
    }
    return lhs;
  }

  int parse_and(int depth) {
    int lhs = parse_unary(depth);
    while (lhs >= 0 && tok_ == Tok::kAnd) {
      next();
      const int rhs = parse_unary(depth);
      if (rhs < 0)
        return -1;
      lhs = add({.kind = FilterTree::Node::Kind::kAnd, .lhs = lhs, .rhs = rhs});
    }
    return lhs;
  }

  int parse_unary(int depth) {
    if (depth > kMaxDepth) {
      fail(tok_start_, "expression nested too deeply");
      return -1;
    }
    if (tok_ == Tok::kNot) {
      next();
      const int inner = parse_unary(depth + 1);
      if (inner < 0)
        return -1;
      return add({.kind = FilterTree::Node::Kind::kNot, .lhs = inner});
    }
    if (tok_ == Tok::kLParen) {
      const std::size_t open = tok_start_;
      next();
      const int inner = parse_or(depth + 1);
      if (inner < 0)
        return -1;
      if (tok_ != Tok::kRParen) {
        fail(tok_start_, fmt::format("expected ')' to close the '(' at column {}, found '{}'",
                                     open + 1, tok_text_));
        return -1;
      }
      next();
      return inner;
    }
    FilterTree::Node node;
    if (!parse_operand(node.a))
      return -1;
    if (tok_ != Tok::kCmp) {
      node.kind = FilterTree::Node::Kind::kTruth;
      return add(std::move(node));
    }
    node.kind = FilterTree::Node::Kind::kCmp;
    node.op = cmp_;
    const bool glob_op = glob_op_;
    glob_op_ = false;
    next();
    if (tracefs_) {
      // tracefs: the right side is a value, a bare word a string ("comm == bash"); '==' on
      // strings compares whole strings, '~' matches a glob (kernel trace_events_filter.c).
      if (tok_ == Tok::kIdent)
        tok_ = Tok::kString;
      if (glob_op && tok_ != Tok::kString) {
        // -1, not fail()'s false: 0 is a node index (a tree rooted at a node never added).
        fail(tok_start_, "'~' matches a string field against a glob: quote the pattern");
        return -1;
      }
    }
    if (!parse_operand(node.b))
      return -1;
    if (tracefs_ && node.b.kind == FilterTree::Operand::Kind::kString)
      node.b.glob = glob_op;
    return add(std::move(node));
  }

  bool parse_operand(FilterTree::Operand& o) {
    o.column = tok_start_ + 1;
    switch (tok_) {
      case Tok::kIdent:
        o.kind = FilterTree::Operand::Kind::kField;
        o.text = tok_text_;
        if (fields_ != nullptr)
          fields_->push_back({.name = tok_text_, .offset = tok_start_});
        next();
        return true;
      case Tok::kString:
        o.kind = FilterTree::Operand::Kind::kString;
        o.text = tok_text_;
        o.glob = o.text.find_first_of("*?[") != std::string::npos;
        next();
        return true;
      case Tok::kMinus: {
        next();
        if (tok_ != Tok::kInt)
          return fail(tok_start_, "expected an integer after '-'");
        if (int_ > std::uint64_t{INT64_MAX} + 1)
          return fail(o.column - 1, "integer literal out of range");
        o.kind = FilterTree::Operand::Kind::kInt;
        o.ival = static_cast<std::int64_t>(0 - int_);
        o.text = "-" + tok_text_;
        next();
        return true;
      }
      case Tok::kInt:
        if (int_ > std::uint64_t{INT64_MAX}) {
          o.kind = FilterTree::Operand::Kind::kUint;
          o.uval = int_;
        } else {
          o.kind = FilterTree::Operand::Kind::kInt;
          o.ival = static_cast<std::int64_t>(int_);
        }
        o.text = tok_text_;
        next();
        return true;
      case Tok::kError:
        return false;
      default:
        return fail(tok_start_,
                    fmt::format("expected a field, a number or a string, found '{}'", tok_text_));
    }
  }

  std::string_view text_;
  FilterTree& out_;
  FilterError& error_;
  std::size_t pos_ = 0, tok_start_ = 0;
  Tok tok_ = Tok::kEnd;
  std::string tok_text_;
  std::uint64_t int_ = 0;
  FilterCmp cmp_ = FilterCmp::kEq;
  bool tracefs_ = false;
  bool glob_op_ = false;                                 // the last kCmp token was tracefs' '~'
  std::vector<tracefs::FilterField>* fields_ = nullptr;  // record_fields()'s
};

}  // namespace

std::optional<FilterTree> parse_filter(std::string_view text,
                                       FilterGrammar grammar,
                                       FilterError& error) {
  FilterTree tree;
  error = {};
  FilterParser parser(text, tree, error, grammar == FilterGrammar::kTracefs);
  if (!parser.run()) {
    if (error.message.empty())
      error = {.column = 1, .message = "bad expression"};
    return std::nullopt;
  }
  return tree;
}

namespace tracefs {

std::vector<FilterField> filter_fields(std::string_view filter) {
  std::vector<FilterField> fields;
  FilterTree tree;
  FilterError error;
  FilterParser parser(filter, tree, error, true);
  parser.record_fields(fields);
  (void)parser.run();  // a text it does not read: the fields up to there, the kernel judges it
  return fields;
}

}  // namespace tracefs
}  // namespace tracer
