// Reading one [[counter]] table (see recipe_counter.hpp).
#include "recipe_counter.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "recipe_schema.hpp"
#include "tracer/counter_expr.hpp"
#include "tracer/event_names.hpp"

namespace tracer::core {
namespace {

constexpr std::string_view kExcludes[] = {"user", "kernel", "hv", "idle"};
constexpr std::size_t kMaxEvents = 64;  // a group the PMU schedules as one is far smaller

/// The position of column `column` (1-based) inside a string value written at `at`.
SourceRegion inside(SourceRegion at, std::size_t column) {
  at.column += static_cast<std::uint32_t>(column);  // past the opening quote
  return at;
}

}  // namespace

RecipeCounter read_counter(const ConfigValue& node,
                           std::size_t index,
                           std::span<const RecipeCounter> earlier,
                           Diagnostics& diags) {
  KeyReader keys(diags);
  RecipeCounter c;
  c.where = node.where;
  const auto names = names_of(kCounterKeys);
  const ConfigValue* metrics = nullptr;
  bool has_events = false;
  for (const auto& e : *node.table()) {
    const auto& [key, v] = e;
    if (find_spec(kCounterKeys, key) == nullptr) {
      keys.unknown_key(e, "[[counter]]", names);
      continue;
    }
    c.value_where[key] = v.where;
    if (key == "name") {
      if (const auto* s = keys.string(e)) {
        c.name = *s;
        if (s->empty())
          diags.add(v.where, "empty counter group name", "name the group: name = \"memory\"");
      }
    } else if (key == "events") {
      has_events = true;
      const ConfigArray* a = v.array();
      if (a == nullptr) {
        wrong_type(diags, v, "events", "an array of event names",
                   R"(events = ["task-clock", "page-faults"] (the first leads the group))");
        continue;
      }
      if (a->empty())
        diags.add(v.where, "a counter group needs at least one event",
                  R"(events = ["task-clock", "page-faults"])");
      if (a->size() > kMaxEvents)
        diags.add(v.where, fmt::format("more than {} events in one group", kMaxEvents),
                  "split them into several [[counter]] groups");
      for (const auto& ev : *a) {
        const std::string* s = ev.string();
        if (s == nullptr) {
          wrong_type(diags, ev, "an event", "a string", "events = [\"page-faults\"]");
          continue;
        }
        // (A PMU event's terms have commas of their own: "cpu/event=0x3c,umask=0/".)
        if (s->find_first_of("{}") != std::string::npos ||
            (s->find(',') != std::string::npos && s->find('/') == std::string::npos)) {
          diags.add(ev.where, fmt::format("'{}': one event per string", *s),
                    "a [[counter]] is a group already: list its events one per string");
        } else if (auto problem = check_event_name(*s)) {
          diags.add(ev.where, problem->message, problem->hint);
        }
        if (std::find(c.events.begin(), c.events.end(), *s) != c.events.end())
          diags.add(ev.where, fmt::format("event '{}' is in the group twice", *s),
                    "list each event once");
        c.events.push_back(*s);
        c.event_where.push_back(ev.where);
      }
    } else if (key == "every") {
      if (auto d = keys.duration(e)) {
        if (d->count() <= 0 || *d < std::chrono::milliseconds(10))
          diags.add(v.where, "'every' must be at least 10ms", "every = \"1s\"");
        else
          c.every = *d;
      }
    } else if (key == "pinned" || key == "exclusive" || key == "weak" || key == "per_cpu") {
      if (auto b = keys.boolean(e)) {
        (key == "pinned"      ? c.pinned
         : key == "exclusive" ? c.exclusive
         : key == "weak"      ? c.weak
                              : c.per_cpu) = *b;
      }
    } else if (key == "exclude") {
      const ConfigArray* a = v.array();
      if (a == nullptr) {
        wrong_type(diags, v, "exclude", "an array of privilege levels",
                   "exclude = [\"kernel\"] (of user, kernel, hv, idle)");
        continue;
      }
      for (const auto& x : *a) {
        const std::string* s = x.string();
        if (s == nullptr ||
            std::find(std::begin(kExcludes), std::end(kExcludes), *s) == std::end(kExcludes)) {
          diags.add(x.where, "exclude takes user, kernel, hv or idle",
                    "exclude = [\"kernel\"] counts user space only");
          continue;
        }
        c.exclude.push_back(*s);
      }
    } else if (key == "metrics") {
      metrics = &v;
    }
  }
  if (c.value_where.find("name") == c.value_where.end()) {
    diags.add(node.where, fmt::format("missing required key 'name' in [[counter]] #{}", index + 1),
              "add name = \"...\" (unique)");
  }
  if (!has_events) {
    diags.add(node.where, "missing required key 'events' in [[counter]]",
              R"(events = ["task-clock", "page-faults"] (the first leads the group))");
  }
  for (const auto& other : earlier) {
    if (!c.name.empty() && other.name == c.name) {
      diags.add(c.where_of("name"), fmt::format("duplicate counter group name '{}'", c.name),
                fmt::format("first defined at {}:{}:{}", other.where.path, other.where.line,
                            other.where.column));
    }
  }
  if (c.pinned && c.weak) {
    diags.add(c.where_of("weak"), "a pinned group cannot be weak",
              "pinned keeps the group on the PMU as one; weak splits it when it does not fit");
  }
  if (metrics != nullptr) {
    const ConfigTable* t = metrics->table();
    if (t == nullptr) {
      wrong_type(diags, *metrics, "metrics", "a table of name = \"expression\"",
                 "metrics = { faults_per_s = \"page-faults / seconds\" }");
    } else {
      for (const auto& [name, expr] : *t) {
        const std::string* s = expr.string();
        if (s == nullptr) {
          wrong_type(diags, expr, fmt::format("metric '{}'", name), "an expression string",
                     "ipc = \"instructions / cycles\"");
          continue;
        }
        if (std::find(c.events.begin(), c.events.end(), name) != c.events.end()) {
          diags.add(expr.key_where.line != 0 ? expr.key_where : expr.where,
                    fmt::format("metric '{}' has the name of a counter of the group", name),
                    "give the metric a name of its own");
        }
        auto parsed = CounterExpr::parse(*s, c.events);
        if (!parsed) {
          // The column of the problem inside the string.
          const std::string& m = parsed.error().message;
          std::size_t col = 0;
          if (m.starts_with("column "))
            col = static_cast<std::size_t>(std::stoul(m.substr(7)));
          diags.add(inside(expr.where, col), fmt::format("metric '{}': {}", name, m),
                    parsed.error().hint);
          continue;
        }
        c.metrics.push_back({name, *s, expr.where});
      }
    }
  }
  return c;
}

}  // namespace tracer::core
