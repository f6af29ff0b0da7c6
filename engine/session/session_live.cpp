// Session::apply: a changed recipe while the session runs. Probes and pipelines are matched by
// name and definition; what is unchanged keeps its kernel objects and what it aggregated, what
// is gone is emitted (a pipeline's final tables) and closed, what is new opens.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <iterator>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "session_impl.hpp"

namespace tracer {

using session_detail::engine_options_for;
using session_detail::monotonic_now;
using session_detail::rethrow_at_probe;

namespace {

bool same_config(const ConfigValue& a, const ConfigValue& b);

/// Tables compare by key, in any order; positions never count.
bool same_table(const ConfigTable& a, const ConfigTable& b) {
  if (a.size() != b.size())
    return false;
  for (const auto& [k, v] : a) {
    const auto it = std::find_if(b.begin(), b.end(), [&](const auto& kv) { return kv.first == k; });
    if (it == b.end() || !same_config(v, it->second))
      return false;
  }
  return true;
}

bool same_config(const ConfigValue& a, const ConfigValue& b) {
  if (a.value.index() != b.value.index())
    return false;
  if (const auto* t = std::get_if<ConfigTable>(&a.value))
    return same_table(*t, std::get<ConfigTable>(b.value));
  if (const auto* x = std::get_if<ConfigArray>(&a.value)) {
    const auto& y = std::get<ConfigArray>(b.value);
    return x->size() == y.size() &&
           std::equal(x->begin(), x->end(), y.begin(),
                      [](const ConfigValue& l, const ConfigValue& r) { return same_config(l, r); });
  }
  if (std::holds_alternative<ConfigDateTime>(a.value))
    return true;
  if (const auto* x = std::get_if<std::string>(&a.value))
    return *x == std::get<std::string>(b.value);
  if (const auto* x = std::get_if<std::int64_t>(&a.value))
    return *x == std::get<std::int64_t>(b.value);
  if (const auto* x = std::get_if<double>(&a.value))
    return *x == std::get<double>(b.value);
  return std::get<bool>(a.value) == std::get<bool>(b.value);
}

bool same_pipeline(const RecipePipeline& a, const RecipePipeline& b) {
  return a.name == b.name && a.stages.size() == b.stages.size() &&
         std::equal(a.stages.begin(), a.stages.end(), b.stages.begin(),
                    [](const RecipeStage& l, const RecipeStage& r) {
                      return l.use == r.use && same_config(l.options, r.options);
                    });
}

/// A pipeline of make_pipelines(): the recipe's i-th, or one it adds (the implicit print of a
/// recipe without stages, the perf-data output).
std::string pipeline_name(const Recipe& r, std::size_t i) {
  return i < r.pipelines.size() ? r.pipelines[i].name : fmt::format("(implicit {})", i);
}

/// The options a session sets itself (the carrier of task records): not part of a probe's
/// definition.
ProbeOptions definition(ProbeOptions o) {
  o.task_records = o.comm_records = o.data_mappings = false;
  return o;
}

Error live_error(const Recipe& r, SourceRegion where, std::string what, std::string hint) {
  if (where.path.empty())
    where.path = r.path;
  Error e(ErrorCategory::kRecipe, std::make_error_code(std::errc::operation_not_permitted),
          std::move(what), std::move(hint), where);
  return e;
}

constexpr const char* kRestart = "restart tracer with the changed recipe";

}  // namespace

bool RecipeChanges::empty() const noexcept {
  return probes_added.empty() && probes_removed.empty() && pipelines_added.empty() &&
         pipelines_removed.empty() && pipelines_restarted.empty();
}

std::string RecipeChanges::describe() const {
  if (empty())
    return "nothing changed";
  std::vector<std::string> parts;
  const auto list = [&](const char* what, const std::vector<std::string>& names) {
    if (!names.empty())
      parts.push_back(fmt::format("{} {}", what, fmt::join(names, ", ")));
  };
  list("probes added:", probes_added);
  list("probes removed:", probes_removed);
  list("pipelines added:", pipelines_added);
  list("pipelines removed:", pipelines_removed);
  list("pipelines restarted (their tables begin again):", pipelines_restarted);
  parts.push_back(fmt::format("kept: {} probe{}, {} pipeline{}", probes_kept,
                              probes_kept == 1 ? "" : "s", pipelines_kept,
                              pipelines_kept == 1 ? "" : "s"));
  return fmt::format("{}", fmt::join(parts, "; "));
}

namespace {

/// Session::Impl::apply, phase by phase. plan(), on the executor: what a running session cannot
/// change (refused first), the probes and pipelines matched, (1) the new probes open
/// (disabled), (2) kept kernel pipelines placed for them in programs of their own and (3) added
/// and restarted pipelines placed, their programs generated. compile(), anywhere (async_apply:
/// on a thread of the session's): the programs compiled. commit(), on the executor: (2, 3) the
/// programs started in the kernel, the fresh pipelines bound, (4) kept user-space pipelines bound
/// again; a failure up to there leaves the session as it was. Then the new probes are enabled,
/// (5) removed probes close, (6) ending pipelines give their final tables, (7) the next recipe's
/// pipelines take their places.
class LiveChange {
 public:
  LiveChange(Session::Impl& s, Recipe next) : s_(s), next_(std::move(next)) {}

