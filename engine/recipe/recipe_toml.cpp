#include "recipe_toml.hpp"

#include <toml++/toml.h>
#include <algorithm>
#include <utility>

namespace tracer::core {
namespace {

SourceRegion at(const std::string& path, const toml::source_region& s) {
  if (s.begin.line == 0)
    return {path, 1, 1};
  return {path, s.begin.line, s.begin.column};
}

ConfigValue convert(const toml::node& n, const std::string& path) {
  ConfigValue out;
  out.where = at(path, n.source());
  switch (n.type()) {
    case toml::node_type::table: {
      ConfigTable t;
      for (const auto& [k, v] : *n.as_table()) {
        ConfigValue value = convert(v, path);
        value.key_where = k.source().begin.line != 0 ? at(path, k.source()) : value.where;
        t.emplace_back(std::string(k.str()), std::move(value));
      }
      // toml++ keeps keys sorted; a recipe's order is the order written.
      // Keys of one table never share a position, so an unstable sort is enough.
      std::sort(t.begin(), t.end(), [](const auto& a, const auto& b) {
        return before(a.second.key_where, b.second.key_where);
      });
      out.value = std::move(t);
      break;
    }
    case toml::node_type::array: {
      ConfigArray a;
      for (const auto& v : *n.as_array())
        a.push_back(convert(v, path));
      out.value = std::move(a);
      break;
    }
    case toml::node_type::string:
      out.value = std::string(n.as_string()->get());
      break;
    case toml::node_type::integer:
      out.value = n.as_integer()->get();
      break;
    case toml::node_type::floating_point:
      out.value = n.as_floating_point()->get();
      break;
    case toml::node_type::boolean:
      out.value = n.as_boolean()->get();
      break;
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
    case toml::node_type::none:
      out.value = ConfigDateTime{};
      break;
  }
  return out;
}

}  // namespace

std::optional<ConfigValue> parse_toml(std::string_view text,
                                      const std::string& path,
                                      Diagnostics& diags) {
  toml::table doc;
  try {
    doc = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& e) {
    diags.add(at(path, e.source()), std::string(e.description()),
              "this is a TOML syntax error; only the first one is reported");
    return std::nullopt;
  }
  return convert(doc, path);
}

bool before(const SourceRegion& a, const SourceRegion& b) noexcept {
  return a.line != b.line ? a.line < b.line : a.column < b.column;
}

}  // namespace tracer::core
