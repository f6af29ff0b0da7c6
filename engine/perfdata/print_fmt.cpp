// PrintFmt: a tracepoint's print fmt parsed once into conversions and expression trees, then
// evaluated per record (libtraceevent's event-parse.c semantics: process_arg / eval_num_arg /
// print_str_arg / pretty_print, read for behaviour, written anew).
#include "tracer/perfdata/print_fmt.hpp"

#include <fmt/core.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace tracer::perfdata {
namespace {

struct Value {
  bool is_str = false;
  std::int64_t i = 0;
  std::string s;
};

enum class Op : std::uint8_t {
  kNum,
  kStr,
  kField,
  kCast,
  kNeg,
  kNot,
  kBitNot,
  kBinary,
  kTernary,
  kFlags,
  kSymbolic,
};

struct Node {
  Op op = Op::kNum;
  std::int64_t num = 0;
  std::string str;  // literal, binary operator, or flags delimiter
  const tracefs::Field* field = nullptr;
  std::uint32_t cast_bytes = 0;  // kCast
  bool cast_signed = false;
  std::vector<int> kids;                                    // indices into the node table
  std::vector<std::pair<std::int64_t, std::string>> table;  // __print_flags/symbolic
};

struct Conversion {
  std::string literal;  // text before it
  bool has = false;     // false: trailing literal only
  std::string flags;    // "-0#+ "
  int width = -1, precision = -1;
  bool width_arg = false, precision_arg = false;  // '*'
  int length = 0;                                 // 0 int, 1 long, 2 long long, -1 h, -2 hh
  char conv = 0;
};

class Parser {
 public:
  Parser(std::string_view text, const tracefs::Format& f, std::vector<Node>& nodes)
      : t_(text), f_(f), nodes_(nodes) {}

  std::string error;

  void skip() {
    while (p_ < t_.size() && std::isspace(static_cast<unsigned char>(t_[p_])) != 0)
      ++p_;
  }
  bool eat(std::string_view s) {
    skip();
    if (t_.substr(p_).starts_with(s)) {
      p_ += s.size();
      return true;
    }
    return false;
  }
  bool at_end() {
    skip();
    return p_ >= t_.size();
  }
  std::size_t pos() const { return p_; }
  std::string_view rest() const { return t_.substr(p_); }

  std::optional<std::string> string_literal() {
    skip();
    if (p_ >= t_.size() || t_[p_] != '"')
      return std::nullopt;
    std::string out;
    ++p_;
    while (p_ < t_.size() && t_[p_] != '"') {
      char c = t_[p_++];
      if (c == '\\' && p_ < t_.size()) {
        const char e = t_[p_++];
        switch (e) {
          case 'n':
            c = '\n';
            break;
          case 't':
            c = '\t';
            break;
          case '0':
            c = '\0';
            break;
          default:
            c = e;  // \" \\ and the rest as themselves
        }
      }
      out += c;
    }
    if (p_ >= t_.size())
      return fail_s("unterminated string");
    ++p_;
    // Adjacent literals concatenate, as in C.
    skip();
    if (p_ < t_.size() && t_[p_] == '"') {
      auto more = string_literal();
      if (!more)
        return std::nullopt;
      out += *more;
    }
    return out;
  }

  std::string identifier() {
    skip();
    const std::size_t b = p_;
    while (p_ < t_.size() &&
           (std::isalnum(static_cast<unsigned char>(t_[p_])) != 0 || t_[p_] == '_'))
      ++p_;
    return std::string(t_.substr(b, p_ - b));
  }

  int add(Node n) {
    nodes_.push_back(std::move(n));
    return static_cast<int>(nodes_.size() - 1);
  }

  // expr := ternary
  int expr() { return ternary(); }

  int ternary() {
    const int c = binary(0);
    if (c < 0)
      return -1;
    if (!eat("?"))
      return c;
    const int a = expr();
    if (a < 0)
      return -1;
    if (!eat(":"))
      return fail("':' expected in ?:");
    const int b = ternary();
    if (b < 0)
      return -1;
    Node n;
    n.op = Op::kTernary;
    n.kids = {c, a, b};
    return add(std::move(n));
  }

  // Binary operators by C precedence, lowest first.
  static constexpr std::string_view kLevels[][4] = {
      {"||"},       {"&&"},     {"|"},          {"^"}, {"&"}, {"==", "!="}, {"<=", ">=", "<", ">"},
      {"<<", ">>"}, {"+", "-"}, {"*", "/", "%"}};
  static constexpr int kNumLevels = 10;

