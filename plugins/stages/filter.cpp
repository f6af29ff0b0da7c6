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

std::optional<FilterExpr> FilterExpr::from_tree(std::optional<FilterTree> tree) {
  if (!tree)
    return std::nullopt;
  FilterExpr expr;
  expr.nodes_.reserve(tree->nodes.size());
  for (const auto& n : tree->nodes) {
    expr.nodes_.push_back({.kind = n.kind,
                           .lhs = n.lhs,
                           .rhs = n.rhs,
                           .op = n.op,
                           .a = n.a.rebound<FieldRef>(),
                           .b = n.b.rebound<FieldRef>()});
  }
  expr.root_ = tree->root;
  return expr;
}

std::optional<FilterExpr> FilterExpr::parse(std::string_view text, FilterError& error) {
  return from_tree(parse_filter(text, FilterGrammar::kTracer, error));
}

std::optional<FilterExpr> FilterExpr::parse_tracefs(std::string_view text, FilterError& error) {
  return from_tree(parse_filter(text, FilterGrammar::kTracefs, error));
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
