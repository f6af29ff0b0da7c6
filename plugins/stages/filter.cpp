#include "filter.hpp"

#include "tracer/ext/stages.hpp"

#include <fmt/format.h>

#include <charconv>

namespace tracer::stages {

// ---------------------------------------------------------------------------------------------
// Glob

namespace {

// Matches one [set] at p[i] against c. Returns false (and leaves `end` at i) if the set is not
// closed, so the '[' is taken literally.
bool class_at(std::string_view p, std::size_t i, char c, std::size_t& end, bool& matched) noexcept {
  std::size_t j = i + 1;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    ++j;
  }
  bool hit = false;
  bool first = true;
  while (j < p.size() && (p[j] != ']' || first)) {
    first = false;
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      if (p[j] <= c && c <= p[j + 2])
        hit = true;
      j += 3;
    } else {
      if (p[j] == c)
        hit = true;
      ++j;
    }
  }
  if (j >= p.size())
    return false;
  end = j + 1;
  matched = hit != negate;
  return true;
}

}  // namespace

bool glob_match(std::string_view p, std::string_view t) noexcept {
  std::size_t pi = 0, ti = 0;
  std::size_t star_p = std::string_view::npos, star_t = 0;
  while (ti < t.size()) {
    if (pi < p.size()) {
      const char c = p[pi];
      if (c == '*') {
        star_p = pi++;
        star_t = ti;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++ti;
        continue;
      }
      std::size_t end = 0;
      bool matched = false;
      if (c == '[' && class_at(p, pi, t[ti], end, matched)) {
        if (matched) {
          pi = end;
          ++ti;
          continue;
        }
      } else if (c == t[ti]) {
        ++pi;
        ++ti;
        continue;
      }
    }
    if (star_p == std::string_view::npos)
      return false;
    pi = star_p + 1;
    ti = ++star_t;
  }
  while (pi < p.size() && p[pi] == '*')
    ++pi;
  return pi == p.size();
}

// ---------------------------------------------------------------------------------------------
// Parser

class FilterParser {
 public:
  FilterParser(std::string_view text, FilterExpr& out, FilterError& error, bool tracefs = false)
      : text_(text), out_(out), error_(error), tracefs_(tracefs) {}

  bool run() {
    next();
    const int root = parse_or(0);
    if (root < 0 || !error_.message.empty())
      return false;
    if (tok_ != Tok::kEnd)
      return fail(tok_start_, fmt::format("unexpected '{}' after the expression", tok_text_));
    out_.root_ = root;
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
      cmp_ = two == "=="   ? FilterExpr::Cmp::kEq
             : two == "!=" ? FilterExpr::Cmp::kNe
             : two == "<=" ? FilterExpr::Cmp::kLe
                           : FilterExpr::Cmp::kGe;
      return set(Tok::kCmp, 2);
    }
    if (two == "&&")
      return set(Tok::kAnd, 2);
    if (two == "||")
      return set(Tok::kOr, 2);
    if (tracefs_ && c == '~') {  // tracefs: a glob match of a string field
      cmp_ = FilterExpr::Cmp::kEq;
      glob_op_ = true;
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
        cmp_ = FilterExpr::Cmp::kLt;
        return set(Tok::kCmp, 1);
      case '>':
        cmp_ = FilterExpr::Cmp::kGt;
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
    tok_ = Tok::kIdent;
    tok_text_ = std::string(text_.substr(pos_, i - pos_));
    pos_ = i;
  }

  int add(FilterExpr::Node n) {
    // Evaluation and code generation walk the tree: its size is bounded, with a position.
    if (out_.nodes_.size() >= kMaxNodes) {
      fail(tok_start_, fmt::format("an expression of more than {} terms", kMaxNodes));
      return -1;
    }
    out_.nodes_.push_back(std::move(n));
    return static_cast<int>(out_.nodes_.size() - 1);
  }