  std::optional<std::string_view> binary_op(int level) {
    skip();
    const auto r = rest();
    for (const auto op : kLevels[level]) {
      if (op.empty() || !r.starts_with(op))
        continue;
      // "|" is not "||", "&" is not "&&", "<" is not "<<".
      if (op.size() == 1 && r.size() > 1 &&
          ((op == "|" && r[1] == '|') || (op == "&" && r[1] == '&') ||
           (op == "<" && (r[1] == '<' || r[1] == '=')) ||
           (op == ">" && (r[1] == '>' || r[1] == '='))))
        continue;
      p_ += op.size();
      return op;
    }
    return std::nullopt;
  }

  int binary(int level) {
    if (level == kNumLevels)
      return unary();
    int lhs = binary(level + 1);
    if (lhs < 0)
      return -1;
    while (auto op = binary_op(level)) {
      const int rhs = binary(level + 1);
      if (rhs < 0)
        return -1;
      Node n;
      n.op = Op::kBinary;
      n.str = std::string(*op);
      n.kids = {lhs, rhs};
      lhs = add(std::move(n));
    }
    return lhs;
  }

  /// "(unsigned long)" and friends: the bytes and signedness of a cast, or nullopt if the
  /// parenthesis does not hold a type.
  std::optional<std::pair<std::uint32_t, bool>> cast_type() {
    skip();
    const std::size_t save = p_;
    if (!eat("("))
      return std::nullopt;
    std::uint32_t bytes = 4;
    bool is_signed = true, any = false, ptr = false;
    int longs = 0;
    while (true) {
      skip();
      if (eat("*")) {
        ptr = true;
        continue;
      }
      const std::size_t before = p_;
      const auto w = identifier();
      if (w.empty()) {
        p_ = before;
        break;
      }
      if (w == "unsigned") {
        is_signed = false;
      } else if (w == "signed" || w == "int" || w == "const" || w == "volatile" || w == "struct") {
      } else if (w == "long") {
        ++longs;
      } else if (w == "char" || w == "bool" || w == "_Bool") {
        bytes = 1;
      } else if (w == "short") {
        bytes = 2;
      } else if (w == "void") {
        bytes = 8;
      } else if (w == "size_t" || w == "unsigned_long") {
        bytes = 8;
        is_signed = false;
      } else if (w.size() >= 2 && (w[0] == 'u' || w[0] == 's') &&
                 (w == "u8" || w == "u16" || w == "u32" || w == "u64" || w == "s8" || w == "s16" ||
                  w == "s32" || w == "s64")) {
        bytes = static_cast<std::uint32_t>(std::stoi(w.substr(1)) / 8);
        is_signed = w[0] == 's';
      } else if (w.starts_with("__u") || w.starts_with("__s")) {
        bytes = static_cast<std::uint32_t>(std::stoi(w.substr(3)) / 8);
        is_signed = w[2] == 's';
      } else {
        p_ = save;
        return std::nullopt;  // an identifier that is not a type: a parenthesised expression
      }
      any = true;
    }
    if (!any || !eat(")")) {
      p_ = save;
      return std::nullopt;
    }
    if (longs > 0)
      bytes = 8;
    if (ptr) {
      bytes = 8;
      is_signed = false;
    }
    return std::make_pair(bytes, is_signed);
  }

  int unary() {
    skip();
    if (eat("-")) {
      return wrap(Op::kNeg, unary());
    }
    if (eat("!"))
      return wrap(Op::kNot, unary());
    if (eat("~"))
      return wrap(Op::kBitNot, unary());
    if (eat("+"))
      return unary();
    if (auto c = cast_type()) {
      const int k = unary();
      if (k < 0)
        return -1;
      Node n;
      n.op = Op::kCast;
      n.cast_bytes = c->first;
      n.cast_signed = c->second;
      n.kids = {k};
      return add(std::move(n));
    }
    return primary();
  }

  int wrap(Op op, int k) {
    if (k < 0)
      return -1;
    Node n;
    n.op = op;
    n.kids = {k};
    return add(std::move(n));
  }

  int number() {
    skip();
    const char* b = t_.data() + p_;
    char* e = nullptr;
    errno = 0;
    const auto v = std::strtoull(b, &e, 0);
    if (e == b)
      return fail("number expected");
    p_ += static_cast<std::size_t>(e - b);
    while (p_ < t_.size() && (t_[p_] == 'u' || t_[p_] == 'U' || t_[p_] == 'l' || t_[p_] == 'L'))
      ++p_;
    Node n;
    n.op = Op::kNum;
    n.num = static_cast<std::int64_t>(v);
    return add(std::move(n));
  }

