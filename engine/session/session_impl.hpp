// Session's state, shared by session.cpp (construction, check, stop, the accessors) and
// session_start.cpp (placement and the start, blocking or not). Private to engine/session.
#pragma once

#include <algorithm>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <thread>
#include <vector>

#include "session_counters.hpp"
#include "tracer/common/clock.hpp"
#include "tracer/common/release.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/kernel/placement.hpp"
#include "tracer/kernel/run.hpp"
#include "tracer/session.hpp"

namespace tracer {

namespace session_detail {
/// CLOCK_MONOTONIC now (the clock of the stages' interval ticks).
using clocks::monotonic_now;
/// The first sampling probe asks the kernel for task records (MMAP2 too when `full`).
void enable_task_records(EngineOptions& eo, bool full);
/// An engine error about one probe, rethrown at that probe's place in the recipe.
[[noreturn]] void rethrow_at_probe(const Error& e, const Recipe& recipe);
/// The engine options of `recipe` as a session with `opts` runs it (before placement).
[[nodiscard]] EngineOptions engine_options_for(const Recipe& recipe, const SessionOptions& opts);
}  // namespace session_detail

struct Session::Impl {
  Impl(const boost::asio::any_io_executor& ex, Recipe r, Sink& o, SessionOptions so)
      : recipe(std::move(r)),
        out(&o),
        opts(std::move(so)),
        executor(ex),
        deadline(ex),
        ticker(ex) {}

  Recipe recipe;
  Session* owner = nullptr;  // set by the constructor
  /// The recipe's [[counter]] groups, opened with the engine's events (before_enable), read by
  /// the counters stages; closed after the pipelines' last tables.
  SessionCounters counters{recipe.counters};
  /// The recipe's probes as the engine options first had them (before the placement made some
  /// counting): what a live change compares the next recipe's with. By engine probe index.
  /// nullopt: not the recipe's (a side-band event, the BPF output channel).
  std::vector<std::optional<ProbeOptions>> base_probes;
  Sink* out;
  SessionOptions opts;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  // After the pipelines: destroyed first (an engine's destructor drains into them).
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Engine> checked;  // plan_placement's, until engine->prepare() (make_engine)
  EngineOptions engine_options;     // what engine was made with (placement may remake it)
  boost::asio::any_io_executor executor;
  std::vector<kernel::PipelinePlace> places;
  std::vector<kernel::Run> kernel;   // before engine in destruction: programs detach with events
  std::vector<bool> in_kernel;       // per pipeline: placed in the kernel
  std::vector<bool> kernel_samples;  // per probe: a sampling event whose samples its program
                                     // aggregates (none reach its ring)
  boost::asio::steady_timer deadline, ticker;
  std::vector<std::function<void()>> done_handlers, tick_handlers;
  std::vector<std::function<void(const TableUpdate&)>> table_handlers;
  std::vector<std::function<void(const EventUpdate&)>> event_handlers;
  std::exception_ptr handler_failure;  // what an on_event handler threw (the session stops)
  std::function<void(std::size_t)> delivery;
  std::uint64_t delivered = 0;
  /// The probes whose samples the pipelines in user space all take in place, and whether
  /// every BPF-delivered probe is among them (set once they are bound; then in_place_ready).
  std::vector<bool> in_place_probes;
  std::vector<bool> delivered_probes;  // ProbeInfo::delivered
  bool in_place_delivered = false;
  std::atomic<bool> in_place_ready{false};
  std::chrono::steady_clock::time_point t0{};
  double seconds = 0;
  bool started = false, stopped = false;
  bool closed = false;  // a failed start closed the engine (stop() has nothing to do)
  // async_start: the preparation runs on `worker` while the host's executor goes on; stop()
  // meanwhile asks it to give up (`cancel`); `alive` tells its completion, posted to the
  // executor, whether the session still exists.
  std::thread worker;
  std::atomic<bool> starting{false}, cancel{false};
  // async_apply: its compile runs on `worker` (no apply meanwhile; stop() sets `cancel`).
  bool applying = false;
  std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  // async_stop: the events close on `closer` while the executor goes on; an async_stop during
  // an async_start waits in `stop_waiters` for the start's (canceled) completion.
  std::thread closer;
  std::vector<std::function<void(std::exception_ptr)>> stop_waiters;