  RecipeChanges run() {
    plan();
    compile();
    return commit();
  }

  void plan() {
    refuse_fixed_parts();
    before_.assign(s_.engine->probes().begin(), s_.engine->probes().end());
    // By engine index from here on (the BPF output channel's probe has no options of its own).
    s_.engine_options.probes.resize(std::max(s_.engine_options.probes.size(), before_.size()));
    s_.base_probes.resize(std::max(s_.base_probes.size(), before_.size()));
    match_probes();
    carry_task_records();
    probes_change_ = !added_.empty() || !changes_.probes_removed.empty();
    if (probes_change_ && !s_.opts.perf_data.empty()) {
      throw live_error(next_, {},
                       "the probes cannot change while a perf.data file is written "
                       "(its header lists them)",
                       kRestart);
    }
    match_pipelines();
    decide_restarts();
    open_added_probes();
    guarded([&] {
      place_kept_kernel_pipelines();
      place_fresh_pipelines();
      const auto gen = [&](std::span<const kernel::PipelinePlace> at) {
        auto progs = kernel::generate_runs(*s_.engine, at, s_.engine_options.target,
                                           s_.engine_options.trace_self, s_.recipe.max_targets);
        std::move(progs.begin(), progs.end(), std::back_inserter(programs_));
      };
      for (const auto& at : kept_places_)
        gen(at);
      gen(fresh_places_);
    });
  }

  /// The generated programs compiled (touches nothing of the session or the engine).
  void compile(const std::atomic<bool>* cancel = nullptr) {
    kernel::compile_runs(programs_, compiled_, cancel);
  }

  RecipeChanges commit() {
    guarded([&] {
      start_kept_kernel_runs();
      start_fresh_pipelines();
      rebind_kept_pipelines();
      s_.engine->enable_probes(added_index_);
    });
    close_removed_probes();
    end_pipelines();
    install_next();
    return std::move(changes_);
  }