  int primary() {
    skip();
    if (p_ >= t_.size())
      return fail("expression expected");
    const char c = t_[p_];
    if (c == '(') {
      ++p_;
      const int e = expr();
      if (e < 0)
        return -1;
      if (!eat(")"))
        return fail("')' expected");
      return e;
    }
    if (c == '"') {
      auto s = string_literal();
      if (!s)
        return -1;
      Node n;
      n.op = Op::kStr;
      n.str = std::move(*s);
      return add(std::move(n));
    }
    if (c == '\'' && p_ + 2 < t_.size() && t_[p_ + 2] == '\'') {
      Node n;
      n.op = Op::kNum;
      n.num = static_cast<unsigned char>(t_[p_ + 1]);
      p_ += 3;
      return add(std::move(n));
    }
    if (std::isdigit(static_cast<unsigned char>(c)) != 0)
      return number();
    const auto id = identifier();
    if (id.empty())
      return fail(fmt::format("unexpected '{}'", c));
    if (id == "REC") {
      if (!eat("->"))
        return fail("'->' expected after REC");
      return field_ref(identifier());
    }
    if (id == "__get_str") {
      if (!eat("("))
        return fail("'(' expected");
      const int r = field_ref(identifier());
      if (r < 0)
        return -1;
      if (!eat(")"))
        return fail("')' expected");
      return r;
    }
    if (id == "__print_flags" || id == "__print_symbolic")
      return flags(id == "__print_flags");
    return fail(fmt::format("{} is not supported", id));
  }

  int field_ref(const std::string& name) {
    const auto* fld = f_.field(name);
    if (fld == nullptr)
      return fail(fmt::format("no field '{}'", name));
    if (!fld->is_string && fld->array_len)
      return fail(fmt::format("array field '{}' is not supported", name));
    Node n;
    n.op = Op::kField;
    n.field = fld;
    return add(std::move(n));
  }

  // __print_flags(value, "delim", { v, "s" }, ...) / __print_symbolic(value, { v, "s" }, ...)
  int flags(bool with_delim) {
    if (!eat("("))
      return fail("'(' expected");
    const int v = expr();
    if (v < 0)
      return -1;
    Node n;
    n.op = with_delim ? Op::kFlags : Op::kSymbolic;
    n.kids = {v};
    if (with_delim) {
      if (!eat(","))
        return fail("',' expected");
      auto d = string_literal();
      if (!d)
        return fail("delimiter string expected");
      n.str = std::move(*d);
    }
    while (eat(",")) {
      if (!eat("{"))
        return fail("'{' expected");
      const int k = expr();
      if (k < 0)
        return -1;
      if (!eat(","))
        return fail("',' expected");
      auto s = string_literal();
      if (!s)
        return fail("string expected");
      if (!eat("}"))
        return fail("'}' expected");
      // The values are constant expressions; evaluate them now.
      Value val;
      if (!constant(k, val) || val.is_str)
        return fail("flag value is not a constant");
      n.table.emplace_back(val.i, std::move(*s));
    }
    if (!eat(")"))
      return fail("')' expected");
    return add(std::move(n));
  }

  bool constant(int k, Value& out);

  int fail(std::string why) {
    if (error.empty())
      error = std::move(why);
    return -1;
  }
  std::optional<std::string> fail_s(std::string why) {
    fail(std::move(why));
    return std::nullopt;
  }

