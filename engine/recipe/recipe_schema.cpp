#include "recipe_schema.hpp"

#include <fmt/format.h>

#include "tracer/common/edit_distance.hpp"
#include "tracer/duration.hpp"

namespace tracer::core {
namespace {

std::string type_hint(KeyType t, std::string_view key) {
  switch (t) {
    case KeyType::kString:
      return fmt::format("put the value in double quotes: {} = \"...\"", key);
    case KeyType::kInt:
      return fmt::format("write a whole number without quotes: {} = 1000", key);
    case KeyType::kBool:
      return fmt::format("write {} = true or {} = false, without quotes", key, key);
    case KeyType::kSize:
      return R"(write a number of bytes or a string with a binary unit: 4096, "64KiB", "8MiB")";
    case KeyType::kDuration:
      return R"(write a string with a unit: "250ms", "10s", "2m")";
  }
  return {};
}

/// How messages name an option type, and a value of it for "write KEY = EXAMPLE".
struct TypeWords {
  std::string_view label;
  std::string_view example;
};

TypeWords words_of(OptionSpec::Type t) {
  using T = OptionSpec::Type;
  switch (t) {
    case T::kBool:
      return {"boolean", "true"};
    case T::kInt:
      return {"integer", "10"};
    case T::kFloat:
      return {"float", "1.0"};
    case T::kString:
      return {"string", "\"...\""};
    case T::kDuration:
      return {"duration", "\"1s\""};
    case T::kSize:
      return {"size", "\"64KiB\""};
    case T::kStringList:
      return {"array of strings", "[\"...\"]"};
    case T::kFieldList:
      return {"array of field names", "[\"comm\"]"};
    case T::kExpression:
      return {"expression string", "\"pid == 42\""};
    case T::kAny:
      return {"any value", "..."};
  }
  return {"?", "..."};
}

/// One option's value against its type.
void check_option(const std::string& key,
                  const ConfigValue& v,
                  const OptionSpec& o,
                  std::string_view stage,
                  Diagnostics& diags) {
  using T = OptionSpec::Type;
  const std::string label = fmt::format("option '{}' of stage '{}'", key, stage);
  const TypeWords words = words_of(o.type);
  const std::string example = fmt::format("write {} = {}", key, words.example);
  const auto wrong = [&] { wrong_type(diags, v, label, words.label, example); };
  switch (o.type) {
    case T::kAny:
      reject_date_times(v, label, diags);
      return;
    case T::kBool:
      if (!v.is_bool())
        wrong();
      return;
    case T::kInt:
      if (!v.is_int())
        wrong();
      return;
    case T::kFloat:
      if (!v.is_int() && !v.is_float())
        wrong();
      return;
    case T::kString:
      if (!v.is_string())
        wrong();
      return;
    case T::kExpression:
      if (!v.is_string())
        wrong();
      else if (v.string()->empty())
        diags.add(v.where, fmt::format("empty expression for {}", label), example);
      return;
    case T::kDuration:
      if (!v.is_string()) {
        wrong();
      } else if (auto d = parse_duration(*v.string()); !d) {
        diags.add(v.where, fmt::format("{} for {}", d.error().message, label), d.error().hint);
      }
      return;
    case T::kSize:
      if (const auto* i = v.integer()) {
        if (*i < 0)
          diags.add(v.where, fmt::format("bad size {} for {}", *i, label),
                    "a size cannot be negative");
      } else if (!v.is_string()) {
        wrong();
      } else if (auto s = parse_size(*v.string()); !s) {
        diags.add(v.where, fmt::format("{} for {}", s.error().message, label), s.error().hint);
      }
      return;
    case T::kStringList:
    case T::kFieldList:
      // A lone string is not taken for a one-element list: `by = "comm, pid"` would be one
      // field named "comm, pid". The error shows the array form.
      if (const auto* a = v.array()) {
        for (const auto& e : *a) {
          if (!e.is_string())
            wrong_type(diags, e, fmt::format("an element of {}", label), "string", example);
        }
        return;
      }
      wrong();
      return;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The fixed sections.

const KeySpec* find_spec(std::span<const KeySpec> specs, std::string_view key) {
  const auto it =
      std::find_if(specs.begin(), specs.end(), [&](const KeySpec& s) { return s.name == key; });
  return it != specs.end() ? &*it : nullptr;
}

const KindKey* find_kind(std::string_view key) {
  for (const auto& k : kKindKeys) {
    if (k.key == key)
      return &k;
  }
  return nullptr;
}

std::string_view type_label(KeyType t) {
  switch (t) {
    case KeyType::kString:
      return "string";
    case KeyType::kInt:
      return "integer";
    case KeyType::kBool:
      return "boolean";
    case KeyType::kSize:
      return "size";
    case KeyType::kDuration:
      return "duration";
  }
  return "?";
}

std::vector<std::string> kind_names() {
  std::vector<std::string> out;
  for (const auto& k : kKindKeys)
    out.emplace_back(k.key);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Messages.

std::vector<std::string> near_names(std::string_view word,
                                    const std::vector<std::string>& candidates) {
  return detail::nearest(
      word, candidates,
      {.max_distance = 2, .limit = detail::NearestOptions::kAnyDistance, .best_only = true});
}

std::string quoted_list(const std::vector<std::string>& items, std::string_view last_sep) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0)
      s += i + 1 == items.size() ? fmt::format(" {} ", last_sep) : ", ";
    s += fmt::format("'{}'", items[i]);
  }
  return s;
}

std::string plain_list(const std::vector<std::string>& items) {
  std::string s;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0)
      s += ", ";
    s += items[i];
  }
  return s;
}