 private:
  /// [bpf], placement, channel, max_targets and [[counter]] groups stay as they started.
  void refuse_fixed_parts() const {
    const Recipe& recipe = s_.recipe;
    const auto same_bpf = [](const std::optional<RecipeBpf>& a, const std::optional<RecipeBpf>& b) {
      if (a.has_value() != b.has_value())
        return false;
      return !a || (a->source == b->source && a->object == b->object && a->builtin == b->builtin &&
                    a->output == b->output && a->payload_struct == b->payload_struct &&
                    a->payload_time == b->payload_time);
    };
    if (!same_bpf(recipe.bpf, next_.bpf)) {
      throw live_error(next_, next_.bpf ? next_.bpf->where : SourceRegion{},
                       "[bpf] cannot change while tracer runs (its programs and maps are loaded)",
                       kRestart);
    }
    const auto recipe_key = [&](const char* key) {
      const auto it = next_.value_where.find(key);
      return it != next_.value_where.end() ? it->second : SourceRegion{};
    };
    if (next_.placement != recipe.placement && !s_.opts.placement)
      throw live_error(next_, recipe_key("placement"), "placement cannot change while tracer runs",
                       kRestart);
    if (next_.channel != recipe.channel && !s_.opts.channel)
      throw live_error(next_, recipe_key("channel"), "channel cannot change while tracer runs",
                       kRestart);
    if (next_.max_targets != recipe.max_targets)
      throw live_error(next_, recipe_key("max_targets"),
                       "max_targets cannot change while tracer runs", kRestart);
    // [[counter]] groups count from the start (their totals are the run's): they stay as they
    // are.
    const auto same_counter = [](const RecipeCounter& a, const RecipeCounter& b) {
      const auto same_metrics = std::equal(
          a.metrics.begin(), a.metrics.end(), b.metrics.begin(), b.metrics.end(),
          [](const auto& x, const auto& y) { return x.name == y.name && x.expr == y.expr; });
      return a.name == b.name && a.events == b.events && a.every == b.every &&
             a.pinned == b.pinned && a.exclusive == b.exclusive && a.weak == b.weak &&
             a.per_cpu == b.per_cpu && a.exclude == b.exclude && same_metrics;
    };
    for (std::size_t i = 0; i < std::max(recipe.counters.size(), next_.counters.size()); ++i) {
      if (i < recipe.counters.size() && i < next_.counters.size() &&
          same_counter(recipe.counters[i], next_.counters[i]))
        continue;
      throw live_error(next_, i < next_.counters.size() ? next_.counters[i].where : SourceRegion{},
                       "[[counter]] groups cannot change while tracer runs (their counts are the "
                       "run's since its start)",
                       kRestart);
    }
  }

  /// The engine's probes that came from the recipe (base_probes, by index) against the next
  /// recipe's, by name and definition: kept, removed, added.
  void match_probes() {
    const std::size_t n_before = before_.size();
    const EngineOptions next_eo = engine_options_for(next_, s_.opts);
    keep_.assign(n_before, true);
    std::vector<bool> matched(next_eo.probes.size(), false);
    for (std::size_t k = 0; k < n_before; ++k) {
      auto& base = s_.base_probes[k];
      if (before_[k].removed || !base)
        continue;  // removed, or not the recipe's (a side-band event, the BPF output channel)
      const auto it =
          std::find_if(next_eo.probes.begin(), next_eo.probes.end(),
                       [&](const ProbeOptions& o) { return o.name == before_[k].name; });
      if (it != next_eo.probes.end() && definition(*it).same_probe(definition(*base))) {
        matched[static_cast<std::size_t>(it - next_eo.probes.begin())] = true;
        base->origin = it->origin;  // errors point at the next recipe's place
        continue;
      }
      keep_[k] = false;
      changes_.probes_removed.push_back(before_[k].name);
    }
    for (std::size_t i = 0; i < next_eo.probes.size(); ++i) {
      if (matched[i])
        continue;
      ProbeOptions o = definition(next_eo.probes[i]);
      changes_.probes_added.push_back(o.name);
      added_.push_back(std::move(o));
    }
    changes_.probes_kept = next_eo.probes.size() - added_.size();
  }