 private:
  std::string_view t_;
  std::size_t p_ = 0;
  const tracefs::Format& f_;
  std::vector<Node>& nodes_;
};

std::int64_t truncate(std::int64_t v, std::uint32_t bytes, bool is_signed) {
  if (bytes >= 8)
    return v;
  const unsigned bits = bytes * 8;
  const auto mask = (std::uint64_t{1} << bits) - 1;
  auto u = static_cast<std::uint64_t>(v) & mask;
  if (is_signed && ((u >> (bits - 1)) & 1U) != 0)
    u |= ~mask;
  return static_cast<std::int64_t>(u);
}

/// Evaluates node `k` on `raw` (empty for constants). @return false if a field does not fit.
bool eval(const std::vector<Node>& nodes, int k, std::span<const std::byte> raw, Value& out) {
  const Node& n = nodes[static_cast<std::size_t>(k)];
  out.is_str = false;
  switch (n.op) {
    case Op::kNum:
      out.i = n.num;
      return true;
    case Op::kStr:
      out.is_str = true;
      out.s = n.str;
      return true;
    case Op::kField:
      if (n.field == nullptr || raw.empty())
        return false;
      if (n.field->is_string) {
        const auto s = tracefs::read_string(*n.field, raw);
        if (!s)
          return false;
        out.is_str = true;
        out.s.assign(s->data(), s->size());
        return true;
      } else {
        const auto v = tracefs::read_int(*n.field, raw);
        if (!v)
          return false;
        out.i = *v;
        return true;
      }
    case Op::kCast:
      if (!eval(nodes, n.kids[0], raw, out))
        return false;
      if (!out.is_str)
        out.i = truncate(out.i, n.cast_bytes, n.cast_signed);
      return true;
    case Op::kNeg:
    case Op::kNot:
    case Op::kBitNot:
      if (!eval(nodes, n.kids[0], raw, out) || out.is_str)
        return false;
      out.i = n.op == Op::kNeg ? static_cast<std::int64_t>(0ULL - static_cast<std::uint64_t>(out.i))
              : n.op == Op::kNot ? static_cast<std::int64_t>(out.i == 0)
                                 : ~out.i;
      return true;
    case Op::kTernary: {
      Value c;
      if (!eval(nodes, n.kids[0], raw, c))
        return false;
      const bool yes = c.is_str ? true : c.i != 0;
      return eval(nodes, n.kids[yes ? 1 : 2], raw, out);
    }
    case Op::kBinary: {
      Value a, b;
      if (!eval(nodes, n.kids[0], raw, a) || !eval(nodes, n.kids[1], raw, b) || a.is_str ||
          b.is_str)
        return false;
      const auto x = a.i, y = b.i;
      const auto ux = static_cast<std::uint64_t>(x), uy = static_cast<std::uint64_t>(y);
      const std::string_view op = n.str;
      if (op == "+")
        out.i = static_cast<std::int64_t>(ux + uy);
      else if (op == "-")
        out.i = static_cast<std::int64_t>(ux - uy);
      else if (op == "*")
        out.i = static_cast<std::int64_t>(ux * uy);
      else if (op == "/" || op == "%") {
        if (y == 0)
          return false;
        out.i = op == "/" ? x / y : x % y;
      } else if (op == "<<")
        out.i = uy >= 64 ? 0 : static_cast<std::int64_t>(ux << uy);
      else if (op == ">>")
        out.i = uy >= 64 ? 0 : x >> uy;
      else if (op == "&")
        out.i = x & y;
      else if (op == "|")
        out.i = x | y;
      else if (op == "^")
        out.i = x ^ y;
      else if (op == "&&")
        out.i = (x != 0 && y != 0) ? 1 : 0;
      else if (op == "||")
        out.i = (x != 0 || y != 0) ? 1 : 0;
      else if (op == "==")
        out.i = x == y;
      else if (op == "!=")
        out.i = x != y;
      else if (op == "<")
        out.i = x < y;
      else if (op == ">")
        out.i = x > y;
      else if (op == "<=")
        out.i = x <= y;
      else if (op == ">=")
        out.i = x >= y;
      else
        return false;
      return true;
    }
    case Op::kFlags:
    case Op::kSymbolic: {
      Value v;
      if (!eval(nodes, n.kids[0], raw, v) || v.is_str)
        return false;
      auto val = static_cast<std::uint64_t>(v.i);
      out.is_str = true;
      out.s.clear();
      if (n.op == Op::kSymbolic) {
        for (const auto& [fv, s] : n.table) {
          if (static_cast<std::uint64_t>(fv) == val) {
            out.s = s;
            return true;
          }
        }
        out.s = fmt::format("0x{:x}", val);
        return true;
      }
      // libtraceevent print_str_arg PRINT_FLAGS: a zero value prints the flag whose value is 0;
      // set flags print in table order, joined by the delimiter; leftover bits in hex.
      bool printed = false;
      for (const auto& [fv, s] : n.table) {
        const auto f = static_cast<std::uint64_t>(fv);
        if (val == 0 && f == 0) {
          out.s += s;
          break;
        }
        if (f != 0 && (val & f) == f) {
          if (printed)
            out.s += n.str;
          out.s += s;
          printed = true;
          val &= ~f;
        }
      }
      if (val != 0) {
        if (printed)
          out.s += n.str;
        out.s += fmt::format("0x{:x}", val);
      }
      return true;
    }
  }
  return false;
}

bool Parser::constant(int k, Value& out) {
  return eval(nodes_, k, {}, out);
}

}  // namespace

