// Engine: owns probes (perf events, optional BPF programs), their rings, and the reactor that
// drains them on an Asio executor it is given. It starts no threads of its own.
//
// Usage:
//   boost::asio::io_context io;
//   tracer::Engine engine(io.get_executor(), {
//       .probes = {{.name = "exec", .kind = ProbeKind::kTracepoint,
//                   .spec = "sched:sched_process_exec"}}});
//   engine.on_batch([](const tracer::Batch& b) { for (auto& r : b.records) ...; });
//   engine.start();                       // throws tracer::Error with a hint on setup failure
//   io.run_for(std::chrono::seconds(5));  // or until engine.on_done fires
//   engine.stop();                        // drains what remains, detaches, closes
//   auto stats = engine.stats();
//
// Threading: the engine's handlers run on a strand of the executor, or directly on it when the
// executor is an io_context's made for one thread (io_context(1), as the CLI's: Asio then
// assumes one thread runs it, and a strand would only add a mutex and a queued operation to every
// completion). Call the engine's member functions from that executor's threads (for instance
// through asio::post) or before running it.
#pragma once

// Boost 1.74's Asio uses std::exchange without including <utility> (TOOLCHAIN.md): included
// here first, so that neither this header nor an embedder's Asio after it needs a forced flag.
#include <utility>

#include <boost/asio/any_io_executor.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tracer/bpf/map_source.hpp"
#include "tracer/engine_options.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/probe.hpp"
#include "tracer/result.hpp"
#include "tracer/stats.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

