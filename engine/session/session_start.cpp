// Session's start: the placement of the pipelines, then the start itself, blocking (start()) or
// off the host's executor (async_start()).
#include <fmt/format.h>

#include <boost/asio/execution/outstanding_work.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/prefer.hpp>

#include <algorithm>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "session_impl.hpp"

namespace tracer {

using session_detail::enable_task_records;
using session_detail::monotonic_now;
using session_detail::rethrow_at_probe;

namespace {

/// Whether some pipeline has an aggregation that could run in the kernel (options only): then
/// placement resolves the probes before the run.
bool kernel_candidate(const std::vector<std::unique_ptr<Pipeline>>& pipelines) {
  for (const auto& p : pipelines) {
    for (std::size_t i = 0; i < p->size(); ++i) {
      const auto f = kernel_form_of(p->stage(i));
      if (f.kind == KernelForm::Kind::kNone)
        break;
      if (f.kind == KernelForm::Kind::kAggregate)
        return true;
    }
  }
  return false;
}

/// Whether some aggregation keys by a field (then the fields are checked against the probes).
bool keys_fields(const std::vector<std::unique_ptr<Pipeline>>& pipelines) {
  for (const auto& p : pipelines) {
    for (std::size_t i = 0; i < p->size(); ++i) {
      const auto f = kernel_form_of(p->stage(i));
      if (f.kind == KernelForm::Kind::kAggregate && !f.by.empty())
        return true;
    }
  }
  return false;
}

}  // namespace

void Session::Impl::check_user_fields(std::span<const ProbeInfo> probes) const {
  const auto problem = kernel::check_user_fields(pipelines, places, probes);
  if (!problem)
    return;
  SourceRegion where{.path = recipe.path};
  if (problem->pipeline < recipe.pipelines.size() &&
      problem->stage < recipe.pipelines[problem->pipeline].stages.size())
    where = recipe.pipelines[problem->pipeline].stages[problem->stage].where;
  Error e(ErrorCategory::kRecipe, std::make_error_code(std::errc::not_supported),
          fmt::format("pipeline {} stage {}: {}", problem->pipeline + 1, problem->stage + 1,
                      problem->message),
          problem->hint, where);
  e.subject() = {.pipeline = problem->pipeline, .stage = problem->stage, .option = "by"};
  throw e;
}

void Session::Impl::plan_placement(Session* self) {
  const Placement mode = opts.placement.value_or(recipe.placement);
  places.clear();
  const auto resolve = [&] {
    try {
      return engine->check();
    } catch (const Error& e) {
      rethrow_at_probe(e, recipe);
    }
  };
  // A cgroup target's events count the cgroup's tasks; the in-kernel programs do not test a
  // task's cgroup (they would count every task): its pipelines run in user space.
  const bool cgroup = engine_options.target.kind == Target::Kind::kCgroup;
  if (cgroup && mode == Placement::kKernel && kernel_candidate(pipelines)) {
    SourceRegion where{.path = recipe.path};
    const auto it = std::find_if(recipe.pipelines.begin(), recipe.pipelines.end(),
                                 [](const RecipePipeline& p) { return !p.stages.empty(); });
    if (it != recipe.pipelines.end())
      where = it->stages.front().where;
    throw Error(ErrorCategory::kRecipe, std::make_error_code(std::errc::not_supported),
                "placement = \"kernel\": a cgroup target's stages run in user space (the "
                "in-kernel programs do not test a task's cgroup)",
                R"(placement = "auto" or "user" with --cgroup)", where);
  }
  if (cgroup ||
      (mode != Placement::kKernel && (mode == Placement::kUser || !kernel_candidate(pipelines)))) {
    // Nothing to resolve for placement: the reasons come from the stages' forms (or the mode).
    places = kernel::place(pipelines, {}, {}, cgroup ? Placement::kUser : mode, false);
    if (keys_fields(pipelines))  // ... but a key may name a field user space cannot read
      check_user_fields(resolve());
    return;
  }
  const std::vector<ProbeInfo> probes = resolve();
  std::vector<bool> sampling;
  std::vector<std::string> filters;
  for (const auto& p : engine_options.probes) {
    sampling.push_back(!p.counting);
    filters.push_back(p.filter);
  }
  places = kernel::place(pipelines, probes, sampling, mode,
                         engine_options.target.kind != Target::Kind::kAllCpus, filters);
  check_user_fields(probes);
  if (mode == Placement::kKernel) {
    for (std::size_t p = 0; p < places.size(); ++p) {
      if (places[p].plan)
        continue;
      // The first stage that stays in user space, at its place in the recipe.
      const std::size_t at = places[p].blocking_stage.value_or(0);
      const auto& st = places[p].stages.at(at);
      SourceRegion where{.path = recipe.path};
      if (p < recipe.pipelines.size() && at < recipe.pipelines[p].stages.size())
        where = recipe.pipelines[p].stages[at].where;
      Error e(ErrorCategory::kRecipe, std::make_error_code(std::errc::not_supported),
              fmt::format("placement = \"kernel\": pipeline {} cannot run in the kernel: {}", p + 1,
                          st.why),
              "use placement = \"auto\" to run it in user space", where);
      e.subject() = {.pipeline = p, .stage = at, .option = "placement"};
      throw e;
    }
  }
  // Probes no user-space pipeline reads become counting events: their events go nowhere but
  // into the kernel programs (a perf.data output reads every probe).
  // (A pipeline of a [[counter]] group reads its counters, no probe's records.)
  bool user_reads = !opts.perf_data.empty();
  bool any_kernel = false;
  for (std::size_t p = 0; p < places.size(); ++p) {
    const bool counters_only = p < pipelines.size() && pipelines[p]->size() > 0 &&
                               pipelines[p]->stage_name(0) == "counters";
    user_reads = user_reads || (!places[p].plan && !counters_only);
    any_kernel = any_kernel || places[p].plan.has_value();
  }
  // A sampling perf event's program keeps the samples in the ring only when user space reads
  // them too.
  for (auto& pl : places) {
    if (pl.plan) {
      for (auto& pp : pl.plan->probes)
        pp.keep_samples = user_reads;
    }
  }
  if (!any_kernel || user_reads)
    return;
  // Task records (MMAP2, FORK, exec COMM) name the user frames of in-kernel stack keys, also of
  // processes that exit before the table is made: they need a ring.
  bool task_records = false;
  for (const auto& pl : places) {
    if (!pl.plan)
      continue;
    for (const auto& pp : pl.plan->probes) {
      for (const auto& k : pp.keys) {
        task_records = task_records || k.source == kernel::gen::Source::kUserStack ||
                       k.source == kernel::gen::Source::kCallchain;
      }
    }
  }
  for (const auto& pl : places) {
    if (!pl.plan)
      continue;
    for (std::size_t k = 0; k < pl.probes.size(); ++k) {
      const std::uint32_t pi = pl.probes[k];  // pl.plan->probes[k]'s engine probe
      auto& po = engine_options.probes[pi];
      po.task_records = po.comm_records = false;  // the program reads comm itself
      if (kernel::gen::is_perf_event(pl.plan->probes[k].kind)) {
        // Its program runs at each sample (it needs the sampling) and returns 0: no sample is
        // written to the ring, the samples are the program's hits.
        kernel_samples.resize(engine_options.probes.size(), false);
        kernel_samples[pi] = true;
        continue;
      }
      po.counting = true;
    }
  }
  if (task_records) {
    enable_task_records(engine_options, true);
    const bool placed = std::any_of(engine_options.probes.begin(), engine_options.probes.end(),
                                    [](const auto& p) { return p.task_records; });
    if (!placed) {  // every probe counts: a dummy event carries them (perf record's sideband)
      ProbeOptions side;
      side.name = "sideband";
      side.kind = ProbeKind::kSoftware;
      side.spec = "dummy";
      side.task_records = true;
      side.ring_pages = 128;  // task records only: 512 KiB per CPU
      engine_options.probes.push_back(std::move(side));
    }
  }
  make_engine(self);
}

void Session::Impl::start_kernel() {
  kernel.clear();
  in_kernel.assign(pipelines.size(), false);
  kernel = kernel::start_runs(*engine, places, engine_options.target, engine_options.trace_self,
                              recipe.max_targets);
  for (const auto& run : kernel)
    in_kernel[run.pipeline] = true;
}

void Session::Impl::absorb_kernel(bool final, std::chrono::nanoseconds now) {
  kernel::absorb_runs(kernel, pipelines, *engine, final, now);
}

void Session::Impl::begin_start() {
  if (started) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "session: start() may be called once");
  }
  started = true;
}

