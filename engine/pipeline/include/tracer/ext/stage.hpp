// The pipeline stage API: what a stage sees (Event), how it reads fields (Schema, FieldRef, Value),
// where it writes (Sink, Table), its lifecycle (Stage), the roles some stages have (Aggregation,
// Output) and the registry of stages by name. What a stage type needs of a run: stage_spec.hpp.
//
// Usage (a stage's life, driven by tracer::Pipeline; the roles are Aggregation, Output, InPlace
// and InKernel, each reached through its accessor):
//   auto stage = registry.make("count");               // from the explicit table of built-ins
//   stage->configure(options_table, diags);            // setup: option errors with positions
//   stage->bind(ctx, diags);                           // once per run: names -> FieldRef accessors
//   stage->start();                                    // the run begins (not in `tracer check`)
//   stage->on_events(events);                          // hot path: noexcept, no allocation
//   if (auto* agg = stage->aggregation())              // the aggregation role: at each `every`
//     agg->snapshot(table, /*reset=*/true);            //   and at stop, a table for the
//                                                      //   outputs after it (Output::on_table)
//   stage->stop();                                     // flush and close outputs
//
// Field names a stage may bind (per probe, resolved once at bind):
//   sample fields   pid tid comm cpu time ip addr period callchain kstack ustack probe kind
//                   lost aux_size
//   tracefs fields  every non-common field of the probe's `format` by name (ints, char arrays,
//                   __data_loc/__rel_loc strings), and array elements as name[i]
//   uprobe registers arg0..arg5 and retval (x86-64 SysV: rdi rsi rdx rcx r8 r9, rax) when the
//                   probe's sample_regs_user has them
//   payload fields  fields of a PayloadSchema (BTF struct of a BPF output payload)
//   derived fields  values an upstream stage hands on (latency's `duration`)
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracer/bpf/map_source.hpp"
#include "tracer/comm_cache.hpp"
#include "tracer/config_value.hpp"
#include "tracer/counter_source.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/ext/kernel_form.hpp"
#include "tracer/ext/stage_options.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/probe.hpp"
#include "tracer/schema.hpp"
#include "tracer/stage_spec.hpp"
#include "tracer/table.hpp"
#include "tracer/value.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// Stage

struct BindContext {
  Schema& schema;
  Sink& out;                         // the pipeline's output (stdout for the CLI)
  bool upstream_aggregates = false;  // an aggregation stage precedes this one
  SourceRegion where{};              // the stage's table, for diagnostics without an option
  const MapSource* maps = nullptr;   // BPF maps (in-kernel aggregations), when the run has any
  /// What the stage asks of the pipeline, set by the pipeline from the stage's StageNeeds before
  /// bind. A stage whose options decide it (a `kinds` option; per-event output only without an
  /// aggregation before it) sets it in bind; the pipeline reads it back after.
  KindMask kinds = kind_bit(RecordKind::kSample);
  bool time_order = false;
  /// `tracer check`: bind to validate only. A stage opens, creates and writes nothing (an
  /// output's `path` is not touched: checking an untrusted recipe as root clobbers no file).
  bool dry_run = false;
  /// The run's [[counter]] groups (the `counters` stage reads them), when it has any.
  const CounterSource* counters = nullptr;
};

class Aggregation;
class Output;
class InPlace;
class InKernel;

/// A pipeline stage: the small core every stage has. What only some stages do is a role reached
/// through a capability accessor (aggregation(), output()); what is fixed per stage type (record
/// kinds, time order, task records, stdout) is declared in its StageSpec::needs.
///
/// Lifecycle: configure -> bind -> start -> on_events* (interleaved with the roles' calls at
/// rounds and intervals) -> stop. Only on_events is on the hot path: it must not throw and must
/// not allocate once warm (new keys of an aggregation allocate once each).
class Stage {
 public:
  virtual ~Stage() = default;
  Stage() = default;
  Stage(const Stage&) = delete;
  Stage& operator=(const Stage&) = delete;

