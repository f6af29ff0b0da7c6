// Recipe: a TOML file naming probes, an optional BPF object and pipelines of stages, loaded into
// a validated model whose every value keeps the position it was written at. The schema is
// documented with examples in configs/README.md.
//
// Usage:
//   tracer::Recipe recipe = tracer::Recipe::load("configs/openat.toml", {
//       .sets = {"pid=42", "recipe.duration=5s"},
//       .stages = registry_specs});      // throws tracer::Error (kRecipe) listing every problem
//   tracer::Diagnostics diags;
//   recipe.check_system(diags);          // `tracer check`: tracepoints, binaries, symbols, files
//   diags.throw_if_any();
//   tracer::Engine engine(executor, recipe.to_engine_options(target));
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/engine_options.hpp"
#include "tracer/error.hpp"
#include "tracer/stage_spec.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// Where each key of a table was written (the value's position), by key name.
using SourceMap = std::map<std::string, SourceRegion, std::less<>>;

struct RecipeLoadOptions {
  /// "key=value" overrides (the CLI's --set): a param name ("pid=42"), or a dotted recipe key:
  /// "recipe.KEY", "probe.NAME.KEY", "bpf.KEY". The value is typed by what the key expects.
  std::vector<std::string> sets{};
  /// The stages a recipe may use (the stage registry's specs). Stage names, option names,
  /// option types and required options are checked against it; when it is empty, they are not
  /// checked at all (only `use` is required).
  std::vector<StageSpec> stages{};
  /// Set (`tracer check`): the problems that leave the recipe readable (unknown keys, values of
  /// the wrong type, stage options) go here and the recipe is returned as far as it could be
  /// read, so that later checks (the system's, each probe's) report theirs in the same
  /// round. Problems of the text itself (TOML syntax, limits) still throw. Unset: any throws.
  Diagnostics* problems = nullptr;
  /// Set: load() also checks what the running kernel alone can answer, and reports it with the
  /// text's own problems (thrown, or into `problems`): each tracepoint exists (near matches in
  /// the hint), a tracepoint probe's filter names only fields of its format, a sampling
  /// frequency is within the kernel's limit, each counted event exists. For a library's recipe
  /// strings, whose mistakes should fail where the string is loaded, not at start. Needs tracefs
  /// (usually root). What needs more than the kernel is left to check_system() (uprobe binaries
  /// and symbols, [bpf] files and sources) and Session::check() (the stages' fields, bound to
  /// the probes). Unset (`tracer check` and `run` call check_system themselves): not read.
  bool check_kernel = false;
};

/// A `[params]` entry: its default, or the value --set gave it.
struct RecipeParam {
  std::string name{};
  ConfigValue value{};  // bool, integer or string
};

struct RecipeProbe {
  ProbeOptions options{};
  SourceRegion where{};  // the [[probe]] header
  /// Position of each value as written, by recipe key ("name", "tracepoint", "filter", ...).
  SourceMap value_where{};

  /// The position of `key`'s value, or of the [[probe]] header when the key was not written.
  [[nodiscard]] const SourceRegion& where_of(std::string_view key) const noexcept;
};

/// `[bpf]`: exactly one of source, object, builtin is set. Loading happens elsewhere.
struct RecipeBpf {
  std::filesystem::path source{};  // .bpf.c, made relative to the recipe's directory
  std::filesystem::path object{};  // .bpf.o, likewise
  std::string builtin{};           // a program shipped with tracer
  std::string output = "events";   // PERF_EVENT_ARRAY map the programs emit into
  std::string payload_struct{};    // `struct`: the emitted C struct (BTF decoding); may be empty
  std::string payload_time{};      // `time`: its u64 field holding bpf_ktime_get_ns(); may be empty
  SourceRegion where{};            // the [bpf] header
  SourceMap value_where{};
};

struct RecipeStage {
  std::string use{};
  /// Every key but `use`, as written (a table; positions kept). Stages parse them.
  ConfigValue options{};
  SourceRegion where{};  // the [[stage]] header
};

struct RecipePipeline {
  std::string name{};  // "main" for the top-level [[stage]] form
  std::vector<RecipeStage> stages{};
  SourceRegion where{};
};

/// A `[[counter]]` group: events counted together (one perf group per CPU or task of the
/// target, read at once with PERF_FORMAT_GROUP and scaled where the kernel multiplexed them),
/// with metrics derived from them. Its tables (each interval's counts with `every`, and the
/// run's total) go through the stages as any aggregation's: the `counters` stage makes them.
struct RecipeCounterMetric {
  std::string name{};
  std::string expr{};  // tracer::CounterExpr over the group's counters and `seconds`
  SourceRegion where{};
};
struct RecipeCounter {
  std::string name{};
  std::vector<std::string> events{};  // perf's event names (the first leads the group)
  std::vector<SourceRegion> event_where{};
  std::optional<std::chrono::nanoseconds> every{};
  bool pinned = false;     // always on the PMU, never multiplexed (or in error)
  bool exclusive = false;  // alone on the PMU while it runs
  bool weak = false;       // separate events when the group cannot be opened as one
  bool per_cpu = false;    // a row per CPU (system-wide targets)
  /// Privilege levels left out of every event: "user", "kernel", "hv", "idle".
  std::vector<std::string> exclude{};
  std::vector<RecipeCounterMetric> metrics{};
  SourceRegion where{};  // the [[counter]] header
  SourceMap value_where{};
  [[nodiscard]] const SourceRegion& where_of(std::string_view key) const noexcept;
};

