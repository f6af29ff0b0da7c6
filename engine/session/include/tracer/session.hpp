// Session: a recipe run end to end by the library: the recipe's probes on an Engine, its
// pipelines (Pipeline) fed by the engine's batches, rounds (time order), interval ticks
// (`every`), the duration, the drain at stop, the stages' accounting and the loss ledger. What
// `tracer run` and `tracer check` do, for any program: an embedder runs a recipe on its own
// executor without copying the CLI.
//
// Usage:
//   boost::asio::io_context io(1);
//   tracer::Recipe recipe = tracer::Recipe::load("configs/runqlat.toml", {.stages = specs});
//   tracer::Sink out = tracer::Sink::to_file(stdout);
//   tracer::Session session(io.get_executor(), recipe, out, {.duration = 5s});
//   session.on_done([&] { io.stop(); });   // the duration, the target's exit, a failure
//   session.start();                       // throws tracer::Error (recipe positions, hints)
//   io.run();
//   session.stop();                        // drains, final tables, flush (idempotent)
//   auto s = session.stats();              // events/lost/missed per probe, stage counters
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (TOOLCHAIN.md): included
// here first, so that neither this header nor an embedder's Asio after it needs a forced flag.
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracer/diagnostics.hpp"
#include "tracer/engine.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// Stack files written from every pipeline that aggregates (`tracer run --folded/--flamegraph`),
/// besides the tables' own output.
struct StackOutputs {
  std::string folded{};      // collapsed stacks (the `folded` stage)
  std::string flamegraph{};  // an SVG flame graph (the `flamegraph` stage)
  [[nodiscard]] bool empty() const noexcept { return folded.empty() && flamegraph.empty(); }
};

struct SessionOptions {
  Target target{};
  /// Stops the session after this long (else the recipe's `duration`, else stop() or the
  /// target's exit).
  std::optional<std::chrono::nanoseconds> duration{};
  /// Output as JSON lines: print stages become jsonl, and an aggregation without an output gets
  /// one.
  bool json = false;
  /// Also write every record of every probe as perf.data ("-": a pipe-mode stream on stdout).
  std::string perf_data{};
  /// Also write the stacks of the aggregations as folded lines and/or an SVG flame graph.
  StackOutputs stacks{};
  /// Full verifier logs in errors.
  bool verbose = false;
  /// System-wide tracepoints through BPF (EngineOptions::deliver_tracepoints_via_bpf), or
  /// sampled by their own perf events (false).
  bool deliver_tracepoints_via_bpf = true;
  /// How often interval outputs (`every`) are due and on_tick observers run.
  std::chrono::milliseconds tick{250};
  /// Options of every pipeline (its comm cache, time-order merge).
  PipelineOptions pipeline{};
  /// Where stages run, instead of the recipe's [recipe] placement (`tracer run --placement`).
  std::optional<Placement> placement{};
  /// The BPF delivery channel, instead of the recipe's [recipe] channel (`tracer run
  /// --channel`).
  std::optional<DeliveryChannel> channel{};
  /// System-wide: trace tracer's own process too (EngineOptions::trace_self; `tracer run
  /// --trace-self`). Left out by default, on every path.
  bool trace_self = false;
  /// How long one drain of the rings may run before the host's other handlers on the executor
  /// (EngineOptions::drain_slice_ms, 50 ms unset): shorter keeps the host's timers closer to
  /// their times under a flood of events, at more passes.
  std::optional<std::uint32_t> drain_slice_ms{};
  /// `tracer check`: every problem at once. The constructor keeps the stages' option problems
  /// instead of throwing them, and check() reports them with these (Recipe::load's, through
  /// RecipeLoadOptions::problems), the system's and each probe's in one error; the stages'
  /// fields are bound when nothing before them failed. start() throws them all first.
  bool all_problems = false;
  Diagnostics problems{};
};

/// Probes of a pid or command target whose events the kernel raises outside the task that
/// caused them (block I/O completions and interrupts in interrupt context, wakeups in the
/// waker's task, timers, softirq networking, workqueues): with the target they are mostly not
/// seen, so a latency pairing them is short of its exits. One line per such probe, with the
/// reason and what to do (`tracer run` warns at start, `tracer check` notes it); empty for a
/// system-wide target.
[[nodiscard]] std::vector<std::string> out_of_target_notes(const Recipe& recipe,
                                                           const Target& target);

/// A Session's accounting: the engine's per probe and CPU, and the stages'.
/// An aggregation's table as C++ values (Session::on_table).
struct TableUpdate {
  std::size_t pipeline = 0;  // index in the recipe's pipelines
  std::size_t stage = 0;     // index of the aggregation in its pipeline
  const Table& table;        // keys, values, buckets as printed; valid during the call
  bool final = false;        // the table of the end (else an interval's, with `every`)
};

/// An event a per-event output (print, jsonl, csv) writes, as values (Session::on_event).
struct EventUpdate {
  std::size_t pipeline = 0;          // index in the recipe's pipelines
  std::size_t stage = 0;             // index of the output in its pipeline
  const Event& event;                // valid during the call
  std::span<const FieldRef> fields;  // what the output writes: f.name(), f.read(event)
};