  /// The carrier of the task records (COMM, FORK, MMAP2...) goes: the first new sampling probe
  /// carries them on, else a side-band event of their own.
  void carry_task_records() {
    for (std::size_t k = 0; k < before_.size(); ++k) {
      const auto& eo =
          s_.engine_options.probes.size() > k ? s_.engine_options.probes[k] : ProbeOptions{};
      if (keep_[k] || before_[k].removed || !(eo.task_records || eo.comm_records))
        continue;
      auto carrier = std::find_if(added_.begin(), added_.end(),
                                  [](const ProbeOptions& o) { return !o.counting; });
      if (carrier == added_.end()) {
        ProbeOptions side;
        side.name = "sideband";
        for (int i = 2;
             std::any_of(before_.begin(), before_.end(),
                         [&](const ProbeInfo& p) { return !p.removed && p.name == side.name; });
             ++i)
          side.name = fmt::format("sideband{}", i);
        side.kind = ProbeKind::kSoftware;
        side.spec = "dummy";
        side.ring_pages = 128;
        added_.push_back(std::move(side));
        carrier = added_.end() - 1;
      }
      carrier->task_records = eo.task_records;
      carrier->comm_records = eo.comm_records;
      carrier->data_mappings = eo.data_mappings;
    }
  }

  /// Pipelines, by name and stages. make_pipelines() adds the implicit ones the same way each
  /// time: they match by position among the added ones.
  void match_pipelines() {
    Diagnostics diags;
    made_ = make_pipelines(next_, *s_.out, s_.opts.json, diags, s_.opts.pipeline, s_.opts.perf_data,
                           s_.opts.stacks);
    diags.throw_if_any();
    from_old_.assign(made_.size(), std::nullopt);
    old_used_.assign(s_.pipelines.size(), false);
    for (std::size_t i = 0; i < made_.size(); ++i) {
      for (std::size_t j = 0; j < s_.pipelines.size(); ++j) {
        if (old_used_[j])
          continue;
        const bool both_recipe = i < next_.pipelines.size() && j < s_.recipe.pipelines.size();
        const bool both_implicit = i >= next_.pipelines.size() && j >= s_.recipe.pipelines.size();
        if ((both_recipe && same_pipeline(next_.pipelines[i], s_.recipe.pipelines[j])) ||
            (both_implicit && i - next_.pipelines.size() == j - s_.recipe.pipelines.size())) {
          from_old_[i] = j;
          old_used_[j] = true;
          break;
        }
      }
    }
  }

  /// Kept pipelines the changed probes reach: one in user space binds again (its stages must
  /// allow it); one in the kernel takes the new probes in programs of their own, unless it pairs
  /// probes (latency) or cannot run them there: then it restarts.
  void decide_restarts() {
    task_target_ = s_.engine_options.target.kind != Target::Kind::kAllCpus &&
                   s_.engine_options.target.kind != Target::Kind::kCgroup;
    restart_.assign(s_.pipelines.size(), false);
    restart_why_.assign(s_.pipelines.size(), {});
    for (std::size_t i = 0; i < made_.size(); ++i) {
      const auto& from = from_old_[i];
      if (!from || !probes_change_)
        continue;
      const std::size_t j = *from;
      const bool kernel_side = j < s_.places.size() && s_.places[j].plan.has_value();
      if (kernel_side) {
        if (s_.places[j].latency) {
          restart_[j] = true;
          restart_why_[j] = "its programs pair probes (latency)";
        } else if (task_target_ && !added_.empty()) {
          restart_[j] = true;
          restart_why_[j] = "a pid or command target's new probes run in user space";
        }
        continue;
      }
      if (!s_.pipelines[j]->rebinds()) {
        const SourceRegion where =
            i < next_.pipelines.size() ? next_.pipelines[i].where : SourceRegion{};
        throw live_error(next_, where,
                         fmt::format("pipeline '{}' cannot take changed probes while it runs (a "
                                     "perf-data output or a plugin stage fixed them at its start)",
                                     pipeline_name(next_, i)),
                         kRestart);
      }
    }
  }

