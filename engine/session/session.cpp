// Session: recipe -> engine options and pipelines -> a run with rounds, ticks, a duration and a
// drain at stop.
#include "tracer/session.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <ctime>
#include <map>

#include <unistd.h>

#include "tracer/error.hpp"
#include "tracer/kernel/placement.hpp"
#include "tracer/kernel/run.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/stages.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {
namespace {

namespace asio = boost::asio;

std::chrono::nanoseconds monotonic_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

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

/// An engine error about one probe ("probe 'x': ...") at that probe's place in the recipe: its
/// filter's for a rejected filter, else its tracepoint/uprobe/... value's. A probe the system
/// lacks or refuses as written is a recipe error (exit 2); other failures keep their category.
/// The place in the recipe of the probe an engine error names ("probe 'x': ..."), if any.
/// The recipe's probe an engine error names ("probe 'NAME': ..."; a glob's "probe 'NAME:event'").
const RecipeProbe* probe_of(const Error& e, const Recipe& recipe) {
  const std::string_view what = e.what();
  for (const auto& p : recipe.probes) {
    const std::string prefix = fmt::format("probe '{}", p.options.name);
    if (what.starts_with(prefix + "':") || what.starts_with(prefix + ":"))
      return &p;
  }
  return nullptr;
}

std::optional<SourceRegion> probe_place(const Error& e, const Recipe& recipe) {
  const std::string_view what = e.what();
  if (const RecipeProbe* found = probe_of(e, recipe)) {
    const auto& p = *found;
    const bool filter = !p.options.filter.empty() && what.find("filter") != std::string_view::npos;
    const SourceRegion& where = p.where_of(filter ? "filter" : to_string(p.options.kind));
    if (where.path.empty())
      return std::nullopt;
    return where;
  }
  return std::nullopt;
}

bool same_place(const SourceRegion& a, const SourceRegion& b) {
  return a.path == b.path && a.line == b.line && a.column == b.column;
}

[[noreturn]] void rethrow_at_probe(const Error& e, const Recipe& recipe) {
  if (const auto where = probe_place(e, recipe)) {
    const bool recipe_error =
        e.category() == ErrorCategory::kUsage || e.category() == ErrorCategory::kNotFound;
    throw Error(recipe_error ? ErrorCategory::kRecipe : e.category(), e.code(),
                fmt::format("{}:{}:{}: {}", where->path, where->line, where->column, e.what()),
                e.hint(), where);
  }
  throw e;
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
  for (const auto& rp : recipe.pipelines) {
    auto p = std::make_unique<Pipeline>(out, options(!json));
    for (const auto& st : rp.stages) {
      if (json && st.use == "print") {
        ConfigValue empty{.value = ConfigTable{}, .where = st.where};
        p->add(registry, "jsonl", empty, diags);
      } else {
        p->add(registry, st.use, st.options, diags);
      }
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

struct Session::Impl {
  Impl(const asio::any_io_executor& ex, Recipe r, Sink& o, SessionOptions so)
      : recipe(std::move(r)),
        out(&o),
        opts(std::move(so)),
        executor(ex),
        deadline(ex),
        ticker(ex) {}

  Recipe recipe;
  Sink* out;
  SessionOptions opts;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  // After the pipelines: destroyed first (an engine's destructor drains into them).
  std::unique_ptr<Engine> engine;
  EngineOptions engine_options;  // what engine was made with (placement may remake it)
  asio::any_io_executor executor;
  std::vector<kernel::PipelinePlace> places;
  std::vector<kernel::Run> kernel;   // before engine in destruction: programs detach with events
  std::vector<bool> in_kernel;       // per pipeline: placed in the kernel
  std::vector<bool> kernel_samples;  // per probe: a sampling event whose samples its program
                                     // aggregates (none reach its ring)
  asio::steady_timer deadline, ticker;
  std::vector<std::function<void()>> done_handlers, tick_handlers;
  std::vector<std::function<void(const TableUpdate&)>> table_handlers;
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
  bool live = false;  // the pipelines were bound and started: stop() has tables to emit

  void make_engine(Session* self) {
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
    engine->on_round([this] {
      for (auto& p : pipelines)
        p->round();
    });
    // Backpressure: a pipeline whose stages are behind holds the rings, so that its queue (and
    // what a stop must run through) stays bounded; the kernel counts what the rings drop.
    engine->hold_while([this] {
      return std::any_of(pipelines.begin(), pipelines.end(),
                         [](const auto& p) { return p->backlogged(); });
    });
    engine->on_done([self] { self->stop(); });
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

  void arm_tick() {
    ticker.expires_after(opts.tick);
    ticker.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped)
        return;
      const auto now = monotonic_now();
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
  if (!s.opts.duration)
    s.opts.duration = recipe.duration;
  EngineOptions eo = recipe.to_engine_options(s.opts.target);
  eo.verbose = s.opts.verbose;
  eo.deliver_tracepoints_via_bpf = s.opts.deliver_tracepoints_via_bpf;
  eo.trace_self = s.opts.trace_self;
  eo.channel = s.opts.channel ? s.opts.channel : recipe.channel;
  const bool stdout_taken = s.opts.perf_data == "-" || stage_takes_stdout(recipe);
  if (stdout_taken && s.opts.json) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "a perf.data stream and --json both write to stdout",
                "write the perf.data to a file, or leave out --json");
  }
  // Machine output on stdout: the traced command's own output must not mix into it.
  eo.target.stdout_to_stderr = eo.target.stdout_to_stderr || s.opts.json || stdout_taken;
  // Callchains are symbolized through the processes' maps: MMAP2 records keep them for the
  // processes that exit before their stacks are rendered.
  const bool callchains = std::any_of(eo.probes.begin(), eo.probes.end(), [](const auto& p) {
    return (p.extra_sample_type & PERF_SAMPLE_CALLCHAIN) != 0;
  });
  if (stages_need_task_records(recipe) || !s.opts.perf_data.empty() || callchains)
    enable_task_records(eo, true);
  enable_task_records(eo, false);
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
  try {
    stop();
  } catch (const std::exception& e) {  // a destructor does not throw; say what stop() met
    std::fprintf(stderr, "tracer: session: stopping at destruction: %s\n", e.what());
  } catch (...) {
    std::fputs("tracer: session: stopping at destruction failed\n", stderr);
  }
}

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
  throw Error(
      ErrorCategory::kRecipe, std::make_error_code(std::errc::not_supported),
      fmt::format("{}:{}:{}: pipeline {} stage {}: {}", where.path, where.line, where.column,
                  problem->pipeline + 1, problem->stage + 1, problem->message),
      problem->hint, where);
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
  if (mode != Placement::kKernel && (mode == Placement::kUser || !kernel_candidate(pipelines))) {
    // Nothing to resolve for placement: the reasons come from the stages' forms (or the mode).
    places = kernel::place(pipelines, {}, {}, mode, false);
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
      const auto& st = places[p].stages.front();
      SourceRegion where{.path = recipe.path};
      if (p < recipe.pipelines.size() && !recipe.pipelines[p].stages.empty())
        where = recipe.pipelines[p].stages.front().where;
      throw Error(ErrorCategory::kRecipe, std::make_error_code(std::errc::not_supported),
                  fmt::format("{}:{}:{}: placement = \"kernel\": pipeline {} cannot run in the "
                              "kernel: {}",
                              where.path, where.line, where.column, p + 1, st.why),
                  "use placement = \"auto\" to run it in user space", where);
    }
  }
  // Probes no user-space pipeline reads become counting events: their events go nowhere but
  // into the kernel programs (a perf.data output reads every probe).
  bool user_reads = !opts.perf_data.empty();
  bool any_kernel = false;
  for (const auto& pl : places) {
    user_reads = user_reads || !pl.plan;
    any_kernel = any_kernel || pl.plan.has_value();
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
      if (pl.plan->probes[k].kind == kernel::gen::ProbeKind::kPerfEvent) {
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
      const RecipeProbe* probe = probe_of(e, s.recipe);
      const bool said = std::any_of(diags.items().begin(), diags.items().end(), [&](const auto& d) {
        if (where && same_place(d.where, *where))
          return true;
        return probe != nullptr &&
               std::any_of(probe->value_where.begin(), probe->value_where.end(),
                           [&](const auto& kv) { return same_place(d.where, kv.second); });
      });
      if (!said)
        diags.add(where.value_or(SourceRegion{.path = s.recipe.path, .line = 1, .column = 1}),
                  e.what(), e.hint());
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
  for (auto& p : s.pipelines)
    p->bind(probes, diags, {}, &s.engine->maps());
  diags.throw_if_any();
  return probes;
}

void Session::start() {
  auto& s = *impl_;
  if (s.started) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "session: start() may be called once");
  }
  s.started = true;
  Diagnostics diags = s.opts.problems;
  const auto& t = s.opts.target;
  s.recipe.check_system(diags,
                        t.kind == Target::Kind::kPid ? std::optional<pid_t>(t.pid) : std::nullopt);
  diags.throw_if_any();
  s.plan_placement(this);
  // The kernel pipelines' programs attach once the events are open and before they are enabled:
  // they count every event the probes see. What start_kernel() throws fails engine->start(),
  // which closes the events; the programs go with s.kernel.
  s.engine->before_enable([&s] {
    try {
      s.start_kernel();
    } catch (...) {
      s.kernel.clear();
      s.stopped = true;
      throw;
    }
  });
  try {
    s.engine->start();
  } catch (const Error& e) {
    if (s.stopped)  // the kernel pipelines' failure, already at its place
      throw;
    rethrow_at_probe(e, s.recipe);
  }
  for (auto& p : s.pipelines)
    p->bind(s.engine->probes(), diags, {}, &s.engine->maps());
  if (!diags.empty()) {
    s.engine->stop();
    s.stopped = true;
    diags.throw_if_any();
  }
  // Pipelines ordered only for their comm keys read comm from the delivered records instead,
  // with no time order, when every user-space pipeline then takes every probe in place (one
  // that needs records would get them rebuilt, without their comm).
  {
    bool any = false, all = true;
    const auto n = static_cast<std::uint32_t>(s.engine->probes().size());
    for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
      if (i < s.in_kernel.size() && s.in_kernel[i])
        continue;
      Pipeline& p = *s.pipelines[i];
      if (p.comm_in_place_possible()) {
        any = true;
        continue;
      }
      for (std::uint32_t pi = 0; pi < n && all; ++pi)
        all = p.takes_in_place(pi);
    }
    if (any && all) {
      for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
        if ((i >= s.in_kernel.size() || !s.in_kernel[i]) &&
            s.pipelines[i]->comm_in_place_possible())
          s.pipelines[i]->use_comm_in_place();
      }
    }
  }
  // In place: the probes every user-space pipeline takes so (none without such a pipeline).
  const auto probes = s.engine->probes();
  s.in_place_probes.assign(probes.size(), false);
  s.delivered_probes.assign(probes.size(), false);
  s.in_place_delivered = false;
  bool any_user = false, all_delivered = true;
  for (std::uint32_t p = 0; p < probes.size(); ++p) {
    bool takes = true;
    for (std::size_t i = 0; i < s.pipelines.size() && takes; ++i) {
      if (i < s.in_kernel.size() && s.in_kernel[i])
        continue;
      any_user = true;
      takes = s.pipelines[i]->takes_in_place(p);
    }
    s.in_place_probes[p] = takes && any_user;
    s.delivered_probes[p] = probes[p].delivered;
    if (probes[p].delivered && !s.in_place_probes[p])
      all_delivered = false;
  }
  s.in_place_delivered = any_user && all_delivered;
  s.t0 = std::chrono::steady_clock::now();
  for (auto& p : s.pipelines)
    p->start(monotonic_now());
  s.in_place_ready.store(true, std::memory_order_release);
  s.live = true;
  if (s.opts.duration) {
    s.deadline.expires_after(*s.opts.duration);
    s.deadline.async_wait([this](const boost::system::error_code& ec) {
      if (!ec)
        stop();
    });
  }
  s.arm_tick();
}

