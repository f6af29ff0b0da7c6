// Pipeline: owns stages, takes the engine's batches, routes each record kind to the stages that
// asked for it, keeps the comm cache, and drives interval output and shutdown.
//
// Usage:
//   tracer::Sink out = tracer::Sink::to_file(stdout);
//   tracer::Pipeline pipeline(out);
//   tracer::Diagnostics diags;
//   pipeline.add(registry, "filter", filter_table, diags);  // make + configure
//   pipeline.add(registry, "count", count_table, diags);
//   engine.start();
//   pipeline.bind(engine.probes(), diags);                  // once the probes are resolved
//   diags.throw_if_any();
//   pipeline.start(now);
//   engine.on_batch(pipeline.handler());                    // or call on_batch yourself
//   engine.on_round([&] { pipeline.round(); });             // perf-data sinks end rounds here
//   ... timer: pipeline.tick(now) ...
//   pipeline.stop(now);                                     // final tables, flush, close
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tracer/bpf/map_source.hpp"
#include "tracer/comm_cache.hpp"
#include "tracer/config_value.hpp"
#include "tracer/counter_source.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/probe.hpp"
#include "tracer/reorder.hpp"
#include "tracer/schema.hpp"
#include "tracer/stage_spec.hpp"
#include "tracer/table.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// Stage authoring (tracer/ext/stage.hpp): outside the stable API.
class Stage;
class StageRegistry;

struct PipelineOptions {
  /// Events built at once; longer batches are processed in chunks of this size, so the event
  /// buffer never grows after construction.
  std::size_t max_events = 512;
  CommCacheOptions comm{};
  /// How stacks are symbolized (source lines, debuginfo roots, /proc) when a stage keys by one.
  symbols::SymbolizeOptions symbols{};
  /// Append a `print` stage when an aggregation has no output stage after it (made by the
  /// registry the stages were added from; a pipeline of hand-made stages gets none).
  bool implicit_print = true;
  /// The time-order merge used when a stage asks for time order (StageNeeds::time_order, or
  /// BindContext::time_order at bind) or binds `comm`.
  ReorderOptions reorder{};
  /// Merge in time order even when no stage needs it (an embedder's own ordered consumer).
  bool force_order = false;
  /// Let the stages take samples in place (on_in_place: BPF-delivered tracepoint samples
  /// without a record rebuilt for each, perf ring samples without a decode), where every stage
  /// that reads samples can (false: always the records; tests and benchmarks compare the two).
  bool in_place = true;
  /// Bind to validate only (`tracer check`): the stages open and write nothing
  /// (BindContext::dry_run).
  bool dry_run = false;
};

struct PipelineStats {
  std::uint64_t records = 0;
  std::array<std::uint64_t, kRecordKindCount> by_kind{};
  std::uint64_t dropped = 0;        // events some stage dropped
  std::uint64_t decode_errors = 0;  // undecoded samples that did not decode (never from a kernel)
  std::uint64_t in_place = 0;       // samples the stages read in place (also in records)
};

/// Hands a task record to `symbolizer`: an MMAP/MMAP2 record's mapping, the FORK of a new
/// process, an exec's COMM. @return the process whose maps changed, or nullopt for any other
/// record.
std::optional<std::uint32_t> feed_symbolizer(symbols::Symbolizer& symbolizer,
                                             const perf::Record& record);

class Pipeline {
 public:
  explicit Pipeline(Sink& out, PipelineOptions options = {});
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  /// Appends a configured stage (embedders' own stages) with what it needs of the pipeline (the
  /// record kinds it wants, time order; the defaults: samples, in ring order).
  void add(std::unique_ptr<Stage> stage, std::string name, StageNeeds needs = {});
  /// Makes `use` from `registry` and configures it with `options` (its needs from its spec); an
  /// unknown name is a diagnostic at options.where with a "did you mean" hint.
  void add(const StageRegistry& registry,
           std::string_view use,
           const ConfigValue& options,
           Diagnostics& diags);