  /// Reads options. Reports every problem to `diags` (with positions) instead of throwing.
  virtual void configure(const ConfigValue& options, Diagnostics& diags) = 0;
  /// Resolves field names to accessors once; may add derived fields for later stages, and set
  /// what its options decide of its needs (BindContext::kinds, BindContext::time_order).
  virtual void bind(BindContext& ctx, Diagnostics& diags) = 0;
  /// Whether bind() may run again, against a changed set of probes, while the stage keeps what
  /// it holds (Pipeline::rebind, a live change of the recipe): true unless the stage fixed
  /// something of the probes it cannot redo (a perf.data header, a plugin's own binding).
  [[nodiscard]] virtual bool rebinds() const noexcept { return true; }
  /// The run begins (Pipeline::start; never called by `tracer check`): open what must not exist
  /// before a real run, such as a perf.data file. May throw tracer::Error.
  virtual void start() {}
  /// The events of one batch of the kinds this stage asked for: in time order across every ring
  /// and probe when some stage of the pipeline asked for time order, else in ring order. Call
  /// Event::drop() to stop an event here.
  virtual void on_events(std::span<Event* const> events) noexcept = 0;
  /// Accounting a user must see at the end of a run (latency: pairs, unmatched entries and
  /// exits, evictions): name and value, shown in the run's summary and --json.
  virtual void counters(std::vector<std::pair<std::string, std::uint64_t>>& /*out*/) const {}
  /// What a user must be told at the end of a run, a sentence each with its cause (an export
  /// that lost records, and why): the run's summary prints each as a warning, --json lists them.
  virtual void warnings(std::vector<std::string>& /*out*/) const {}
  /// End of the run (after the last tables): flush and close.
  virtual void stop() {}

  /// The aggregation role (count, hist, bpf-map, ...): tables out. nullptr for other stages.
  [[nodiscard]] virtual Aggregation* aggregation() noexcept { return nullptr; }
  /// The output role (print, jsonl, csv, perf-data): where data leaves the pipeline. nullptr
  /// for other stages.
  [[nodiscard]] virtual Output* output() noexcept { return nullptr; }
  /// The in-place role: samples read where they lie instead of Events. nullptr for stages that
  /// read Events only.
  [[nodiscard]] virtual InPlace* in_place() noexcept { return nullptr; }
  /// The in-kernel role: what the stage computes, in a form the planner compiles to BPF, and
  /// what it takes back from the kernel. nullptr for stages that run in user space only.
  [[nodiscard]] virtual InKernel* in_kernel() noexcept { return nullptr; }
};

/// Role: an aggregation. Its state becomes a table at each `every` and at the end of the run;
/// the pipeline hands the table to the outputs after it (Output::on_table). A stage with this
/// role returns itself from Stage::aggregation().
class Aggregation {
 public:
  /// The interval of `every`, or nullopt for a table at the end of the run only.
  [[nodiscard]] virtual std::optional<std::chrono::nanoseconds> every() const noexcept = 0;
  /// The rows so far (ordered, cut to top); clears the state when `reset`.
  virtual void snapshot(Table& out, bool reset) = 0;
  /// At the end of the run, after the last interval's table (with `every`), one more table of
  /// the whole run: snapshot() is called with Table::total set. The counters stage keeps one.
  [[nodiscard]] virtual bool total_at_stop() const noexcept { return false; }

 protected:
  Aggregation() = default;
  ~Aggregation() = default;  // owned and destroyed as a Stage
  Aggregation(const Aggregation&) = default;
  Aggregation& operator=(const Aggregation&) = default;
};

/// Role: an output, where data leaves the pipeline: text, JSON or CSV of events and tables, or
/// the records themselves (perf-data). A stage with this role returns itself from
/// Stage::output().
class Output {
 public:
  /// Whether the tables of the aggregations before this output reach on_table. An output of
  /// records only (perf-data) says no: an aggregation before it still gets an implicit print.
  [[nodiscard]] virtual bool takes_tables() const noexcept { return true; }
  /// A table of an aggregation before this stage, at its interval or at the end of the run.
  virtual void on_table(const Table& /*table*/) {}
  /// Whether, with an aggregation before it, this output still writes each event or record it
  /// gets (as configured: known after configure, before bind; the placement asks). An output of
  /// records only (perf-data) does.
  [[nodiscard]] virtual bool writes_events_after_aggregation() const noexcept {
    return !takes_tables();
  }
  /// The fields this output writes of each event it gets, in its order (print, jsonl, csv: a
  /// line per event); empty when it writes no events as fields (tables only, perf.data).
  /// Pipeline::on_event hands each such event on with these fields.
  [[nodiscard]] virtual std::span<const FieldRef> event_fields() const noexcept { return {}; }
  /// The engine finished a pass over every ring (Engine::on_round), or a perf.data file's
  /// FINISHED_ROUND: records handed on after it were written to their rings after the pass
  /// began. Outputs that keep time order (perf.data's FINISHED_ROUND) end a round here.
  virtual void on_round() noexcept {}
  /// End of a tick: write what is buffered.
  virtual void flush() {}