void Session::stop() {
  auto& s = *impl_;
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
  s.engine->stop();             // drains: the last batches reach the pipelines
  for (auto& run : s.kernel) {  // the programs detach with their events
    run.events.clear();
    run.fork_event = {};
    run.exit_event = {};
    run.exec_event = {};
  }
  s.feed_counters(monotonic_now());        // the counters' last counts
  s.absorb_kernel(true, monotonic_now());  // what the kernel aggregated since the last read
  for (auto& p : s.pipelines)
    p->stop(monotonic_now());
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - s.t0).count();
  for (auto& h : s.done_handlers)
    h();
}

void Session::on_done(std::function<void()> handler) {
  impl_->done_handlers.push_back(std::move(handler));
}

void Session::on_delivery(std::function<void(std::size_t)> handler) {
  impl_->delivery = std::move(handler);
}

void Session::on_table(std::function<void(const TableUpdate&)> handler) {
  auto& s = *impl_;
  if (s.table_handlers.empty()) {
    for (std::size_t i = 0; i < s.pipelines.size(); ++i) {
      s.pipelines[i]->on_table([&s, i](std::size_t stage, const Table& table, bool final) {
        const TableUpdate update{.pipeline = i, .stage = stage, .table = table, .final = final};
        for (auto& h : s.table_handlers)
          h(update);
      });
    }
  }
  s.table_handlers.push_back(std::move(handler));
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
  return impl_->started && !impl_->stopped;
}

bool Session::target_exited() const noexcept {
  return impl_->engine->target_exited();
}

std::optional<int> Session::command_exit_code() const noexcept {
  return impl_->engine->command_exit_code();
}

std::exception_ptr Session::failure() const noexcept {
  return impl_->engine->failure();
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