void Session::Impl::prepare_start(Session* self) {
  try {
    prepare_start_steps(self);
  } catch (...) {
    // The engine placement checked keeps its trial events open until the next one opens its
    // own: a start given up before (a stop 20 ms into an async_start under ASan) left one open.
    checked.reset();
    throw;
  }
}

void Session::Impl::prepare_start_steps(Session* self) {
  Diagnostics diags = opts.problems;
  const auto& t = opts.target;
  recipe.check_system(diags,
                      t.kind == Target::Kind::kPid ? std::optional<pid_t>(t.pid) : std::nullopt);
  diags.throw_if_any();
  throw_if_canceled();
  plan_placement(self);
  throw_if_canceled();
  // The kernel pipelines' programs attach once the events are open and before they are enabled:
  // they count every event the probes see. What start_kernel() throws fails engine->prepare(),
  // which closes the events; the programs go with `kernel`.
  bool kernel_failed = false;
  engine->before_enable([this, &kernel_failed] {
    try {
      // A command's counters open on its pid while it waits before its exec (which starts them).
      counters.open(opts.target, engine->command_pid());
      start_kernel();
    } catch (...) {
      counters.close();
      kernel.clear();
      kernel_failed = true;
      throw;
    }
  });
  try {
    engine->prepare();
    checked.reset();
  } catch (const Error& e) {
    checked.reset();
    closed = true;
    if (kernel_failed)  // the kernel pipelines' failure, already at its place
      throw;
    rethrow_at_probe(e, recipe);
  }
  engine->before_enable({});
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    const std::size_t said = diags.size();
    if (!counters.empty())
      pipelines[i]->set_counters(&counters);
    pipelines[i]->bind(engine->probes(), diags, {}, &engine->maps());
    diags.about_since(said, {.pipeline = i});
  }
  if (!diags.empty()) {
    close_after_failure();
    diags.throw_if_any();
  }
  if (cancel.load()) {
    close_after_failure();
    throw_if_canceled();
  }
  decide_in_place();
}

