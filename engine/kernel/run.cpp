#include "tracer/kernel/run.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "tracer/error.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/syscall_names.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::kernel {

namespace {

/// What every program of a start is generated for: the target's processes and the fork, free
/// and exec tracepoints that follow them.
struct Targets {
  std::vector<std::uint32_t> tgids;
  std::optional<gen::ForkTracepoint> fork;
  std::uint32_t fork_id = 0, exec_id = 0, free_id = 0;
};

Targets targets_of(Engine& engine, const Target& target) {
  Targets t;
  // The processes the programs count: the pid or the command (and their children, as the
  // engine's inherited events follow them).
  if (target.kind == Target::Kind::kPid)
    t.tgids.push_back(static_cast<std::uint32_t>(target.pid));
  else if (target.kind == Target::Kind::kCommand)
    t.tgids.push_back(static_cast<std::uint32_t>(engine.command_pid()));
  if (t.tgids.empty())
    return t;
  auto fs = tracefs::Tracefs::open();
  auto format = fs ? fs->format({.system = "sched", .event = "sched_process_fork"})
                   : Result<tracefs::Format>(std::unexpected(fs.error()));
  const tracefs::Field* child = format ? format->field("child_pid") : nullptr;
  if (child == nullptr) {
    throw Error(ErrorCategory::kRuntime, std::make_error_code(std::errc::not_supported),
                "in-kernel placement: sched:sched_process_fork has no child_pid field",
                "run with placement = \"user\"");
  }
  t.fork = gen::ForkTracepoint{.child_pid_offset = child->offset, .child_pid_size = child->size};
  t.fork_id = format->id;
  auto free = fs->format({.system = "sched", .event = "sched_process_free"});
  const tracefs::Field* freed = free ? free->field("pid") : nullptr;
  if (freed == nullptr) {
    throw Error(ErrorCategory::kRuntime, std::make_error_code(std::errc::not_supported),
                "in-kernel placement: sched:sched_process_free has no pid field" +
                    (free ? std::string() : ": " + free.error().message),
                "run with placement = \"user\"");
  }
  t.fork->free_pid_offset = freed->offset;
  t.fork->free_pid_size = freed->size;
  t.free_id = free->id;
  auto exec = fs->format({.system = "sched", .event = "sched_process_exec"});
  if (!exec) {
    throw Error(ErrorCategory::kRuntime, exec.error().code,
                "in-kernel placement: " + exec.error().message, "run with placement = \"user\"");
  }
  t.exec_id = exec->id;
  return t;
}

/// `plan` made ready for generation: its targets, the processes it leaves out, the probe that
/// arms a command.
void configure(gen::KernelPlan& plan,
               const PipelinePlace& place,
               Engine& engine,
               const Targets& t,
               const Target& target,
               bool trace_self,
               std::uint32_t max_targets) {
  plan.tgids = t.tgids;
  plan.max_tgids = max_targets;
  if (target.kind == Target::Kind::kAllCpus && !trace_self)
    plan.exclude_tgid = static_cast<std::uint32_t>(::getpid());
  plan.follow_children = t.fork;
  plan.arm_on_exec = target.kind == Target::Kind::kCommand;
  for (std::size_t i = 0; i < plan.probes.size(); ++i) {
    const perf::EventAttr& attr = engine.probes()[place.probes[i]].attr;
    plan.probes[i].arms_command =
        plan.arm_on_exec && attr.type() == PERF_TYPE_TRACEPOINT && attr.config() == t.exec_id;
  }
}

}  // namespace

std::vector<gen::GeneratedProgram> generate_runs(Engine& engine,
                                                 std::span<const PipelinePlace> places,
                                                 const Target& target,
                                                 bool trace_self,
                                                 std::uint32_t max_targets) {
  std::vector<gen::GeneratedProgram> out;
  if (std::none_of(places.begin(), places.end(), [](const auto& p) { return p.plan.has_value(); }))
    return out;
  const Targets t = targets_of(engine, target);
  for (const auto& place : places) {
    if (!place.plan)
      continue;
    gen::KernelPlan plan = *place.plan;
    configure(plan, place, engine, t, target, trace_self, max_targets);
    if (auto prog = gen::generate(plan))
      out.push_back(std::move(*prog));
  }
  return out;
}

void compile_runs(std::span<const gen::GeneratedProgram> programs,
                  CompiledPrograms& into,
                  const std::atomic<bool>* cancel) {
  for (const auto& prog : programs) {
    if (cancel != nullptr && cancel->load())
      return;
    if (!into.contains(prog.hash))
      into.emplace(prog.hash, gen::compile(prog));
  }
}