  /// Hands the in-kernel pipelines' events (their programs detach as they close) to `release`.
  void release_kernel_events(common::ConcurrentRelease& release);
  /// stop() after the events closed: the last in-kernel read, the final tables, the done
  /// observers (then the first error a pipeline's end threw is rethrown).
  void finish_stop();

  /// (Re)installs the on_table/on_event handlers on every pipeline, with its index.
  void hook_pipelines();
  /// Which probes' samples the user-space pipelines take in place, and whether pipelines
  /// ordered only for comm read it from the delivered records (after they are bound).
  void decide_in_place();
  /// Session::apply.
  RecipeChanges apply(const Recipe& next);
  /// Throws kUsage when no change can be applied now (not running, starting, or a change under
  /// way).
  void refuse_apply() const;

  void begin_start();
  /// check_system, placement, engine->prepare() (with the kernel programs), the pipelines'
  /// bind and the in-place decisions: everything of a start that does not touch the executor.
  void prepare_start(Session* self);
  void prepare_start_steps(Session* self);  // prepare_start's body
  /// engine->go(), the stages' start, the duration and the ticks: on the executor.
  void finish_start(Session* self);
  void throw_if_canceled() const;
  /// A start that failed (or was canceled) after the engine opened: everything closes now.
  void close_after_failure();
  bool live = false;  // the pipelines were bound and started: stop() has tables to emit

  void make_engine(Session* self) {
    // The engine placement checked stays until the new one has opened its events: its trial
    // events are then not the tracepoints' last, and close without the kernel's grace periods.
    if (engine)
      checked = std::move(engine);
    engine = std::make_unique<Engine>(executor, engine_options);
    engine->on_batch([this](const Batch& b) {
      if (delivery)
        delivery(b.records.size());
      delivered += b.records.size();
      for (std::size_t i = 0; i < pipelines.size(); ++i) {
        if (i >= in_kernel.size() || !in_kernel[i])
          pipelines[i]->on_batch(b);
        else  // a kernel pipeline's events stay there; its stacks need the processes' maps
          pipelines[i]->on_task_records(b);
      }
    });
    // Samples reach the pipelines in place when every user-space one takes their probe's so
    // (decided once they are bound): BPF-delivered ones when all their probes are taken, else
    // rebuilt as records for on_batch; a perf ring's when its probe is.
    engine->on_in_place(
        [this](std::span<const InPlaceSample> samples) {
          if (!in_place_ready.load(std::memory_order_acquire))
            return false;
          // A delivered batch (of any delivered probes), or a perf ring's (of the probe asked
          // for before its drain).
          const std::uint32_t p = samples.empty() ? 0 : samples.front().probe();
          if (p >= in_place_probes.size() ||
              !(delivered_probes[p] ? in_place_delivered : in_place_probes[p]))
            return false;
          if (delivery)
            delivery(samples.size());
          delivered += samples.size();
          for (std::size_t i = 0; i < pipelines.size(); ++i) {
            if (i >= in_kernel.size() || !in_kernel[i])
              pipelines[i]->on_in_place(samples);
          }
          return true;
        },
        [this](std::uint32_t probe) {
          return in_place_ready.load(std::memory_order_acquire) && probe < in_place_probes.size() &&
                 in_place_probes[probe];
        });
    // Rounds: the time-order merge releases there, perf-data sinks end a FINISHED_ROUND.
    engine->on_pass([this](bool round) {
      for (auto& p : pipelines)
        p->round(round);
    });
    // Backpressure: a pipeline whose stages are behind holds the rings, so that its queue (and
    // what a stop must run through) stays bounded; the kernel counts what the rings drop.
    engine->hold_while([this] {
      return std::any_of(pipelines.begin(), pipelines.end(),
                         [](const auto& p) { return p->backlogged(); });
    });
    // Posted by the engine's stop, it may run after the session is gone (a stop() just before
    // the destructor): `alive` says whether there is a session to stop.
    engine->on_done([self, alive = alive] {
      if (alive->load())
        self->stop();
    });
  }