  /// 1. The new probes open (nothing has changed before this: a failure leaves the session as
  /// it was); the probes as the placement sees them.
  void open_added_probes() {
    const std::size_t n_before = before_.size();
    if (!added_.empty()) {
      try {
        added_index_ = s_.engine->add_probes(added_, false);  // enabled by commit()
      } catch (const Error& e) {
        rethrow_at_probe(e, next_);
      }
    }
    // The probes as the placement saw them at the start: one the placement made counting (only
    // the kernel read it) does not count to the stages.
    now_probes_.assign(s_.engine->probes().begin(), s_.engine->probes().end());
    place_probes_ = now_probes_;
    for (std::size_t p = 0; p < n_before; ++p) {
      if (const auto& base = s_.base_probes[p]; base && !base->counting)
        place_probes_[p].counts_to_stages = false;
    }
    sampling_.assign(now_probes_.size(), false);
    filters_.assign(now_probes_.size(), {});
    for (std::size_t p = 0; p < now_probes_.size(); ++p) {
      // As the recipe wrote it: a probe the placement made counting still delivers its events
      // to the kernel's programs.
      const ProbeOptions& o = p < n_before ? s_.base_probes[p].value_or(s_.engine_options.probes[p])
                                           : added_[p - n_before];
      sampling_[p] = !o.counting && !now_probes_[p].removed && (p >= n_before || keep_[p]) &&
                     now_probes_[p].kind != ProbeKind::kBpfOutput;
      filters_[p] = o.filter;
    }
  }

  void roll_back() {
    new_runs_.clear();
    fresh_runs_.clear();
    for (auto p : std::exchange(added_index_, {}))
      s_.engine->remove_probe(p);
  }

  /// Runs `step`; on a failure takes back what the change opened and rethrows (an engine error
  /// about a probe at its place in the next recipe).
  template <typename Step>
  void guarded(const Step& step) {
    try {
      step();
    } catch (const Error& e) {
      roll_back();
      rethrow_at_probe(e, next_);
    } catch (...) {
      roll_back();
      throw;
    }
  }

  /// 2. Kept kernel pipelines: placed for the added probes, in programs beside the ones they
  /// have (kept_places_, by old index).
  void place_kept_kernel_pipelines() {
    std::vector<bool> only_added(now_probes_.size(), false);
    for (auto p : added_index_)
      only_added[p] = sampling_[p];
    if (std::find(only_added.begin(), only_added.end(), true) == only_added.end())
      return;
    for (std::size_t j = 0; j < s_.pipelines.size(); ++j) {
      if (!old_used_[j] || restart_[j] || j >= s_.places.size() || !s_.places[j].plan)
        continue;
      // place() reads the pipeline's stages only: a span of the one pipeline.
      auto place = kernel::place(std::span(&s_.pipelines[j], 1), place_probes_, only_added,
                                 Placement::kKernel, task_target_, filters_);
      auto& plan = place.front().plan;
      if (!plan) {  // the new probes cannot run in its programs
        restart_[j] = true;
        for (const auto& st : place.front().stages) {
          if (!st.kernel && !st.why.empty()) {
            restart_why_[j] = st.why;
            break;
          }
        }
        continue;
      }
      for (auto& pp : plan->probes)
        pp.keep_samples = true;  // user space may read a sampling event's samples too
      std::vector<kernel::PipelinePlace> at(j + 1);
      at[j] = std::move(place.front());
      kept_places_.push_back(std::move(at));
    }
  }

  /// 2. ... their programs started.
  void start_kept_kernel_runs() {
    for (const auto& at : kept_places_) {
      auto runs =
          kernel::start_runs(*s_.engine, at, s_.engine_options.target, s_.engine_options.trace_self,
                             s_.recipe.max_targets, &compiled_);
      for (auto& r : runs)
        new_runs_.push_back(std::move(r));
    }
  }

  /// 3. Added pipelines, and the restarted ones anew: placed (fresh_places_).
  void place_fresh_pipelines() {
    for (std::size_t i = 0; i < made_.size(); ++i) {
      if (const auto& from = from_old_[i]; !from || restart_[*from])
        fresh_.push_back(i);
    }
    if (fresh_.empty())
      return;
    for (auto i : fresh_)
      fresh_pipes_.push_back(std::move(made_[i]));
    const Placement mode =
        task_target_ ? Placement::kUser : s_.opts.placement.value_or(next_.placement);
    started_places_ =
        kernel::place(fresh_pipes_, place_probes_, sampling_, mode, task_target_, filters_);
    for (std::size_t k = 0; k < fresh_pipes_.size(); ++k) {
      if (!started_places_[k].plan)
        refuse_kernel_only_probes(fresh_[k]);
    }
    fresh_places_.assign(started_places_.begin(), started_places_.end());
    for (auto& pl : fresh_places_) {
      if (pl.plan) {
        for (auto& pp : pl.plan->probes)
          pp.keep_samples = true;
      }
    }
  }