  int parse_or(int depth) {
    int lhs = parse_and(depth);
    while (lhs >= 0 && tok_ == Tok::kOr) {
      next();
      const int rhs = parse_and(depth);
      if (rhs < 0)
        return -1;
      lhs = add({.kind = FilterExpr::Node::Kind::kOr, .lhs = lhs, .rhs = rhs});
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
      lhs = add({.kind = FilterExpr::Node::Kind::kAnd, .lhs = lhs, .rhs = rhs});
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
      return add({.kind = FilterExpr::Node::Kind::kNot, .lhs = inner});
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
    FilterExpr::Node node;
    if (!parse_operand(node.a))
      return -1;
    if (tok_ != Tok::kCmp) {
      node.kind = FilterExpr::Node::Kind::kTruth;
      return add(std::move(node));
    }
    node.kind = FilterExpr::Node::Kind::kCmp;
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
    if (tracefs_ && node.b.kind == FilterExpr::Operand::Kind::kString)
      node.b.glob = glob_op;
    return add(std::move(node));
  }

  bool parse_operand(FilterExpr::Operand& o) {
    o.column = tok_start_ + 1;
    switch (tok_) {
      case Tok::kIdent:
        o.kind = FilterExpr::Operand::Kind::kField;
        o.text = tok_text_;
        next();
        return true;
      case Tok::kString:
        o.kind = FilterExpr::Operand::Kind::kString;
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
        o.kind = FilterExpr::Operand::Kind::kInt;
        o.ival = static_cast<std::int64_t>(0 - int_);
        o.text = "-" + tok_text_;
        next();
        return true;
      }
      case Tok::kInt:
        if (int_ > std::uint64_t{INT64_MAX}) {
          o.kind = FilterExpr::Operand::Kind::kUint;
          o.uval = int_;
        } else {
          o.kind = FilterExpr::Operand::Kind::kInt;
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
  FilterExpr& out_;
  FilterError& error_;
  std::size_t pos_ = 0, tok_start_ = 0;
  Tok tok_ = Tok::kEnd;
  std::string tok_text_;
  std::uint64_t int_ = 0;
  FilterExpr::Cmp cmp_ = FilterExpr::Cmp::kEq;
  bool tracefs_ = false;
  bool glob_op_ = false;  // the last kCmp token was tracefs' '~'
};

std::optional<FilterExpr> FilterExpr::parse(std::string_view text, FilterError& error) {
  FilterExpr expr;
  error = {};
  FilterParser parser(text, expr, error);
  if (!parser.run()) {
    if (error.message.empty())
      error = {.column = 1, .message = "bad expression"};
    return std::nullopt;
  }
  return expr;
}

std::optional<FilterExpr> FilterExpr::parse_tracefs(std::string_view text, FilterError& error) {
  FilterExpr expr;
  error = {};
  FilterParser parser(text, expr, error, /*tracefs=*/true);
  if (!parser.run()) {
    if (error.message.empty())
      error = {.column = 1, .message = "bad expression"};
    return std::nullopt;
  }
  return expr;
}

// ---------------------------------------------------------------------------------------------
// Binding and evaluation

namespace {

bool numeric(FieldType t) {
  return t == FieldType::kInt || t == FieldType::kUint || t == FieldType::kDouble;
}

FieldType literal_type(const FilterExpr::Operand& o) {
  switch (o.kind) {
    case FilterExpr::Operand::Kind::kInt:
      return FieldType::kInt;
    case FilterExpr::Operand::Kind::kUint:
      return FieldType::kUint;
    case FilterExpr::Operand::Kind::kString:
      return FieldType::kString;
    case FilterExpr::Operand::Kind::kField:
      return o.field.type();
  }
  return FieldType::kNone;
}

std::optional<__int128> wide(const Value& v) noexcept;

Value operand_value(const FilterExpr::Operand& o, const Event& e) noexcept {
  switch (o.kind) {
    case FilterExpr::Operand::Kind::kField:
      return o.field.read(e);
    case FilterExpr::Operand::Kind::kInt:
      return o.ival;
    case FilterExpr::Operand::Kind::kUint:
      return o.uval;
    case FilterExpr::Operand::Kind::kString:
      return std::string_view(o.text);
  }
  return {};
}

bool truthy(const Value& v) noexcept {
  if (const auto* s = std::get_if<std::string_view>(&v))
    return !s->empty();
  if (const auto* ips = std::get_if<IpList>(&v))
    return !ips->ips.empty();
  if (const auto* d = std::get_if<double>(&v))
    return *d != 0;
  if (auto i = wide(v))
    return *i != 0;
  return false;
}

template <typename T>
bool apply(FilterExpr::Cmp op, const T& a, const T& b) noexcept {
  switch (op) {
    case FilterExpr::Cmp::kEq:
      return a == b;
    case FilterExpr::Cmp::kNe:
      return a != b;
    case FilterExpr::Cmp::kLt:
      return a < b;
    case FilterExpr::Cmp::kLe:
      return a <= b;
    case FilterExpr::Cmp::kGt:
      return a > b;
    case FilterExpr::Cmp::kGe:
      return a >= b;
  }
  return false;
}

std::optional<__int128> wide(const Value& v) noexcept {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return __int128{*i};
  if (const auto* u = std::get_if<std::uint64_t>(&v))
    return __int128{*u};
  return std::nullopt;
}

}  // namespace

bool FilterExpr::bind(const Schema& schema, const SourceRegion& where, Diagnostics& diags) {
  bool ok = true;
  const auto at = [&](const Operand& o) {
    SourceRegion r = where;
    r.column = where.column + static_cast<std::uint32_t>(o.column);
    return r;
  };
  for (auto& n : nodes_) {
    for (Operand* o : {&n.a, &n.b}) {
      if (o->kind != Operand::Kind::kField)
        continue;
      if (auto f = schema.bind(o->text, at(*o), diags))
        o->field = std::move(*f);
      else
        ok = false;
    }
    if (!ok || n.kind != Node::Kind::kCmp)
      continue;
    const FieldType ta = literal_type(n.a), tb = literal_type(n.b);
    if (ta == FieldType::kIps || tb == FieldType::kIps) {
      diags.add(at(ta == FieldType::kIps ? n.a : n.b),
                "a callchain or array can only be tested for presence, not compared");
      ok = false;
    } else if ((ta == FieldType::kString) != (tb == FieldType::kString) &&
               numeric(ta) != numeric(tb)) {
      diags.add(at(n.b),
                fmt::format("cannot compare {} '{}' with {} '{}'", to_string(ta), n.a.text,
                            to_string(tb), n.b.text),
                "strings compare with strings (\"bash\"), numbers with numbers");
      ok = false;
    }
  }
  return ok;
}

bool FilterExpr::eval(const Event& e) const noexcept {
  return root_ >= 0 && eval_node(root_, e);
}

bool FilterExpr::eval_node(int idx, const Event& e) const noexcept {
  const Node& n = nodes_[static_cast<std::size_t>(idx)];
  switch (n.kind) {
    case Node::Kind::kOr:
      return eval_node(n.lhs, e) || eval_node(n.rhs, e);
    case Node::Kind::kAnd:
      return eval_node(n.lhs, e) && eval_node(n.rhs, e);
    case Node::Kind::kNot:
      return !eval_node(n.lhs, e);
    case Node::Kind::kTruth:
      return truthy(operand_value(n.a, e));
    case Node::Kind::kCmp:
      break;
  }
  const Value a = operand_value(n.a, e);
  const Value b = operand_value(n.b, e);
  const auto* sa = std::get_if<std::string_view>(&a);
  const auto* sb = std::get_if<std::string_view>(&b);
  if (sa != nullptr && sb != nullptr) {
    if (n.op == Cmp::kEq || n.op == Cmp::kNe) {
      bool eq = false;
      if (n.b.glob && n.b.kind == Operand::Kind::kString)
        eq = glob_match(*sb, *sa);
      else if (n.a.glob && n.a.kind == Operand::Kind::kString)
        eq = glob_match(*sa, *sb);
      else
        eq = *sa == *sb;
      return n.op == Cmp::kEq ? eq : !eq;
    }
    return apply(n.op, *sa, *sb);
  }
  if (auto wa = wide(a), wb = wide(b); wa && wb)
    return apply(n.op, *wa, *wb);
  if (auto da = to_double(a), db = to_double(b); da && db)
    return apply(n.op, *da, *db);
  return false;  // missing field or mismatched types
}

std::string FilterExpr::dump() const {
  return root_ >= 0 ? dump_node(root_) : std::string();
}

std::string FilterExpr::dump_node(int idx) const {
  const Node& n = nodes_[static_cast<std::size_t>(idx)];
  const auto operand = [](const Operand& o) {
    return o.kind == Operand::Kind::kString ? fmt::format("\"{}\"", o.text) : o.text;
  };
  static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
  switch (n.kind) {
    case Node::Kind::kOr:
      return fmt::format("(|| {} {})", dump_node(n.lhs), dump_node(n.rhs));
    case Node::Kind::kAnd:
      return fmt::format("(&& {} {})", dump_node(n.lhs), dump_node(n.rhs));
    case Node::Kind::kNot:
      return fmt::format("(! {})", dump_node(n.lhs));
    case Node::Kind::kTruth:
      return operand(n.a);
    case Node::Kind::kCmp:
      break;
  }
  return fmt::format("({} {} {})", kOps[static_cast<std::size_t>(n.op)], operand(n.a),
                     operand(n.b));
}

// ---------------------------------------------------------------------------------------------
// Stage

KindMask read_kinds(const StageOptions& opts, KindMask fallback, Diagnostics& diags) {
  const auto names = opts.list("kinds");
  if (names.empty())
    return fallback;
  KindMask mask = 0;
  for (const auto& [name, where] : names) {
    if (name == "all") {
      mask = kAllKinds;
    } else if (auto k = parse_record_kind(name)) {
      mask |= kind_bit(*k);
    } else {
      diags.add(where, fmt::format("unknown record kind '{}'", name),
                "kinds: sample, aux, itrace_start, lost, lost_samples, comm, mmap, fork, exit, "
                "switch, throttle, other, all");
    }
  }
  return mask == 0 ? fallback : mask;
}

StageSpec Filter::spec() {
  return {.name = "filter",
          .summary = "keep events matching an expression",
          .options = {
              {.name = "expr",
               .type = OptionSpec::Type::kExpression,
               .required = true,
               .help = R"(expr = "comm == "bash" && ret < 0")"},
              {.name = "kinds",
               .type = OptionSpec::Type::kStringList,
               .required = false,
               .help = "record kinds tested (default [\"sample\"]); others pass untouched"},
          }};
}

void Filter::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  kinds_ = read_kinds(opts, kind_bit(RecordKind::kSample), diags);
  where_ = opts.where("expr");
  const auto text = opts.string("expr");
  if (!text || text->empty())  // StageOptions reported an empty one
    return;
  FilterError error;
  expr_ = FilterExpr::parse(*text, error);
  if (!expr_) {
    SourceRegion at = where_;
    at.column += static_cast<std::uint32_t>(error.column);
    diags.add(at,
              fmt::format("filter: {} (column {} of the expression)", error.message, error.column));
  }
}

void FilterExpr::to_kernel(KernelForm& out) const {
  out.kind = KernelForm::Kind::kFilter;
  out.nodes.clear();
  for (const auto& n : nodes_) {
    out.nodes.push_back({.kind = n.kind,
                         .lhs = n.lhs,
                         .rhs = n.rhs,
                         .op = n.op,
                         .a = n.a.rebound<std::monostate>(),
                         .b = n.b.rebound<std::monostate>()});
  }
  out.root = root_;
}

KernelForm Filter::kernel_form() const {
  if (!expr_)
    return {.why_not = "no expression"};
  if (kinds_ != kind_bit(RecordKind::kSample))
    return {.why_not = "it filters records other than samples (option 'kinds')"};
  KernelForm f;
  expr_->to_kernel(f);
  return f;
}

}  // namespace tracer::stages

namespace tracer {

KernelForm tracefs_filter_kernel_form(std::string_view filter) {
  stages::FilterError error;
  auto expr = stages::FilterExpr::parse_tracefs(filter, error);
  if (!expr) {
    return {.why_not = fmt::format("column {} of its filter \"{}\": {}", error.column, filter,
                                   error.message)};
  }
  KernelForm f;
  expr->to_kernel(f);
  // The kernel's names for the generic fields (trace_events_filter.c): tracer's cpu and comm.
  for (auto& n : f.nodes) {
    for (auto* o : {&n.a, &n.b}) {
      if (o->kind != KernelForm::Operand::Kind::kField)
        continue;
      if (o->text == "CPU" || o->text == "common_cpu")
        o->text = "cpu";
      else if (o->text == "COMM" || o->text == "common_comm")
        o->text = "comm";
    }
  }
  return f;
}

}  // namespace tracer

namespace tracer::stages {

void Filter::bind(BindContext& ctx, Diagnostics& diags) {
  ctx.kinds = kinds_;  // the `kinds` option
  bound_ = expr_ && expr_->bind(ctx.schema, where_, diags);
}

void Filter::on_events(std::span<Event* const> events) noexcept {
  if (!bound_ || !expr_)
    return;
  for (Event* e : events) {
    if (!expr_->eval(*e))
      e->drop();
  }
}

}  // namespace tracer::stages