struct PrintFmt::Impl {
  const tracefs::Format* format = nullptr;
  tracefs::Format owned;
  std::vector<Conversion> convs;
  std::vector<int> args;  // one root node per argument
  std::vector<Node> nodes;
  std::string problem;
};

PrintFmt::PrintFmt(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
PrintFmt::PrintFmt(PrintFmt&&) noexcept = default;
PrintFmt& PrintFmt::operator=(PrintFmt&&) noexcept = default;
PrintFmt::~PrintFmt() = default;

bool PrintFmt::supported() const noexcept {
  return impl_->problem.empty();
}
const std::string& PrintFmt::problem() const noexcept {
  return impl_->problem;
}

namespace {

/// Splits the format string into literal text and conversions.
bool parse_conversions(const std::string& s, std::vector<Conversion>& out, std::string& problem) {
  Conversion cur;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      cur.literal += s[i];
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '%') {
      cur.literal += '%';
      ++i;
      continue;
    }
    ++i;
    while (i < s.size() && std::strchr("-0#+ ", s[i]) != nullptr)
      cur.flags += s[i++];
    if (i < s.size() && s[i] == '*') {
      cur.width_arg = true;
      ++i;
    } else {
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0)
        cur.width = (cur.width < 0 ? 0 : cur.width * 10) + (s[i++] - '0');
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      cur.precision = 0;
      if (i < s.size() && s[i] == '*') {
        cur.precision_arg = true;
        ++i;
      } else {
        while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i])) != 0)
          cur.precision = cur.precision * 10 + (s[i++] - '0');
      }
    }
    while (i < s.size() && std::strchr("hlzLjt", s[i]) != nullptr) {
      if (s[i] == 'l' || s[i] == 'L' || s[i] == 'z' || s[i] == 'j' || s[i] == 't')
        cur.length = std::min(cur.length < 0 ? 1 : cur.length + 1, 2);
      else
        cur.length = cur.length < 0 ? -2 : -1;
      if (s[i] == 'z' || s[i] == 'j' || s[i] == 't')
        cur.length = 1;
      ++i;
    }
    if (i >= s.size()) {
      problem = "format string ends inside a conversion";
      return false;
    }
    cur.conv = s[i];
    if (std::strchr("diuxXocsp", cur.conv) == nullptr) {
      problem = fmt::format("conversion %{} is not supported", cur.conv);
      return false;
    }
    if (cur.conv == 'p' && i + 1 < s.size() && std::isalnum(static_cast<unsigned char>(s[i + 1])))
      return problem = fmt::format("conversion %p{} is not supported", s[i + 1]), false;
    cur.has = true;
    out.push_back(std::move(cur));
    cur = Conversion{};
  }
  out.push_back(std::move(cur));  // trailing literal
  return true;
}

}  // namespace

PrintFmt PrintFmt::parse(const tracefs::Format& format) {
  auto impl = std::make_unique<Impl>();
  impl->owned = format;
  impl->format = &impl->owned;
  Parser p(impl->owned.print_fmt, impl->owned, impl->nodes);
  const auto text = p.string_literal();
  if (!text) {
    impl->problem = p.error.empty() ? "print fmt does not start with a string" : p.error;
    return PrintFmt(std::move(impl));
  }
  if (!parse_conversions(*text, impl->convs, impl->problem))
    return PrintFmt(std::move(impl));
  while (p.eat(",")) {
    const int a = p.expr();
    if (a < 0) {
      impl->problem = p.error;
      return PrintFmt(std::move(impl));
    }
    impl->args.push_back(a);
  }
  if (!p.at_end()) {
    impl->problem = fmt::format("cannot parse the arguments from \"{}\"", p.rest().substr(0, 40));
    return PrintFmt(std::move(impl));
  }
  std::size_t need = 0;
  for (const auto& c : impl->convs)
    need += (c.has ? 1 : 0) + (c.width_arg ? 1 : 0) + (c.precision_arg ? 1 : 0);
  if (need != impl->args.size()) {
    impl->problem = fmt::format("{} conversions but {} arguments", need, impl->args.size());
  }
  return PrintFmt(std::move(impl));
}