std::string suggest(std::string_view word,
                    const std::vector<std::string>& candidates,
                    std::string_view what) {
  auto near = near_names(word, candidates);
  if (!near.empty())
    return fmt::format("did you mean {}?", quoted_list(near));
  if (candidates.empty())
    return fmt::format("there are no {}", what);
  return fmt::format("{}: {}", what, plain_list(candidates));
}

const SourceRegion& key_position(const ConfigValue& v) noexcept {
  return v.key_where.line != 0 ? v.key_where : v.where;
}

void wrong_type(Diagnostics& diags,
                const ConfigValue& v,
                std::string_view label,
                std::string_view expected,
                std::string hint) {
  diags.add(v.where,
            fmt::format("wrong type for {}: expected {}, got {}", label, expected, v.type_name()),
            std::move(hint));
}

// ---------------------------------------------------------------------------------------------
// Typed reads.

void KeyReader::unknown_key(const Entry& e,
                            std::string_view section,
                            const std::vector<std::string>& keys) {
  diags_->add(key_position(e.second), fmt::format("unknown key '{}' in {}", e.first, section),
              suggest(e.first, keys, fmt::format("{} takes", section)));
}

const std::string* KeyReader::string(const Entry& e) {
  if (const auto* s = e.second.string())
    return s;
  wrong_type(*diags_, e.second, fmt::format("'{}'", e.first), "string",
             type_hint(KeyType::kString, e.first));
  return nullptr;
}

std::optional<std::int64_t> KeyReader::integer(const Entry& e) {
  if (const auto* i = e.second.integer())
    return *i;
  wrong_type(*diags_, e.second, fmt::format("'{}'", e.first), "integer",
             type_hint(KeyType::kInt, e.first));
  return std::nullopt;
}

std::optional<bool> KeyReader::boolean(const Entry& e) {
  if (const auto* b = e.second.boolean())
    return *b;
  wrong_type(*diags_, e.second, fmt::format("'{}'", e.first), "boolean",
             type_hint(KeyType::kBool, e.first));
  return std::nullopt;
}

std::optional<std::uint64_t> KeyReader::size(const Entry& e) {
  const auto& [key, v] = e;
  if (const auto* i = v.integer()) {
    if (*i < 0) {
      diags_->add(v.where, fmt::format("bad size {} for '{}'", *i, key),
                  "a size cannot be negative");
      return std::nullopt;
    }
    return static_cast<std::uint64_t>(*i);
  }
  if (const auto* s = v.string()) {
    auto bytes = parse_size(*s);
    if (!bytes) {
      diags_->add(v.where, fmt::format("{} for '{}'", bytes.error().message, key),
                  bytes.error().hint);
      return std::nullopt;
    }
    return *bytes;
  }
  wrong_type(*diags_, v, fmt::format("'{}'", key), "size", type_hint(KeyType::kSize, key));
  return std::nullopt;
}

