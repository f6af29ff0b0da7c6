#include "recipe_subst.hpp"

#include <fmt/format.h>

#include <charconv>
#include <optional>
#include <string_view>
#include <utility>

#include "recipe_schema.hpp"
#include "recipe_toml.hpp"

namespace tracer::core {
namespace {

// ---------------------------------------------------------------------------------------------
// --set

std::vector<std::string> probe_names(const ConfigValue& root) {
  std::vector<std::string> names;
  const auto* probes = root.find("probe");
  if (probes == nullptr || probes->array() == nullptr)
    return names;
  for (const auto& p : *probes->array()) {
    if (const auto* n = p.find("name"); n != nullptr && n->string() != nullptr)
      names.push_back(*n->string());
  }
  return names;
}

std::vector<std::string> param_names(const ConfigValue& root) {
  std::vector<std::string> names;
  if (const auto* p = root.find("params"); p != nullptr && p->table() != nullptr) {
    for (const auto& [key, v] : *p->table())
      names.push_back(key);
  }
  return names;
}

/// Every key --set accepts, for "did you mean".
std::vector<std::string> set_keys(const ConfigValue& root) {
  std::vector<std::string> keys = param_names(root);
  for (const auto& s : kRecipeKeys)
    keys.push_back(fmt::format("recipe.{}", s.name));
  for (const auto& name : probe_names(root)) {
    for (const auto& s : kProbeKeys)
      keys.push_back(fmt::format("probe.{}.{}", name, s.name));
  }
  for (const auto& s : kBpfKeys)
    keys.push_back(fmt::format("bpf.{}", s.name));
  return keys;
}

std::string set_forms_hint(const ConfigValue& root) {
  const auto params = param_names(root);
  const auto probes = probe_names(root);
  return fmt::format(
      "--set takes a param ({}), recipe.KEY ({}), probe.NAME.KEY (NAME: {}), stage.N.KEY or "
      "stage.USE.KEY (a stage's option, e.g. stage.count.top=5) or bpf.KEY ({})",
      params.empty() ? "none declared" : plain_list(params), plain_list(names_of(kRecipeKeys)),
      probes.empty() ? "no probes" : plain_list(probes), plain_list(names_of(kBpfKeys)));
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  // NOLINTNEXTLINE(bugprone-suspicious-stringview-data-usage): bounded by `end`.
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    return std::nullopt;
  return v;
}

/// The text of a --set value as the type the key expects.
std::optional<ConfigValue> typed(std::string_view text,
                                 KeyType type,
                                 std::string_view key,
                                 const SourceRegion& where,
                                 Diagnostics& diags) {
  ConfigValue v{.value = std::string(text), .where = where};
  switch (type) {
    case KeyType::kString:
    case KeyType::kDuration:
      return v;
    case KeyType::kSize:
      if (auto i = parse_int(text))
        v.value = *i;
      return v;
    case KeyType::kInt:
      if (auto i = parse_int(text)) {
        v.value = *i;
        return v;
      }
      break;
    case KeyType::kBool:
      if (text == "true" || text == "false") {
        v.value = text == "true";
        return v;
      }
      break;
  }
  diags.add(
      where,
      fmt::format("wrong type for --set {}: expected {}, got '{}'", key, type_label(type), text),
      type == KeyType::kBool ? "write true or false" : "write a whole number");
  return std::nullopt;
}

/// Sets `key` of `table` to `v`; a key already written keeps its position.
void put(ConfigTable& table, std::string_view key, const SourceRegion& key_where, ConfigValue v) {
  for (auto& [k, old] : table) {
    if (k == key) {
      v.key_where = old.key_where;
      old = std::move(v);
      return;
    }
  }
  v.key_where = key_where;
  table.emplace_back(std::string(key), std::move(v));
}

/// The table under a top-level key, created (as if written at `where`) when absent; nullptr
/// when the key holds something else.
ConfigTable* section(ConfigValue& root, std::string_view key, const SourceRegion& where) {
  if (auto* v = root.find(key))
    return v->table();
  put(*root.table(), key, where, ConfigValue{.value = ConfigTable{}, .where = where});
  return root.table()->back().second.table();
}

/// The [[probe]] table named `name`, or nullptr (the last one, if several have that name).
ConfigTable* probe_table(ConfigValue& root, std::string_view name) {
  ConfigTable* found = nullptr;
  auto* probes = root.find("probe");
  if (probes == nullptr || probes->array() == nullptr)
    return nullptr;
  for (auto& p : *probes->array()) {
    const auto* n = p.find("name");
    if (p.table() != nullptr && n != nullptr && n->string() != nullptr && *n->string() == name)
      found = p.table();
  }
  return found;
}

/// One --set: whether its key names something (a diagnostic for a bad value is already added).
bool apply_set(ConfigValue& root,
               std::string_view key,
               std::string_view text,
               const SourceRegion& key_where,
               const SourceRegion& value_where,
               Diagnostics& diags) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const auto dot = key.find('.', start);
    parts.push_back(key.substr(start, dot - start));
    if (dot == std::string_view::npos)
      break;
    start = dot + 1;
  }