  /// Binds every stage, in order, against the probes (payloads[i]: probe i's BPF payload
  /// schema, optional). Problems go to `diags`.
  void bind(std::span<const ProbeInfo> probes,
            Diagnostics& diags,
            std::span<const PayloadSchema> payloads = {},
            const MapSource* maps = nullptr);
  /// A live change of the probes (Session::apply): binds every stage again against `probes`
  /// (the same indices for the probes that stay, new ones after them) while the stages keep
  /// what they hold. What the time-order merge holds runs first. Only when rebinds().
  void rebind(std::span<const ProbeInfo> probes, Diagnostics& diags, const MapSource* maps);
  /// Whether every stage may bind again while it keeps its state (Stage::rebinds).
  [[nodiscard]] bool rebinds() const noexcept;
  /// Starts the interval clocks (`every`, rate) at `now` (CLOCK_MONOTONIC ns) and every stage
  /// (Stage::start: outputs such as perf.data files open here). May throw tracer::Error.
  void start(std::chrono::nanoseconds now);

  /// The hot path: builds events for the batch and runs them through the stages.
  void on_batch(const Batch& batch) noexcept;
  /// Whether the stages take probe `probe`'s samples in place (set by bind()): the records are
  /// not merged in time order, no stage derives values, and every stage that reads samples has
  /// the in-place role and takes that probe's (InPlace::takes).
  [[nodiscard]] bool takes_in_place(std::uint32_t probe) const noexcept;
  /// Whether this pipeline is ordered only because a stage binds `comm`, and every probe's
  /// samples carry the name at the hit (ProbeInfo::delivered_comm) and every stage that reads
  /// samples takes them in place: then it may run without time order (use_comm_in_place).
  [[nodiscard]] bool comm_in_place_possible() const noexcept;
  /// Drops the time order and takes every probe's samples in place (comm read from each
  /// delivered record). Only when comm_in_place_possible(), and only if every sample will then
  /// come in place: a rebuilt record carries no comm (Session decides).
  void use_comm_in_place();
  /// The in-place path (Engine::on_in_place), only with samples of probes takes_in_place()
  /// says yes to: each stage that reads samples gets them as they are.
  void on_in_place(std::span<const InPlaceSample> samples) noexcept;
  /// Releases every record the time-order merge holds now (a kernel pipeline's task records,
  /// before the rows whose stacks they name are absorbed).
  void flush_order() noexcept;
  /// Whether a stage bound a stack field: the pipeline feeds the symbolizer task records.
  [[nodiscard]] bool tracks_maps() const noexcept;
  /// When stacks are bound: starts reading the kernel's symbols on a thread now, so that the
  /// first kernel frame does not wait for them (a replay, before its records).
  void preload_symbols();
  /// A pipeline whose events stay in the kernel (tracer::Session placement): only the task
  /// records of the batch, which teach the symbolizer the processes' maps (when stacks are
  /// bound: the kernel's stack keys are symbolized as their rows are absorbed).
  void on_task_records(const Batch& batch) noexcept;
  /// A BatchHandler that calls on_batch (the pipeline must outlive it).
  [[nodiscard]] BatchHandler handler();
  /// The engine finished a pass over every ring (Engine::on_round), or a perf.data file's
  /// FINISHED_ROUND: an ordered pipeline hands on the records that are now safe in time order,
  /// then every output is told (Output::on_round). Live runs must call it (the session does
  /// from Engine::on_pass). `complete` false: a pass that was no round (Engine::on_pass) only
  /// goes on with a release the last round left unfinished; no output is told.
  void round(bool complete = true) noexcept;
  /// The stages are behind: the last round's release ran out of its time with records it could
  /// release still queued, and the time-order merge holds more than half its byte budget, or
  /// more records than the stages run in kBacklogTime at their measured pace (records arrive
  /// faster than the stages run). The session then holds the rings (Engine::hold_while) until the
  /// rounds have run the queue down: memory stays bounded and a stop runs through what is
  /// queued within its time.
  [[nodiscard]] bool backlogged() const noexcept;
  static constexpr std::chrono::milliseconds kBacklogTime{100};
  /// stop() runs what is queued for the stages for at most this long; what is left then is
  /// counted (order.unprocessed) and said, not run: a stop is honoured on time.
  static constexpr std::chrono::milliseconds kStopBudget{200};
  /// Whether records are merged in time order before the stages (set by bind()).
  [[nodiscard]] bool ordered() const noexcept;
  /// The merge's counters (late records, forced flushes), when ordered().
  [[nodiscard]] const ReorderStats* order_stats() const noexcept;
  /// Every stage's counters (Stage::counters), as "stage.name" -> value, in stage order.
  [[nodiscard]] std::vector<std::pair<std::string, std::uint64_t>> counters() const;
  /// Every stage's warnings (Stage::warnings), in stage order.
  [[nodiscard]] std::vector<std::string> warnings() const;