struct SessionStats {
  Stats engine{};
  /// Stage counters ("latency.paired", "order.late", ...); the pipelines after the first
  /// prefix theirs with "pipelineN.".
  std::vector<std::pair<std::string, std::uint64_t>> counters{};
  /// The stages' warnings (Stage::warnings): an export that lost records, with the cause.
  std::vector<std::string> warnings{};
  std::uint64_t delivered = 0;  // records handed to the pipelines
  /// The pipelines in user space read some probe's samples in place (Pipeline::on_in_place):
  /// no record is rebuilt (BPF-delivered samples) or decoded (perf ring samples) for them.
  bool in_place = false;
  double seconds = 0;  // since start()
};

/// What Session::apply changed: the names of the probes (as the engine has them: a glob's one
/// per tracepoint) and of the pipelines.
struct RecipeChanges {
  std::vector<std::string> probes_added{}, probes_removed{};
  std::vector<std::string> pipelines_added{}, pipelines_removed{};
  /// Pipelines that began again: their final tables were emitted, and new ones start from
  /// nothing. An in-kernel pipeline whose probes changed in a way its programs cannot take (it
  /// pairs probes, a new probe's fields cannot be read there, a pid or command target): "name
  /// (why)".
  std::vector<std::string> pipelines_restarted{};
  std::size_t probes_kept = 0, pipelines_kept = 0;
  [[nodiscard]] bool empty() const noexcept;
  /// One line: "probes added: x; probes removed: y; ...; kept: 2 probes, 1 pipeline".
  [[nodiscard]] std::string describe() const;
};

/// The pipelines of `recipe` writing to `out` (what a Session runs; replay feeds them from a
/// file). A recipe without stages gets one pipeline that prints every event; `json` and
/// `perf_data` as in SessionOptions. Problems go to `diags`.
[[nodiscard]] std::vector<std::unique_ptr<Pipeline>> make_pipelines(
    const Recipe& recipe,
    Sink& out,
    bool json,
    Diagnostics& diags,
    const PipelineOptions& base = {},
    const std::string& perf_data = {},
    const StackOutputs& stacks = {});

/// The specs of every registered stage (what Recipe::load checks stages against).
[[nodiscard]] std::vector<StageSpec> stage_catalog();

