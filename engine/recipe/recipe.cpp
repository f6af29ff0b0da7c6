// Recipe loading: the text becomes a ConfigValue tree that keeps every key's and value's position
// (recipe_toml.cpp), --set overrides and ${param} references change that tree
// (recipe_subst.cpp), and the model is read from it against the key schema (recipe_schema.cpp)
// while every problem is collected into one Diagnostics (A4 `Diagnostics`, A6 `source_region`),
// thrown once at the end.
#include "tracer/recipe.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "recipe_counter.hpp"
#include "recipe_export.hpp"
#include "recipe_probe.hpp"
#include "recipe_schema.hpp"
#include "recipe_subst.hpp"
#include "recipe_system.hpp"
#include "recipe_toml.hpp"
#include "tracer/common/trusted_file.hpp"

namespace tracer {

std::string_view to_string(Placement p) noexcept {
  switch (p) {
    case Placement::kKernel:
      return "kernel";
    case Placement::kUser:
      return "user";
    case Placement::kAuto:
      break;
  }
  return "auto";
}

std::optional<Placement> parse_placement(std::string_view text) noexcept {
  if (text == "auto")
    return Placement::kAuto;
  if (text == "kernel")
    return Placement::kKernel;
  if (text == "user")
    return Placement::kUser;
  return std::nullopt;
}

namespace {

namespace fs = std::filesystem;
using core::Entry;
using core::find_spec;
using core::names_of;
using core::plain_list;
using core::suggest;

/// The entry of `table` named `key`, or nullptr.
const Entry* find_entry(const ConfigTable& table, std::string_view key) {
  const auto it =
      std::find_if(table.begin(), table.end(), [&](const Entry& e) { return e.first == key; });
  return it != table.end() ? &*it : nullptr;
}

class Loader {
 public:
  Loader(std::string_view display_path, const RecipeLoadOptions& options)
      : path_(display_path), options_(options) {
    base_dir_ = fs::path(path_).parent_path();
  }

  Recipe run(std::string_view text) {
    if (!structure_ok(text)) {
      diags_.throw_if_any();
      return {};
    }
    std::optional<ConfigValue> root = core::parse_toml(text, path_, diags_);
    if (!root) {
      diags_.throw_if_any();
      return {};
    }
    core::apply_sets(*root, options_.sets, diags_);
    recipe_.params = core::read_params(*root, diags_);
    for (auto& [key, v] : *root->table()) {
      if (key == "probe" || key == "bpf" || key == "stage" || key == "pipeline" ||
          key == "counter" || key == "export")
        core::substitute(v, recipe_.params, diags_);
    }
    read_root(*root->table());
    // The kernel's answers, once the text itself is sound (a recipe half read would name
    // tracepoints it does not mean).
    if (options_.check_kernel && diags_.empty()) {
      core::check_against_system(recipe_, diags_, core::SystemScope::kKernel, std::nullopt,
                                 Recipe::Writes::kNone);
    }
    if (options_.problems != nullptr) {
      for (const auto& d : diags_.items())
        options_.problems->add(d.where, d.message, d.hint);
      return std::move(recipe_);
    }
    diags_.throw_if_any();
    return std::move(recipe_);
  }