  if (parts.size() == 1) {
    auto* params = root.find("params");
    ConfigValue* p = params != nullptr ? params->find(key) : nullptr;
    if (p == nullptr)
      return false;
    KeyType t = KeyType::kString;
    if (p->is_int())
      t = KeyType::kInt;
    else if (p->is_bool())
      t = KeyType::kBool;
    if (auto v = typed(text, t, key, value_where, diags))
      put(*params->table(), key, key_where, std::move(*v));
    return true;
  }
  if (parts.size() == 2 && (parts[0] == "recipe" || parts[0] == "bpf")) {
    const KeySpec* spec =
        parts[0] == "recipe" ? find_spec(kRecipeKeys, parts[1]) : find_spec(kBpfKeys, parts[1]);
    if (spec == nullptr)
      return false;
    ConfigTable* t = section(root, parts[0], key_where);
    if (t == nullptr)
      diags.add(key_where, fmt::format("--set {}: [{}] is not a table", key, parts[0]));
    else if (auto v = typed(text, spec->type, key, value_where, diags))
      put(*t, parts[1], key_where, std::move(*v));
    return true;
  }
  if (parts.size() == 3 && parts[0] == "stage") {
    // stage.N.KEY (N from 1, the top-level [[stage]] tables in order) or stage.USE.KEY (the one
    // stage of that kind): a shipped recipe's `top`, `every`, ... from the command line. The
    // stage checks the option against its spec as if written in the file.
    auto* stages = root.find("stage");
    if (stages == nullptr || stages->array() == nullptr)
      return false;
    auto& list = *stages->array();
    ConfigTable* stage = nullptr;
    if (const auto n = parse_int(parts[1])) {
      if (*n >= 1 && static_cast<std::size_t>(*n) <= list.size())
        stage = list[static_cast<std::size_t>(*n - 1)].table();
    } else {
      int matches = 0;
      for (auto& st : list) {
        const auto* use = st.find("use");
        if (st.table() != nullptr && use != nullptr && use->string() != nullptr &&
            *use->string() == parts[1]) {
          stage = st.table();
          ++matches;
        }
      }
      if (matches > 1) {
        diags.add(key_where, fmt::format("--set {}: {} stages use '{}'", key, matches, parts[1]),
                  fmt::format("name the stage by its place: --set stage.N.{}", parts[2]));
        return true;
      }
    }
    if (stage == nullptr || parts[2] == "use")
      return false;
    // An array is written as TOML writes it: --set 'stage.count.by=["comm", "pid"]'.
    if (text.starts_with('[')) {
      Diagnostics syntax;
      const auto parsed = parse_toml(fmt::format("v = {}", text), "--set", syntax);
      const ConfigValue* v = parsed ? parsed->find("v") : nullptr;
      if (v == nullptr || v->array() == nullptr) {
        diags.add(value_where, fmt::format("--set {}: '{}' is not a TOML array", key, text),
                  R"(write the array as in a recipe: --set 'stage.count.by=["comm", "pid"]')");
        return true;
      }
      ConfigValue array = *v;
      array.where = value_where;
      for (auto& e : *array.array())
        e.where = value_where;
      put(*stage, parts[2], key_where, std::move(array));
      return true;
    }
    // The type the recipe wrote for it, else what the text looks like.
    KeyType t = KeyType::kString;
    const ConfigValue* old = nullptr;
    for (const auto& [k, v] : *stage) {
      if (k == parts[2])
        old = &v;
    }
    if (old != nullptr ? old->is_int() : parse_int(text).has_value())
      t = KeyType::kInt;
    else if (old != nullptr ? old->is_bool() : (text == "true" || text == "false"))
      t = KeyType::kBool;
    if (auto v = typed(text, t, key, value_where, diags))
      put(*stage, parts[2], key_where, std::move(*v));
    return true;
  }
  if (parts.size() == 3 && parts[0] == "probe") {
    const KeySpec* spec = find_spec(kProbeKeys, parts[2]);
    ConfigTable* probe = probe_table(root, parts[1]);
    if (spec == nullptr || probe == nullptr)
      return false;
    if (auto v = typed(text, spec->type, key, value_where, diags))
      put(*probe, parts[2], key_where, std::move(*v));
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// ${...}

const RecipeParam* find_param(std::span<const RecipeParam> params, std::string_view name) {
  for (const auto& p : params) {
    if (p.name == name)
      return &p;
  }
  return nullptr;
}

std::string param_text(const ConfigValue& v) {
  if (const auto* s = v.string())
    return *s;
  if (const auto* i = v.integer())
    return std::to_string(*i);
  return std::get<bool>(v.value) ? "true" : "false";
}

}  // namespace

void apply_sets(ConfigValue& root, std::span<const std::string> sets, Diagnostics& diags) {
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const std::string_view set = sets[i];
    const auto line = static_cast<std::uint32_t>(i + 1);
    const SourceRegion key_where{"--set", line, 1};
    const auto eq = set.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      diags.add(key_where, fmt::format("--set '{}' is not key=value", set),
                "write --set pid=42 or --set recipe.duration=5s");
      continue;
    }
    const std::string_view key = set.substr(0, eq);
    const SourceRegion value_where{"--set", line, static_cast<std::uint32_t>(eq + 2)};
    if (!apply_set(root, key, set.substr(eq + 1), key_where, value_where, diags)) {
      auto near = near_names(key, set_keys(root));
      diags.add(
          key_where, fmt::format("unknown --set key '{}'", key),
          near.empty() ? set_forms_hint(root) : fmt::format("did you mean {}?", quoted_list(near)));
    }
  }
}

