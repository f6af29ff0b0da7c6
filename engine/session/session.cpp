// Session: recipe -> engine options and pipelines -> a run with rounds, ticks, a duration and a
// drain at stop.
#include "tracer/session.hpp"

#include "session_impl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <ctime>
#include <exception>
#include <map>

#include <unistd.h>

#include "tracer/common/release.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/kernel/placement.hpp"
#include "tracer/kernel/run.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {

using session_detail::enable_task_records;
using session_detail::monotonic_now;
using session_detail::rethrow_at_probe;

namespace session_detail {

/// The first sampling probe asks the kernel for task records, on every CPU (when no probe does
/// yet): `full` adds MMAP2 (what perf report needs), else COMM/FORK/EXIT only (thread names at
/// event time, so a short-lived process keeps its comm after it exited).
/// A probe unwound with DWARF makes the carrier announce data mappings as well.
void enable_task_records(EngineOptions& eo, bool full) {
  const bool data = std::any_of(eo.probes.begin(), eo.probes.end(),
                                [](const auto& p) { return p.sample_stack_user != 0; });
  for (auto& p : eo.probes) {
    if (p.task_records || (!full && p.comm_records)) {
      p.data_mappings = p.data_mappings || (p.task_records && data);
      return;
    }
  }
  for (auto& p : eo.probes) {
    if (!p.counting) {
      (full ? p.task_records : p.comm_records) = true;
      p.data_mappings = full && data;
      return;
    }
  }
}

}  // namespace session_detail

namespace {

namespace asio = boost::asio;

/// The place in the recipe of the probe an engine error is about (ErrorSubject::recipe_probe):
/// its filter's for an error about the filter, else its tracepoint/uprobe/... value's.
std::optional<SourceRegion> probe_place(const Error& e, const Recipe& recipe) {
  const auto& about = e.subject().recipe_probe;
  if (!about || *about >= recipe.probes.size())
    return std::nullopt;
  const auto& p = recipe.probes[*about];
  const bool filter = e.subject().option == "filter" && !p.options.filter.empty();
  const SourceRegion& where = p.where_of(filter ? "filter" : to_string(p.options.kind));
  if (where.path.empty())
    return std::nullopt;
  return where;
}

bool same_place(const SourceRegion& a, const SourceRegion& b) {
  return a.path == b.path && a.line == b.line && a.column == b.column;
}

/// Whether some stage of the recipe, with its spec's needs, satisfies `pred(spec, stage)`.
template <typename Pred>
bool any_stage(const Recipe& recipe, Pred pred) {
  const auto& registry = stage_registry();
  for (const auto& p : recipe.pipelines) {
    for (const auto& st : p.stages) {
      const StageSpec* spec = registry.find(st.use);
      if (spec != nullptr && pred(*spec, st))
        return true;
    }
  }
  return false;
}

/// Whether some stage of the recipe writes machine output on stdout (its stdout option is "-").
bool stage_takes_stdout(const Recipe& recipe) {
  return any_stage(recipe, [](const StageSpec& spec, const RecipeStage& st) {
    if (spec.needs.stdout_option.empty())
      return false;
    const ConfigValue* v = st.options.find(spec.needs.stdout_option);
    return v != nullptr && v->string() != nullptr && *v->string() == "-";
  });
}

bool stages_need_task_records(const Recipe& recipe) {
  return any_stage(
      recipe, [](const StageSpec& spec, const RecipeStage&) { return spec.needs.task_records; });
}

}  // namespace