/// A loaded, validated recipe. Passive data plus its loaders.
enum class Placement : std::uint8_t { kAuto, kKernel, kUser };
[[nodiscard]] std::string_view to_string(Placement p) noexcept;
/// "auto", "kernel", "user"; nullopt for anything else.
[[nodiscard]] std::optional<Placement> parse_placement(std::string_view text) noexcept;

/// One rule of [export] relabel: what `tracer serve` does to a table's keys before they become
/// Prometheus labels (as Prometheus's relabel_configs do to a target's).
struct RecipeRelabel {
  enum class Action : std::uint8_t {
    kDrop,       // rows whose `label` fully matches `regex` are not exported
    kKeep,       // only rows whose `label` fully matches `regex` are exported
    kLabelDrop,  // the label goes; rows left with the same labels are merged
    kRename,     // the label is called `to`
  };
  Action action = Action::kDrop;
  std::string label{};
  std::string regex{};  // kDrop, kKeep (ECMAScript syntax, anchored at both ends)
  std::string to{};     // kRename
  SourceRegion where{};
};

/// [export]: how `tracer serve` exposes the recipe's tables as metrics.
struct RecipeExport {
  /// The start of every metric name (default "tracer_" and the recipe's name).
  std::string prefix{};
  /// Label sets kept per metric (default: tracer serve's --label-budget); the others are
  /// dropped and counted (tracer_export_label_sets_dropped_total).
  std::optional<std::uint32_t> label_budget{};
  std::vector<RecipeRelabel> relabel{};
  SourceRegion where{};
};

struct Recipe {
  using LoadOptions = RecipeLoadOptions;

  std::string path{};  // as given to load()/load_string() (diagnostics print it)
  std::string name{};
  std::string description{};
  std::optional<std::chrono::nanoseconds> duration{};
  /// Where the stages run ([recipe] placement): "auto" puts a pipeline's filters and its
  /// aggregation in the kernel when every field they use is readable there, "kernel" requires
  /// it (an error names the stage and the reason), "user" keeps every stage in user space.
  Placement placement = Placement::kAuto;
  /// The channel of what BPF delivers to user space ([recipe] channel): "ringbuf" (a BPF ring
  /// buffer, the default where the kernel has one) or "perf" (a perf ring per CPU).
  std::optional<DeliveryChannel> channel{};
  /// [recipe] max_targets: the processes of a pid or command target (the target and its
  /// descendants) alive at once that an in-kernel program follows. Exited ones leave; children
  /// past it are counted as targets_dropped, never silently missed.
  std::uint32_t max_targets = 65536;
  std::vector<RecipeParam> params{};      // in the order written
  std::vector<RecipeProbe> probes{};      // in the order written
  std::vector<RecipeCounter> counters{};  // [[counter]] groups, in the order written
  std::optional<RecipeBpf> bpf{};
  std::optional<RecipeExport> exporting{};  // [export]
  std::vector<RecipePipeline> pipelines{};
  SourceMap value_where{};  // [recipe] keys

  /// Reads and validates a recipe file. Relative paths inside it ([bpf] source/object) are made
  /// relative to the file's directory; diagnostics print `file` as given.
  /// @return the recipe; throws one tracer::Error (category kRecipe) whose message lists every
  /// problem as "file:line:column: message" with "  hint: ..." lines (Diagnostics::format), or
  /// kNotFound when the file cannot be read.
  [[nodiscard]] static Recipe load(const std::filesystem::path& file,
                                   const LoadOptions& options = {});
  /// The same for text already in memory; `display_path` is printed in diagnostics and its
  /// directory anchors relative paths.
  [[nodiscard]] static Recipe load_string(std::string_view text,
                                          std::string_view display_path,
                                          const LoadOptions& options = {});

  /// What load() cannot know without the running system: tracepoints exist (with near matches
  /// in the hint), uprobe binaries and symbols resolve, [bpf] source/object files exist. Adds a
  /// diagnostic per problem at the value's position; never throws. Needs tracefs access for
  /// tracepoints (usually root). A tracepoint probe's filter names only fields of the
  /// tracepoint's format (or the kernel's generic ones): an unknown field is reported at the
  /// filter's position with a "did you mean". `pid`: the traced process, for "lib:symbol"
  /// uprobes found through its maps. A [bpf] source is compiled to report clang's errors at
  /// its position: into the BPF cache that `run` loads from, or with `writes` = kNone (`tracer
  /// check`, which writes nothing) in a temporary directory removed at once.
  enum class Writes : std::uint8_t { kCache, kNone };
  void check_system(Diagnostics& diagnostics,
                    std::optional<pid_t> pid = std::nullopt,
                    Writes writes = Writes::kCache) const;

  /// The engine's options for this recipe's probes and `target` (BPF object, duration and
  /// pipelines are wired by the caller). A tracepoint glob ("syscalls:sys_enter_*", fnmatch on
  /// system:event as `tracer list tracepoints`) becomes one probe per match, named
  /// "<probe name>:<event>", each its own perf event with the probe's other options.
  /// @throw Error (kRecipe, at the spec's position) when a glob matches nothing, with near
  /// matches, or tracefs cannot be read to expand it.
  [[nodiscard]] EngineOptions to_engine_options(const Target& target) const;
};

}  // namespace tracer

#pragma GCC visibility pop