  /// Placement: which pipelines run in the kernel (probes resolved by a check of the engine).
  /// Probes that only kernel pipelines consume become counting events (no ring).
  void plan_placement(Session* self);
  /// A pipeline left in user space may not key by what only the kernel reads (a `char *`
  /// field's string): an error at its stage's position.
  void check_user_fields(std::span<const ProbeInfo> probes) const;
  /// Generates, loads and attaches the kernel pipelines' programs (after the engine started,
  /// before the command target runs).
  void start_kernel();
  /// Hands what the kernel aggregated since the last read to the aggregation stages: at the
  /// end (`final`), and at a tick only for a pipeline whose output is due at `now`, whose stacks
  /// need the processes' maps of now, or whose map may be half full. Otherwise nothing is
  /// read: a count with no `every` costs tracer no syscall per tick.
  void absorb_kernel(bool final, std::chrono::nanoseconds now);

  /// Counting probes whose counts reach the stages (ProbeInfo::counts_to_stages): each CPU
  /// slot's count since the last reading, as one sample (probe, cpu, time, period = weight =
  /// the count) handed to the user-space pipelines; nothing for a slot that did not count.
  void feed_counters(std::chrono::nanoseconds now) {
    const auto& infos = engine->probes();
    const bool any = std::any_of(infos.begin(), infos.end(),
                                 [](const ProbeInfo& p) { return p.counts_to_stages; });
    if (!any)
      return;
    const Stats st = engine->stats();
    counter_samples.clear();
    for (std::size_t p = 0; p < infos.size() && p < st.probes.size(); ++p) {
      if (!infos[p].counts_to_stages)
        continue;
      for (const auto& [cpu, rs] : st.probes[p].per_cpu) {
        std::uint64_t& last = counter_last[{p, cpu}];
        if (rs.samples <= last)
          continue;
        perf::Sample sample;
        sample.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;
        sample.time = static_cast<std::uint64_t>(now.count());
        sample.cpu = static_cast<std::uint32_t>(std::max(cpu, 0));
        sample.period = rs.samples - last;
        last = rs.samples;
        counter_samples.push_back({static_cast<std::uint32_t>(p), cpu, sample});
      }
    }
    if (counter_samples.empty())
      return;
    std::vector<RecordRef> refs(counter_samples.size());
    for (std::size_t i = 0; i < refs.size(); ++i) {
      const auto& c = counter_samples[i];
      refs[i].probe = c.probe;
      refs[i].cpu = c.cpu;
      refs[i].record.type = PERF_RECORD_SAMPLE;
      refs[i].record.body = c.sample;
    }
    const Batch b{.records = refs};
    for (std::size_t i = 0; i < pipelines.size(); ++i) {
      if (i >= in_kernel.size() || !in_kernel[i])
        pipelines[i]->on_batch(b);
    }
  }
  struct CounterSample {
    std::uint32_t probe = 0;
    std::int32_t cpu = -1;
    perf::Sample sample{};
  };
  std::vector<CounterSample> counter_samples;
  std::map<std::pair<std::size_t, int>, std::uint64_t> counter_last;

  /// opts.tick, or the shortest `every` of an aggregation when shorter: a table is due on time.
  std::chrono::milliseconds tick_period{250};
  void choose_tick() {
    tick_period = opts.tick;
    for (const auto& p : pipelines) {
      for (std::size_t i = 0; i < p->size(); ++i) {
        const Aggregation* a = p->stage(i).aggregation();
        const auto due = a != nullptr ? a->every() : std::nullopt;
        if (!due)
          continue;
        // A tick that divides every `every` (at least 10 ms): each table comes on time.
        const auto every = std::chrono::duration_cast<std::chrono::milliseconds>(*due);
        if (every.count() >= 10) {
          tick_period = std::chrono::milliseconds(
              std::max<std::int64_t>(10, std::gcd(tick_period.count(), every.count())));
        }
      }
    }
  }
  void arm_tick() {
    ticker.expires_after(tick_period);
    ticker.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped)
        return;
      const auto now = session_detail::monotonic_now();
      feed_counters(now);
      absorb_kernel(false, now);
      for (auto& p : pipelines)
        p->tick(now);
      for (auto& h : tick_handlers)
        h();
      arm_tick();
    });
  }
};

}  // namespace tracer