namespace session_detail {

EngineOptions engine_options_for(const Recipe& recipe, const SessionOptions& opts) {
  EngineOptions eo = recipe.to_engine_options(opts.target);
  eo.verbose = opts.verbose;
  eo.deliver_tracepoints_via_bpf = opts.deliver_tracepoints_via_bpf;
  eo.trace_self = opts.trace_self;
  if (opts.drain_slice_ms)
    eo.drain_slice_ms = *opts.drain_slice_ms;
  eo.channel = opts.channel ? opts.channel : recipe.channel;
  eo.allow_no_probes = !recipe.counters.empty();
  const bool stdout_taken = opts.perf_data == "-" || stage_takes_stdout(recipe);
  if (stdout_taken && opts.json) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "a perf.data stream and --json both write to stdout",
                "write the perf.data to a file, or leave out --json");
  }
  // Machine output on stdout: the traced command's own output must not mix into it.
  eo.target.stdout_to_stderr = eo.target.stdout_to_stderr || opts.json || stdout_taken;
  // Callchains are symbolized through the processes' maps: MMAP2 records keep them for the
  // processes that exit before their stacks are rendered.
  const bool callchains = std::any_of(eo.probes.begin(), eo.probes.end(), [](const auto& p) {
    return (p.extra_sample_type & PERF_SAMPLE_CALLCHAIN) != 0;
  });
  if (stages_need_task_records(recipe) || !opts.perf_data.empty() || callchains)
    enable_task_records(eo, true);
  enable_task_records(eo, false);
  return eo;
}

/// An engine error about one probe ("probe 'x': ...") at that probe's place in the recipe: its
/// filter's for a rejected filter, else its tracepoint/uprobe/... value's. A probe the system
/// lacks or refuses as written is a recipe error (exit 2); other failures keep their category.
[[noreturn]] void rethrow_at_probe(const Error& e, const Recipe& recipe) {
  if (const auto where = probe_place(e, recipe)) {
    const bool recipe_error =
        e.category() == ErrorCategory::kUsage || e.category() == ErrorCategory::kNotFound;
    Error placed(recipe_error ? ErrorCategory::kRecipe : e.category(), e.code(), e.message(),
                 e.hint(), where);
    placed.subject() = e.subject();
    throw placed;
  }
  throw e;
}

}  // namespace session_detail

std::vector<StageSpec> stage_catalog() {
  std::vector<StageSpec> specs;
  for (const auto* s : stage_registry().specs())
    specs.push_back(*s);
  return specs;
}

std::vector<std::unique_ptr<Pipeline>> make_pipelines(const Recipe& recipe,
                                                      Sink& out,
                                                      bool json,
                                                      Diagnostics& diags,
                                                      const PipelineOptions& base,
                                                      const std::string& perf_data,
                                                      const StackOutputs& stacks) {
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  const auto& registry = stage_registry();
  auto options = [&](bool implicit_print) {
    PipelineOptions o = base;
    o.implicit_print = implicit_print;
    return o;
  };
  for (std::size_t pi = 0; pi < recipe.pipelines.size(); ++pi) {
    const auto& rp = recipe.pipelines[pi];
    auto p = std::make_unique<Pipeline>(out, options(!json));
    for (std::size_t si = 0; si < rp.stages.size(); ++si) {
      const auto& st = rp.stages[si];
      const std::size_t said = diags.size();
      if (json && st.use == "print") {
        // The same output as JSON lines: its fields, kinds and events, not its text format.
        ConfigTable as_json;
        if (const ConfigTable* t = st.options.table()) {
          for (const auto& kv : *t) {
            if (kv.first != "format")
              as_json.push_back(kv);
          }
        }
        p->add(registry, "jsonl", ConfigValue{.value = std::move(as_json), .where = st.where},
               diags);
      } else {
        p->add(registry, st.use, st.options, diags);
      }
      diags.about_since(said, {.pipeline = pi, .stage = si});  // its options' problems
    }
    const Output* last = p->size() == 0 ? nullptr : p->stage(p->size() - 1).output();
    bool aggregates = false;
    for (std::size_t i = 0; i < p->size(); ++i)
      aggregates = aggregates || p->stage(i).aggregation() != nullptr;
    if ((json || (aggregates && !stacks.empty())) && (last == nullptr || !last->takes_tables())) {
      // The tables' own output, before the stack files (which would replace the implicit one).
      p->add(registry, json ? "jsonl" : "print",
             ConfigValue{.value = ConfigTable{}, .where = rp.where}, diags);
    }
    if (aggregates) {
      for (const auto& [use, path] :
           {std::pair{"folded", &stacks.folded}, std::pair{"flamegraph", &stacks.flamegraph}}) {
        if (path->empty())
          continue;
        const SourceRegion where{.path = fmt::format("--{}", use), .line = 0, .column = 0};
        ConfigTable table{{"path", ConfigValue{.value = *path, .where = where}}};
        p->add(registry, use, ConfigValue{.value = std::move(table), .where = where}, diags);
      }
    }
    pipelines.push_back(std::move(p));
  }
  if (pipelines.empty() && perf_data.empty()) {  // no stages: every event as a line
    auto p = std::make_unique<Pipeline>(out, options(false));
    p->add(registry, json ? "jsonl" : "print", ConfigValue{.value = ConfigTable{}}, diags);
    pipelines.push_back(std::move(p));
  }
  if (!perf_data.empty()) {
    auto p = std::make_unique<Pipeline>(out, options(false));
    const SourceRegion where{.path = "--perf-data", .line = 0, .column = 0};
    ConfigTable table{{"path", ConfigValue{.value = perf_data, .where = where}}};
    p->add(registry, "perf-data", ConfigValue{.value = std::move(table), .where = where}, diags);
    pipelines.push_back(std::move(p));
  }
  return pipelines;
}
namespace {

/// Whether some aggregation keys by `comm`.
bool keys_by_comm(const std::vector<std::unique_ptr<Pipeline>>& pipelines) {
  for (const auto& p : pipelines) {
    for (std::size_t i = 0; i < p->size(); ++i) {
      const auto f = kernel_form_of(p->stage(i));
      if (f.kind == KernelForm::Kind::kAggregate &&
          std::find(f.by.begin(), f.by.end(), "comm") != f.by.end())
        return true;
    }
  }
  return false;
}

}  // namespace