void PrintFmt::print_fields(const tracefs::Format& format,
                            std::span<const std::byte> raw,
                            std::string& out) {
  bool first = true;
  for (const auto& field : format.fields) {
    if (field.is_common)
      continue;
    if (!first)
      out += ' ';
    first = false;
    if (field.is_string) {
      const auto v = tracefs::read_string(field, raw);
      fmt::format_to(std::back_inserter(out), "{}={}", field.name, v ? *v : "?");
    } else if (const auto v = tracefs::read_int(field, raw)) {
      if (field.type.find('*') != std::string::npos)
        fmt::format_to(std::back_inserter(out), "{}={:#x}", field.name,
                       static_cast<std::uint64_t>(*v));
      else if (field.is_signed)
        fmt::format_to(std::back_inserter(out), "{}={}", field.name, *v);
      else
        fmt::format_to(std::back_inserter(out), "{}={}", field.name,
                       static_cast<std::uint64_t>(*v));
    } else if (const auto b = tracefs::read_bytes(field, raw)) {
      fmt::format_to(std::back_inserter(out), "{}=[{} bytes]", field.name, b->size());
    } else {
      fmt::format_to(std::back_inserter(out), "{}=?", field.name);
    }
  }
}

bool PrintFmt::print(std::span<const std::byte> raw, std::string& out) const {
  const Impl& m = *impl_;
  if (!m.problem.empty()) {
    print_fields(*m.format, raw, out);
    return false;
  }
  const std::size_t start = out.size();
  std::size_t arg = 0;
  Value v;
  char spec[32];
  char buf[512];
  const auto next_int = [&](std::int64_t& i) {
    if (arg >= m.args.size())
      return false;
    const auto at = m.args[arg];
    ++arg;
    if (!eval(m.nodes, at, raw, v) || v.is_str)
      return false;
    i = v.i;
    return true;
  };
  for (const auto& c : m.convs) {
    out += c.literal;
    if (!c.has)
      continue;
    std::int64_t width = c.width, precision = c.precision;
    if ((c.width_arg && !next_int(width)) || (c.precision_arg && !next_int(precision)))
      goto fallback;
    if (arg >= m.args.size())
      goto fallback;
    ++arg;
    if (!eval(m.nodes, m.args[arg - 1], raw, v))
      goto fallback;
    {
      std::string f = "%" + c.flags;
      if (width >= 0)
        f += std::to_string(width);
      if (precision >= 0)
        f += "." + std::to_string(precision);
      int n = 0;
      if (c.conv == 's') {
        if (!v.is_str)
          goto fallback;
        std::snprintf(spec, sizeof(spec), "%ss", f.c_str());
        n = std::snprintf(buf, sizeof(buf), spec, v.s.c_str());
      } else if (v.is_str) {
        goto fallback;
      } else if (c.conv == 'c') {
        std::snprintf(spec, sizeof(spec), "%sc", f.c_str());
        n = std::snprintf(buf, sizeof(buf), spec, static_cast<int>(v.i));
      } else if (c.conv == 'p') {
        // libtraceevent prints a plain %p as the value in hex with 0x.
        n = std::snprintf(buf, sizeof(buf), "0x%llx", static_cast<unsigned long long>(v.i));
      } else {
        // The argument is converted to the conversion's type, as printf would read it
        // (libtraceevent passes (int), (long) or (long long) by the length).
        const bool is_signed = c.conv == 'd' || c.conv == 'i';
        std::int64_t x = v.i;
        if (c.length <= 0)
          x = truncate(x, c.length == -2 ? 1 : c.length == -1 ? 2 : 4, is_signed);
        std::snprintf(spec, sizeof(spec), "%sll%c", f.c_str(), c.conv);
        n = is_signed
                ? std::snprintf(buf, sizeof(buf), spec, static_cast<long long>(x))
                : std::snprintf(buf, sizeof(buf), spec,
                                static_cast<unsigned long long>(static_cast<std::uint64_t>(x)));
      }
      if (n < 0)
        goto fallback;
      if (static_cast<std::size_t>(n) >= sizeof(buf)) {
        // Longer than the buffer (a long string): format again into the output directly.
        std::string big(static_cast<std::size_t>(n) + 1, '\0');
        if (c.conv == 's')
          std::snprintf(big.data(), big.size(), spec, v.s.c_str());
        out.append(big.data(), static_cast<std::size_t>(n));
      } else {
        out.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  return true;
fallback:
  out.resize(start);
  print_fields(*m.format, raw, out);
  return false;
}

}  // namespace tracer::perfdata
