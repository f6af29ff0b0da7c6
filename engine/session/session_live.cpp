// Session::apply: a changed recipe while the session runs. Probes and pipelines are matched by
// name and definition; what is unchanged keeps its kernel objects and what it aggregated, what
// is gone is emitted (a pipeline's final tables) and closed, what is new opens.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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
          fmt::format("{}:{}:{}: {}", where.path, where.line, where.column, what), std::move(hint),
          where);
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

RecipeChanges Session::Impl::apply(const Recipe& next) {
  if (!live || stopped || starting) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "session: apply() changes a running session (after start(), before stop())");
  }
  // What a running session cannot change.
  const auto same_bpf = [](const std::optional<RecipeBpf>& a, const std::optional<RecipeBpf>& b) {
    if (a.has_value() != b.has_value())
      return false;
    return !a || (a->source == b->source && a->object == b->object && a->builtin == b->builtin &&
                  a->output == b->output && a->payload_struct == b->payload_struct &&
                  a->payload_time == b->payload_time);
  };
  if (!same_bpf(recipe.bpf, next.bpf)) {
    throw live_error(next, next.bpf ? next.bpf->where : SourceRegion{},
                     "[bpf] cannot change while tracer runs (its programs and maps are loaded)",
                     kRestart);
  }
  const auto recipe_key = [&](const char* key) {
    const auto it = next.value_where.find(key);
    return it != next.value_where.end() ? it->second : SourceRegion{};
  };
  if (next.placement != recipe.placement && !opts.placement)
    throw live_error(next, recipe_key("placement"), "placement cannot change while tracer runs",
                     kRestart);
  if (next.channel != recipe.channel && !opts.channel)
    throw live_error(next, recipe_key("channel"), "channel cannot change while tracer runs",
                     kRestart);
  if (next.max_targets != recipe.max_targets)
    throw live_error(next, recipe_key("max_targets"), "max_targets cannot change while tracer runs",
                     kRestart);
  // [[counter]] groups count from the start (their totals are the run's): they stay as they are.
  const auto same_counter = [](const RecipeCounter& a, const RecipeCounter& b) {
    const auto same_metrics = std::equal(
        a.metrics.begin(), a.metrics.end(), b.metrics.begin(), b.metrics.end(),
        [](const auto& x, const auto& y) { return x.name == y.name && x.expr == y.expr; });
    return a.name == b.name && a.events == b.events && a.every == b.every && a.pinned == b.pinned &&
           a.exclusive == b.exclusive && a.weak == b.weak && a.per_cpu == b.per_cpu &&
           a.exclude == b.exclude && same_metrics;
  };
  for (std::size_t i = 0; i < std::max(recipe.counters.size(), next.counters.size()); ++i) {
    if (i < recipe.counters.size() && i < next.counters.size() &&
        same_counter(recipe.counters[i], next.counters[i]))
      continue;
    throw live_error(next, i < next.counters.size() ? next.counters[i].where : SourceRegion{},
                     "[[counter]] groups cannot change while tracer runs (their counts are the "
                     "run's since its start)",
                     kRestart);
  }

  RecipeChanges changes;
  const std::vector<ProbeInfo> before(engine->probes().begin(), engine->probes().end());
  const std::size_t n_before = before.size();
  // By engine index from here on (the BPF output channel's probe has no options of its own).
  engine_options.probes.resize(std::max(engine_options.probes.size(), n_before));
  base_probes.resize(std::max(base_probes.size(), n_before));

  // Probes: the engine's that came from the recipe (base_probes, by index), against the next
  // recipe's, by name and definition.
  EngineOptions next_eo = engine_options_for(next, opts);
  std::vector<bool> keep(n_before, true);  // false: removed
  std::vector<ProbeOptions> added;
  std::vector<bool> matched(next_eo.probes.size(), false);
  for (std::size_t k = 0; k < n_before; ++k) {
    if (before[k].removed || !base_probes[k])
      continue;  // removed, or not the recipe's (a side-band event, the BPF output channel)
    const auto it = std::find_if(next_eo.probes.begin(), next_eo.probes.end(),
                                 [&](const ProbeOptions& o) { return o.name == before[k].name; });
    if (it != next_eo.probes.end() && definition(*it).same_probe(definition(*base_probes[k]))) {
      matched[static_cast<std::size_t>(it - next_eo.probes.begin())] = true;
      base_probes[k]->origin = it->origin;  // errors point at the next recipe's place
      continue;
    }
    keep[k] = false;
    changes.probes_removed.push_back(before[k].name);
  }
  for (std::size_t i = 0; i < next_eo.probes.size(); ++i) {
    if (matched[i])
      continue;
    ProbeOptions o = definition(next_eo.probes[i]);
    changes.probes_added.push_back(o.name);
    added.push_back(std::move(o));
  }
  changes.probes_kept = next_eo.probes.size() - added.size();
  // The carrier of the task records (COMM, FORK, MMAP2...) goes: the first new sampling probe
  // carries them on, else a side-band event of their own.
  for (std::size_t k = 0; k < n_before; ++k) {
    const auto& eo = engine_options.probes.size() > k ? engine_options.probes[k] : ProbeOptions{};
    if (keep[k] || before[k].removed || !(eo.task_records || eo.comm_records))
      continue;
    auto carrier =
        std::find_if(added.begin(), added.end(), [](const ProbeOptions& o) { return !o.counting; });
    if (carrier == added.end()) {
      ProbeOptions side;
      side.name = "sideband";
      for (int i = 2;
           std::any_of(before.begin(), before.end(),
                       [&](const ProbeInfo& p) { return !p.removed && p.name == side.name; });
           ++i)
        side.name = fmt::format("sideband{}", i);
      side.kind = ProbeKind::kSoftware;
      side.spec = "dummy";
      side.ring_pages = 128;
      added.push_back(std::move(side));
      carrier = added.end() - 1;
    }
    carrier->task_records = eo.task_records;
    carrier->comm_records = eo.comm_records;
    carrier->data_mappings = eo.data_mappings;
  }
  const bool probes_change = !added.empty() || !changes.probes_removed.empty();
  if (probes_change && !opts.perf_data.empty()) {
    throw live_error(next, {},
                     "the probes cannot change while a perf.data file is written "
                     "(its header lists them)",
                     kRestart);
  }

  // Pipelines, by name and stages. make_pipelines() adds the implicit ones the same way each
  // time: they match by position among the added ones.
  Diagnostics diags;
  auto made =
      make_pipelines(next, *out, opts.json, diags, opts.pipeline, opts.perf_data, opts.stacks);
  diags.throw_if_any();
  std::vector<std::optional<std::size_t>> from_old(made.size());  // next index -> old index
  std::vector<bool> old_used(pipelines.size(), false);
  for (std::size_t i = 0; i < made.size(); ++i) {
    for (std::size_t j = 0; j < pipelines.size(); ++j) {
      if (old_used[j])
        continue;
      const bool both_recipe = i < next.pipelines.size() && j < recipe.pipelines.size();
      const bool both_implicit = i >= next.pipelines.size() && j >= recipe.pipelines.size();
      if ((both_recipe && same_pipeline(next.pipelines[i], recipe.pipelines[j])) ||
          (both_implicit && i - next.pipelines.size() == j - recipe.pipelines.size())) {
        from_old[i] = j;
        old_used[j] = true;
        break;
      }
    }
  }
  // Kept pipelines the changed probes reach: one in user space binds again (its stages must
  // allow it); one in the kernel takes the new probes in programs of their own, unless it pairs
  // probes (latency) or cannot run them there: then it restarts.
  const bool task_target = engine_options.target.kind != Target::Kind::kAllCpus &&
                           engine_options.target.kind != Target::Kind::kCgroup;
  std::vector<bool> restart(pipelines.size(), false);
  std::vector<std::string> restart_why(pipelines.size());
  for (std::size_t i = 0; i < made.size(); ++i) {
    if (!from_old[i] || !probes_change)
      continue;
    const std::size_t j = *from_old[i];
    const bool kernel_side = j < places.size() && places[j].plan.has_value();
    if (kernel_side) {
      if (places[j].latency) {
        restart[j] = true;
        restart_why[j] = "its programs pair probes (latency)";
      } else if (task_target && !added.empty()) {
        restart[j] = true;
        restart_why[j] = "a pid or command target's new probes run in user space";
      }
      continue;
    }
    if (!pipelines[j]->rebinds()) {
      const SourceRegion where =
          i < next.pipelines.size() ? next.pipelines[i].where : SourceRegion{};
      throw live_error(next, where,
                       fmt::format("pipeline '{}' cannot take changed probes while it runs (a "
                                   "perf-data output or a plugin stage fixed them at its start)",
                                   pipeline_name(next, i)),
                       kRestart);
    }
  }

  // 1. The new probes open (nothing has changed before this: a failure leaves the session as
  // it was).
  std::vector<std::uint32_t> added_index;
  if (!added.empty()) {
    try {
      added_index = engine->add_probes(added);
    } catch (const Error& e) {
      rethrow_at_probe(e, next);
    }
  }
  // The probes as the placement saw them at the start: one the placement made counting (only
  // the kernel read it) does not count to the stages.
  const std::vector<ProbeInfo> now_probes(engine->probes().begin(), engine->probes().end());
  std::vector<ProbeInfo> place_probes = now_probes;
  for (std::size_t p = 0; p < n_before; ++p) {
    if (base_probes[p] && !base_probes[p]->counting)
      place_probes[p].counts_to_stages = false;
  }
  std::vector<bool> sampling(now_probes.size(), false);
  std::vector<std::string> filters(now_probes.size());
  for (std::size_t p = 0; p < now_probes.size(); ++p) {
    // As the recipe wrote it: a probe the placement made counting still delivers its events to
    // the kernel's programs.
    const ProbeOptions& o =
        p < n_before ? base_probes[p].value_or(engine_options.probes[p]) : added[p - n_before];
    sampling[p] = !o.counting && !now_probes[p].removed && (p >= n_before || keep[p]) &&
                  now_probes[p].kind != ProbeKind::kBpfOutput;
    filters[p] = o.filter;
  }
  std::vector<kernel::Run> new_runs;                   // of kept pipelines (old indexes)
  std::vector<kernel::Run> fresh_runs;                 // of added and restarted ones (next indexes)
  std::vector<std::unique_ptr<Pipeline>> fresh_pipes;  // added or restarted, bound, not fresh_pipes
  std::vector<kernel::PipelinePlace> started_places;
  const auto roll_back = [&] {
    new_runs.clear();
    fresh_runs.clear();
    for (auto p : added_index)
      engine->remove_probe(p);
  };
  try {
    // 2. Kept kernel pipelines: programs for the added probes, beside the ones they have.
    std::vector<bool> only_added(now_probes.size(), false);
    for (auto p : added_index)
      only_added[p] = sampling[p];
    if (std::find(only_added.begin(), only_added.end(), true) != only_added.end()) {
      for (std::size_t j = 0; j < pipelines.size(); ++j) {
        if (!old_used[j] || restart[j] || j >= places.size() || !places[j].plan)
          continue;
        // place() reads the pipeline's stages only: a span of the one pipeline.
        auto place = kernel::place(std::span(&pipelines[j], 1), place_probes, only_added,
                                   Placement::kKernel, task_target, filters);
        if (!place.front().plan) {  // the new probes cannot run in its programs
          restart[j] = true;
          for (const auto& st : place.front().stages) {
            if (!st.kernel && !st.why.empty()) {
              restart_why[j] = st.why;
              break;
            }
          }
          continue;
        }
        for (auto& pp : place.front().plan->probes)
          pp.keep_samples = true;  // user space may read a sampling event's samples too
        std::vector<kernel::PipelinePlace> at(j + 1);
        at[j] = std::move(place.front());
        auto runs = kernel::start_runs(*engine, at, engine_options.target,
                                       engine_options.trace_self, recipe.max_targets);
        for (auto& r : runs)
          new_runs.push_back(std::move(r));
      }
    }
    // 3. Added pipelines, and the restarted ones anew: placed, their programs fresh_pipes, bound.
    std::vector<std::size_t> fresh;  // next indexes
    for (std::size_t i = 0; i < made.size(); ++i) {
      if (!from_old[i] || restart[*from_old[i]])
        fresh.push_back(i);
    }
    if (!fresh.empty()) {
      for (auto i : fresh)
        fresh_pipes.push_back(std::move(made[i]));
      const Placement mode =
          task_target ? Placement::kUser : opts.placement.value_or(next.placement);
      started_places =
          kernel::place(fresh_pipes, place_probes, sampling, mode, task_target, filters);
      for (std::size_t k = 0; k < fresh_pipes.size(); ++k) {
        if (started_places[k].plan)
          continue;
        // In user space it reads every probe's events: a probe only the kernel read so far
        // has none for it.
        for (std::size_t p = 0; p < now_probes.size() && p < engine_options.probes.size(); ++p) {
          const bool converted = keep[p] && !now_probes[p].removed &&
                                 ((engine_options.probes[p].counting && p < base_probes.size() &&
                                   base_probes[p] && !base_probes[p]->counting) ||
                                  (p < kernel_samples.size() && kernel_samples[p]));
          if (converted) {
            const std::size_t i = fresh[k];
            throw live_error(next,
                             i < next.pipelines.size() ? next.pipelines[i].where : SourceRegion{},
                             fmt::format("pipeline '{}' runs in user space and would read probe "
                                         "'{}', whose events only the kernel reads since the "
                                         "start",
                                         pipeline_name(next, i), now_probes[p].name),
                             kRestart);
          }
        }
      }
      std::vector<kernel::PipelinePlace> at;
      for (auto& pl : started_places)
        at.push_back(pl);
      for (auto& pl : at) {
        if (pl.plan) {
          for (auto& pp : pl.plan->probes)
            pp.keep_samples = true;
        }
      }
      for (auto& r : kernel::start_runs(*engine, at, engine_options.target,
                                        engine_options.trace_self, recipe.max_targets)) {
        r.pipeline = fresh[r.pipeline];  // a next index
        fresh_runs.push_back(std::move(r));
      }
      Diagnostics bind_diags;
      for (std::size_t k = 0; k < fresh_pipes.size(); ++k) {
        const std::size_t said = bind_diags.size();
        if (!counters.empty())
          fresh_pipes[k]->set_counters(&counters);
        fresh_pipes[k]->bind(now_probes, bind_diags, {}, &engine->maps());
        bind_diags.about_since(said, {.pipeline = fresh[k]});
      }
      bind_diags.throw_if_any();
    }
    // 4. Kept user-space pipelines see the probes as they are now.
    if (probes_change) {
      Diagnostics bind_diags;
      for (std::size_t j = 0; j < pipelines.size(); ++j) {
        if (old_used[j] && !restart[j] && (j >= places.size() || !places[j].plan))
          pipelines[j]->rebind(now_probes, bind_diags, &engine->maps());
      }
      bind_diags.throw_if_any();
    }
  } catch (const Error& e) {
    roll_back();
    rethrow_at_probe(e, next);
  } catch (...) {
    roll_back();
    throw;
  }

  // 5. Removed probes close (their last records reach the pipelines first); kernel programs
  // that served only them go with their maps, once read.
  for (std::size_t k = 0; k < n_before; ++k) {
    if (keep[k] || before[k].removed)
      continue;
    engine->remove_probe(static_cast<std::uint32_t>(k));
  }
  const auto removed_now = engine->probes();
  const auto now = monotonic_now();
  // 6. Pipelines that go (removed or restarted): what the kernel holds for them, their final
  // tables, their end.
  std::vector<std::size_t> ending;
  for (std::size_t j = 0; j < pipelines.size(); ++j) {
    if (!old_used[j] || restart[j])
      ending.push_back(j);
  }
  {
    std::vector<kernel::Run> theirs, others;
    for (auto& r : kernel) {
      const bool ends = std::find(ending.begin(), ending.end(), r.pipeline) != ending.end();
      bool serving = true;
      if (!ends) {
        for (std::size_t k = 0; k < n_before; ++k) {
          if (!keep[k] && !before[k].removed)
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
    engine->drain_now();
    kernel::absorb_runs(theirs, pipelines, *engine, true, now);
    kernel = std::move(others);
  }
  for (auto j : ending) {
    try {
      pipelines[j]->stop(now);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tracer: pipeline '%s' at its removal: %s\n",
                   pipeline_name(recipe, j).c_str(), e.what());
    }
    if (restart[j])
      changes.pipelines_restarted.push_back(
          fmt::format("{} ({})", pipeline_name(recipe, j), restart_why[j]));
    else
      changes.pipelines_removed.push_back(pipeline_name(recipe, j));
  }

  // 7. The next recipe's pipelines, in its order: kept ones with their runs and places.
  std::vector<std::unique_ptr<Pipeline>> next_pipelines(made.size());
  std::vector<kernel::PipelinePlace> next_places(made.size());
  std::vector<std::size_t> old_to_next(pipelines.size(), SIZE_MAX);
  std::size_t fresh_k = 0;
  for (std::size_t i = 0; i < made.size(); ++i) {
    if (from_old[i] && !restart[*from_old[i]]) {
      const std::size_t j = *from_old[i];
      next_pipelines[i] = std::move(pipelines[j]);
      if (j < places.size())
        next_places[i] = std::move(places[j]);
      old_to_next[j] = i;
      ++changes.pipelines_kept;
      continue;
    }
    next_pipelines[i] = std::move(fresh_pipes[fresh_k]);
    next_places[i] = std::move(started_places[fresh_k]);
    ++fresh_k;
    if (!from_old[i])
      changes.pipelines_added.push_back(pipeline_name(next, i));
  }
  for (auto& r : kernel)
    r.pipeline = old_to_next[r.pipeline];
  for (auto& r : new_runs) {
    r.pipeline = old_to_next[r.pipeline];
    kernel.push_back(std::move(r));
  }
  for (auto& r : fresh_runs)
    kernel.push_back(std::move(r));
  pipelines = std::move(next_pipelines);
  places = std::move(next_places);
  in_kernel.assign(pipelines.size(), false);
  for (std::size_t i = 0; i < places.size(); ++i)
    in_kernel[i] = places[i].plan.has_value();
  for (std::size_t k = 0; k < added.size(); ++k) {
    engine_options.probes.push_back(added[k]);
    const bool side = k >= changes.probes_added.size();  // the side-band event added above
    base_probes.push_back(side ? std::nullopt : std::optional<ProbeOptions>(added[k]));
  }
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    if (!from_old[i] || restart.size() <= *from_old[i] || restart[*from_old[i]])
      pipelines[i]->start(now);
  }
  recipe = next;
  hook_pipelines();
  decide_in_place();
  return changes;
}

RecipeChanges Session::apply(const Recipe& recipe) {
  return impl_->apply(recipe);
}

}  // namespace tracer