Session::Session(asio::any_io_executor executor,
                 const Recipe& recipe,
                 Sink& out,
                 SessionOptions options)
    : impl_(std::make_unique<Impl>(executor, recipe, out, std::move(options))) {
  auto& s = *impl_;
  s.owner = this;
  if (!s.opts.duration)
    s.opts.duration = recipe.duration;
  EngineOptions eo = session_detail::engine_options_for(recipe, s.opts);
  s.base_probes.assign(eo.probes.begin(), eo.probes.end());
  Diagnostics diags;
  s.pipelines = make_pipelines(recipe, out, s.opts.json, diags, s.opts.pipeline, s.opts.perf_data,
                               s.opts.stacks);
  if (s.opts.all_problems) {
    // A stage the recipe's check already found wrong says so once (its own words may sit at
    // another place of the same stage).
    for (const auto& d : diags.items()) {
      const auto& known = s.opts.problems.items();
      if (std::none_of(known.begin(), known.end(),
                       [&](const auto& k) { return k.message == d.message; }))
        s.opts.problems.add(d.where, d.message, d.hint);
    }
  } else {
    diags.throw_if_any();
  }
  // A stage that keys by comm gets it from each delivered record (the name at the hit), so
  // that its pipeline may run without time order (use_comm_in_place, at start).
  eo.deliver_comm = keys_by_comm(s.pipelines);
  s.engine_options = std::move(eo);
  s.make_engine(this);
}

Session::~Session() {
  auto& s = *impl_;
  if (s.worker.joinable()) {  // an async_start still preparing: it gives up at its next step
    s.cancel = true;
    s.worker.join();
  }
  if (s.closer.joinable())  // an async_stop's closing: the events are closed when it returns
    s.closer.join();
  s.alive->store(false);  // its completion, if posted, finds the session gone
  s.starting = false;
  try {
    stop();
  } catch (const std::exception& e) {  // a destructor does not throw; say what stop() met
    std::fprintf(stderr, "tracer: session: stopping at destruction: %s\n", e.what());
  } catch (...) {
    std::fputs("tracer: session: stopping at destruction failed\n", stderr);
  }
}