  /// 3. ... their programs started, bound.
  void start_fresh_pipelines() {
    if (fresh_.empty())
      return;
    for (auto& r :
         kernel::start_runs(*s_.engine, fresh_places_, s_.engine_options.target,
                            s_.engine_options.trace_self, s_.recipe.max_targets, &compiled_)) {
      r.pipeline = fresh_[r.pipeline];  // a next index
      fresh_runs_.push_back(std::move(r));
    }
    Diagnostics bind_diags;
    for (std::size_t k = 0; k < fresh_pipes_.size(); ++k) {
      const std::size_t said = bind_diags.size();
      if (!s_.counters.empty())
        fresh_pipes_[k]->set_counters(&s_.counters);
      fresh_pipes_[k]->bind(now_probes_, bind_diags, {}, &s_.engine->maps());
      bind_diags.about_since(said, {.pipeline = fresh_[k]});
    }
    bind_diags.throw_if_any();
  }

  /// A fresh pipeline in user space reads every probe's events: a probe only the kernel read so
  /// far has none for it (the next recipe's pipeline `i`).
  void refuse_kernel_only_probes(std::size_t i) const {
    const auto& eo = s_.engine_options.probes;
    for (std::size_t p = 0; p < now_probes_.size() && p < eo.size() && p < keep_.size(); ++p) {
      bool base_samples = false;  // the recipe's probe samples (the placement made it count)
      if (p < s_.base_probes.size()) {
        if (const auto& base = s_.base_probes[p]; base)
          base_samples = !base->counting;
      }
      const bool converted = keep_[p] && !now_probes_[p].removed &&
                             ((eo[p].counting && base_samples) ||
                              (p < s_.kernel_samples.size() && s_.kernel_samples[p]));
      if (converted) {
        throw live_error(next_,
                         i < next_.pipelines.size() ? next_.pipelines[i].where : SourceRegion{},
                         fmt::format("pipeline '{}' runs in user space and would read probe "
                                     "'{}', whose events only the kernel reads since the start",
                                     pipeline_name(next_, i), now_probes_[p].name),
                         kRestart);
      }
    }
  }

  /// 4. Kept user-space pipelines see the probes as they are now.
  void rebind_kept_pipelines() {
    if (!probes_change_)
      return;
    Diagnostics bind_diags;
    for (std::size_t j = 0; j < s_.pipelines.size(); ++j) {
      if (old_used_[j] && !restart_[j] && (j >= s_.places.size() || !s_.places[j].plan))
        s_.pipelines[j]->rebind(now_probes_, bind_diags, &s_.engine->maps());
    }
    bind_diags.throw_if_any();
  }

  /// 5. Removed probes close (their last records reach the pipelines first).
  void close_removed_probes() {
    for (std::size_t k = 0; k < before_.size(); ++k) {
      if (keep_[k] || before_[k].removed)
        continue;
      s_.engine->remove_probe(static_cast<std::uint32_t>(k));
    }
    now_ = monotonic_now();
  }