std::vector<Run> start_runs(Engine& engine,
                            std::span<const PipelinePlace> places,
                            const Target& target,
                            bool trace_self,
                            std::uint32_t max_targets,
                            CompiledPrograms* compiled) {
  std::vector<Run> runs;
  const Targets t = targets_of(engine, target);
  const auto& tgids = t.tgids;
  const auto& fork = t.fork;
  const std::uint32_t fork_id = t.fork_id, exec_id = t.exec_id, free_id = t.free_id;
  for (std::size_t p = 0; p < places.size(); ++p) {
    if (!places[p].plan)
      continue;
    Run run;
    run.pipeline = p;
    run.place = places[p];
    if (!run.place.plan)
      continue;
    auto& plan = *run.place.plan;
    configure(plan, run.place, engine, t, target, trace_self, max_targets);
    auto fail = [&](const Failure& f, std::string_view what) {
      throw Error(ErrorCategory::kRuntime, f.code,
                  fmt::format("pipeline {} in the kernel: {}: {}", p + 1, what, f.message),
                  f.hint.empty() ? "run it in user space: placement = \"user\"" : f.hint);
    };
    auto prog = gen::generate(plan);
    if (!prog)
      fail(prog.error(), "generating its program");
    auto obj = [&]() -> Result<bpf::Object> {
      if (compiled != nullptr) {
        if (auto it = compiled->find(prog->hash); it != compiled->end()) {
          auto ahead = std::move(it->second);
          compiled->erase(it);
          return ahead;
        }
      }
      return gen::compile(*prog);
    }();
    if (!obj)
      fail(obj.error(), "compiling its program");
    run.object = std::make_unique<bpf::Object>(std::move(*obj));
    if (auto st = gen::load(*run.object, *prog); !st)
      fail(st.error(), "loading its program");
    if (prog->tgid_map) {
      if (auto st = gen::set_targets(*run.object, *prog, tgids); !st)
        fail(st.error(), "filling its target map");
    }
    // One event per tracepoint: its program runs on every CPU and for every task.
    auto on_tracepoint = [&](std::uint64_t id, std::string_view prog_name) {
      auto fd = run.object->program_fd(prog_name);
      if (!fd)
        fail(fd.error(), "finding its program");
      perf::EventAttr a;
      a.type(PERF_TYPE_TRACEPOINT).config(id).flag(perf::Flag::kDisabled);
      auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
      if (!ev)
        fail(ev.error(), "opening a tracepoint event for its program");
      if (auto st = ev->set_bpf(*fd); !st)
        fail(st.error(), "attaching its program");
      return std::move(*ev);
    };
    for (std::size_t i = 0; i < prog->programs.size(); ++i) {
      const std::uint32_t pi = run.place.probes[i];
      const perf::EventAttr& attr = engine.probes()[pi].attr;
      if (attr.type() == PERF_TYPE_TRACEPOINT) {
        // (A tracefs uprobe of several sites is a tracepoint of each.)
        const auto& sites = engine.probes()[pi].sites;
        const auto& site_programs = prog->site_programs[i];  // a usdt probe's, per site
        for (std::size_t s = 0; s < std::max<std::size_t>(1, sites.size()); ++s) {
          run.events.push_back(
              on_tracepoint(sites.empty() ? attr.config() : sites[s].config,
                            s < site_programs.size() ? site_programs[s] : prog->programs[i]));
          run.event_probes.push_back(pi);
        }
      } else {  // a probe PMU's kprobe/uprobe, or a sampling event, system-wide (place() keeps
                // task targets out)
        const auto& site_programs = prog->site_programs[i];
        if (std::any_of(site_programs.begin(), site_programs.end(),
                        [&](const std::string& n) { return n != prog->programs[i]; }))
          fail({.code = std::make_error_code(std::errc::not_supported),
                .message = "its call sites keep their arguments in different places, and a "
                           "probe PMU's sites take one program",
                .hint = "mount tracefs: a tracefs uprobe's sites take a program each"},
               "attaching its programs");
        auto fd = run.object->program_fd(prog->programs[i]);
        if (!fd)
          fail(fd.error(), "finding its program");
        // A sampling event's program is the event's own: one on every CPU's.
        engine.attach_bpf(pi, *fd, gen::is_perf_event(prog->plan.probes[i].kind));
      }
    }
    if (fork) {  // children of the targets join them, and leave when they are freed
      run.fork_event = on_tracepoint(fork_id, gen::kForkProgram);
      run.free_event = on_tracepoint(free_id, gen::kFreeProgram);
    }
    if (plan.arm_on_exec)
      run.exec_event = on_tracepoint(exec_id, gen::kExecProgram);
    run.reader = std::make_unique<gen::Reader>(
        *run.object, std::move(*prog), gen::ReaderOptions{.syscall_name = [](std::int64_t nr) {
          return std::string(core::syscall_name(nr));
        }});
    runs.push_back(std::move(run));
  }
  return runs;
}