std::vector<std::string> out_of_target_notes(const Recipe& recipe, const Target& target) {
  std::vector<std::string> out;
  if (target.kind != Target::Kind::kPid && target.kind != Target::Kind::kCommand)
    return out;
  struct Outside {
    std::string_view prefix;  // "system:event" prefix
    std::string_view where;
  };
  static constexpr Outside kOutside[] = {
      {"block:block_rq_complete", "a request completes in interrupt context"},
      {"block:block_bio_complete", "a bio completes in interrupt context"},
      {"block:block_rq_issue", "a request is often issued by a kworker or the plug flush"},
      {"irq:", "interrupts run in whatever task they interrupt"},
      {"irq_vectors:", "interrupts run in whatever task they interrupt"},
      {"timer:", "timers fire in interrupt context"},
      {"sched:sched_wakeup", "a wakeup runs in the waker's task"},
      {"sched:sched_waking", "a wakeup runs in the waker's task"},
      {"net:netif_receive_skb", "packets are received in softirq context"},
      {"napi:", "packets are received in softirq context"},
      {"workqueue:", "work runs in kworker threads"},
  };
  for (const auto& p : recipe.probes) {
    if (p.options.kind != ProbeKind::kTracepoint)
      continue;
    for (const auto& o : kOutside) {
      if (!std::string_view(p.options.spec).starts_with(o.prefix))
        continue;
      out.push_back(fmt::format(
          "probe '{}' ({}): {}, outside the traced process: with -p or a command, tracer sees "
          "only the events that happen to run in its tasks (a latency pairing them counts most "
          "entries as unmatched); trace system-wide and filter by a field of the event instead",
          p.options.name, p.options.spec, o.where));
      break;
    }
  }
  return out;
}

std::vector<ProbeInfo> Session::check(std::vector<std::string>* notes) {
  auto& s = *impl_;
  Diagnostics diags = s.opts.problems;
  const auto& t = s.opts.target;
  s.recipe.check_system(diags,
                        t.kind == Target::Kind::kPid ? std::optional<pid_t>(t.pid) : std::nullopt,
                        Recipe::Writes::kNone);
  if (s.opts.all_problems) {
    // Each probe on its own: its error at its place, unless the system's check said something
    // at that place already (a missing tracepoint is one problem, not two).
    // A probe the system's check found wrong (its freq, its offset) is not trial-opened into a
    // second, vaguer error about the same mistake.
    for (const auto& e : s.engine->check_probes()) {
      const auto where = probe_place(e, s.recipe);
      const auto& about = e.subject().recipe_probe;
      const RecipeProbe* probe =
          about && *about < s.recipe.probes.size() ? &s.recipe.probes[*about] : nullptr;
      const bool said = std::any_of(diags.items().begin(), diags.items().end(), [&](const auto& d) {
        if (where && same_place(d.where, *where))
          return true;
        return probe != nullptr &&
               std::any_of(probe->value_where.begin(), probe->value_where.end(),
                           [&](const auto& kv) { return same_place(d.where, kv.second); });
      });
      if (!said)
        diags.add(where.value_or(SourceRegion{.path = s.recipe.path, .line = 1, .column = 1}),
                  e.message(), e.hint());
    }
  }
  diags.throw_if_any();
  s.plan_placement(this);
  std::vector<ProbeInfo> probes;
  try {
    probes = s.engine->check(notes);
  } catch (const Error& e) {
    rethrow_at_probe(e, s.recipe);
  }
  for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
    const std::size_t said = diags.size();
    s.pipelines[i]->bind(probes, diags, {}, &s.engine->maps());
    diags.about_since(said, {.pipeline = i});
  }
  diags.throw_if_any();
  return probes;
}

void Session::stop() {
  auto& s = *impl_;
  if (s.starting) {  // async_start's preparation runs: its handler gets the cancellation
    s.cancel = true;
    return;
  }
  if (s.applying)  // async_apply's compile gives up; its completion gets the cancellation
    s.cancel = true;
  if (s.stopped || !s.started)
    return;
  s.stopped = true;
  if (!s.live) {  // start() failed part way: nothing was bound, nothing to emit
    s.engine->stop();
    return;
  }
  boost::system::error_code ignored;
  [[maybe_unused]] auto a = s.deadline.cancel(ignored);
  [[maybe_unused]] auto b = s.ticker.cancel(ignored);
  s.engine->stop();  // drains: the last batches reach the pipelines
  {  // the programs detach with their events, closed side by side (ConcurrentRelease)
    common::ConcurrentRelease release;
    s.release_kernel_events(release);
  }
  s.finish_stop();
}