 private:
  /// Limits checked before the TOML parser sees the text (its recursion follows a key's dotted
  /// parts and the nesting of arrays and inline tables: a hostile recipe would overflow the
  /// stack). Strings and comments are skipped. False (with a positioned diagnostic) past them.
  bool structure_ok(std::string_view text) {
    constexpr std::size_t kMaxRecipeBytes = std::size_t{4} << 20;
    constexpr int kMaxDots = 64, kMaxDepth = 64;
    if (text.size() > kMaxRecipeBytes) {
      diags_.add({path_, 1, 1},
                 fmt::format("the recipe is larger than {} MiB", kMaxRecipeBytes >> 20),
                 "a recipe is a few KiB: is this the right file?");
      return false;
    }
    std::uint32_t line = 1, col = 1;
    int dots = 0, depth = 0;
    for (std::size_t i = 0; i < text.size(); ++i, ++col) {
      const char c = text[i];
      if (c == '\n') {
        ++line;
        col = 0;
        dots = 0;
        continue;
      }
      if (c == '#') {  // a comment: to the end of the line
        while (i + 1 < text.size() && text[i + 1] != '\n')
          ++i;
        continue;
      }
      if (c == '"' || c == '\'') {  // a string (multi-line ones too): its content is not structure
        const std::string_view triple = c == '"' ? std::string_view(R"(""")") : "'''";
        const bool multi = text.substr(i, 3) == triple;
        const std::string_view close = multi ? text.substr(i, 3) : text.substr(i, 1);
        std::size_t j = i + close.size();
        // A single-line string ends at its line's end at the latest (an unterminated one is the
        // parser's error to report, not a reason to skip the rest of the file).
        while (j < text.size() && text.substr(j, close.size()) != close &&
               (multi || text[j] != '\n')) {
          if (c == '"' && text[j] == '\\' && j + 1 < text.size())
            ++j;  // the escaped character (a newline is counted below)
          if (j < text.size() && text[j] == '\n')
            ++line;
          ++j;
        }
        std::size_t end = j + (j < text.size() && text[j] != '\n' ? close.size() : 0);
        // A multi-line string may end with one or two quotes of its own before its closing
        // three (""""quoted"""" is valid TOML).
        for (int extra = 0; multi && extra < 2 && end < text.size() && text[end] == c; ++extra)
          ++end;
        col += static_cast<std::uint32_t>(end - i);
        i = end - 1;
        continue;
      }
      if (c == '.' && ++dots > kMaxDots) {
        diags_.add({path_, line, col},
                   fmt::format("a key of more than {} dotted parts", kMaxDots + 1),
                   "write the nested tables as [section] headers");
        return false;
      }
      if (c == '[' || c == '{') {
        if (++depth > kMaxDepth) {
          diags_.add({path_, line, col},
                     fmt::format("arrays or tables nested more than {} deep", kMaxDepth),
                     "a recipe's values nest a few levels at most");
          return false;
        }
      } else if ((c == ']' || c == '}') && depth > 0) {
        --depth;
      } else if (c == '=' || c == ',') {
        dots = 0;
      }
    }
    return true;
  }

  // --- sections ------------------------------------------------------------------------------

  void read_root(const ConfigTable& root) {
    recipe_.path = path_;
    const SourceRegion file_start{path_, 1, 1};
    const std::vector<std::string> top = {std::begin(core::kTopKeys), std::end(core::kTopKeys)};
    for (const auto& [key, v] : root) {
      if (std::find(top.begin(), top.end(), key) == top.end())
        diags_.add(v.key_where, fmt::format("unknown top-level key '{}'", key),
                   suggest(key, top, "a recipe has"));
    }

    if (const auto* r = find_entry(root, "recipe")) {
      if (const auto* t = keys_.table(*r, "write [recipe] followed by name = \"...\""))
        read_recipe_table(*t, r->second.where);
    } else {
      diags_.add(file_start, "missing [recipe] table",
                 "start the file with [recipe] and name = \"...\"");
    }

    if (const auto* bpf = find_entry(root, "bpf")) {
      if (const auto* t = keys_.table(*bpf, "write [bpf] followed by source = \"file.bpf.c\""))
        read_bpf(*t, bpf->second.where);
    }

    if (const auto* x = find_entry(root, "export")) {
      if (keys_.table(*x, R"(write [export] followed by prefix = "...")") != nullptr)
        recipe_.exporting = core::read_export(x->second, diags_);
    }

    if (const auto* c = find_entry(root, "counter")) {
      if (const auto* a = keys_.table_array(*c, "[[counter]]")) {
        for (const auto& e : *a)
          recipe_.counters.push_back(
              core::read_counter(e, recipe_.counters.size(), recipe_.counters, diags_));
      }
    }
    if (const auto* p = find_entry(root, "probe")) {
      if (const auto* a = keys_.table_array(*p, "[[probe]]")) {
        for (const auto& e : *a)
          recipe_.probes.push_back(
              core::read_probe(e, recipe_.probes.size(), recipe_.probes, diags_));
      }
    } else if (recipe_.counters.empty()) {
      diags_.add(
          file_start, "the recipe has no [[probe]] and no [[counter]]",
          "add a [[probe]] with a name and a kind, e.g. tracepoint = \"sched:sched_switch\", or "
          "a [[counter]] group with events = [\"task-clock\", \"page-faults\"]");
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

    const auto* stage = find_entry(root, "stage");
    const auto* pipeline = find_entry(root, "pipeline");
    if (stage != nullptr && pipeline != nullptr) {
      const SourceRegion& s = stage->second.key_where;
      const SourceRegion& p = pipeline->second.key_where;
      diags_.add(core::before(s, p) ? p : s,
                 "a recipe has either [[stage]] or [[pipeline]] tables, not both",
                 "move the top-level [[stage]] tables into a [[pipeline]] as [[pipeline.stage]]");
    }
    if (stage != nullptr) {
      if (const auto* a = keys_.table_array(*stage, "[[stage]]")) {
        RecipePipeline pl{.name = "main", .stages = {}, .where = stage->second.where};
        if (!a->empty())
          pl.where = a->front().where;
        for (const auto& e : *a)
          read_stage(e, pl.stages);
        recipe_.pipelines.push_back(std::move(pl));
      }
    }
    if (pipeline != nullptr) {
      if (const auto* a = keys_.table_array(*pipeline, "[[pipeline]]")) {
        for (const auto& e : *a)
          read_pipeline(e);
      }
    }
    add_counter_pipelines();
  }

  /// A [[counter]] group no `counters` stage names gets a pipeline of its own, "counter.NAME":
  /// its tables then print (or go to --json) as any aggregation's.
  void add_counter_pipelines() {
    for (const auto& c : recipe_.counters) {
      bool named = false;
      for (const auto& pl : recipe_.pipelines) {
        for (const auto& st : pl.stages) {
          if (st.use != "counters")
            continue;
          const ConfigValue* g = st.options.find("group");
          named = named || g == nullptr || (g->string() != nullptr && *g->string() == c.name);
        }
      }
      if (named || c.name.empty())
        continue;
      RecipeStage st{.use = "counters", .options = {}, .where = c.where};
      ConfigValue group;
      group.value = c.name;
      group.where = c.where_of("name");
      st.options.value = ConfigTable{{"group", std::move(group)}};
      st.options.where = c.where;
      recipe_.pipelines.push_back(
          {.name = "counter." + c.name, .stages = {std::move(st)}, .where = c.where});
    }
  }

  void read_recipe_table(const ConfigTable& t, const SourceRegion& where) {
    const auto keys = names_of(core::kRecipeKeys);
    bool has_name = false;
    for (const auto& e : t) {
      const auto& [key, v] = e;
      if (find_spec(core::kRecipeKeys, key) == nullptr) {
        keys_.unknown_key(e, "[recipe]", keys);
        continue;
      }
      recipe_.value_where[key] = v.where;
      if (key == "name") {
        has_name = true;
        if (const auto* s = keys_.string(e)) {
          if (s->empty())
            diags_.add(v.where, "empty recipe name", "name the recipe: name = \"openat\"");
          recipe_.name = *s;
        }
      } else if (key == "description") {
        if (const auto* s = keys_.string(e))
          recipe_.description = *s;
      } else if (key == "placement") {
        if (const auto* s = keys_.string(e)) {
          if (auto p = parse_placement(*s))
            recipe_.placement = *p;
          else
            diags_.add(v.where, fmt::format("unknown placement '{}'", *s),
                       R"(placement is "auto" (the default), "kernel" or "user")");
        }
      } else if (key == "channel") {
        if (const auto* s = keys_.string(e)) {
          if (auto c = parse_delivery_channel(*s))
            recipe_.channel = c;
          else
            diags_.add(v.where, fmt::format("unknown channel '{}'", *s),
                       R"(channel is "ringbuf" (a BPF ring buffer, the default) or "perf")");
        }
      } else if (key == "max_targets") {
        if (auto n = keys_.integer(e)) {
          if (*n < 16 || *n > (1 << 22))
            diags_.add(v.where, fmt::format("max_targets {} is out of range", *n),
                       "the target processes alive at once that in-kernel programs follow: "
                       "16 to 4194304 (default 65536)");
          else
            recipe_.max_targets = static_cast<std::uint32_t>(*n);
        }
      } else if (key == "duration") {
        if (auto d = keys_.duration(e)) {
          if (d->count() <= 0)
            diags_.add(v.where, "'duration' must be positive", "leave it out to run until SIGINT");
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

  static bool is_bpf_origin(std::string_view key) {
    return key == "source" || key == "object" || key == "builtin";
  }

  void read_bpf(const ConfigTable& t, const SourceRegion& where) {
    RecipeBpf bpf;
    bpf.where = where;
    const auto keys = names_of(core::kBpfKeys);
    const Entry* first_origin = nullptr;
    for (const auto& e : t) {
      const auto& [key, v] = e;
      if (find_spec(core::kBpfKeys, key) == nullptr) {
        keys_.unknown_key(e, "[bpf]", keys);
        continue;
      }
      bpf.value_where[key] = v.where;
      const auto* s = keys_.string(e);
      if (s == nullptr)
        continue;
      if (s->empty()) {
        diags_.add(v.where, fmt::format("empty '{}' in [bpf]", key),
                   key == "output" ? "leave it out for the default, \"events\""
                                   : "give a value or leave the key out");
        continue;
      }
      const bool origin = is_bpf_origin(key);
      // source and object together: the object is the source built ahead (the shipped
      // configs' are built with tracer), loaded when it is there; else the source compiles.
      const bool built_ahead = origin && first_origin != nullptr &&
                               ((key == "object" && first_origin->first == "source") ||
                                (key == "source" && first_origin->first == "object"));
      if (origin && first_origin != nullptr && !built_ahead) {
        diags_.add(v.key_where,
                   fmt::format("[bpf] has both '{}' and '{}'", first_origin->first, key),
                   "keep one: source compiles a .bpf.c, object loads a .bpf.o (or both: the "
                   "object built from the source ahead), builtin names a program shipped with "
                   "tracer");
        continue;
      }
      if (origin)
        first_origin = &e;
      if (key == "source" || key == "object") {
        (key == "source" ? bpf.source : bpf.object) = relative_path(*s);
        // Another user's BPF code is refused here, at its position (the engine checks the file
        // it loads again, on the descriptor it reads).
        const fs::path& file = key == "source" ? bpf.source : bpf.object;
        if (auto f = trust::open_trusted(file, key == "source" ? "bpf source" : "bpf object");
            !f && trust::is_refusal(f.error()))
          diags_.add(v.where, f.error().message, f.error().hint);
      } else if (key == "builtin")
        bpf.builtin = *s;
      else if (key == "output")
        bpf.output = *s;
      else if (key == "time")
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
    if (first_origin == nullptr &&
        !std::any_of(t.begin(), t.end(), [](const Entry& e) { return is_bpf_origin(e.first); })) {
      diags_.add(where, "[bpf] needs one of 'source', 'object' or 'builtin'",
                 "source = \"file.bpf.c\" (compiled at start), object = \"file.bpf.o\", or "
                 "builtin = \"name\"");
    }
    recipe_.bpf = std::move(bpf);
  }

  void read_pipeline(const ConfigValue& node) {
    RecipePipeline pl;
    pl.where = node.where;
    const Entry* name = nullptr;
    const Entry* stages = nullptr;
    for (const auto& e : *node.table()) {
      if (e.first == "name") {
        name = &e;
        if (const auto* s = keys_.string(e))
          pl.name = *s;
      } else if (e.first == "stage") {
        stages = &e;
      } else {
        keys_.unknown_key(e, "[[pipeline]]", {"name", "stage"});
      }
    }
    if (name == nullptr) {
      diags_.add(node.where, "missing required key 'name' in [[pipeline]]",
                 "add name = \"...\" (unique)");
    } else if (!pl.name.empty()) {
      for (const auto& other : recipe_.pipelines) {
        if (other.name == pl.name) {
          diags_.add(name->second.where, fmt::format("duplicate pipeline name '{}'", pl.name),
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
    } else if (const auto* a = keys_.table_array(*stages, "[[pipeline.stage]]")) {
      for (const auto& e : *a)
        read_stage(e, pl.stages);
    }
    recipe_.pipelines.push_back(std::move(pl));
  }

  void read_stage(const ConfigValue& node, std::vector<RecipeStage>& out) {
    // Its problems are about it: the pipeline being read (not yet in the recipe) and this stage.
    const std::size_t said = diags_.size();
    RecipeStage stage;
    stage.where = node.where;
    stage.options.where = node.where;
    ConfigTable options;
    const Entry* use = nullptr;
    for (const auto& e : *node.table()) {
      if (e.first != "use") {
        options.push_back(e);
        continue;
      }
      use = &e;
      if (const auto* s = keys_.string(e))
        stage.use = *s;
    }
    stage.options.value = std::move(options);
    bool checked = false;
    const ConfigValue* plugin = stage.options.find("plugin");
    if (use == nullptr && plugin != nullptr) {
      // `plugin = "./lib.so"` alone names the plugin stage (its other keys are its options).
      stage.use = "plugin";
      checked = check_stage(
          Entry{"plugin", ConfigValue{.value = std::string("plugin"), .where = plugin->where}},
          node);
    } else if (use == nullptr) {
      diags_.add(node.where, "missing required key 'use' in [[stage]]",
                 options_.stages.empty() ? std::string("name the stage: use = \"count\"")
                                         : fmt::format("name the stage: use = \"...\" (stages: {})",
                                                       plain_list(names_of(options_.stages))));
    } else if (use->second.is_string() && stage.use.empty()) {
      diags_.add(use->second.where, "empty 'use' in [[stage]]", "name the stage: use = \"count\"");
    } else if (use->second.is_string()) {
      checked = check_stage(*use, node);
    }
    if (!checked) {
      // Not checked against a spec: still, no option takes a date or time.
      for (const auto& [key, v] : *stage.options.table())
        core::reject_date_times(v, fmt::format("option '{}'", key), diags_);
    }
    diags_.about_since(said, {.pipeline = recipe_.pipelines.size(), .stage = out.size()});
    out.push_back(std::move(stage));
  }

  /// The stage's options against its spec (when the caller gave the specs).
  /// @return whether they were checked.
  bool check_stage(const Entry& use, const ConfigValue& node) {
    if (options_.stages.empty())
      return false;
    const std::string& name = *use.second.string();
    const StageSpec* spec = nullptr;
    for (const auto& s : options_.stages) {
      if (s.name == name)
        spec = &s;
    }
    if (spec == nullptr) {
      diags_.add(use.second.where, fmt::format("unknown stage '{}'", name),
                 suggest(name, names_of(options_.stages), "stages"));
      return false;
    }
    check_stage_options(*spec, node, diags_);
    return true;
  }

  std::string path_;
  fs::path base_dir_;
  const RecipeLoadOptions& options_;
  Diagnostics diags_;
  core::KeyReader keys_{diags_};
  Recipe recipe_;
};

}  // namespace

const SourceRegion& RecipeCounter::where_of(std::string_view key) const noexcept {
  const auto it = value_where.find(key);
  return it != value_where.end() ? it->second : where;
}

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
  // A recipe is a few KiB; more than 4 MiB is an error (Loader::structure_ok), not a cut.
  // A recipe decides what a root process attaches, runs and writes: it is read only when no
  // other user can change it (tracer/common/trusted_file.hpp), from the descriptor checked.
  auto text = trust::read_trusted(file, "recipe", (std::size_t{4} << 20) + 1);
  if (!text) {
    const bool untrusted = trust::is_refusal(text.error());
    throw Error(untrusted ? ErrorCategory::kUsage : ErrorCategory::kNotFound, text.error().code,
                text.error().message,
                untrusted ? text.error().hint
                          : "check the recipe path (configs/ holds ready-made recipes)");
  }
  return load_string(*text, file.string(), options);
}

}  // namespace tracer