void absorb_runs(std::span<Run> runs,
                 std::span<const std::unique_ptr<Pipeline>> pipelines,
                 Engine& engine,
                 bool all,
                 std::chrono::nanoseconds now) {
  std::vector<std::optional<Result<gen::Snapshot>>> snaps;
  bool stacks = false;
  for (auto& run : runs) {
    const Pipeline& p = *pipelines[run.pipeline];
    bool due = all || p.tracks_maps() || p.output_due(now);
    if (!due) {
      auto filling = run.reader->filling();
      due = !filling || *filling;  // a failed read: flip, and report its error there
    }
    if (!due) {
      snaps.emplace_back();
      continue;
    }
    snaps.emplace_back(run.reader->flip_and_read());
    stacks = stacks || p.tracks_maps();
  }
  // Every event of these rows happened before the flip, and so did the task records (MMAP2,
  // FORK, exec COMM) of their processes: read the rings now, so that the symbolizer has those
  // maps before the rows' stacks are named (a process may be gone by then).
  if (stacks)
    engine.drain_now();
  for (std::size_t k = 0; k < runs.size(); ++k) {
    auto& run = runs[k];
    auto& slot = snaps[k];
    if (!slot)
      continue;  // not read this tick
    auto& snap = *slot;
    if (!snap) {
      std::fprintf(stderr, "tracer: pipeline %zu in the kernel: reading its maps: %s\n",
                   run.pipeline + 1, snap.error().message.c_str());
      continue;
    }
    Pipeline& p = *pipelines[run.pipeline];
    p.flush_order();  // the task records so far, in time order
    if (InKernel* agg = p.stage(run.place.aggregation).in_kernel())
      agg->absorb(snap->rows);
    if (InKernel* lat = run.place.latency ? p.stage(*run.place.latency).in_kernel() : nullptr) {
      const auto& l = snap->pipeline;
      lat->absorb_counters({.paired = l.paired,
                            .unmatched_exits = l.unmatched_exits,
                            .unmatched_entries = l.unmatched_entries,
                            .out_of_order = l.out_of_order,
                            .entries_dropped = l.entries_dropped,
                            .pending = snap->pending});
    }
    run.last = std::move(snap->probes);
    run.targets_dropped = snap->pipeline.targets_dropped;
  }
}

bool drop_probe(Run& run, std::uint32_t probe, std::span<const ProbeInfo> probes) {
  for (std::size_t i = 0; i < run.events.size() && i < run.event_probes.size(); ++i) {
    if (run.event_probes[i] == probe)
      run.events[i] = perf::Event{};
  }
  return std::any_of(run.place.probes.begin(), run.place.probes.end(), [&](std::uint32_t p) {
    return p != probe && p < probes.size() && !probes[p].removed;
  });
}

void add_run_stats(std::span<const Run> runs,
                   Stats& stats,
                   const std::function<bool(std::uint32_t)>& counting) {
  // In-kernel pipelines: the events each probe's program saw (per CPU) and the events whose key
  // did not fit the map, as of the last read.
  for (const auto& run : runs) {
    for (std::size_t i = 0; i < run.last.size() && i < run.place.probes.size(); ++i) {
      const std::uint32_t pi = run.place.probes[i];
      if (pi >= stats.probes.size())
        continue;
      auto& ps = stats.probes[pi];
      ps.kernel_dropped += run.last[i].total.map_full + run.last[i].total.stacks_lost;
      ps.kernel_stacks_lost += run.last[i].total.stacks_lost;
      ps.keys_truncated += run.last[i].total.truncated;
      ps.string_faults += run.last[i].total.read_faults;
      ps.kernel_contended += run.last[i].total.contended;
      ps.targets_dropped = std::max(ps.targets_dropped, run.targets_dropped);
      // The probe's own generated program: its skips are this probe's alone (a hit counter or
      // delivery program on the same tracepoint was skipped for the same hits).
      if (run.last[i].recursion_misses >= ps.bpf_skipped && run.last[i].recursion_misses != 0) {
        ps.bpf_skipped = run.last[i].recursion_misses;
        ps.bpf_skipped_shared = false;
      }
      const bool counts = counting(pi);
      if (counts)  // the program's hits per CPU are the count: not also the event's own
        std::erase_if(ps.per_cpu, [](const auto& e) { return e.first < 0; });
      for (std::size_t cpu = 0; cpu < run.last[i].hits_per_cpu.size(); ++cpu) {
        const std::uint64_t hits = run.last[i].hits_per_cpu[cpu];
        auto it = std::find_if(ps.per_cpu.begin(), ps.per_cpu.end(),
                               [&](const auto& e) { return e.first == static_cast<int>(cpu); });
        if (it == ps.per_cpu.end()) {
          if (hits == 0)
            continue;
          ps.per_cpu.emplace_back(static_cast<int>(cpu), RingStats{});
          it = ps.per_cpu.end() - 1;
        }
        if (counts) {  // no ring: the events are the program's, its count the kernel's
          it->second.samples = hits;
          it->second.kernel_hits = 0;
          it->second.missed = 0;
        } else
          it->second.kernel_hits = std::max(it->second.kernel_hits, hits);
      }
    }
  }
}

}  // namespace tracer::kernel