void Session::Impl::release_kernel_events(common::ConcurrentRelease& release) {
  for (auto& run : kernel) {
    release.add_each(run.events);
    release.add(std::move(run.fork_event));
    release.add(std::move(run.free_event));
    release.add(std::move(run.exec_event));
  }
}

void Session::async_stop(std::function<void(std::exception_ptr)> handler) {
  auto& s = *impl_;
  boost::asio::any_io_executor work =
      boost::asio::prefer(s.executor, boost::asio::execution::outstanding_work.tracked);
  if (s.starting) {  // async_start's preparation gives up; its completion runs the handler
    s.cancel = true;
    s.stop_waiters.push_back(std::move(handler));
    return;
  }
  if (s.applying)  // async_apply's compile gives up; its completion gets the cancellation
    s.cancel = true;
  if (s.closer.joinable()) {  // a stop under way: its completion runs this handler too
    s.stop_waiters.push_back(std::move(handler));
    return;
  }
  if (s.stopped || !s.live) {  // nothing runs: stop() has nothing to wait for
    std::exception_ptr failure;
    try {
      stop();
    } catch (...) {
      failure = std::current_exception();
    }
    boost::asio::post(work, [handler = std::move(handler), failure, alive = s.alive] {
      if (alive->load())
        handler(failure);
    });
    return;
  }
  s.stopped = true;
  boost::system::error_code ignored;
  [[maybe_unused]] auto a = s.deadline.cancel(ignored);
  [[maybe_unused]] auto b = s.ticker.cancel(ignored);
  // The rings drain here (the last batches reach the pipelines); what waits for the kernel's
  // grace periods (closing the events, detaching the programs, removing tracefs probes) runs on
  // `closer`; the rest of the stop (the last in-kernel read, after the programs detached, and
  // the final tables) comes back to the executor.
  auto close_engine = s.engine->stop_deferring_close();
  auto kernel_events = std::make_shared<common::ConcurrentRelease>();
  s.release_kernel_events(*kernel_events);
  s.closer = std::thread([&s, kernel_events, close_engine = std::move(close_engine),
                          handler = std::move(handler), work = std::move(work)]() mutable {
    kernel_events->run();
    if (close_engine)
      close_engine();
    boost::asio::post(work, [&s, handler = std::move(handler), alive = s.alive] {
      if (!alive->load())
        return;  // the session is gone (its destructor joined this thread)
      if (s.closer.joinable())
        s.closer.join();
      std::exception_ptr failure;
      try {
        s.finish_stop();
      } catch (...) {
        failure = std::current_exception();
      }
      handler(failure);
      for (auto& waiter : std::exchange(s.stop_waiters, {}))
        waiter(failure);
    });
  });
}

void Session::Impl::finish_stop() {
  auto& s = *this;
  s.feed_counters(monotonic_now());        // the counters' last counts
  s.absorb_kernel(true, monotonic_now());  // what the kernel aggregated since the last read
  // Every pipeline ends and emits, whatever another's end throws (a plugin that ran over its
  // budget must not cost the others their tables); the first error is rethrown at the end.
  std::exception_ptr first;
  for (auto& p : s.pipelines) {
    try {
      p->stop(monotonic_now());
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  }
  s.counters.close();  // after the counters stages' last tables
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
  for (auto& h : s.done_handlers)
    h();
  if (first)
    std::rethrow_exception(first);
}

void Session::collect(const std::function<void(const TableUpdate&)>& handler) {
  auto& s = *impl_;
  if (!s.live || s.stopped)
    return;
  s.engine->drain_now();  // what the rings hold reaches the pipelines
  const auto now = monotonic_now();
  s.feed_counters(now);
  s.absorb_kernel(true, now);
  for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
    Pipeline& p = *s.pipelines[i];
    for (std::size_t k = 0; k < p.size(); ++k) {
      if (p.stage(k).aggregation() == nullptr)
        continue;
      const Table table = p.peek(k, now);
      handler(TableUpdate{.pipeline = i, .stage = k, .table = table, .final = false});
    }
  }
}