  /// 6. Pipelines that go (removed or restarted): what the kernel holds for them, their final
  /// tables, their end. Kernel programs that served only removed probes go with their maps,
  /// once read.
  void end_pipelines() {
    const auto removed_now = s_.engine->probes();
    std::vector<std::size_t> ending;
    for (std::size_t j = 0; j < s_.pipelines.size(); ++j) {
      if (!old_used_[j] || restart_[j])
        ending.push_back(j);
    }
    std::vector<kernel::Run> theirs, others;
    for (auto& r : s_.kernel) {
      const bool ends = std::find(ending.begin(), ending.end(), r.pipeline) != ending.end();
      bool serving = true;
      if (!ends) {
        for (std::size_t k = 0; k < before_.size(); ++k) {
          if (!keep_[k] && !before_[k].removed)
            serving = kernel::drop_probe(r, static_cast<std::uint32_t>(k), removed_now) && serving;
        }
      }
      (ends || !serving ? theirs : others).push_back(std::move(r));
    }
    for (auto& r : theirs) {  // detach: they count nothing more
      r.events.clear();
      r.fork_event = {};
      r.free_event = {};
      r.exec_event = {};
    }
    // What the rings hold goes to the pipelines as they were (the ending ones too): a pipeline
    // that starts now gets no event from before its start, and one that restarts counts no
    // event twice (its old programs are detached: what they missed since is the restart's gap).
    s_.engine->drain_now();
    kernel::absorb_runs(theirs, s_.pipelines, *s_.engine, true, now_);
    s_.kernel = std::move(others);
    for (auto j : ending) {
      try {
        s_.pipelines[j]->stop(now_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tracer: pipeline '%s' at its removal: %s\n",
                     pipeline_name(s_.recipe, j).c_str(), e.what());
      }
      if (restart_[j])
        changes_.pipelines_restarted.push_back(
            fmt::format("{} ({})", pipeline_name(s_.recipe, j), restart_why_[j]));
      else
        changes_.pipelines_removed.push_back(pipeline_name(s_.recipe, j));
    }
  }

  /// 7. The next recipe's pipelines, in its order: kept ones with their runs and places.
  void install_next() {
    std::vector<std::unique_ptr<Pipeline>> next_pipelines(made_.size());
    std::vector<kernel::PipelinePlace> next_places(made_.size());
    std::vector<std::size_t> old_to_next(s_.pipelines.size(), SIZE_MAX);
    std::size_t fresh_k = 0;
    for (std::size_t i = 0; i < made_.size(); ++i) {
      if (const auto& from = from_old_[i]; from && !restart_[*from]) {
        const std::size_t j = *from;
        next_pipelines[i] = std::move(s_.pipelines[j]);
        if (j < s_.places.size())
          next_places[i] = std::move(s_.places[j]);
        old_to_next[j] = i;
        ++changes_.pipelines_kept;
        continue;
      }
      next_pipelines[i] = std::move(fresh_pipes_[fresh_k]);
      next_places[i] = std::move(started_places_[fresh_k]);
      ++fresh_k;
      if (!from_old_[i])
        changes_.pipelines_added.push_back(pipeline_name(next_, i));
    }
    for (auto& r : s_.kernel)
      r.pipeline = old_to_next[r.pipeline];
    for (auto& r : new_runs_) {
      r.pipeline = old_to_next[r.pipeline];
      s_.kernel.push_back(std::move(r));
    }
    for (auto& r : fresh_runs_)
      s_.kernel.push_back(std::move(r));
    s_.pipelines = std::move(next_pipelines);
    s_.places = std::move(next_places);
    s_.in_kernel.assign(s_.pipelines.size(), false);
    for (std::size_t i = 0; i < s_.places.size(); ++i)
      s_.in_kernel[i] = s_.places[i].plan.has_value();
    for (std::size_t k = 0; k < added_.size(); ++k) {
      s_.engine_options.probes.push_back(added_[k]);
      const bool side = k >= changes_.probes_added.size();  // the side-band event added above
      s_.base_probes.push_back(side ? std::nullopt : std::optional<ProbeOptions>(added_[k]));
    }
    for (std::size_t i = 0; i < s_.pipelines.size(); ++i) {
      const auto& from = from_old_[i];
      if (!from || restart_.size() <= *from || restart_[*from])
        s_.pipelines[i]->start(now_);
    }
    s_.recipe = next_;
    s_.hook_pipelines();
    s_.decide_in_place();
  }

