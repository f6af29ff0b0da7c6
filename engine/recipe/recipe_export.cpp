// Reading a recipe's [export] table (see recipe_export.hpp).
#include "recipe_export.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <regex>
#include <string>

#include "recipe_schema.hpp"

namespace tracer::core {
namespace {

constexpr std::uint32_t kMaxLabelBudget = 1'000'000;
constexpr std::size_t kMaxRegex = 256;
constexpr int kMaxRegexDepth = 8;

struct ActionName {
  std::string_view name;
  RecipeRelabel::Action action;
};
constexpr ActionName kActions[] = {
    {"drop", RecipeRelabel::Action::kDrop},
    {"keep", RecipeRelabel::Action::kKeep},
    {"labeldrop", RecipeRelabel::Action::kLabelDrop},
    {"rename", RecipeRelabel::Action::kRename},
};

bool valid_label_name(std::string_view name) noexcept {
  if (name.empty() || (std::isdigit(static_cast<unsigned char>(name.front())) != 0))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  });
}

RecipeRelabel read_rule(const ConfigValue& node, Diagnostics& diags) {
  KeyReader keys(diags);
  RecipeRelabel r;
  r.where = node.where;
  const auto names = names_of(kRelabelKeys);
  bool has_action = false, has_label = false, has_regex = false, has_to = false;
  bool known_action = false;  // a rule of an unknown action is not checked further
  SourceRegion regex_where = node.where, to_where = node.where;
  for (const auto& e : *node.table()) {
    const auto& [key, v] = e;
    if (find_spec(kRelabelKeys, key) == nullptr) {
      keys.unknown_key(e, "[[export.relabel]]", names);
      continue;
    }
    const std::string* s = keys.string(e);
    if (s == nullptr)
      continue;
    if (key == "action") {
      has_action = true;
      const auto* a = std::find_if(std::begin(kActions), std::end(kActions),
                                   [&](const ActionName& n) { return n.name == *s; });
      if (a == std::end(kActions)) {
        std::vector<std::string> all;
        for (const auto& n : kActions)
          all.emplace_back(n.name);
        diags.add(v.where, fmt::format("unknown relabel action '{}'", *s),
                  suggest(*s, all, "the actions are"));
      } else {
        r.action = a->action;
        known_action = true;
      }
    } else if (key == "label") {
      has_label = true;
      r.label = *s;
      if (!valid_label_name(*s))
        diags.add(v.where, fmt::format("'{}' is not a label name", *s),
                  "a table key as named in the recipe: letters, digits and _, e.g. label = "
                  "\"comm\"");
    } else if (key == "regex") {
      has_regex = true;
      r.regex = *s;
      regex_where = v.where;
      // std::regex compiles and matches by recursion: a hostile pattern (deep groups, a long
      // one) must not exhaust the stack of a root tool.
      int depth = 0, deepest = 0;
      for (char c : *s) {
        depth += c == '(' ? 1 : (c == ')' ? -1 : 0);
        deepest = std::max(deepest, depth);
      }
      if (s->size() > kMaxRegex || deepest > kMaxRegexDepth) {
        diags.add(v.where,
                  fmt::format("regex of {} characters and {} nested groups: at most {} and {}",
                              s->size(), deepest, kMaxRegex, kMaxRegexDepth),
                  "match the label's value with a shorter pattern");
        continue;
      }
      try {
        [[maybe_unused]] const auto groups = std::regex(*s, std::regex::ECMAScript).mark_count();
      } catch (const std::regex_error& err) {
        diags.add(
            v.where, fmt::format("invalid regex: {}", err.what()),
            R"(an ECMAScript regular expression matching the whole value, e.g. regex = "kworker.*")");
      }
    } else if (key == "to") {
      has_to = true;
      r.to = *s;
      to_where = v.where;
      if (!valid_label_name(*s))
        diags.add(v.where, fmt::format("'{}' is not a valid Prometheus label name", *s),
                  "letters, digits and _, not starting with a digit: to = \"process\"");
    }
  }
  if (!has_action)
    diags.add(node.where, "a relabel rule needs an action",
              R"(action = "drop", "keep", "labeldrop" or "rename")");
  if (!has_label)
    diags.add(node.where, "a relabel rule needs the label it acts on", R"(label = "comm")");
  const bool filters =
      r.action == RecipeRelabel::Action::kDrop || r.action == RecipeRelabel::Action::kKeep;
  if (known_action && filters && !has_regex)
    diags.add(node.where, "a drop or keep rule needs a regex",
              R"(regex = "kworker.*" (matched against the whole value))");
  if (known_action && !filters && has_regex)
    diags.add(regex_where, "only a drop or keep rule takes a regex", "remove regex");
  if (known_action && r.action == RecipeRelabel::Action::kRename && !has_to)
    diags.add(node.where, "a rename rule needs the new name", R"(to = "process")");
  if (known_action && r.action != RecipeRelabel::Action::kRename && has_to)
    diags.add(to_where, "only a rename rule takes 'to'", "remove to, or use action = \"rename\"");
  return r;
}

}  // namespace

bool valid_metric_name(std::string_view name) noexcept {
  if (name.empty() || (std::isdigit(static_cast<unsigned char>(name.front())) != 0))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
  });
}

RecipeExport read_export(const ConfigValue& node, Diagnostics& diags) {
  KeyReader keys(diags);
  RecipeExport x;
  x.where = node.where;
  const auto names = names_of(kExportKeys);
  for (const auto& e : *node.table()) {
    const auto& [key, v] = e;
    if (find_spec(kExportKeys, key) == nullptr) {
      keys.unknown_key(e, "[export]", names);
      continue;
    }
    if (key == "prefix") {
      if (const auto* s = keys.string(e)) {
        x.prefix = *s;
        if (!valid_metric_name(*s))
          diags.add(
              v.where, fmt::format("'{}' cannot start a Prometheus metric name", *s),
              R"(letters, digits, _ and :, not starting with a digit: prefix = "node_sched")");
      }
    } else if (key == "label_budget") {
      if (auto n = keys.count<std::uint32_t>(e)) {
        if (*n > kMaxLabelBudget)
          diags.add(v.where, fmt::format("label_budget {} is above {}", *n, kMaxLabelBudget),
                    "a budget bounds the memory of a metric: keep it to the keys worth a series");
        else
          x.label_budget = n;
      }
    } else if (key == "relabel") {
      if (const auto* a = keys.table_array(e, "[[export.relabel]]")) {
        for (const auto& rule : *a)
          x.relabel.push_back(read_rule(rule, diags));
      }
    }
  }
  return x;
}

}  // namespace tracer::core
