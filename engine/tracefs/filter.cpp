#include "tracer/tracefs/filter.hpp"

#include <array>
#include <cctype>

namespace tracer::tracefs {
namespace {

bool is_ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_';
}

bool is_ident(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
}

}  // namespace

std::vector<FilterField> filter_fields(std::string_view f) {
  std::vector<FilterField> out;
  std::size_t i = 0;
  const auto skip_space = [&] {
    while (i < f.size() && std::isspace(static_cast<unsigned char>(f[i])) != 0)
      ++i;
  };
  // Expects a predicate, possibly behind '(' and '!'.
  for (;;) {
    skip_space();
    while (i < f.size() && (f[i] == '(' || f[i] == '!')) {
      ++i;
      skip_space();
    }
    if (i >= f.size() || !is_ident_start(f[i]))
      return out;
    const std::size_t start = i;
    while (i < f.size() && is_ident(f[i]))
      ++i;
    out.push_back({std::string(f.substr(start, i - start)), start});
    // A suffix such as ".function" (a field shown as a function name) belongs to the field.
    while (i < f.size() && (f[i] == '.' || is_ident(f[i])))
      ++i;
    skip_space();
    // The operator.
    static constexpr std::array<std::string_view, 8> kOps = {
        "==", "!=", "<=", ">=", "<", ">", "&", "~"};
    bool op = false;
    for (auto o : kOps) {
      if (f.substr(i).starts_with(o) && !f.substr(i).starts_with("&&")) {
        i += o.size();
        op = true;
        break;
      }
    }
    if (!op)
      return out;
    skip_space();
    // The value: a quoted string, CPUS{...}, or a bare word up to a space or ')'.
    if (i < f.size() && (f[i] == '"' || f[i] == '\'')) {
      const char q = f[i++];
      while (i < f.size() && f[i] != q)
        i += f[i] == '\\' ? 2 : 1;
      if (i >= f.size())
        return out;
      ++i;
    } else {
      const std::size_t value_start = i;
      while (i < f.size() && std::isspace(static_cast<unsigned char>(f[i])) == 0 && f[i] != ')' &&
             !f.substr(i).starts_with("&&") && !f.substr(i).starts_with("||")) {
        if (f[i] == '{') {
          while (i < f.size() && f[i] != '}')
            ++i;
        }
        if (i < f.size())
          ++i;
      }
      if (i == value_start)
        return out;
    }
    skip_space();
    while (i < f.size() && f[i] == ')') {
      ++i;
      skip_space();
    }
    if (i >= f.size())
      return out;
    if (f.substr(i).starts_with("&&") || f.substr(i).starts_with("||")) {
      i += 2;
      continue;
    }
    return out;
  }
}

bool is_generic_filter_field(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, 7> kGeneric = {
      "CPU", "cpu", "common_cpu", "COMM", "comm", "STACKTRACE", "stacktrace"};
  for (auto g : kGeneric) {
    if (g == name)
      return true;
  }
  return false;
}

}  // namespace tracer::tracefs