void Session::Impl::decide_in_place() {
  // Pipelines ordered only for their comm keys read comm from the delivered records instead,
  // with no time order, when every user-space pipeline then takes every probe in place (one
  // that needs records would get them rebuilt, without their comm).
  const auto user = [this](std::size_t i) { return i >= in_kernel.size() || !in_kernel[i]; };
  {
    bool any = false, all = true;
    const auto n = static_cast<std::uint32_t>(engine->probes().size());
    for (std::size_t i = 0; i < pipelines.size(); ++i) {
      if (!user(i))
        continue;
      Pipeline& p = *pipelines[i];
      if (p.comm_in_place_possible()) {
        any = true;
        continue;
      }
      for (std::uint32_t pi = 0; pi < n && all; ++pi)
        all = p.takes_in_place(pi);
    }
    if (any && all) {
      for (std::size_t i = 0; i < pipelines.size(); ++i) {
        if (user(i) && pipelines[i]->comm_in_place_possible())
          pipelines[i]->use_comm_in_place();
      }
    }
  }
  // In place: the probes every user-space pipeline takes so (none without such a pipeline).
  const auto probes = engine->probes();
  in_place_probes.assign(probes.size(), false);
  delivered_probes.assign(probes.size(), false);
  in_place_delivered = false;
  bool any_user = false, all_delivered = true;
  for (std::uint32_t p = 0; p < probes.size(); ++p) {
    bool takes = true;
    for (std::size_t i = 0; i < pipelines.size() && takes; ++i) {
      if (!user(i))
        continue;
      any_user = true;
      takes = pipelines[i]->takes_in_place(p);
    }
    in_place_probes[p] = takes && any_user;
    delivered_probes[p] = probes[p].delivered;
    if (probes[p].delivered && !in_place_probes[p])
      all_delivered = false;
  }
  in_place_delivered = any_user && all_delivered;
}