void Session::on_done(std::function<void()> handler) {
  impl_->done_handlers.push_back(std::move(handler));
}

void Session::on_delivery(std::function<void(std::size_t)> handler) {
  impl_->delivery = std::move(handler);
}

void Session::on_table(std::function<void(const TableUpdate&)> handler) {
  auto& s = *impl_;
  s.table_handlers.push_back(std::move(handler));
  s.hook_pipelines();
}

void Session::on_event(std::function<void(const EventUpdate&)> handler) {
  auto& s = *impl_;
  s.event_handlers.push_back(std::move(handler));
  s.hook_pipelines();
}

void Session::Impl::hook_pipelines() {
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    if (!table_handlers.empty()) {
      pipelines[i]->on_table([this, i](std::size_t stage, const Table& table, bool final) {
        const TableUpdate update{.pipeline = i, .stage = stage, .table = table, .final = final};
        for (auto& h : table_handlers)
          h(update);
      });
    }
    if (event_handlers.empty())
      continue;
    pipelines[i]->on_event(
        [this, i](std::size_t stage, const Event& event, std::span<const FieldRef> fields) {
          const EventUpdate update{.pipeline = i, .stage = stage, .event = event, .fields = fields};
          try {
            for (auto& h : event_handlers)
              h(update);
          } catch (...) {
            // The session ends (failure() says why); the pipeline gives the handlers no more
            // events and counts them.
            if (!handler_failure) {
              handler_failure = std::current_exception();
              boost::asio::post(executor, [this, token = alive] {
                if (token->load())
                  owner->stop();
              });
            }
            throw;
          }
        });
  }
}

void Session::on_tick(std::function<void()> handler) {
  impl_->tick_handlers.push_back(std::move(handler));
}

SessionStats Session::stats() const {
  const auto& s = *impl_;
  SessionStats out;
  out.engine = s.engine->stats();
  for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
    for (auto& [name, value] : s.pipelines[i]->counters())
      out.counters.emplace_back(i == 0 ? name : fmt::format("pipeline{}.{}", i, name), value);
    for (auto& w : s.pipelines[i]->warnings())
      out.warnings.push_back(std::move(w));
  }
  kernel::add_run_stats(s.kernel, out.engine, [&s](std::uint32_t pi) {
    return s.engine_options.probes[pi].counting ||
           (pi < s.kernel_samples.size() && s.kernel_samples[pi]);
  });
  out.delivered = s.delivered;
  out.in_place = s.in_place_ready.load(std::memory_order_acquire) &&
                 std::find(s.in_place_probes.begin(), s.in_place_probes.end(), true) !=
                     s.in_place_probes.end();
  out.seconds =
      s.stopped ? s.seconds
                : std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
  return out;
}

bool Session::running() const noexcept {
  return impl_->live && !impl_->stopped;
}

bool Session::target_exited() const noexcept {
  return impl_->engine->target_exited();
}

std::optional<int> Session::command_exit_code() const noexcept {
  return impl_->engine->command_exit_code();
}

std::exception_ptr Session::failure() const noexcept {
  if (auto f = impl_->engine->failure())
    return f;
  return impl_->handler_failure;
}

std::string Session::placement() const {
  return kernel::describe(impl_->places);
}

Engine& Session::engine() noexcept {
  return *impl_->engine;
}

std::span<const std::unique_ptr<Pipeline>> Session::pipelines() const noexcept {
  return impl_->pipelines;
}

bool Session::takes_stdout(const Recipe& recipe, const SessionOptions& options) {
  return options.perf_data == "-" || stage_takes_stdout(recipe);
}

}  // namespace tracer