std::vector<RecipeParam> read_params(const ConfigValue& root, Diagnostics& diags) {
  std::vector<RecipeParam> out;
  const auto* params = root.find("params");
  if (params == nullptr)
    return out;
  const ConfigTable* t = params->table();
  if (t == nullptr) {
    wrong_type(diags, *params, "'params'", "table",
               "write [params] followed by name = default lines");
    return out;
  }
  for (const auto& [name, v] : *t) {
    if (!v.is_string() && !v.is_int() && !v.is_bool()) {
      wrong_type(diags, v, fmt::format("param '{}'", name), "string, integer or boolean",
                 fmt::format("give the param a default: {} = \"text\", 42 or true", name));
      continue;
    }
    out.push_back({name, ConfigValue{.value = v.value, .where = v.where}});
  }
  return out;
}

void substitute(ConfigValue& v, std::span<const RecipeParam> params, Diagnostics& diags) {
  if (auto* t = v.table()) {
    for (auto& [key, e] : *t)
      substitute(e, params, diags);
    return;
  }
  if (auto* a = v.array()) {
    for (auto& e : *a)
      substitute(e, params, diags);
    return;
  }
  auto* s = std::get_if<std::string>(&v.value);
  if (s == nullptr || s->find('$') == std::string::npos)
    return;
  std::string out;
  bool ok = true;
  for (std::size_t i = 0; i < s->size();) {
    if (s->compare(i, 3, "$${") == 0) {
      out += "${";
      i += 3;
      continue;
    }
    if (s->compare(i, 2, "${") != 0) {
      out += (*s)[i++];
      continue;
    }
    const auto close = s->find('}', i + 2);
    if (close == std::string::npos) {
      diags.add(v.where, "unterminated '${' in string",
                "write ${name} to use a param, or $${ for a literal ${");
      return;
    }
    const std::string name = s->substr(i + 2, close - i - 2);
    const RecipeParam* p = find_param(params, name);
    if (p == nullptr) {
      const auto names = names_of(params);
      diags.add(v.where, fmt::format("unknown param '{}'", name),
                names.empty() ? fmt::format("the recipe has no [params]; declare it there "
                                            "with a default: {} = ...",
                                            name)
                              : suggest(name, names, "params"));
      ok = false;
    } else if (i == 0 && close + 1 == s->size() && !p->value.is_string()) {
      // The whole value is one reference: it takes the param's type (period = "${period}").
      v.value = p->value.value;
      return;
    } else {
      out += param_text(p->value);
    }
    i = close + 1;
  }
  if (ok)
    *s = std::move(out);
}

}  // namespace tracer::core