class Engine {
 public:
  Engine(boost::asio::any_io_executor executor, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  /// Where decoded records go (set before start()).
  void on_batch(BatchHandler handler);
  /// Where samples go in place, read where they lie in their rings (set before start()): the
  /// tracepoint hits of BPF-delivered probes, in batches before any record is rebuilt for them,
  /// and the samples of a fixed layout (perf::SampleLayout::fixed) in the perf rings of the
  /// probes `takes` says yes to (asked before each drain of a probe's ring). Without a handler,
  /// or when it returns false for a batch, they are rebuilt or decoded and reach the batch
  /// handler like every other record; so do the few samples that wrap around their ring's end.
  /// The two paths keep each probe's order; there is no order between them (a consumer in time
  /// order takes the records).
  void on_in_place(InPlaceHandler handler, std::function<bool(std::uint32_t probe)> takes = {});
  /// Called once when the engine stopped by itself (the traced command or pid target exited, see
  /// target_exited(); a batch handler threw) or by stop().
  void on_done(std::function<void()> handler);
  /// Called after each pass that ends a round: every ring was read, over one pass or several, up
  /// to its head at the last round's end (at least once per flush interval while the rings keep
  /// up, and the last one in stop()). A record delivered after it was written to its ring after
  /// the last round ended, so a sink can end a reorder round there, as perf record writes
  /// FINISHED_ROUND after each pass over its mmaps (each read to the head it found). Replaces
  /// on_pass's handler.
  void on_round(std::function<void()> handler);
  /// Called after every pass: `round` true for those on_round is called for, false for a pass
  /// that left a ring short of its head at the last round (its time slice ran out) or read none
  /// (held): what the last round made safe still is, nothing more (Pipeline::round(false)).
  /// Replaces on_round's handler.
  void on_pass(std::function<void(bool round)> handler);
  /// Backpressure: while `backlogged()` is true (the stages are behind: records queue faster
  /// than they run), no ring is read. Their records wait in the kernel, which counts what does
  /// not fit as LOST, instead of in a queue that grows without bound and that a stop would have
  /// to run through; passes run only the pass handler, back to back with whatever else is
  /// ready (a signal, the duration's timer), until the stages catch up. Not during stop()'s own
  /// drain. Unset: always read.
  void hold_while(std::function<bool()> backlogged);
  /// Called by start() once every event is open, before any is enabled (and before a command
  /// target runs): programs attached here (attach_bpf) see every event the probes will count.
  /// What it throws fails start().
  void before_enable(std::function<void()> handler);
  /// Drains every ring now to the head it has, delivering the batches and a round: unlike the
  /// flush timer's pass, with no time slice and whether or not the stages are behind (what a
  /// change of the pipelines or a read of their tables counts on must have reached them). From
  /// the engine's executor; nothing while it is not running.
  void drain_now();

  /// What start() would do short of opening anything: resolves every probe (tracepoint ids and
  /// formats, symbols, PMUs), loads the BPF object (compiling a source; the verifier runs) and
  /// opens no event and attaches nothing. The loaded object is kept, attached to nothing, so
  /// maps() describes its maps (a bpf-map stage's names and fields are checked against them).
  /// Notes worth a user's attention (a BPF program that gates every perf consumer of its
  /// tracepoint) are appended to `notes`.
  /// Only before start(): afterwards a usage error. Writes nothing: a BPF source compiles in a
  /// temporary directory removed at once, not into the cache.
  /// @return the probes as start() would resolve them. Throws tracer::Error like start().
  std::vector<ProbeInfo> check(std::vector<std::string>* notes = nullptr);
  /// Each probe on its own, as check() would resolve and trial-open it: the error of every probe
  /// that fails (check() stops at the first), in probe order; empty when all are fine. For
  /// `tracer check`, which reports every problem of a recipe at once.
  std::vector<Error> check_probes();

  /// Checks privileges, resolves every probe, opens and maps events, attaches BPF programs,
  /// enables, and arms the reactor. Throws tracer::Error (category, message, hint) on failure,
  /// after closing whatever it had opened.
  void start();
  /// start() in two halves, for a caller whose executor must stay free while probes resolve,
  /// BPF compiles and events open (Session::async_start). prepare() does all of that and
  /// enables the events (records wait in the rings); it touches nothing of the executor, so it
  /// may run on another thread, once, while nothing else is called on the engine. Its
  /// before_enable() hook runs on that thread too. go() then, on the executor, arms the ring
  /// waits and timers and lets a command target run. stop() after prepare() alone closes
  /// everything. Both throw as start() does.
  void prepare();
  void go();
  /// Disables every event, drains every ring to the end, detaches, closes and removes dynamic
  /// probes. Idempotent.
  void stop();
  /// stop() up to the closing: every event disabled and every ring drained (the last records
  /// reached the handlers; stats() is final), but the events, BPF links and tracefs probes,
  /// whose closing waits for the kernel's grace periods (tens to hundreds of ms), are handed to
  /// the function returned, which closes them on whatever thread calls it (once; the engine may
  /// be gone by then). A BPF program on them runs until then. Empty when already stopped.
  [[nodiscard]] std::function<void()> stop_deferring_close();
  [[nodiscard]] bool running() const noexcept;
  /// True once the engine stopped by itself because its target exited: the started command,
  /// or the process of a pid target (as perf record -p ends with its process).
  [[nodiscard]] bool target_exited() const noexcept;

  /// Probes as resolved by start().
  [[nodiscard]] std::span<const ProbeInfo> probes() const noexcept;
  /// A snapshot of every counter, per probe and CPU.
  [[nodiscard]] Stats stats() const;
  /// The exception a batch handler threw, if one did: the engine stopped itself then (on_done
  /// fired) and delivered nothing more.
  [[nodiscard]] std::exception_ptr failure() const noexcept;
  /// The maps of the engine's BPF object (none without one). They stay readable after stop(),
  /// until the engine is destroyed.
  [[nodiscard]] const MapSource& maps() const noexcept;
  /// How start() sized the rings of probes without ring_pages (and the output channel): their
  /// number and size, and the locked-memory budget they share (for -v).
  [[nodiscard]] std::string ring_note() const;
  /// The channel system-wide tracepoints are delivered through; nullopt when none is (delivery
  /// off, or no probe delivered).
  [[nodiscard]] std::optional<DeliveryChannel> delivery_channel() const;
  /// The pid of the command started for a kCommand target (-1 otherwise).
  [[nodiscard]] pid_t command_pid() const noexcept;
  /// A kCommand target's exit code once it ended by itself (128 + N after signal N, as a shell
  /// and `tracer stat` report it); nullopt while it runs, or when the engine ended it.
  [[nodiscard]] std::optional<int> command_exit_code() const noexcept;
  /// Attaches a loaded BPF program (its fd) to probe `probe`'s perf event (PERF_EVENT_IOC_SET_BPF
  /// on one event: a tracepoint's or probe's program runs on every CPU and for every task, so
  /// it must filter its targets itself). After start(), before the first batch of a command
  /// target (whose command starts once the reactor runs). The program stays attached until the
  /// events close at stop(). `every_event`: a BPF_PROG_TYPE_PERF_EVENT program (a sampling
  /// event's: cpu-clock, a hardware counter) belongs to one event, so it goes on each CPU's.
  /// Throws tracer::Error (kRuntime) with the errno.
  void attach_bpf(std::uint32_t probe, int prog_fd, bool every_event = false);

  /// Live changes, while the engine runs (after go(), on its executor), for a system-wide or
  /// cgroup target. add_probes() opens `added` as new probes after the others (their indices
  /// are probes().size() on), enabled at once unless `enabled` is false (then enable_probes()
  /// enables them): their records reach the handlers like the others'. Their tracepoints are
  /// sampled by their own events (not through the BPF delivery) and no tracepoint hit counter
  /// checks them. Throws tracer::Error about the probe (kUsage for a pid or command target, whose
  /// processes made since the start a new event would not follow, or a name taken), leaving nothing
  /// of them open.
  /// @return their indices.
  std::vector<std::uint32_t> add_probes(std::vector<ProbeOptions> added, bool enabled = true);
  /// Enables the events of probes add_probes() opened disabled. Throws tracer::Error about the
  /// probe whose event refused (the others stay as they are).
  void enable_probes(std::span<const std::uint32_t> indices);
  /// Live: closes probe `index`. Its events stop, what they wrote reaches the handlers, and its
  /// rings, events, BPF links and dynamic tracefs probe close (the rings and events once the
  /// executor has run what it had queued for them). Its ProbeInfo stays with `removed` set and
  /// its stats are those of its removal; no other probe's index changes. Throws kUsage for an
  /// index that is not a probe, or the BPF output channel's.
  void remove_probe(std::uint32_t index);

  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace tracer

#pragma GCC visibility pop