class Session {
 public:
  /// Builds the engine options and the pipelines. Throws tracer::Error: kUsage for conflicting
  /// options, kRecipe with positions for stage problems.
  Session(boost::asio::any_io_executor executor,
          const Recipe& recipe,
          Sink& out,
          SessionOptions options = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// `tracer check`: resolves every probe, compiles and verifies BPF, binds every stage;
  /// attaches nothing. Notes worth a user's attention go to `notes`. With
  /// SessionOptions::all_problems, every probe is resolved on its own and every problem found
  /// so far is reported together.
  /// @return the probes as start() would resolve them. Throws tracer::Error.
  std::vector<ProbeInfo> check(std::vector<std::string>* notes = nullptr);
  /// Checks the recipe against the system, starts the engine, binds and starts the pipelines,
  /// arms the duration and the ticks. Errors about a probe point at its place in the recipe.
  void start();
  /// start() without blocking the caller's executor: the recipe's check against the system,
  /// probe resolution, BPF generation and compiles, opening and attaching the events and the
  /// pipelines' bind run on a thread of the session's own; the rest (the rings' waits, the
  /// stages' start, the duration and the ticks) then runs on the session's executor, and
  /// `handler` runs there last with nullptr (the session runs) or what start() would have thrown
  /// (tracer::Error with the recipe position). Until the handler runs, call nothing on the
  /// session but stop() (the start gives up at its next step and the handler gets an Error with
  /// std::errc::operation_canceled; on_done observers then run) and its destructor (which waits
  /// for the preparation's current step). The handler never runs after the session is gone.
  void async_start(std::function<void(std::exception_ptr)> handler);
  /// A live change: runs `recipe` from now on, in place of the one running (tracer run's
  /// SIGHUP). Probes are matched by name and definition, pipelines by name and stages.
  /// - An unchanged probe keeps its events, rings and in-kernel programs: it loses and counts
  ///   nothing twice. A removed one's events stop, its last records reach the pipelines, and its
  ///   events, rings, BPF links and tracefs probe close (a program of an in-kernel pipeline
  ///   that also serves other probes stays loaded, detached from it, until that pipeline ends).
  ///   An added one opens, enabled at once (sampled by its own events, not the BPF delivery).
  /// - An unchanged pipeline keeps what it aggregated; one in user space sees the added probes
  ///   from now on, one in the kernel counts them in programs of their own (or restarts, see
  ///   RecipeChanges::pipelines_restarted). A removed pipeline emits its final tables (on_table
  ///   with `final`) and ends; an added one starts (placed as at start()).
  /// What cannot change while tracer runs is a kRecipe error at its position in `recipe`, and the
  /// session goes on unchanged: [bpf], placement, channel, max_targets, the probes while a
  /// perf.data file is written or a plugin stage binds them; probes of a pid or command target
  /// (the processes it made since the start would be missed). An error opening an added probe
  /// (at its position) also leaves the session as it was. Call on the session's executor while
  /// it runs (after start()'s completion, before stop()); it blocks that executor while added
  /// probes resolve and in-kernel programs compile (async_apply does not while they compile).
  /// Pipeline indices of on_table and on_event are those of `recipe` afterwards.
  RecipeChanges apply(const Recipe& recipe);
  /// apply() without blocking the caller's executor where it takes time: the change is checked,
  /// its added probes opened (disabled) and its in-kernel programs generated here; the programs
  /// compile (clang, the slow step) on a thread of the session's own while the executor goes
  /// on, the running recipe unchanged meanwhile; then, back on the executor, they load and
  /// attach, the pipelines bind, the added probes are enabled and the rest of apply() happens
  /// (a removed probe's events close on the executor, as in apply()). `handler` runs on the
  /// session's executor with nullptr and the changes, or what apply() would have thrown (the
  /// session then goes on unchanged), never inside this call. A stop() meanwhile cancels the
  /// change (an Error with std::errc::operation_canceled); apply() and async_apply() meanwhile
  /// are refused (kUsage); the handler never runs after the session is gone. `recipe` is copied.
  void async_apply(const Recipe& recipe,
                   std::function<void(std::exception_ptr, RecipeChanges)> handler);
  /// Stops the engine (the last records reach the pipelines), emits the final tables, flushes.
  /// Idempotent; on_done observers run once. It blocks the caller's executor while the events
  /// close (each close waits for the kernel's grace periods: tens to hundreds of ms); async_stop
  /// does not.
  void stop();
  /// stop() without blocking the caller's executor: the events stop and the rings drain here
  /// (the last records reach the pipelines), the events, BPF programs and tracefs probes close on
  /// a thread of the session's own, then, back on the session's executor, the in-kernel
  /// aggregations are read a last time, the final tables are emitted, on_done observers run and
  /// `handler` runs last with nullptr or what stop() would have thrown. During an async_start it
  /// cancels the start and `handler` runs after the start's handler; a second async_stop's
  /// handler runs with the first's; stop(), collect() and apply() meanwhile do nothing (the stop
  /// is under way). The handler never runs after the session is gone (its destructor waits for
  /// the closing and emits nothing more). Call on the session's executor.
  void async_stop(std::function<void(std::exception_ptr)> handler);

  /// The session ended (the duration, the target's exit, a failure, or stop()). Set before
  /// start().
  void on_done(std::function<void()> handler);
  /// Before records reach the pipelines (a status line clears itself there).
  void on_delivery(std::function<void(std::size_t records)> handler);
  /// After each tick's interval output.
  void on_tick(std::function<void()> handler);
  /// Every aggregation's table as values, wherever the stage runs (in the kernel or in user
  /// space): at each interval of an `every` and at the end, as the stages after it (print,
  /// jsonl, ...) get it. Runs on the session's executor, inside start()'s ticks and stop().
  /// Set before start(); handlers run in the order they were added.
  void on_table(std::function<void(const TableUpdate&)> handler);
  /// Every event a per-event output (print, jsonl, csv) writes, as values: the output's fields
  /// of it, read with FieldRef::read (a number, a string, a stack...), in the output's order,
  /// as the output gets it (after the filters before it). Runs on the hot path on the session's
  /// executor: keep it short. A handler that throws gets no more events; the session stops and
  /// failure() is that exception. Set before start().
  void on_event(std::function<void(const EventUpdate&)> handler);

  /// The tables as they stand now, nothing emitted or reset (a scrape of `tracer serve`): the
  /// rings are drained, the in-kernel maps and the counter groups read, and each aggregation's
  /// rows so far (Pipeline::peek: since its last interval with `every`; the whole run's for the
  /// counters stage) go to `handler` with `final` false. The in-kernel maps are read only here
  /// and where an output is due: nothing is drained for metrics nobody asks for. Call on the
  /// session's executor while it runs; does nothing otherwise.
  void collect(const std::function<void(const TableUpdate&)>& handler);
  [[nodiscard]] SessionStats stats() const;
  [[nodiscard]] bool running() const noexcept;
  /// The pid or command target exited (the session stopped by itself).
  [[nodiscard]] bool target_exited() const noexcept;
  /// A command target's exit code once it ended by itself (Engine::command_exit_code).
  [[nodiscard]] std::optional<int> command_exit_code() const noexcept;
  /// What a batch handler threw, if anything (the session stopped).
  [[nodiscard]] std::exception_ptr failure() const noexcept;
  [[nodiscard]] Engine& engine() noexcept;
  /// Where each stage runs and why (`tracer check --plan`): a line per stage. Valid after
  /// check() or start().
  [[nodiscard]] std::string placement() const;
  [[nodiscard]] std::span<const std::unique_ptr<Pipeline>> pipelines() const noexcept;

  /// Whether a session of `recipe` with `options` writes machine output (a perf.data stream)
  /// on stdout: a front end then sends its text output elsewhere.
  [[nodiscard]] static bool takes_stdout(const Recipe& recipe, const SessionOptions& options);

  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracer

#pragma GCC visibility pop