  /// Emits the tables of aggregations whose `every` elapsed by `now`, then flushes outputs
  /// (Output::flush).
  void tick(std::chrono::nanoseconds now);
  /// Whether tick(now) would emit a table (an aggregation's `every` elapsed): when the rows an
  /// aggregation keeps in the kernel must be read.
  [[nodiscard]] bool output_due(std::chrono::nanoseconds now) const;
  /// Aggregation `index`'s rows so far, as its next table would have them, without emitting or
  /// resetting anything (a scrape of `tracer serve`): since the last interval's table with
  /// `every`, else since the start; an aggregation that keeps a total (Aggregation::
  /// total_at_stop) gives the whole run's, with Table::total set. Rows the time-order merge still
  /// holds are not in it.
  [[nodiscard]] Table peek(std::size_t index, std::chrono::nanoseconds now);
  /// Emits every aggregation's final table, stops every stage, flushes the sink. Idempotent.
  void stop(std::chrono::nanoseconds now);
  /// Each aggregation's table as a value, as it is emitted (every interval of an `every`, and
  /// the final one stop() emits), before the outputs after the stage see it: `stage` is its
  /// index in this pipeline, `final` whether stop() emits it. Quiet intervals (no rows, with
  /// `every`) are not emitted. Runs where the tables are made (the session's executor); the
  /// table is valid during the call.
  using TableHandler = std::function<void(std::size_t stage, const Table& table, bool final)>;
  void on_table(TableHandler handler);
  /// Each event a per-event output (print, jsonl, csv) writes, as it gets it: `stage` is the
  /// output's index, `fields` what it writes of the event (FieldRef::name, FieldRef::read).
  /// Runs on the hot path, on the session's executor; the event is valid during the call. A
  /// handler that throws gets no more events: the pipeline keeps the exception
  /// (handler_failure()) and counts the events it missed ("on_event.missed").
  using EventHandler =
      std::function<void(std::size_t stage, const Event& event, std::span<const FieldRef> fields)>;
  void on_event(EventHandler handler);
  [[nodiscard]] std::exception_ptr handler_failure() const noexcept;
  void stop();

  /// The run's [[counter]] groups, for the stages that read them (BindContext::counters); set
  /// before bind(). Not owned.
  void set_counters(const CounterSource* counters) noexcept;

  [[nodiscard]] CommCache& comm() noexcept;
  /// What the symbolizer of stacks found worth a user's eye since the last call (kernel symbols
  /// hidden by kptr_restrict, binaries without symbols, files that could not be read).
  [[nodiscard]] std::vector<std::string> take_warnings();
  [[nodiscard]] const PipelineStats& stats() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept;
  [[nodiscard]] Stage& stage(std::size_t i) noexcept;
  /// The name stage i was added under (its `use`).
  [[nodiscard]] const std::string& stage_name(std::size_t i) const noexcept;

 private:
  class [[gnu::visibility("hidden")]] Impl;  // pipeline.cpp; not exported
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracer

#pragma GCC visibility pop