 protected:
  Output() = default;
  ~Output() = default;  // owned and destroyed as a Stage
  Output(const Output&) = default;
  Output& operator=(const Output&) = default;
};

/// Role: samples read where they lie (InPlaceSample: the BPF delivery channel's records, a perf
/// ring's samples of a fixed layout) instead of Events: Pipeline::on_in_place. A stage with this
/// role returns itself from Stage::in_place().
class InPlace {
 public:
  /// Whether this stage takes probe `probe`'s samples in place: every field it reads is
  /// readable there (FieldRef::reads_in_place). Asked after bind. A stage that says yes never
  /// drops an event: there is no Event to drop.
  [[nodiscard]] virtual bool takes(std::uint32_t probe) const noexcept = 0;
  /// The samples of one batch, doing what Stage::on_events does with the same samples as
  /// Events. Called only with samples of the probes takes() says yes to.
  virtual void on_samples(std::span<const InPlaceSample> samples) noexcept = 0;

 protected:
  InPlace() = default;
  ~InPlace() = default;  // owned and destroyed as a Stage
  InPlace(const InPlace&) = default;
  InPlace& operator=(const InPlace&) = default;
};

/// Role: placeable in the kernel. The planner asks each stage of a pipeline for its
/// kernel_form(); a pipeline placed there gives its results back through absorb() (the rows of
/// an aggregation) and absorb_counters() (a latency pairing's accounting). A stage with this
/// role returns itself from Stage::in_kernel().
class InKernel {
 public:
  /// What this stage computes, as configured, in a form the planner can compile to BPF; kNone
  /// with the reason when this configuration has none. Called after Stage::configure().
  [[nodiscard]] virtual KernelForm kernel_form() const = 0;
  /// An aggregation placed in the kernel: adds the rows the kernel computed since the last
  /// read to the state, as if their events had reached on_events (snapshot() then renders them
  /// as ever). Each row's bytes are laid out as the stage's own KernelAgg (kernel_form().agg)
  /// declared them.
  virtual void absorb(const std::vector<KernelRow>& /*rows*/) {}
  /// A latency pairing placed in the kernel: its counters so far (replace the stage's own).
  virtual void absorb_counters(const KernelLatencyCounters& /*counters*/) {}

 protected:
  InKernel() = default;
  ~InKernel() = default;  // owned and destroyed as a Stage
  InKernel(const InKernel&) = default;
  InKernel& operator=(const InKernel&) = default;
};

/// The kernel form of `stage`: its in-kernel role's, else kNone with the reason.
[[nodiscard]] inline KernelForm kernel_form_of(Stage& stage) {
  if (const InKernel* k = stage.in_kernel())
    return k->kernel_form();
  return {.why_not = "this stage runs in user space only"};
}

// ---------------------------------------------------------------------------------------------
// Registry

using StageFactory = std::function<std::unique_ptr<Stage>()>;

/// One row of the explicit table of built-in stages.
struct StageEntry {
  StageSpec (*spec)() = nullptr;
  std::unique_ptr<Stage> (*make)() = nullptr;
};
/// stage<Count>(): an entry for a class with `static StageSpec spec()` and a default constructor.
template <typename S>
[[nodiscard]] constexpr StageEntry stage() noexcept {
  return {&S::spec, []() -> std::unique_ptr<Stage> { return std::make_unique<S>(); }};
}

class StageRegistry {
 public:
  /// A registry of the stages of `table`, checked for duplicate names (the built-in table is
  /// the stages layer's: tracer/ext/stages.hpp). Throws tracer::Error (kRuntime) on a duplicate: a
  /// bug in the table.
  [[nodiscard]] static StageRegistry from_table(std::span<const StageEntry> table);

  /// Adds an embedder's stage. Throws tracer::Error (kUsage) if the name is taken.
  void register_stage(StageSpec spec, StageFactory factory);
  [[nodiscard]] const StageSpec* find(std::string_view name) const noexcept;
  /// A new stage, or nullptr for an unknown name.
  [[nodiscard]] std::unique_ptr<Stage> make(std::string_view name) const;
  [[nodiscard]] std::vector<const StageSpec*> specs() const;
  /// Names close to `name` ("did you mean").
  [[nodiscard]] std::string suggest(std::string_view name) const;

 private:
  struct Item {
    StageSpec spec;
    StageFactory factory;
  };
  std::vector<Item> items_;
};

}  // namespace tracer

#pragma GCC visibility pop
