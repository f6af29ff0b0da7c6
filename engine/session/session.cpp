// Session: recipe -> engine options and pipelines -> a run with rounds, ticks, a duration and a
// drain at stop.
#include "tracer/session.hpp"

#include <fmt/format.h>

#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <ctime>

#include "tracer/error.hpp"
#include "tracer/stages.hpp"

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
void enable_task_records(EngineOptions& eo, bool full) {
  for (auto& p : eo.probes) {
    if (p.task_records || (!full && p.comm_records))
      return;
  }
  for (auto& p : eo.probes) {
    if (!p.counting) {
      (full ? p.task_records : p.comm_records) = true;
      return;
    }
  }
}

/// An engine error about one probe ("probe 'x': ...") at that probe's place in the recipe: its
/// filter's for a rejected filter, else its tracepoint/uprobe/... value's. A probe the system
/// lacks or refuses as written is a recipe error (exit 2); other failures keep their category.
[[noreturn]] void rethrow_at_probe(const Error& e, const Recipe& recipe) {
  const std::string_view what = e.what();
  for (const auto& p : recipe.probes) {
    // A glob's probes are "name:event".
    const std::string prefix = fmt::format("probe '{}", p.options.name);
    if (!what.starts_with(prefix + "':") && !what.starts_with(prefix + ":"))
      continue;
    const bool filter = !p.options.filter.empty() && what.find("filter") != std::string_view::npos;
    const SourceRegion& where = p.where_of(filter ? "filter" : to_string(p.options.kind));
    if (where.path.empty())
      break;
    const bool recipe_error =
        e.category() == ErrorCategory::kUsage || e.category() == ErrorCategory::kNotFound;
    throw Error(recipe_error ? ErrorCategory::kRecipe : e.category(), e.code(),
                fmt::format("{}:{}:{}: {}", where.path, where.line, where.column, what), e.hint(),
                where);
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
                                                      const std::string& perf_data) {
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
    if (json && (last == nullptr || !last->takes_tables())) {
      p->add(registry, "jsonl", ConfigValue{.value = ConfigTable{}, .where = rp.where}, diags);
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
      : recipe(std::move(r)), out(&o), opts(std::move(so)), deadline(ex), ticker(ex) {}

  Recipe recipe;
  Sink* out;
  SessionOptions opts;
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  // After the pipelines: destroyed first (an engine's destructor drains into them).
  std::unique_ptr<Engine> engine;
  asio::steady_timer deadline, ticker;
  std::vector<std::function<void()>> done_handlers, tick_handlers;
  std::function<void(std::size_t)> delivery;
  std::uint64_t delivered = 0;
  std::chrono::steady_clock::time_point t0{};
  double seconds = 0;
  bool started = false, stopped = false;
  bool live = false;  // the pipelines were bound and started: stop() has tables to emit

  void arm_tick() {
    ticker.expires_after(opts.tick);
    ticker.async_wait([this](const boost::system::error_code& ec) {
      if (ec || stopped)
        return;
      for (auto& p : pipelines)
        p->tick(monotonic_now());
      for (auto& h : tick_handlers)
        h();
      arm_tick();
    });
  }
};

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
  const bool stdout_taken = s.opts.perf_data == "-" || stage_takes_stdout(recipe);
  if (stdout_taken && s.opts.json) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "a perf.data stream and --json both write to stdout",
                "write the perf.data to a file, or leave out --json");
  }
  // Machine output on stdout: the traced command's own output must not mix into it.
  eo.target.stdout_to_stderr = eo.target.stdout_to_stderr || s.opts.json || stdout_taken;
  if (stages_need_task_records(recipe) || !s.opts.perf_data.empty())
    enable_task_records(eo, true);
  enable_task_records(eo, false);
  Diagnostics diags;
  s.pipelines = make_pipelines(recipe, out, s.opts.json, diags, s.opts.pipeline, s.opts.perf_data);
  diags.throw_if_any();
  s.engine = std::make_unique<Engine>(executor, std::move(eo));
  s.engine->on_batch([&s](const Batch& b) {
    if (s.delivery)
      s.delivery(b.records.size());
    s.delivered += b.records.size();
    for (auto& p : s.pipelines)
      p->on_batch(b);
  });
  // Rounds: the time-order merge releases there, perf-data sinks end a FINISHED_ROUND.
  s.engine->on_round([&s] {
    for (auto& p : s.pipelines)
      p->round();
  });
  s.engine->on_done([this] { stop(); });
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

std::vector<ProbeInfo> Session::check(std::vector<std::string>* notes) {
  auto& s = *impl_;
  Diagnostics diags;
  const auto& t = s.opts.target;
  s.recipe.check_system(diags,
                        t.kind == Target::Kind::kPid ? std::optional<pid_t>(t.pid) : std::nullopt);
  diags.throw_if_any();
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
  Diagnostics diags;
  const auto& t = s.opts.target;
  s.recipe.check_system(diags,
                        t.kind == Target::Kind::kPid ? std::optional<pid_t>(t.pid) : std::nullopt);
  diags.throw_if_any();
  try {
    s.engine->start();
  } catch (const Error& e) {
    rethrow_at_probe(e, s.recipe);
  }
  for (auto& p : s.pipelines)
    p->bind(s.engine->probes(), diags, {}, &s.engine->maps());
  if (!diags.empty()) {
    s.engine->stop();
    s.stopped = true;
    diags.throw_if_any();
  }
  s.t0 = std::chrono::steady_clock::now();
  for (auto& p : s.pipelines)
    p->start(monotonic_now());
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
  s.engine->stop();  // drains: the last batches reach the pipelines
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
  out.delivered = s.delivered;
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

std::exception_ptr Session::failure() const noexcept {
  return impl_->engine->failure();
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