  Session::Impl& s_;
  const Recipe next_;
  RecipeChanges changes_;
  std::vector<ProbeInfo> before_;    // the engine's probes before the change
  std::vector<bool> keep_;           // by engine index: false when removed
  std::vector<ProbeOptions> added_;  // the added probes (and a side-band event's)
  bool probes_change_ = false;
  std::vector<std::unique_ptr<Pipeline>> made_;       // the next recipe's pipelines, made
  std::vector<std::optional<std::size_t>> from_old_;  // next index -> old index
  std::vector<bool> old_used_;                        // by old index
  bool task_target_ = false;
  std::vector<bool> restart_;  // by old index
  std::vector<std::string> restart_why_;
  std::vector<std::uint32_t> added_index_;  // engine indexes of added_
  std::vector<ProbeInfo> now_probes_, place_probes_;
  std::vector<bool> sampling_;
  std::vector<std::string> filters_;
  std::vector<kernel::Run> new_runs_;                   // of kept pipelines (old indexes)
  std::vector<kernel::Run> fresh_runs_;                 // of added and restarted ones (next)
  std::vector<std::size_t> fresh_;                      // next indexes of fresh_pipes_
  std::vector<std::unique_ptr<Pipeline>> fresh_pipes_;  // added or restarted, bound
  std::vector<kernel::PipelinePlace> started_places_;   // fresh_pipes_' places
  std::vector<std::vector<kernel::PipelinePlace>> kept_places_;  // kept ones' extensions
  std::vector<kernel::PipelinePlace> fresh_places_;              // started_places_, keeping samples
  std::vector<kernel::gen::GeneratedProgram> programs_;  // generated by plan(), for compile()
  kernel::CompiledPrograms compiled_;                    // compile()'s, taken by commit()
  std::chrono::nanoseconds now_{};
};

}  // namespace

void Session::Impl::refuse_apply() const {
  if (!live || stopped || starting) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "session: apply() changes a running session (after start(), before stop())");
  }
  if (applying) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_in_progress),
                "session: a change is under way (async_apply): apply the next one from its "
                "handler");
  }
}

RecipeChanges Session::Impl::apply(const Recipe& next) {
  refuse_apply();
  return LiveChange(*this, next).run();
}

RecipeChanges Session::apply(const Recipe& recipe) {
  return impl_->apply(recipe);
}

void Session::async_apply(const Recipe& recipe,
                          std::function<void(std::exception_ptr, RecipeChanges)> handler) {
  auto& s = *impl_;
  boost::asio::any_io_executor work =
      boost::asio::prefer(s.executor, boost::asio::execution::outstanding_work.tracked);
  std::shared_ptr<LiveChange> change;
  try {
    s.refuse_apply();
    change = std::make_shared<LiveChange>(s, recipe);
    change->plan();
  } catch (...) {  // (a completion never runs inside its initiation)
    boost::asio::post(
        work, [handler = std::move(handler), failure = std::current_exception(), alive = s.alive] {
          if (alive->load())
            handler(failure, {});
        });
    return;
  }
  s.applying = true;
  s.worker = std::thread([&s, change, handler = std::move(handler),
                          work = std::move(work)]() mutable {
    change->compile(&s.cancel);
    boost::asio::post(work, [&s, change = std::move(change), handler = std::move(handler),
                             alive = s.alive]() mutable {
      if (!alive->load())
        return;  // the session is gone (its destructor joined this thread)
      if (s.worker.joinable())
        s.worker.join();
      s.applying = false;
      if (s.stopped) {  // a stop meanwhile closed everything, the change's probes too
        handler(std::make_exception_ptr(Error(ErrorCategory::kRuntime,
                                              std::make_error_code(std::errc::operation_canceled),
                                              "session: stopped while a change was being applied")),
                {});
        return;
      }
      RecipeChanges changes;
      std::exception_ptr failure;
      try {
        changes = change->commit();
      } catch (...) {
        failure = std::current_exception();
      }
      handler(failure, std::move(changes));
    });
  });
}

}  // namespace tracer
