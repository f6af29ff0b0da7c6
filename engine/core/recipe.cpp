// Recipe loading: toml++ parses, then one pass builds an internal tree that keeps every key's
// and value's position, --set overrides are applied to that tree, ${param} references are
// substituted, and the model is read from it while every problem is collected into one
// Diagnostics (A4 `Diagnostics`, A6 `source_region`), thrown once at the end.
#include "tracer/recipe.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

#include <toml++/toml.h>
#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <limits>
#include <utility>
#include <variant>

#include "common/edit_distance.hpp"
#include "common/text_file.hpp"
#include "core/elf_symbols.hpp"
#include "tracer/duration.hpp"
#include "tracer/tracefs/filter.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// The working tree: TOML values with the position of each key and value.

struct DateTime {
  std::string text;
};
struct Member;
struct Node;
using NodeArray = std::vector<Node>;
using NodeTable = std::vector<Member>;

struct Node {
  // No default member initializer: it would instantiate the variant while Member is incomplete.
  std::variant<bool, std::int64_t, double, std::string, NodeArray, NodeTable, DateTime> value;
  SourceRegion where{};

  [[nodiscard]] const std::string* string() const { return std::get_if<std::string>(&value); }
  [[nodiscard]] const std::int64_t* integer() const { return std::get_if<std::int64_t>(&value); }
  [[nodiscard]] const bool* boolean() const { return std::get_if<bool>(&value); }
  [[nodiscard]] const NodeArray* array() const { return std::get_if<NodeArray>(&value); }
  [[nodiscard]] const NodeTable* table() const { return std::get_if<NodeTable>(&value); }
  [[nodiscard]] NodeTable* table() { return std::get_if<NodeTable>(&value); }
  [[nodiscard]] std::string_view type_name() const {
    static constexpr std::string_view kNames[] = {"boolean", "integer", "float",    "string",
                                                  "array",   "table",   "date-time"};
    return kNames[value.index()];
  }
};

struct Member {
  std::string key;
  SourceRegion key_where;
  Node value;
};

const Member* find_member(const NodeTable& t, std::string_view key) {
  for (const auto& m : t) {
    if (m.key == key)
      return &m;
  }
  return nullptr;
}

Member* find_member(NodeTable& t, std::string_view key) {
  for (auto& m : t) {
    if (m.key == key)
      return &m;
  }
  return nullptr;
}

bool before(const SourceRegion& a, const SourceRegion& b) {
  return a.line != b.line ? a.line < b.line : a.column < b.column;
}

// ---------------------------------------------------------------------------------------------
// The schema of the fixed sections.

enum class KeyType : std::uint8_t { kString, kInt, kBool, kSize, kDuration };

struct KeySpec {
  std::string_view name;
  KeyType type;
};

constexpr std::string_view kTopKeys[] = {"recipe", "params", "probe", "bpf", "stage", "pipeline"};

constexpr KeySpec kRecipeKeys[] = {
    {"name", KeyType::kString},
    {"description", KeyType::kString},
    {"duration", KeyType::kDuration},
};

struct KindKey {
  std::string_view key;
  ProbeKind kind;
};

constexpr KindKey kKindKeys[] = {
    {"tracepoint", ProbeKind::kTracepoint},
    {"kprobe", ProbeKind::kKprobe},
    {"kretprobe", ProbeKind::kKretprobe},
    {"uprobe", ProbeKind::kUprobe},
    {"uretprobe", ProbeKind::kUretprobe},
    {"software", ProbeKind::kSoftware},
    {"hardware", ProbeKind::kHardware},
    {"cache", ProbeKind::kCache},
    {"pmu", ProbeKind::kRawPmu},
    {"breakpoint", ProbeKind::kBreakpoint},
    {"aux", ProbeKind::kAux},
};

constexpr KeySpec kProbeKeys[] = {
    {"name", KeyType::kString},       {"tracepoint", KeyType::kString},
    {"kprobe", KeyType::kString},     {"kretprobe", KeyType::kString},
    {"uprobe", KeyType::kString},     {"uretprobe", KeyType::kString},
    {"software", KeyType::kString},   {"hardware", KeyType::kString},
    {"cache", KeyType::kString},      {"pmu", KeyType::kString},
    {"breakpoint", KeyType::kString}, {"aux", KeyType::kString},
    {"period", KeyType::kInt},        {"freq", KeyType::kInt},
    {"counting", KeyType::kBool},     {"filter", KeyType::kString},
    {"bpf", KeyType::kString},        {"callchain", KeyType::kBool},
    {"user_regs", KeyType::kBool},    {"user_stack", KeyType::kSize},
    {"task_records", KeyType::kBool}, {"context_switches", KeyType::kBool},
    {"ring", KeyType::kSize},         {"wakeup_events", KeyType::kInt},
    {"wakeup_bytes", KeyType::kSize}, {"aux_size", KeyType::kSize},
    {"aux_snapshot", KeyType::kBool},
};

constexpr KeySpec kBpfKeys[] = {
    {"source", KeyType::kString}, {"object", KeyType::kString}, {"builtin", KeyType::kString},
    {"output", KeyType::kString}, {"struct", KeyType::kString}, {"time", KeyType::kString},
};

template <typename Range>
const KeySpec* find_spec(const Range& specs, std::string_view key) {
  for (const auto& s : specs) {
    if (s.name == key)
      return &s;
  }
  return nullptr;
}

const KindKey* find_kind(std::string_view key) {
  for (const auto& k : kKindKeys) {
    if (k.key == key)
      return &k;
  }
  return nullptr;
}

// ---------------------------------------------------------------------------------------------
// Messages.

/// The candidates nearest to `word` by edit distance, if near enough to be a typo (all of those
/// equally near).
std::vector<std::string> nearest(std::string_view word,
                                 const std::vector<std::string>& candidates) {
  return detail::nearest(
      word, candidates,
      {.max_distance = 2, .limit = detail::NearestOptions::kAnyDistance, .best_only = true});
}

std::string quoted_list(const std::vector<std::string>& items, std::string_view last_sep = "or") {
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

/// "did you mean 'x'?" when a candidate is near, else "<what>: a, b, c".
std::string suggest(std::string_view word,
                    const std::vector<std::string>& candidates,
                    std::string_view what) {
  auto near = nearest(word, candidates);
  if (!near.empty())
    return fmt::format("did you mean {}?", quoted_list(near));
  if (candidates.empty())
    return fmt::format("there are no {}", what);
  return fmt::format("{}: {}", what, plain_list(candidates));
}

template <typename Range>
std::vector<std::string> names_of(const Range& specs) {
  std::vector<std::string> out;
  for (const auto& s : specs)
    out.emplace_back(s.name);
  return out;
}

std::vector<std::string> kind_names() {
  std::vector<std::string> out;
  for (const auto& k : kKindKeys)
    out.emplace_back(k.key);
  return out;
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

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0)
    return fmt::format("{}GiB", bytes >> 30);
  if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0)
    return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0)
    return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::uint64_t page_bytes() {
  const long ps = ::sysconf(_SC_PAGESIZE);
  return ps > 0 ? static_cast<std::uint64_t>(ps) : 4096;
}