void Session::Impl::close_after_failure() {
  counters.close();
  engine->stop();
  kernel.clear();  // the in-kernel pipelines' events and programs too
  closed = true;
}

namespace {
/// What a start stopped before it was done ends with (async_start's handler gets it).
Error canceled_start() {
  return {ErrorCategory::kRuntime, std::make_error_code(std::errc::operation_canceled),
          "session: stopped while starting"};
}
}  // namespace

void Session::Impl::throw_if_canceled() const {
  if (cancel.load())
    throw canceled_start();
}

void Session::Impl::finish_start(Session* self) {
  try {
    engine->go();
    if (opts.target.kind != Target::Kind::kCommand)
      counters.enable();  // a command's start at its exec
  } catch (...) {
    close_after_failure();
    throw;
  }
  t0 = std::chrono::steady_clock::now();
  for (auto& p : pipelines)
    p->start(monotonic_now());
  in_place_ready.store(true, std::memory_order_release);
  live = true;
  if (opts.duration) {
    deadline.expires_after(*opts.duration);
    deadline.async_wait([self](const boost::system::error_code& ec) {
      if (!ec)
        self->stop();
    });
  }
  choose_tick();
  arm_tick();
}

void Session::start() {
  auto& s = *impl_;
  s.begin_start();
  try {
    s.prepare_start(this);
    s.finish_start(this);
  } catch (...) {
    s.stopped = s.stopped || s.closed;  // what failed closed the engine: nothing to stop
    throw;
  }
}

void Session::async_start(std::function<void(std::exception_ptr)> handler) {
  auto& s = *impl_;
  s.begin_start();
  s.starting = true;
  // Outstanding work on the executor until the completion runs: the host's run() does not
  // return while the start prepares.
  boost::asio::any_io_executor work =
      boost::asio::prefer(s.executor, boost::asio::execution::outstanding_work.tracked);
  s.worker =
      std::thread([this, &s, handler = std::move(handler), work = std::move(work)]() mutable {
        std::exception_ptr failure;
        try {
          s.prepare_start(this);
        } catch (...) {
          failure = std::current_exception();
        }
        // The rest on the executor: the engine's waits and timers, the stages' start, the ticks.
        boost::asio::post(
            work, [this, &s, failure, handler = std::move(handler), alive = s.alive]() mutable {
              if (!alive->load())
                return;  // the session is gone (its destructor joined this thread)
              if (s.worker.joinable())
                s.worker.join();
              s.starting = false;
              const bool canceled = s.cancel.load();
              if (!failure && canceled) {
                s.close_after_failure();
                failure = std::make_exception_ptr(canceled_start());
              }
              if (!failure) {
                try {
                  s.finish_start(this);
                } catch (...) {
                  failure = std::current_exception();
                }
              }
              s.stopped = s.stopped || s.closed;
              handler(failure);
              if (canceled) {  // stop() was called meanwhile: the session ended
                s.stopped = true;
                for (auto& h : s.done_handlers)
                  h();
                for (auto& waiter : std::exchange(s.stop_waiters, {}))
                  waiter(nullptr);  // async_stop's: the session is stopped
              }
            });
      });
}

}  // namespace tracer