std::optional<std::chrono::nanoseconds> KeyReader::duration(const Entry& e) {
  const auto& [key, v] = e;
  const auto* s = v.string();
  if (s == nullptr) {
    wrong_type(*diags_, v, fmt::format("'{}'", key), "duration string",
               type_hint(KeyType::kDuration, key));
    return std::nullopt;
  }
  auto d = parse_duration(*s);
  if (!d) {
    diags_->add(v.where, fmt::format("{} for '{}'", d.error().message, key), d.error().hint);
    return std::nullopt;
  }
  return *d;
}

const ConfigTable* KeyReader::table(const Entry& e, std::string_view hint) {
  if (const auto* t = e.second.table())
    return t;
  wrong_type(*diags_, e.second, fmt::format("'{}'", e.first), "table", std::string(hint));
  return nullptr;
}

const ConfigArray* KeyReader::table_array(const Entry& e, std::string_view header) {
  const auto* a = e.second.array();
  if (a != nullptr &&
      std::all_of(a->begin(), a->end(), [](const ConfigValue& v) { return v.is_table(); }))
    return a;
  wrong_type(*diags_, e.second, fmt::format("'{}'", e.first), "array of tables",
             fmt::format("write a {} header (double brackets) before each one", header));
  return nullptr;
}

void KeyReader::out_of_range(const Entry& e, std::int64_t v, std::int64_t max) {
  diags_->add(e.second.where, fmt::format("'{}' out of range: {}", e.first, v),
              max == std::numeric_limits<std::int64_t>::max()
                  ? std::string("write a positive whole number")
                  : fmt::format("write a whole number from 1 to {}", max));
}

// ---------------------------------------------------------------------------------------------
// Stage options.

void check_stage_options(const StageSpec& spec, const ConfigValue& options, Diagnostics& diags) {
  const auto* t = options.table();
  if (t == nullptr) {
    diags.add(options.where, fmt::format("options of stage '{}' must be a table", spec.name));
    return;
  }
  const auto option_names = names_of(spec.options);
  for (const auto& [key, v] : *t) {
    if (key == "use")
      continue;
    const auto it = std::find_if(spec.options.begin(), spec.options.end(),
                                 [&](const OptionSpec& o) { return o.name == key; });
    if (it == spec.options.end()) {
      if (spec.open_options)
        continue;
      diags.add(key_position(v), fmt::format("unknown option '{}' for stage '{}'", key, spec.name),
                suggest(key, option_names, fmt::format("options of '{}'", spec.name)),
                {.option = std::string(key)});
      continue;
    }
    check_option(key, v, *it, spec.name, diags);
  }
  for (const auto& o : spec.options) {
    if (o.required && options.find(o.name) == nullptr)
      diags.add(options.where, fmt::format("stage '{}' needs option '{}'", spec.name, o.name),
                o.help.empty()
                    ? fmt::format("add {} = {}", o.name, words_of(o.type).example)
                    : fmt::format("add {} = {} ({})", o.name, words_of(o.type).example, o.help));
  }
}

void reject_date_times(const ConfigValue& v, std::string_view label, Diagnostics& diags) {
  if (const auto* t = v.table()) {
    for (const auto& [key, e] : *t)
      reject_date_times(e, label, diags);
  } else if (const auto* a = v.array()) {
    for (const auto& e : *a)
      reject_date_times(e, label, diags);
  } else if (v.is_date_time()) {
    wrong_type(diags, v, label, "a value other than a date or time", "write it as a string");
  }
}

}  // namespace tracer::core

namespace tracer {

void check_stage_options(const StageSpec& spec, const ConfigValue& options, Diagnostics& diags) {
  core::check_stage_options(spec, options, diags);
}

}  // namespace tracer