/// Every general-purpose user register perf can sample (perf's PERF_REGS_MASK for x86-64:
/// the segment registers DS, ES, FS, GS are not sampled by the kernel).
std::uint64_t all_user_regs() {
#if defined(__x86_64__)
  return ((1ULL << PERF_REG_X86_64_MAX) - 1) &
         ~((1ULL << PERF_REG_X86_DS) | (1ULL << PERF_REG_X86_ES) | (1ULL << PERF_REG_X86_FS) |
           (1ULL << PERF_REG_X86_GS));
#else
  return 0;
#endif
}

std::string example_of(OptionSpec::Type t) {
  using T = OptionSpec::Type;
  switch (t) {
    case T::kBool:
      return "true";
    case T::kInt:
      return "10";
    case T::kFloat:
      return "1.0";
    case T::kString:
      return "\"...\"";
    case T::kDuration:
      return "\"1s\"";
    case T::kSize:
      return "\"64KiB\"";
    case T::kStringList:
      return "[\"...\"]";
    case T::kFieldList:
      return "[\"comm\"]";
    case T::kExpression:
      return "\"pid == 42\"";
    case T::kAny:
      return "...";
  }
  return "...";
}

std::string_view option_type_label(OptionSpec::Type t) {
  using T = OptionSpec::Type;
  switch (t) {
    case T::kBool:
      return "boolean";
    case T::kInt:
      return "integer";
    case T::kFloat:
      return "float";
    case T::kString:
      return "string";
    case T::kDuration:
      return "duration";
    case T::kSize:
      return "size";
    case T::kStringList:
      return "array of strings";
    case T::kFieldList:
      return "array of field names";
    case T::kExpression:
      return "expression string";
    case T::kAny:
      return "any value";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------------

class Loader {
 public:
  Loader(std::string_view display_path, const RecipeLoadOptions& options)
      : path_(display_path), options_(options) {
    base_dir_ = fs::path(path_).parent_path();
  }

  Recipe run(std::string_view text) {
    toml::table doc;
    try {
      doc = toml::parse(text, std::string_view(path_));
    } catch (const toml::parse_error& e) {
      diags_.add(at(e.source()), std::string(e.description()),
                 "this is a TOML syntax error; only the first one is reported");
      diags_.throw_if_any();
    }
    Node root = convert(doc);
    apply_sets(root);
    read_params(root);
    for (auto& m : *root.table()) {
      if (m.key == "probe" || m.key == "bpf" || m.key == "stage" || m.key == "pipeline")
        substitute(m.value);
    }
    read_root(root);
    diags_.throw_if_any();
    return std::move(recipe_);
  }

 private:
  // --- positions and the tree ----------------------------------------------------------------

  SourceRegion at(const toml::source_region& s) const {
    if (s.begin.line == 0)
      return {path_, 1, 1};
    return {path_, s.begin.line, s.begin.column};
  }

  Node convert(const toml::node& n) {
    Node out;
    out.where = at(n.source());
    switch (n.type()) {
      case toml::node_type::table: {
        NodeTable t;
        for (const auto& [k, v] : *n.as_table()) {
          SourceRegion kw = k.source().begin.line != 0 ? at(k.source()) : at(v.source());
          t.push_back({std::string(k.str()), std::move(kw), convert(v)});
        }
        // toml++ keeps keys sorted; a recipe's order is the order written.
        // Keys of one table never share a position, so an unstable sort is enough.
        std::sort(t.begin(), t.end(), [](const Member& a, const Member& b) {
          return before(a.key_where, b.key_where);
        });
        out.value = std::move(t);
        break;
      }
      case toml::node_type::array: {
        NodeArray a;
        for (const auto& v : *n.as_array())
          a.push_back(convert(v));
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
        out.value = DateTime{};
        break;
    }
    return out;
  }

  // --- --set ---------------------------------------------------------------------------------

  /// Every key --set accepts, for "did you mean".
  std::vector<std::string> set_keys(const NodeTable& root) const {
    std::vector<std::string> keys;
    if (const auto* p = find_member(root, "params"); p != nullptr && p->value.table() != nullptr) {
      for (const auto& m : *p->value.table())
        keys.push_back(m.key);
    }
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

  static std::vector<std::string> probe_names(const NodeTable& root) {
    std::vector<std::string> names;
    const auto* probes = find_member(root, "probe");
    if (probes == nullptr || probes->value.array() == nullptr)
      return names;
    for (const auto& p : *probes->value.array()) {
      if (const auto* t = p.table()) {
        if (const auto* n = find_member(*t, "name"); n != nullptr && n->value.string() != nullptr)
          names.push_back(*n->value.string());
      }
    }
    return names;
  }

  std::string set_forms_hint(const NodeTable& root) const {
    std::vector<std::string> params;
    if (const auto* p = find_member(root, "params"); p != nullptr && p->value.table() != nullptr) {
      for (const auto& m : *p->value.table())
        params.push_back(m.key);
    }
    const auto probes = probe_names(root);
    return fmt::format(
        "--set takes a param ({}), recipe.KEY ({}), probe.NAME.KEY (NAME: {}) or bpf.KEY ({})",
        params.empty() ? "none declared" : plain_list(params), plain_list(names_of(kRecipeKeys)),
        probes.empty() ? "no probes" : plain_list(probes), plain_list(names_of(kBpfKeys)));
  }

  /// The text of a --set value as the type the key expects.
  std::optional<Node> typed(std::string_view text,
                            KeyType type,
                            std::string_view key,
                            const SourceRegion& where) {
    Node n;
    n.where = where;
    switch (type) {
      case KeyType::kString:
      case KeyType::kDuration:
        n.value = std::string(text);
        return n;
      case KeyType::kSize:
        if (auto v = parse_int(text))
          n.value = *v;
        else
          n.value = std::string(text);
        return n;
      case KeyType::kInt:
        if (auto v = parse_int(text)) {
          n.value = *v;
          return n;
        }
        break;
      case KeyType::kBool:
        if (text == "true" || text == "false") {
          n.value = text == "true";
          return n;
        }
        break;
    }
    diags_.add(
        where,
        fmt::format("wrong type for --set {}: expected {}, got '{}'", key, type_label(type), text),
        type == KeyType::kBool ? "write true or false" : "write a whole number");
    return std::nullopt;
  }

  static std::optional<std::int64_t> parse_int(std::string_view text) {
    std::int64_t v = 0;
    const char* end = text.data() + text.size();
    // NOLINTNEXTLINE(bugprone-suspicious-stringview-data-usage): bounded by `end`.
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    if (text.empty() || ec != std::errc() || ptr != end)
      return std::nullopt;
    return v;
  }

  static void put(NodeTable& table, std::string_view key, const SourceRegion& key_where, Node v) {
    if (auto* m = find_member(table, key)) {
      m->value = std::move(v);
      return;
    }
    table.push_back({std::string(key), key_where, std::move(v)});
  }

  /// The table under a top-level key, created (as if written at `where`) when absent.
  static NodeTable* section(NodeTable& root, std::string_view key, const SourceRegion& where) {
    if (auto* m = find_member(root, key))
      return m->value.table();
    Node t;
    t.value = NodeTable{};
    t.where = where;
    root.push_back({std::string(key), where, std::move(t)});
    return root.back().value.table();
  }

  void apply_sets(Node& root_node) {
    NodeTable& root = *root_node.table();
    for (std::size_t i = 0; i < options_.sets.size(); ++i) {
      const std::string_view set = options_.sets[i];
      const auto line = static_cast<std::uint32_t>(i + 1);
      const SourceRegion key_where{"--set", line, 1};
      const auto eq = set.find('=');
      if (eq == std::string_view::npos || eq == 0) {
        diags_.add(key_where, fmt::format("--set '{}' is not key=value", set),
                   "write --set pid=42 or --set recipe.duration=5s");
        continue;
      }
      const std::string_view key = set.substr(0, eq);
      const std::string_view text = set.substr(eq + 1);
      const SourceRegion value_where{"--set", line, static_cast<std::uint32_t>(eq + 2)};

      std::vector<std::string_view> parts;
      for (std::size_t start = 0;;) {
        const auto dot = key.find('.', start);
        parts.push_back(key.substr(start, dot - start));
        if (dot == std::string_view::npos)
          break;
        start = dot + 1;
      }

      bool done = false;
      if (parts.size() == 1) {
        auto* params = find_member(root, "params");
        Member* p = params != nullptr && params->value.table() != nullptr
                        ? find_member(*params->value.table(), key)
                        : nullptr;
        if (p != nullptr) {
          done = true;
          KeyType t = KeyType::kString;
          if (p->value.integer() != nullptr)
            t = KeyType::kInt;
          else if (p->value.boolean() != nullptr)
            t = KeyType::kBool;
          if (auto v = typed(text, t, key, value_where))
            p->value = std::move(*v);
        }
      } else if (parts.size() == 2 && (parts[0] == "recipe" || parts[0] == "bpf")) {
        const KeySpec* spec =
            parts[0] == "recipe" ? find_spec(kRecipeKeys, parts[1]) : find_spec(kBpfKeys, parts[1]);
        if (spec != nullptr) {
          done = true;
          NodeTable* t = section(root, parts[0], key_where);
          if (t == nullptr) {
            diags_.add(key_where, fmt::format("--set {}: [{}] is not a table", key, parts[0]));
          } else if (auto v = typed(text, spec->type, key, value_where)) {
            put(*t, parts[1], key_where, std::move(*v));
          }
        }
      } else if (parts.size() == 3 && parts[0] == "probe") {
        const KeySpec* spec = find_spec(kProbeKeys, parts[2]);
        NodeTable* probe = nullptr;
        if (auto* probes = find_member(root, "probe");
            probes != nullptr && std::holds_alternative<NodeArray>(probes->value.value)) {
          for (auto& p : std::get<NodeArray>(probes->value.value)) {
            auto* t = p.table();
            if (t == nullptr)
              continue;
            const auto* n = find_member(*t, "name");
            if (n != nullptr && n->value.string() != nullptr && *n->value.string() == parts[1])
              probe = t;
          }
        }
        if (spec != nullptr && probe != nullptr) {
          done = true;
          if (auto v = typed(text, spec->type, key, value_where))
            put(*probe, parts[2], key_where, std::move(*v));
        }
      }
      if (!done) {
        auto near = nearest(key, set_keys(root));
        diags_.add(key_where, fmt::format("unknown --set key '{}'", key),
                   near.empty() ? set_forms_hint(root)
                                : fmt::format("did you mean {}?", quoted_list(near)));
      }
    }
  }

  // --- params and ${...} ---------------------------------------------------------------------

  void read_params(const Node& root) {
    const auto* m = find_member(*root.table(), "params");
    if (m == nullptr)
      return;
    const NodeTable* t = m->value.table();
    if (t == nullptr) {
      wrong_type(m->value, "'params'", "table", "write [params] followed by name = default lines");
      return;
    }
    for (const auto& p : *t) {
      ConfigValue v;
      v.where = p.value.where;
      if (const auto* s = p.value.string())
        v.value = *s;
      else if (const auto* i = p.value.integer())
        v.value = *i;
      else if (const auto* b = p.value.boolean())
        v.value = *b;
      else {
        wrong_type(p.value, fmt::format("param '{}'", p.key), "string, integer or boolean",
                   fmt::format("give the param a default: {} = \"text\", 42 or true", p.key));
        continue;
      }
      recipe_.params.push_back({p.key, std::move(v)});
    }
  }

  const RecipeParam* find_param(std::string_view name) const {
    for (const auto& p : recipe_.params) {
      if (p.name == name)
        return &p;
    }
    return nullptr;
  }

  static std::string param_text(const ConfigValue& v) {
    if (const auto* s = v.string())
      return *s;
    if (const auto* i = v.integer())
      return std::to_string(*i);
    return std::get<bool>(v.value) ? "true" : "false";
  }

  void substitute(Node& n) {
    if (auto* t = n.table()) {
      for (auto& m : *t)
        substitute(m.value);
      return;
    }
    if (auto* a = std::get_if<NodeArray>(&n.value)) {
      for (auto& e : *a)
        substitute(e);
      return;
    }
    auto* s = std::get_if<std::string>(&n.value);
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
        diags_.add(n.where, "unterminated '${' in string",
                   "write ${name} to use a param, or $${ for a literal ${");
        return;
      }
      const std::string name = s->substr(i + 2, close - i - 2);
      const RecipeParam* p = find_param(name);
      if (p == nullptr) {
        std::vector<std::string> names;
        for (const auto& q : recipe_.params)
          names.push_back(q.name);
        diags_.add(n.where, fmt::format("unknown param '{}'", name),
                   names.empty() ? fmt::format("the recipe has no [params]; declare it there "
                                               "with a default: {} = ...",
                                               name)
                                 : suggest(name, names, "params"));
        ok = false;
      } else if (i == 0 && close + 1 == s->size() && !p->value.is_string()) {
        // The whole value is one reference: it takes the param's type (period = "${period}").
        if (const auto* iv = p->value.integer())
          n.value = *iv;
        else
          n.value = std::get<bool>(p->value.value);
        return;
      } else {
        out += param_text(p->value);
      }
      i = close + 1;
    }
    if (ok)
      *s = std::move(out);
  }

  // --- typed reads ---------------------------------------------------------------------------

  void wrong_type(const Node& v,
                  std::string_view label,
                  std::string_view expected,
                  std::string hint) {
    diags_.add(
        v.where,
        fmt::format("wrong type for {}: expected {}, got {}", label, expected, v.type_name()),
        std::move(hint));
  }

  void unknown_key(const Member& m, std::string_view where, const std::vector<std::string>& keys) {
    diags_.add(m.key_where, fmt::format("unknown key '{}' in {}", m.key, where),
               suggest(m.key, keys, fmt::format("{} takes", where)));
  }

  const std::string* get_string(const Member& m) {
    if (const auto* s = m.value.string())
      return s;
    wrong_type(m.value, fmt::format("'{}'", m.key), "string", type_hint(KeyType::kString, m.key));
    return nullptr;
  }

  std::optional<std::int64_t> get_int(const Member& m) {
    if (const auto* i = m.value.integer())
      return *i;
    wrong_type(m.value, fmt::format("'{}'", m.key), "integer", type_hint(KeyType::kInt, m.key));
    return std::nullopt;
  }

  std::optional<bool> get_bool(const Member& m) {
    if (const auto* b = m.value.boolean())
      return *b;
    wrong_type(m.value, fmt::format("'{}'", m.key), "boolean", type_hint(KeyType::kBool, m.key));
    return std::nullopt;
  }

  std::optional<std::uint64_t> get_size(const Member& m) {
    if (const auto* i = m.value.integer()) {
      if (*i < 0) {
        diags_.add(m.value.where, fmt::format("bad size {} for '{}'", *i, m.key),
                   "a size cannot be negative");
        return std::nullopt;
      }
      return static_cast<std::uint64_t>(*i);
    }
    if (const auto* s = m.value.string()) {
      auto v = parse_size(*s);
      if (!v) {
        diags_.add(m.value.where, fmt::format("{} for '{}'", v.error().message, m.key),
                   v.error().hint);
        return std::nullopt;
      }
      return *v;
    }
    wrong_type(m.value, fmt::format("'{}'", m.key), "size", type_hint(KeyType::kSize, m.key));
    return std::nullopt;
  }

  std::optional<std::chrono::nanoseconds> get_duration(const Member& m) {
    const auto* s = m.value.string();
    if (s == nullptr) {
      wrong_type(m.value, fmt::format("'{}'", m.key), "duration string",
                 type_hint(KeyType::kDuration, m.key));
      return std::nullopt;
    }
    auto v = parse_duration(*s);
    if (!v) {
      diags_.add(m.value.where, fmt::format("{} for '{}'", v.error().message, m.key),
                 v.error().hint);
      return std::nullopt;
    }
    return *v;
  }

  /// A positive integer that fits T.
  template <typename T>
  std::optional<T> get_count(const Member& m) {
    auto v = get_int(m);
    if (!v)
      return std::nullopt;
    const auto max = static_cast<std::int64_t>(std::min<std::uint64_t>(
        std::numeric_limits<T>::max(),
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
    if (*v < 1 || *v > max) {
      diags_.add(m.value.where, fmt::format("'{}' out of range: {}", m.key, *v),
                 max == std::numeric_limits<std::int64_t>::max()
                     ? std::string("write a positive whole number")
                     : fmt::format("write a whole number from 1 to {}", max));
      return std::nullopt;
    }
    return static_cast<T>(*v);
  }

  const NodeTable* want_table(const Member& m, std::string_view hint) {
    if (const auto* t = m.value.table())
      return t;
    wrong_type(m.value, fmt::format("'{}'", m.key), "table", std::string(hint));
    return nullptr;
  }

  /// An array of tables ([[key]]); nullptr (after a diagnostic) for anything else.
  const NodeArray* want_table_array(const Member& m, std::string_view header) {
    const auto* a = m.value.array();
    bool ok = a != nullptr;
    if (ok) {
      for (const auto& e : *a)
        ok = ok && e.table() != nullptr;
    }
    if (ok)
      return a;
    wrong_type(m.value, fmt::format("'{}'", m.key), "array of tables",
               fmt::format("write a {} header (double brackets) before each one", header));
    return nullptr;
  }

  // --- sections ------------------------------------------------------------------------------

  void read_root(const Node& root_node) {
    recipe_.path = path_;
    const NodeTable& root = *root_node.table();
    const SourceRegion file_start{path_, 1, 1};
    const std::vector<std::string> top = {std::begin(kTopKeys), std::end(kTopKeys)};
    for (const auto& m : root) {
      if (std::find(top.begin(), top.end(), m.key) == top.end())
        diags_.add(m.key_where, fmt::format("unknown top-level key '{}'", m.key),
                   suggest(m.key, top, "a recipe has"));
    }

    if (const auto* r = find_member(root, "recipe")) {
      if (const auto* t = want_table(*r, "write [recipe] followed by name = \"...\""))
        read_recipe_table(*t, r->value.where);
    } else {
      diags_.add(file_start, "missing [recipe] table",
                 "start the file with [recipe] and name = \"...\"");
    }

    const auto* bpf = find_member(root, "bpf");
    if (bpf != nullptr) {
      if (const auto* t = want_table(*bpf, "write [bpf] followed by source = \"file.bpf.c\""))
        read_bpf(*t, bpf->value.where);
    }

    if (const auto* p = find_member(root, "probe")) {
      if (const auto* a = want_table_array(*p, "[[probe]]")) {
        for (const auto& e : *a)
          read_probe(e);
      }
    }
    if (find_member(root, "probe") == nullptr) {
      diags_.add(
          file_start, "the recipe has no [[probe]]",
          "add a [[probe]] with a name and a kind, e.g. tracepoint = \"sched:sched_switch\"");
    }
    for (const auto& p : recipe_.probes) {
      if (!p.options.bpf_program.empty() && !recipe_.bpf) {
        diags_.add(p.where_of("bpf"),
                   fmt::format("probe '{}' uses bpf program '{}' but the recipe has no [bpf]",
                               p.options.name, p.options.bpf_program),
                   "add a [bpf] section with source = \"file.bpf.c\", object = \"file.bpf.o\" "
                   "or builtin = \"name\"");
      }
    }

    const auto* stage = find_member(root, "stage");
    const auto* pipeline = find_member(root, "pipeline");
    if (stage != nullptr && pipeline != nullptr) {
      diags_.add(
          before(stage->key_where, pipeline->key_where) ? pipeline->key_where : stage->key_where,
          "a recipe has either [[stage]] or [[pipeline]] tables, not both",
          "move the top-level [[stage]] tables into a [[pipeline]] as [[pipeline.stage]]");
    }
    if (stage != nullptr) {
      if (const auto* a = want_table_array(*stage, "[[stage]]")) {
        RecipePipeline pl{.name = "main", .stages = {}, .where = stage->value.where};
        if (!a->empty())
          pl.where = a->front().where;
        for (const auto& e : *a)
          read_stage(e, pl.stages);
        recipe_.pipelines.push_back(std::move(pl));
      }
    }
    if (pipeline != nullptr) {
      if (const auto* a = want_table_array(*pipeline, "[[pipeline]]")) {
        for (const auto& e : *a)
          read_pipeline(e);
      }
    }
  }

  void read_recipe_table(const NodeTable& t, const SourceRegion& where) {
    const auto keys = names_of(kRecipeKeys);
    bool has_name = false;
    for (const auto& m : t) {
      if (find_spec(kRecipeKeys, m.key) == nullptr) {
        unknown_key(m, "[recipe]", keys);
        continue;
      }
      recipe_.value_where[m.key] = m.value.where;
      if (m.key == "name") {
        has_name = true;
        if (const auto* s = get_string(m)) {
          if (s->empty())
            diags_.add(m.value.where, "empty recipe name", "name the recipe: name = \"openat\"");
          recipe_.name = *s;
        }
      } else if (m.key == "description") {
        if (const auto* s = get_string(m))
          recipe_.description = *s;
      } else if (m.key == "duration") {
        if (auto d = get_duration(m)) {
          if (d->count() <= 0)
            diags_.add(m.value.where, "'duration' must be positive",
                       "leave it out to run until SIGINT");
          else
            recipe_.duration = *d;
        }
      }
    }
    if (!has_name)
      diags_.add(where, "missing required key 'name' in [recipe]",
                 "add name = \"...\" (shown by `tracer list` and in reports)");
  }

  fs::path relative_path(const std::string& p) const {
    const fs::path path(p);
    return path.is_absolute() || base_dir_.empty() ? path : base_dir_ / path;
  }

  void read_bpf(const NodeTable& t, const SourceRegion& where) {
    RecipeBpf bpf;
    bpf.where = where;
    const auto keys = names_of(kBpfKeys);
    const Member* first_origin = nullptr;
    for (const auto& m : t) {
      if (find_spec(kBpfKeys, m.key) == nullptr) {
        unknown_key(m, "[bpf]", keys);
        continue;
      }
      bpf.value_where[m.key] = m.value.where;
      const auto* s = get_string(m);
      if (s == nullptr)
        continue;
      if (s->empty()) {
        diags_.add(m.value.where, fmt::format("empty '{}' in [bpf]", m.key),
                   m.key == "output" ? "leave it out for the default, \"events\""
                                     : "give a value or leave the key out");
        continue;
      }
      const bool origin = m.key == "source" || m.key == "object" || m.key == "builtin";
      if (origin && first_origin != nullptr) {
        diags_.add(m.key_where,
                   fmt::format("[bpf] has both '{}' and '{}'", first_origin->key, m.key),
                   "keep one: source compiles a .bpf.c, object loads a .bpf.o, builtin names a "
                   "program shipped with tracer");
        continue;
      }
      if (origin)
        first_origin = &m;
      if (m.key == "source")
        bpf.source = relative_path(*s);
      else if (m.key == "object")
        bpf.object = relative_path(*s);
      else if (m.key == "builtin")
        bpf.builtin = *s;
      else if (m.key == "output")
        bpf.output = *s;
      else if (m.key == "time")
        bpf.payload_time = *s;
      else
        bpf.payload_struct = *s;
    }
    if (!bpf.payload_time.empty() && bpf.payload_struct.empty()) {
      diags_.add(bpf.value_where["time"],
                 fmt::format("[bpf] time = \"{}\" names a field of the payload struct, but [bpf] "
                             "has no 'struct'",
                             bpf.payload_time),
                 "add struct = \"...\" (the C struct the programs emit) next to it");
    }
    if (first_origin == nullptr && !std::any_of(t.begin(), t.end(), [](const Member& m) {
          return m.key == "source" || m.key == "object" || m.key == "builtin";
        })) {
      diags_.add(where, "[bpf] needs one of 'source', 'object' or 'builtin'",
                 "source = \"file.bpf.c\" (compiled at start), object = \"file.bpf.o\", or "
                 "builtin = \"name\"");
    }
    recipe_.bpf = std::move(bpf);
  }

  void read_probe(const Node& node) {
    const NodeTable& t = *node.table();
    RecipeProbe probe;
    probe.where = node.where;
    ProbeOptions& o = probe.options;
    const auto keys = names_of(kProbeKeys);
    const auto kinds = kind_names();

    std::string label = fmt::format("probe #{}", probe_index_ + 1);
    ++probe_index_;
    if (const auto* n = find_member(t, "name"); n != nullptr && n->value.string() != nullptr)
      label = fmt::format("probe '{}'", *n->value.string());

    const Member* kind = nullptr;
    bool kind_reported = false;
    std::optional<std::uint64_t> ring_bytes;
    for (const auto& m : t) {
      const KeySpec* spec = find_spec(kProbeKeys, m.key);
      if (spec == nullptr) {
        auto near = nearest(m.key, keys);
        if (!near.empty() && find_kind(near.front()) != nullptr) {
          diags_.add(m.key_where, fmt::format("unknown probe kind '{}'", m.key),
                     fmt::format("did you mean {}?", quoted_list(near)));
          kind_reported = true;
        } else {
          unknown_key(m, "[[probe]]", keys);
        }
        continue;
      }
      probe.value_where[m.key] = m.value.where;
      if (const auto* k = find_kind(m.key)) {
        if (kind != nullptr) {
          diags_.add(
              m.key_where, fmt::format("{} has two kinds: '{}' and '{}'", label, kind->key, m.key),
              fmt::format("a probe has exactly one of {}; split it into two [[probe]] tables",
                          plain_list(kinds)));
          kind_reported = true;
          continue;
        }
        kind = &m;
        o.kind = k->kind;
        if (const auto* s = get_string(m)) {
          o.spec = *s;
          check_spec(m, k->kind);
        }
        continue;
      }
      if (m.key == "name") {
        if (const auto* s = get_string(m)) {
          if (s->empty())
            diags_.add(m.value.where, "empty probe name", "name it: name = \"openat\"");
          o.name = *s;
        }
      } else if (m.key == "period") {
        o.period = get_count<std::uint64_t>(m);
      } else if (m.key == "freq") {
        o.freq = get_count<std::uint64_t>(m);
      } else if (m.key == "counting") {
        if (auto v = get_bool(m))
          o.counting = *v;
      } else if (m.key == "filter") {
        if (const auto* s = get_string(m))
          o.filter = *s;
      } else if (m.key == "bpf") {
        if (const auto* s = get_string(m)) {
          if (s->empty())
            diags_.add(m.value.where, "empty 'bpf' program name",
                       "name a program of the [bpf] object, or leave the key out");
          o.bpf_program = *s;
        }
      } else if (m.key == "callchain") {
        if (auto v = get_bool(m); v && *v)
          o.extra_sample_type |= PERF_SAMPLE_CALLCHAIN;
      } else if (m.key == "user_regs") {
        if (auto v = get_bool(m); v && *v) {
          o.sample_regs_user = all_user_regs();
          if (o.sample_regs_user == 0)
            diags_.add(m.value.where, "'user_regs' is supported on x86-64 only",
                       "leave it out on this architecture");
          o.extra_sample_type |= PERF_SAMPLE_REGS_USER;
        }
      } else if (m.key == "user_stack") {
        if (auto v = get_size(m)) {
          // perf_copy_attr(): sample_stack_user must be u64-aligned and below USHRT_MAX.
          if (*v == 0 || *v % 8 != 0 || *v >= 65535) {
            diags_.add(m.value.where, fmt::format("bad user_stack size {}", *v),
                       "the kernel takes a multiple of 8 from 8 to 65528 bytes, e.g. \"8KiB\"");
          } else {
            o.sample_stack_user = static_cast<std::uint32_t>(*v);
            o.extra_sample_type |= PERF_SAMPLE_STACK_USER;
          }
        }
      } else if (m.key == "task_records") {
        if (auto v = get_bool(m))
          o.task_records = *v;
      } else if (m.key == "context_switches") {
        if (auto v = get_bool(m))
          o.context_switches = *v;
      } else if (m.key == "ring") {
        if (auto v = get_size(m)) {
          if (auto pages = pages_of(m, *v, "ring size"))
            o.ring_pages = *pages;
          ring_bytes = v;
        }
      } else if (m.key == "wakeup_events") {
        if (auto v = get_count<std::uint32_t>(m))
          o.wakeup.events = *v;
      } else if (m.key == "wakeup_bytes") {
        if (auto v = get_size(m)) {
          if (*v == 0 || *v > std::numeric_limits<std::uint32_t>::max())
            diags_.add(m.value.where, fmt::format("bad wakeup_bytes {}", *v),
                       "write a fill level smaller than the ring, e.g. \"64KiB\"");
          else
            o.wakeup.watermark_bytes = static_cast<std::uint32_t>(*v);
        }
      } else if (m.key == "aux_size") {
        if (auto v = get_size(m)) {
          if (pages_of(m, *v, "aux_size"))
            o.aux_bytes = *v;
        }
      } else if (m.key == "aux_snapshot") {
        if (auto v = get_bool(m))
          o.aux_snapshot = *v;
      }
    }

    if (find_member(t, "name") == nullptr)
      diags_.add(node.where, fmt::format("missing required key 'name' in {}", label),
                 "add name = \"...\" (unique; shown in stats and used by --set probe.NAME.KEY)");
    if (kind == nullptr && !kind_reported)
      diags_.add(node.where, fmt::format("{} has no kind", label),
                 fmt::format("add one of {} with its spec, e.g. tracepoint = "
                             "\"syscalls:sys_enter_openat\"",
                             plain_list(kinds)));
    check_probe_combinations(t, probe, label, ring_bytes);

    if (!o.name.empty()) {
      for (const auto& other : recipe_.probes) {
        if (other.options.name == o.name) {
          const auto& first = other.where_of("name");
          diags_.add(probe.where_of("name"), fmt::format("duplicate probe name '{}'", o.name),
                     fmt::format("first used at {}:{}:{}; probe names must be unique", first.path,
                                 first.line, first.column));
          break;
        }
      }
    }
    recipe_.probes.push_back(std::move(probe));
  }

  /// Syntax of a kind's spec that needs no system access.
  void check_spec(const Member& m, ProbeKind kind) {
    const std::string& spec = *m.value.string();
    if (spec.empty()) {
      diags_.add(m.value.where, fmt::format("empty {} spec", m.key),
                 "say what to probe, e.g. tracepoint = \"sched:sched_switch\"");
      return;
    }
    if (kind == ProbeKind::kTracepoint && !tracefs::split_tracepoint(spec)) {
      diags_.add(m.value.where, fmt::format("malformed tracepoint '{}'", spec),
                 "write it as system:event, e.g. \"syscalls:sys_enter_openat\"");
    } else if (kind == ProbeKind::kUprobe || kind == ProbeKind::kUretprobe) {
      const auto colon = spec.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
        diags_.add(m.value.where, fmt::format("malformed {} '{}'", m.key, spec),
                   "write it as binary:symbol, e.g. \"/usr/bin/bash:readline\" or "
                   "\"libc:malloc+0x10\"");
    }
  }

  /// Bytes as a power-of-two number of pages (what a ring or an AUX area must be).
  std::optional<std::uint32_t> pages_of(const Member& m,
                                        std::uint64_t bytes,
                                        std::string_view what) {
    const std::uint64_t page = page_bytes();
    const std::uint64_t pages = bytes / page;
    if (bytes % page == 0 && pages > 0 && std::has_single_bit(pages) &&
        pages <= std::numeric_limits<std::uint32_t>::max())
      return static_cast<std::uint32_t>(pages);
    const std::uint64_t lower = pages == 0 ? 1 : std::bit_floor(pages);
    const std::string text =
        m.value.string() != nullptr ? *m.value.string() : std::to_string(bytes);
    const std::string why = bytes % page != 0
                                ? fmt::format("not a whole number of {}-byte pages", page)
                                : fmt::format("{} pages is not a power of two", pages);
    diags_.add(
        m.value.where, fmt::format("bad {} '{}': {}", what, text, why),
        pages == 0 || lower == pages
            ? fmt::format("use a power of two pages, e.g. {} ({} page)", format_bytes(page), 1)
            : fmt::format("use a power of two pages: {} ({} pages) or {} ({} pages)",
                          format_bytes(lower * page), lower, format_bytes(2 * lower * page),
                          2 * lower));
    return std::nullopt;
  }

  void check_probe_combinations(const NodeTable& t,
                                const RecipeProbe& probe,
                                const std::string& label,
                                std::optional<std::uint64_t> ring_bytes) {
    const ProbeOptions& o = probe.options;
    const bool has_kind = std::any_of(t.begin(), t.end(),
                                      [](const Member& m) { return find_kind(m.key) != nullptr; });
    if (o.period && o.freq)
      diags_.add(probe.where_of("freq"), fmt::format("{} has both 'period' and 'freq'", label),
                 "keep one: period = N samples every N events, freq = N samples per second");
    if (o.counting && (o.period || o.freq))
      diags_.add(
          probe.where_of(o.period ? "period" : "freq"),
          fmt::format("{} is counting: it takes no '{}'", label, o.period ? "period" : "freq"),
          "a counter is read, not sampled; drop the key or counting = true");
    const bool tracefs_kind = o.kind == ProbeKind::kTracepoint || o.kind == ProbeKind::kKprobe ||
                              o.kind == ProbeKind::kKretprobe || o.kind == ProbeKind::kUprobe ||
                              o.kind == ProbeKind::kUretprobe;
    if (has_kind && !o.filter.empty() && !tracefs_kind)
      diags_.add(probe.where_of("filter"),
                 fmt::format("'filter' does not apply to {} probes", to_string(o.kind)),
                 "tracefs filters work on tracepoints and k/u(ret)probes; filter in a pipeline "
                 "stage instead");
    if (has_kind && o.kind != ProbeKind::kAux) {
      for (std::string_view k : {"aux_size", "aux_snapshot"}) {
        if (find_member(t, k) != nullptr)
          diags_.add(probe.where_of(k),
                     fmt::format("'{}' does not apply to {} probes", k, to_string(o.kind)),
                     "only aux probes map an AUX area");
      }
    }
    if (ring_bytes && o.wakeup.watermark_bytes != 0 && o.wakeup.watermark_bytes >= *ring_bytes)
      diags_.add(probe.where_of("wakeup_bytes"),
                 fmt::format("'wakeup_bytes' ({}) is not smaller than the ring ({})",
                             format_bytes(o.wakeup.watermark_bytes), format_bytes(*ring_bytes)),
                 "the kernel would never wake the reader; use a quarter of the ring");
  }

  void read_pipeline(const Node& node) {
    const NodeTable& t = *node.table();
    RecipePipeline pl;
    pl.where = node.where;
    const Member* name = nullptr;
    const Member* stages = nullptr;
    for (const auto& m : t) {
      if (m.key == "name") {
        name = &m;
        if (const auto* s = get_string(m))
          pl.name = *s;
      } else if (m.key == "stage") {
        stages = &m;
      } else {
        unknown_key(m, "[[pipeline]]", {"name", "stage"});
      }
    }
    if (name == nullptr) {
      diags_.add(node.where, "missing required key 'name' in [[pipeline]]",
                 "add name = \"...\" (unique)");
    } else if (!pl.name.empty()) {
      for (const auto& other : recipe_.pipelines) {
        if (other.name == pl.name) {
          diags_.add(name->value.where, fmt::format("duplicate pipeline name '{}'", pl.name),
                     fmt::format("first defined at {}:{}:{}; pipeline names must be unique",
                                 other.where.path, other.where.line, other.where.column));
          break;
        }
      }
    }
    if (stages == nullptr) {
      diags_.add(node.where,
                 fmt::format("pipeline '{}' has no stages", pl.name.empty() ? "?" : pl.name),
                 "add [[pipeline.stage]] tables after it, each with use = \"...\"");
    } else if (const auto* a = want_table_array(*stages, "[[pipeline.stage]]")) {
      for (const auto& e : *a)
        read_stage(e, pl.stages);
    }
    recipe_.pipelines.push_back(std::move(pl));
  }

  /// A tree value as the ConfigValue stages read; nullopt (after a diagnostic) for date-times.
  std::optional<ConfigValue> to_config(const Node& n, std::string_view label) {
    ConfigValue v;
    v.where = n.where;
    if (const auto* t = n.table()) {
      ConfigTable out;
      for (const auto& m : *t) {
        if (auto c = to_config(m.value, label))
          out.emplace_back(m.key, std::move(*c));
      }
      v.value = std::move(out);
    } else if (const auto* a = n.array()) {
      ConfigArray out;
      for (const auto& e : *a) {
        if (auto c = to_config(e, label))
          out.push_back(std::move(*c));
      }
      v.value = std::move(out);
    } else if (std::holds_alternative<DateTime>(n.value)) {
      wrong_type(n, label, "a value other than a date or time", "write it as a string");
      return std::nullopt;
    } else {
      std::visit(
          [&](const auto& x) {
            using X = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<X, bool> || std::is_same_v<X, std::int64_t> ||
                          std::is_same_v<X, double> || std::is_same_v<X, std::string>)
              v.value = x;
          },
          n.value);
    }
    return v;
  }

  void read_stage(const Node& node, std::vector<RecipeStage>& out) {
    const NodeTable& t = *node.table();
    RecipeStage stage;
    stage.where = node.where;
    stage.options.where = node.where;
    ConfigTable options;
    const Member* use = nullptr;
    for (const auto& m : t) {
      if (m.key == "use") {
        use = &m;
        if (const auto* s = get_string(m))
          stage.use = *s;
        continue;
      }
      if (auto c = to_config(m.value, fmt::format("option '{}'", m.key)))
        options.emplace_back(m.key, std::move(*c));
    }
    stage.options.value = std::move(options);
    if (use == nullptr) {
      diags_.add(node.where, "missing required key 'use' in [[stage]]",
                 options_.stages.empty() ? std::string("name the stage: use = \"count\"")
                                         : fmt::format("name the stage: use = \"...\" (stages: {})",
                                                       plain_list(names_of(options_.stages))));
    } else if (use->value.string() != nullptr && stage.use.empty()) {
      diags_.add(use->value.where, "empty 'use' in [[stage]]", "name the stage: use = \"count\"");
    } else if (use->value.string() != nullptr) {
      check_stage(t, *use, stage);
    }
    out.push_back(std::move(stage));
  }

  void check_stage(const NodeTable& t, const Member& use, const RecipeStage& stage) {
    if (options_.stages.empty())
      return;
    const StageSpec* spec = nullptr;
    for (const auto& s : options_.stages) {
      if (s.name == stage.use)
        spec = &s;
    }
    if (spec == nullptr) {
      diags_.add(use.value.where, fmt::format("unknown stage '{}'", stage.use),
                 suggest(stage.use, names_of(options_.stages), "stages"));
      return;
    }
    const auto option_names = names_of(spec->options);
    for (const auto& m : t) {
      if (m.key == "use")
        continue;
      const OptionSpec* o = nullptr;
      for (const auto& os : spec->options) {
        if (os.name == m.key)
          o = &os;
      }
      if (o == nullptr) {
        diags_.add(m.key_where,
                   fmt::format("unknown option '{}' for stage '{}'", m.key, spec->name),
                   suggest(m.key, option_names, fmt::format("options of '{}'", spec->name)));
        continue;
      }
      check_option(m, *o, spec->name);
    }
    for (const auto& o : spec->options) {
      if (o.required && find_member(t, o.name) == nullptr)
        diags_.add(stage.where, fmt::format("stage '{}' needs option '{}'", spec->name, o.name),
                   o.help.empty()
                       ? fmt::format("add {} = {}", o.name, example_of(o.type))
                       : fmt::format("add {} = {} ({})", o.name, example_of(o.type), o.help));
    }
  }

  void check_option(const Member& m, const OptionSpec& o, const std::string& stage) {
    using T = OptionSpec::Type;
    const std::string label = fmt::format("option '{}' of stage '{}'", m.key, stage);
    const Node& v = m.value;
    const auto wrong = [&] {
      wrong_type(v, label, option_type_label(o.type),
                 fmt::format("write {} = {}", m.key, example_of(o.type)));
    };
    switch (o.type) {
      case T::kAny:
        return;
      case T::kBool:
        if (v.boolean() == nullptr)
          wrong();
        return;
      case T::kInt:
        if (v.integer() == nullptr)
          wrong();
        return;
      case T::kFloat:
        if (v.integer() == nullptr && !std::holds_alternative<double>(v.value))
          wrong();
        return;
      case T::kString:
        if (v.string() == nullptr)
          wrong();
        return;
      case T::kExpression:
        if (v.string() == nullptr)
          wrong();
        else if (v.string()->empty())
          diags_.add(v.where, fmt::format("empty expression for {}", label),
                     fmt::format("write {} = {}", m.key, example_of(o.type)));
        return;
      case T::kDuration:
        if (v.string() == nullptr) {
          wrong();
        } else if (auto d = parse_duration(*v.string()); !d) {
          diags_.add(v.where, fmt::format("{} for {}", d.error().message, label), d.error().hint);
        }
        return;
      case T::kSize:
        if (const auto* i = v.integer()) {
          if (*i < 0)
            diags_.add(v.where, fmt::format("bad size {} for {}", *i, label),
                       "a size cannot be negative");
        } else if (v.string() == nullptr) {
          wrong();
        } else if (auto s = parse_size(*v.string()); !s) {
          diags_.add(v.where, fmt::format("{} for {}", s.error().message, label), s.error().hint);
        }
        return;
      case T::kStringList:
      case T::kFieldList:
        if (v.string() != nullptr)
          return;
        if (const auto* a = v.array()) {
          for (const auto& e : *a) {
            if (e.string() == nullptr)
              wrong_type(e, fmt::format("an element of {}", label), "string",
                         fmt::format("write {} = {}", m.key, example_of(o.type)));
          }
          return;
        }
        wrong();
        return;
    }
  }

  std::string path_;
  fs::path base_dir_;
  const RecipeLoadOptions& options_;
  Diagnostics diags_;
  Recipe recipe_;
  std::size_t probe_index_ = 0;
};

/// Whether a tracepoint spec is a shell glob ("syscalls:sys_enter_*"): one probe per match.
bool is_tracepoint_glob(std::string_view spec) {
  return spec.find_first_of("*?[") != std::string_view::npos;
}

/// The glob with its wildcard characters removed, as a name to look near matches up with.
tracefs::TracepointName glob_as_name(std::string_view glob) {
  std::string plain;
  for (char c : glob) {
    if (c != '*' && c != '?' && c != '[' && c != ']')
      plain.push_back(c);
  }
  if (auto tp = tracefs::split_tracepoint(plain))
    return *tp;
  return {.system = {}, .event = plain};
}

/// A glob that matches nothing, at the spec's position, with what it may have meant.
void no_match(const RecipeProbe& p, const tracefs::Tracefs& fs, Diagnostics& diagnostics) {
  const auto near = fs.near_matches(glob_as_name(p.options.spec));
  diagnostics.add(p.where_of(to_string(p.options.kind)),
                  fmt::format("no tracepoint matches '{}'", p.options.spec),
                  near.empty() ? std::string("see `tracer list tracepoints 'GLOB'`")
                               : fmt::format("near matches: {}", plain_list(near)));
}

/// The kernel answers a filter naming a field its event lacks with a bare EINVAL: name the
/// field here, at the filter's position, with the fields it may have meant.
void check_filter_fields(const RecipeProbe& p,
                         const tracefs::Format& format,
                         Diagnostics& diagnostics) {
  std::vector<std::string> names;
  for (const auto& f : format.fields)
    names.push_back(f.name);
  for (const auto& ff : tracefs::filter_fields(p.options.filter)) {
    if (format.field(ff.name) != nullptr || tracefs::is_generic_filter_field(ff.name))
      continue;
    const auto near = nearest(ff.name, names);
    std::vector<std::string> own;  // the event's own fields, without common_*
    for (const auto& f : format.fields) {
      if (!f.is_common)
        own.push_back(f.name);
    }
    const std::string hint =
        !near.empty() ? fmt::format("did you mean {}?", quoted_list(near))
                      : fmt::format("{} has the fields {} (and common_pid, cpu, comm, ...)",
                                    p.options.spec, plain_list(own));
    diagnostics.add(p.where_of("filter"),
                    fmt::format("filter of probe '{}': {} has no field '{}' (at offset {} of "
                                "the filter)",
                                p.options.name, p.options.spec, ff.name, ff.offset),
                    hint);
  }
}

}  // namespace

const SourceRegion& RecipeProbe::where_of(std::string_view key) const noexcept {
  const auto it = value_where.find(key);
  return it != value_where.end() ? it->second : where;
}

Recipe Recipe::load_string(std::string_view text,
                           std::string_view display_path,
                           const LoadOptions& options) {
  return Loader(display_path, options).run(text);
}

Recipe Recipe::load(const std::filesystem::path& file, const LoadOptions& options) {
  // A recipe is a few KiB; 4 MiB guards against being pointed at something else.
  auto text = detail::read_text_file(file, "recipe", std::size_t{4} << 20);
  if (!text)
    throw Error(ErrorCategory::kNotFound, text.error().code, text.error().message,
                "check the recipe path (configs/ holds ready-made recipes)");
  return load_string(*text, file.string(), options);
}

void Recipe::check_system(Diagnostics& diagnostics, std::optional<pid_t> pid) const {
  std::optional<Result<tracefs::Tracefs>> tracefs;
  for (const auto& p : probes) {
    const ProbeOptions& o = p.options;
    const SourceRegion& where = p.where_of(to_string(o.kind));
    if (o.kind == ProbeKind::kTracepoint) {
      if (!tracefs) {
        tracefs = tracefs::Tracefs::open();
        if (!*tracefs) {
          diagnostics.add(where,
                          fmt::format("cannot check tracepoints: {}", tracefs->error().message),
                          tracefs->error().hint);
        }
      }
      if (!*tracefs)
        continue;
      if (is_tracepoint_glob(o.spec)) {
        auto matches = (*tracefs)->list_tracepoints(o.spec);
        if (!matches) {
          diagnostics.add(where, matches.error().message, matches.error().hint);
        } else if (matches->empty()) {
          no_match(p, **tracefs, diagnostics);
        } else if (!o.filter.empty()) {
          // The filter goes to every match: each must have its fields.
          for (const auto& m : *matches) {
            if (auto format = (*tracefs)->format(m)) {
              Diagnostics one;
              check_filter_fields(p, *format, one);
              if (!one.empty()) {
                for (const auto& d : one.items())
                  diagnostics.add(d.where, d.message, d.hint);
                break;  // one event lacking the field says it
              }
            }
          }
        }
        continue;
      }
      const auto tp = tracefs::split_tracepoint(o.spec);
      if (!tp) {
        diagnostics.add(where, fmt::format("malformed tracepoint '{}'", o.spec),
                        "write it as system:event, e.g. \"syscalls:sys_enter_openat\"");
        continue;
      }
      auto format = (*tracefs)->format(*tp);
      if (!format) {
        diagnostics.add(where,
                        format.error().errno_value() == ENOENT
                            ? fmt::format("unknown tracepoint '{}'", o.spec)
                            : format.error().message,
                        format.error().hint);
      } else if (!o.filter.empty()) {
        check_filter_fields(p, *format, diagnostics);
      }
    } else if (o.kind == ProbeKind::kUprobe || o.kind == ProbeKind::kUretprobe) {
      auto target = core::parse_uprobe_spec(o.spec, pid);
      if (!target)
        diagnostics.add(where, target.error().message, target.error().hint);
    }
  }
  if (bpf) {
    const auto check_file = [&](const fs::path& file, std::string_view key) {
      if (file.empty())
        return;
      std::error_code ec;
      if (!fs::is_regular_file(file, ec)) {
        const auto it = bpf->value_where.find(key);
        diagnostics.add(it != bpf->value_where.end() ? it->second : bpf->where,
                        fmt::format("bpf {} '{}' not found", key, file.string()),
                        "paths in [bpf] are relative to the recipe's directory");
      }
    };
    check_file(bpf->source, "source");
    check_file(bpf->object, "object");
  }
}

EngineOptions Recipe::to_engine_options(const Target& target) const {
  EngineOptions out;
  out.target = target;
  out.probes.reserve(probes.size());
  std::optional<Result<tracefs::Tracefs>> tracefs;
  Diagnostics diags;
  for (const auto& p : probes) {
    if (p.options.kind != ProbeKind::kTracepoint || !is_tracepoint_glob(p.options.spec)) {
      out.probes.push_back(p.options);
      continue;
    }
    // A glob is one probe per matching tracepoint, each its own perf event: "name:event".
    if (!tracefs)
      tracefs = tracefs::Tracefs::open();
    if (!*tracefs) {
      diags.add(p.where_of("tracepoint"),
                fmt::format("cannot expand '{}': {}", p.options.spec, tracefs->error().message),
                tracefs->error().hint);
      continue;
    }
    auto matches = (*tracefs)->list_tracepoints(p.options.spec);
    if (!matches) {
      diags.add(p.where_of("tracepoint"), matches.error().message, matches.error().hint);
      continue;
    }
    if (matches->empty())
      no_match(p, **tracefs, diags);
    for (const auto& m : *matches) {
      ProbeOptions o = p.options;
      o.name = fmt::format("{}:{}", p.options.name, m.event);
      o.spec = fmt::format("{}:{}", m.system, m.event);
      out.probes.push_back(std::move(o));
    }
  }
  diags.throw_if_any();
  if (bpf) {
    BpfOptions b;
    b.builtin = bpf->builtin;
    b.object = bpf->object;
    b.source = bpf->source;
    b.output_map = bpf->output;
    b.output_optional = !bpf->value_where.contains("output");
    b.payload_struct = bpf->payload_struct;
    b.payload_time = bpf->payload_time;
    if (const auto w = bpf->value_where.find("struct"); w != bpf->value_where.end())
      b.payload_struct_where = w->second;
    if (const auto w = bpf->value_where.find("time"); w != bpf->value_where.end())
      b.payload_time_where = w->second;
    out.bpf = std::move(b);
  }
  return out;
}

}  // namespace tracer
