// Derived metrics of a counter group (see counter_expr.hpp).
#include "tracer/counter_expr.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>

namespace tracer {

struct CounterExpr::Node {
  enum class Kind : std::uint8_t { kNumber, kCounter, kSeconds, kNeg, kAdd, kSub, kMul, kDiv };
  Kind kind = Kind::kNumber;
  double number = 0;
  std::size_t counter = 0;
  std::shared_ptr<const Node> a, b;
};

namespace {

using Node = CounterExpr::Node;
using NodePtr = std::shared_ptr<const Node>;

constexpr int kMaxDepth = 64;  // parentheses and unary minus nest at most this deep

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == ':' ||
         c == '.';
}

class Parser {
 public:
  Parser(std::string_view text, std::span<const std::string> names) : text_(text), names_(names) {}

  Result<NodePtr> parse() {
    auto e = expr(0);
    if (!e)
      return e;
    skip();
    if (at_ < text_.size())
      return fail(error(fmt::format("unexpected '{}'", text_[at_]), "an operator: + - * /"));
    return e;
  }
  std::vector<std::size_t> inputs;

 private:
  void skip() {
    while (at_ < text_.size() && text_[at_] == ' ')
      ++at_;
  }
  Failure error(const std::string& what, const std::string& expected) const {
    std::string known;
    for (const auto& n : names_)
      known += (known.empty() ? "" : ", ") + n;
    return {std::make_error_code(std::errc::invalid_argument),
            fmt::format("column {}: {}; expected {}", at_ + 1, what, expected),
            fmt::format("names are the group's counters ({}) or seconds", known)};
  }
  static NodePtr make(Node::Kind k, NodePtr a, NodePtr b) {
    auto n = std::make_shared<Node>();
    n->kind = k;
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }

  Result<NodePtr> expr(int depth) {
    auto left = term(depth);
    if (!left)
      return left;
    for (;;) {
      skip();
      if (at_ >= text_.size() || (text_[at_] != '+' && text_[at_] != '-'))
        return left;
      const char op = text_[at_++];
      auto right = term(depth);
      if (!right)
        return right;
      left = make(op == '+' ? Node::Kind::kAdd : Node::Kind::kSub, *left, *right);
    }
  }

  Result<NodePtr> term(int depth) {
    auto left = factor(depth);
    if (!left)
      return left;
    for (;;) {
      skip();
      if (at_ >= text_.size() || (text_[at_] != '*' && text_[at_] != '/'))
        return left;
      const char op = text_[at_++];
      auto right = factor(depth);
      if (!right)
        return right;
      left = make(op == '*' ? Node::Kind::kMul : Node::Kind::kDiv, *left, *right);
    }
  }

  Result<NodePtr> factor(int depth) {
    if (depth > kMaxDepth)
      return fail(error("nested too deep", fmt::format("at most {} levels", kMaxDepth)));
    skip();
    if (at_ >= text_.size())
      return fail(error("the expression ends", "a counter, a number or '('"));
    const char c = text_[at_];
    if (c == '(') {
      ++at_;
      auto e = expr(depth + 1);
      if (!e)
        return e;
      skip();
      if (at_ >= text_.size() || text_[at_] != ')')
        return fail(error("a '(' is not closed", "')'"));
      ++at_;
      return e;
    }
    if (c == '-') {
      ++at_;
      auto f = factor(depth + 1);
      if (!f)
        return f;
      return make(Node::Kind::kNeg, *f, nullptr);
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.') {
      double v = 0;
      const auto* begin = text_.data() + at_;
      const auto r = std::from_chars(begin, text_.data() + text_.size(), v);
      if (r.ec != std::errc{})
        return fail(error("a malformed number", "a number such as 1e9 or 100"));
      at_ += static_cast<std::size_t>(r.ptr - begin);
      auto n = std::make_shared<Node>();
      n->number = v;
      return NodePtr(n);
    }
    if (!name_char(c))
      return fail(error(fmt::format("unexpected '{}'", c), "a counter, a number or '('"));
    const std::size_t start = at_;
    while (at_ < text_.size() && name_char(text_[at_]))
      ++at_;
    const std::string_view name = text_.substr(start, at_ - start);
    auto n = std::make_shared<Node>();
    if (name == "seconds") {
      n->kind = Node::Kind::kSeconds;
      return NodePtr(n);
    }
    const auto it = std::find(names_.begin(), names_.end(), name);
    if (it == names_.end()) {
      at_ = start;
      return fail(error(fmt::format("'{}' is not a counter of the group", name),
                        "one of the group's counters"));
    }
    n->kind = Node::Kind::kCounter;
    n->counter = static_cast<std::size_t>(it - names_.begin());
    if (std::find(inputs.begin(), inputs.end(), n->counter) == inputs.end())
      inputs.push_back(n->counter);
    return NodePtr(n);
  }

  std::string_view text_;
  std::span<const std::string> names_;
  std::size_t at_ = 0;
};

std::optional<double> eval_node(const Node& n, std::span<const double> values, double seconds) {
  switch (n.kind) {
    case Node::Kind::kNumber:
      return n.number;
    case Node::Kind::kCounter:
      return n.counter < values.size() ? std::optional(values[n.counter]) : std::nullopt;
    case Node::Kind::kSeconds:
      return seconds;
    case Node::Kind::kNeg: {
      auto a = eval_node(*n.a, values, seconds);
      return a ? std::optional(-*a) : std::nullopt;
    }
    default:
      break;
  }
  const auto a = eval_node(*n.a, values, seconds);
  const auto b = eval_node(*n.b, values, seconds);
  if (!a || !b)
    return std::nullopt;
  switch (n.kind) {
    case Node::Kind::kAdd:
      return *a + *b;
    case Node::Kind::kSub:
      return *a - *b;
    case Node::Kind::kMul:
      return *a * *b;
    case Node::Kind::kDiv:
      if (*b == 0)
        return std::nullopt;
      return *a / *b;
    default:
      return std::nullopt;
  }
}

}  // namespace

Result<CounterExpr> CounterExpr::parse(std::string_view text, std::span<const std::string> names) {
  if (text.size() > 4096)
    return fail(EINVAL, "a metric expression of more than 4096 characters");
  Parser p(text, names);
  auto root = p.parse();
  if (!root)
    return fail(std::move(root).error());
  CounterExpr e;
  e.root_ = std::move(*root);
  e.inputs_ = std::move(p.inputs);
  return e;
}

std::optional<double> CounterExpr::eval(std::span<const double> values, double seconds) const {
  if (!root_)
    return std::nullopt;
  auto v = eval_node(*root_, values, seconds);
  if (v && !std::isfinite(*v))
    return std::nullopt;
  return v;
}

}  // namespace tracer
