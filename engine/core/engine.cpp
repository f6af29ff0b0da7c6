#include "tracer/engine.hpp"

#include <sys/wait.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <boost/asio/post.hpp>
#include <chrono>

#include "engine_impl.hpp"
#include "privileges.hpp"
#include "ring_budget.hpp"
#include "tracer/common/release.hpp"
#include "tracer/perf/software.hpp"

namespace tracer {

namespace asio = boost::asio;

[[noreturn]] void core::throw_failure(ErrorCategory cat,
                                      const Failure& f,
                                      const std::string& prefix,
                                      ErrorSubject subject) {
  // A message that names its layer already ("bpf: ...") is not named twice.
  const bool named = prefix.empty() || f.message.starts_with(prefix + ": ");
  Error e(cat, f.code, named ? f.message : prefix + ": " + f.message, f.hint);
  e.subject() = std::move(subject);
  throw e;
}

using core::throw_failure;

void core::throw_duplicate_probe(const std::string& name) {
  throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
              fmt::format("engine: two probes are named '{}'", name), "probe names must be unique");
}

void Engine::Impl::open_probe(core::ResolvedProbe& rp,
                              const std::vector<int>& cpus,
                              const std::vector<pid_t>& pids) {
  const auto& o = opts.probes[rp.info.index];
  auto& per_cpu = events.emplace_back();
  const bool task_target =
      opts.target.kind == Target::Kind::kPid || opts.target.kind == Target::Kind::kCommand;
  if (task_target)
    rp.attr.flag(perf::Flag::kInherit);
  if (rp.config1_is_attr_string) {
    // The probe PMU reads the path/symbol string at open time.
    rp.attr.config1(reinterpret_cast<std::uint64_t>(rp.attr_string.c_str()));
  }
  if (opts.target.kind == Target::Kind::kCommand)
    rp.attr.flag(perf::Flag::kEnableOnExec);
  // A counting probe of a task target counts the task wherever it runs, as perf stat does (one
  // event per task, cpu -1): time_enabled/time_running then measure multiplexing. Per CPU, a
  // per-task event runs only while the task is on that CPU, and scaling by that ratio
  // over-counts a task that moves (up to the number of CPUs).
  static const std::vector<int> kAnyCpu = {-1};
  const auto& event_cpus = rp.counting && task_target ? kAnyCpu : cpus;
  // A delivered probe's tracepoint events sample nothing and are never enabled: one per CPU,
  // the attach point of the delivery program (which tests the target itself) and the owner of
  // the ring its side-band records go to. Never inherited: an inherited copy would carry the
  // program, and a child's exit detach it.
  const bool delivered_probe = rp.info.index < delivered.size() && delivered[rp.info.index];
  static const std::vector<pid_t> kAnyTask = {-1};
  const auto& event_pids = delivered_probe && task_target ? kAnyTask : pids;
  perf::EventAttr attr = rp.attr;
  if (delivered_probe && task_target)
    attr.flag(perf::Flag::kInherit, false).flag(perf::Flag::kEnableOnExec, false);
  // A uprobe of several sites (a C++ name's overloads, a pattern's matches): an event of each
  // per CPU and task, all writing to one ring.
  const std::size_t sites = std::max<std::size_t>(1, rp.info.sites.size());
  for (int cpu : event_cpus) {
    CpuEvents ce;
    ce.cpu = cpu;
    for (std::size_t site = 0; site < sites; ++site) {
      perf::EventAttr site_attr = attr;
      if (site != 0)
        site_attr.config(rp.info.sites[site].config).config2(rp.info.sites[site].config2);
      for (pid_t pid : event_pids) {
        perf::OpenTarget t{.pid = pid, .cpu = cpu};
        if (opts.target.kind == Target::Kind::kCgroup) {
          t.pid = targets.cgroup_fd();
          t.flags = PERF_FLAG_PID_CGROUP;
        }
        auto ev = perf::Event::open(site_attr, t);
        if (!ev && ev.error().errno_value() == ESRCH && opts.target.kind == Target::Kind::kPid &&
            pid != opts.target.pid) {
          continue;  // a thread that exited since we listed it
        }
        if (!ev) {
          throw_failure(ev.error().errno_value() == EACCES || ev.error().errno_value() == EPERM
                            ? ErrorCategory::kPermission
                        : ev.error().errno_value() == ENOENT ? ErrorCategory::kUnsupported
                                                             : ErrorCategory::kRuntime,
                        ev.error(), fmt::format("probe '{}'", rp.info.name), about(rp.info.index));
        }
        // A system-wide tracepoint sampled by its own events leaves tracer's main thread out
        // (its drains' system calls would be samples that wake it again).
        // (A system call's `char *` argument compares as the user string it points to.)
        std::string filter = o.filter.empty() || !rp.info.format
                                 ? o.filter
                                 : tracefs::kernel_filter(o.filter, *rp.info.format);
        if (self_tgid() != 0 && o.kind == ProbeKind::kTracepoint && !delivered_probe &&
            o.bpf_program.empty()) {
          const std::string self = fmt::format("common_pid != {}", self_tgid());
          filter = filter.empty() ? self : fmt::format("({}) && {}", filter, self);
        }
        if (!filter.empty()) {
          if (auto st = ev->set_filter(filter); !st) {
            throw_failure(ErrorCategory::kUsage, st.error(),
                          fmt::format("probe '{}'", rp.info.name), about(rp.info.index, "filter"));
          }
        }
        // Timebase sampling: the members count in the group this event leads; each sample of
        // it reads them (PERF_SAMPLE_READ). They follow the leader's enabling.
        for (std::size_t m = 0; m < rp.members.size(); ++m) {
          perf::EventAttr ma = rp.members[m];
          ma.flag(perf::Flag::kInherit, attr.has(perf::Flag::kInherit))
              .flag(perf::Flag::kDisabled, false)
              .flag(perf::Flag::kEnableOnExec, false);
          perf::OpenTarget mt = t;
          mt.group_fd = ev->fd();
          auto member = perf::Event::open(ma, mt);
          if (!member) {
            throw_failure(member.error().errno_value() == ENOENT ? ErrorCategory::kUnsupported
                                                                 : ErrorCategory::kRuntime,
                          member.error(),
                          fmt::format("probe '{}': read '{}'", rp.info.name, o.read_events[m]),
                          about(rp.info.index, "read"));
          }
          ce.members.push_back(std::move(*member));
        }
        ce.events.push_back(std::move(*ev));
        ce.site_of.push_back(static_cast<std::uint32_t>(site));
      }
    }
    if (ce.events.empty())
      continue;
    if (!rp.counting) {
      auto ring = perf::Ring::map(ce.events.front().fd(), rp.ring);
      if (!ring)
        throw_failure(ErrorCategory::kRuntime, ring.error(),
                      fmt::format("probe '{}'", rp.info.name), about(rp.info.index));
      // The other tasks' events on this CPU write to the first one's ring. (After the mmap: the
      // kernel refuses SET_OUTPUT to an event without a ring, EINVAL; a multi-threaded -p
      // target failed there.)
      for (std::size_t i = 1; i < ce.events.size(); ++i) {
        if (auto st = ce.events[i].set_output(ce.events.front().fd()); !st) {
          throw_failure(ErrorCategory::kRuntime, st.error(),
                        fmt::format("probe '{}'", rp.info.name), about(rp.info.index));
        }
      }
      auto r = std::make_unique<Reader>(
          perf::RingReader(std::move(*ring), rp.info.index, cpu, &probes[rp.info.index].layout,
                           opts.max_batch, opts.decode_samples),
          serial, ce.events.front().fd(), probes[rp.info.index].attr);
      ce.reader = r.get();
      readers.push_back(std::move(r));
    }
    // (After the ring is mapped: SET_OUTPUT needs the ring it redirects to.)
    if (delivered_probe)
      open_side_band(rp, cpu, pids, ce);
    per_cpu.push_back(std::move(ce));
  }
}

void Engine::Impl::open_side_band(const core::ResolvedProbe& rp,
                                  int cpu,
                                  const std::vector<pid_t>& pids,
                                  CpuEvents& ce) {
  const perf_event_attr* a = rp.attr.raw();
  if (a->mmap == 0 && a->comm == 0 && a->task == 0 && a->mmap2 == 0 && a->context_switch == 0 &&
      a->namespaces == 0 && a->ksymbol == 0 && a->bpf_event == 0 && a->cgroup == 0 &&
      a->text_poke == 0)
    return;
  // As perf record's tracking event: a dummy software event counts nothing, and its side-band
  // records (with the probe's sample_type, so its ring decodes them) go to the probe's ring.
  // A pid or command target: the target's tasks' records only (inherited by its children, from
  // the command's exec), as the probe's own per-task events would have written them.
  perf::EventAttr dummy = rp.attr;
  dummy.type(PERF_TYPE_SOFTWARE).config(PERF_COUNT_SW_DUMMY);
  const bool task_target =
      opts.target.kind == Target::Kind::kPid || opts.target.kind == Target::Kind::kCommand;
  static const std::vector<pid_t> kAnyTask = {-1};
  for (pid_t pid : task_target ? pids : kAnyTask) {
    auto ev = perf::Event::open(dummy, {.pid = pid, .cpu = cpu});
    if (!ev && ev.error().errno_value() == ESRCH && opts.target.kind == Target::Kind::kPid &&
        pid != opts.target.pid)
      continue;  // a thread that exited since we listed it
    if (!ev)
      throw_failure(ErrorCategory::kRuntime, ev.error(),
                    fmt::format("probe '{}': its side-band event", rp.info.name),
                    about(rp.info.index));
    if (auto st = ev->set_output(ce.events.front().fd()); !st)
      throw_failure(ErrorCategory::kRuntime, st.error(),
                    fmt::format("probe '{}': its side-band event", rp.info.name),
                    about(rp.info.index));
    ce.events.push_back(std::move(*ev));
  }
}

void Engine::Impl::prepare(core::ResolveContext& ctx) const {
  const auto& target = opts.target;
  // A task target's events are inherited by the tasks it creates, and the probe PMU cannot
  // inherit its kprobes and uprobes: the kernel reads the copy's config1 (a pointer to the
  // path or symbol in tracer's memory) again in the new task, fails, and so does the target's
  // clone() (its threads and children could not be created). A tracefs dynamic probe is a
  // tracepoint, which inherits as any other.
  ctx.prefer_tracefs_probes = opts.prefer_tracefs_probes || target.kind == Target::Kind::kPid ||
                              target.kind == Target::Kind::kCommand;
  if (target.kind == Target::Kind::kPid)
    ctx.pid = target.pid;
  if (target.kind == Target::Kind::kCommand && !target.command.empty())
    ctx.command = target.command.front();
}

std::vector<core::ResolvedProbe> Engine::Impl::resolve(core::ResolveContext& ctx) const {
  prepare(ctx);
  std::vector<core::ResolvedProbe> resolved;
  resolved.reserve(opts.probes.size());
  for (std::size_t i = 0; i < opts.probes.size(); ++i) {
    try {
      resolved.push_back(core::resolve_probe(opts.probes[i], static_cast<std::uint32_t>(i), ctx));
    } catch (Error& e) {
      mark(e, i);
      throw;
    }
  }
  return resolved;
}

std::uint32_t Engine::Impl::plan_ring_sizes() {
  // The locked-memory budget is shared by every ring (each sampling probe's per CPU, and the BPF
  // output channel's).
  std::size_t rings = 0;
  for (const auto& p : opts.probes)
    rings += p.counting || p.ring_pages != 0 ? 0 : 1;
  const bool channel = opts.bpf && !opts.bpf->output_map.empty() && opts.bpf->output_pages == 0;
  rings += channel ? 1 : 0;
  const auto cpus = perf::online_cpus();
  rings *= cpus ? std::max<std::size_t>(1, cpus->size()) : 1;
  const auto budget = core::mlock_budget();
  const auto plan = core::plan_rings(rings, budget);
  ring_pages_default = plan.data_pages;
  ring_note = plan.why;
  // The output channel keeps its measured default where no limit applies (kDefaultOutputPages).
  output_ring_pages = budget.unlimited ? 0 : std::min(plan.data_pages, kDefaultOutputPages);
  return plan.data_pages;
}

void Engine::Impl::start() {
  prepare();
  go();
}

void Engine::Impl::prepare() {
  if (prepared || running || stopped) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: start() may be called once");
  }
  if (opts.probes.empty() && !opts.allow_no_probes) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: no probes to start", "add at least one probe");
  }
  if (opts.flush_interval_ms == 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: flush_interval_ms is 0",
                "give the longest time a record may wait in a quiet ring, in milliseconds");
  }
  for (std::size_t i = 0; i < opts.probes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (opts.probes[i].name == opts.probes[j].name)
        core::throw_duplicate_probe(opts.probes[i].name);
    }
  }
  const auto& target = opts.target;
  core::Needs needs;
  needs.cpu_wide = target.kind == Target::Kind::kAllCpus || target.kind == Target::Kind::kCgroup;
  for (const auto& p : opts.probes) {
    needs.tracepoints = needs.tracepoints || core::opens_trace_event(p.kind);
    if (!p.bpf_program.empty())
      needs.bpf = true;
  }
  if (opts.bpf)
    needs.bpf = true;
  if (auto st = core::check_privileges(needs); !st)
    throw_failure(ErrorCategory::kPermission, st.error());

  // Dynamic probes a crashed or killed run left behind go first (their owner is dead).
  if (auto fs = tracefs::Tracefs::open()) {
    [[maybe_unused]] auto removed = tracefs::DynamicProbes::remove_stale(*fs);
  }
  core::ResolveContext ctx;
  ctx.default_ring_pages = plan_ring_sizes();
  std::vector<core::ResolvedProbe> resolved = resolve(ctx);
  probes.clear();
  // RingReaders keep pointers to the layouts: no reallocation (+1: the BPF output channel).
  probes.reserve(resolved.size() + 1);
  for (const auto& r : resolved) {
    probes.push_back(r.info);
    counting.push_back(r.counting);
  }
  if (ctx.dynamic)
    dynamic.emplace(std::move(*ctx.dynamic));

  auto online = perf::online_cpus();
  if (!online)
    throw_failure(ErrorCategory::kRuntime, online.error());
  targets.open(target);

  try {
    if (target.kind == Target::Kind::kCommand)
      targets.start_command(target);
    plan_delivery(resolved);
    for (auto& rp : resolved)
      open_probe(rp, *online, targets.pids());
    trial_events.clear();  // check()'s: no longer the tracepoints' last events, closed at once
    open_delivery();
    if (opts.bpf) {
      load_bpf(*opts.bpf, resolved);
      if (bpf_object)
        open_output_channel(*opts.bpf, *bpf_object);
      if (bpf_object)
        follow_target(*bpf_object, opts.bpf->tgids);
      attach_bpf_programs();
    } else {
      attach_bpf_programs();  // reports probes that name a program without a BPF object
    }
    attach_hit_counters();
    if (before_enable)
      before_enable();
    if (target.kind != Target::Kind::kCommand) {
      for (std::size_t p = 0; p < events.size(); ++p) {
        // A delivered probe's tracepoint event (the first) is its program's attach point only.
        const std::size_t first = p < delivered.size() && delivered[p] ? 1 : 0;
        for (auto& ce : events[p]) {
          for (std::size_t i = first; i < ce.events.size(); ++i) {
            if (auto st = ce.events[i].enable(); !st)
              throw_failure(ErrorCategory::kRuntime, st.error());
          }
        }
      }
    }
    read_kernel_counts(hit_base, drop_base, true);
    if (output) {
      if (auto st = output->enable(); !st)
        throw_failure(ErrorCategory::kRuntime, st.error(), "bpf output channel");
    }
  } catch (...) {
    cleanup();
    throw;
  }
  prepared = true;
}

void Engine::Impl::go() {
  if (!prepared || running || stopped) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: go() follows prepare(), once");
  }
  const auto& target = opts.target;
  running = true;
  last_pass = std::chrono::steady_clock::now();
  for (auto& r : readers)
    arm(*r);
  arm_ringbuf();
  arm_timer();
  if (target.kind == Target::Kind::kCommand) {
    watch_exit(targets.command_pid());
    // The command starts once the reactor runs (the caller binds its pipelines first): its
    // first burst then finds a consumer waiting on the rings.
    asio::post(serial, [self = shared_from_this()] { self->targets.release_command(); });
  } else if (target.kind == Target::Kind::kPid) {
    watch_exit(target.pid);  // as perf record -p: the trace ends with the process
  }
}

void Engine::Impl::arm(Reader& r) {
  if (r.armed || !running || r.retired)
    return;
  r.armed = true;
  r.wait.async_wait(
      [self = shared_from_this(), &r](const boost::system::error_code& ec, bool kernel_wakeup) {
        // After stop() the reader may be gone: look at `running` before `r`.
        if (ec || !self->running || r.retired)
          return;
        r.armed = false;
        if (kernel_wakeup)
          r.reader.count_wakeup();
        self->drain_slice(r);
      });
}

bool Engine::Impl::held() const {
  if (stopping || !backlogged)
    return false;
  try {
    return backlogged();
  } catch (...) {  // a check that fails holds nothing
    return false;
  }
}

void Engine::Impl::drain_reader(Reader& r) noexcept {
  if (r.via) {
    r.reader.drain(r.via);
    return;
  }
  const bool in_place = in_place_handler && in_place_takes && in_place_takes(r.reader.probe());
  r.reader.drain(batch_handler, in_place ? &in_place_handler : nullptr);
}

void Engine::Impl::drain_slice(Reader& r) {
  if (held()) {
    // Not read, not re-armed (its fd would stay readable): the held passes go on, and the
    // first that reads again re-arms it.
    r.parked = true;
    post_held_pass();
    return;
  }
  r.reader.yield_at(std::chrono::steady_clock::now() +
                    std::chrono::milliseconds(opts.drain_slice_ms));
  drain_reader(r);
  if (!after_wakeup())
    return;
  if (r.reader.more()) {
    // Records are left (the pipeline is slower than the ring fills): the rest after whatever
    // else is ready (a signal, the duration's timer), not on a wakeup that may not come.
    asio::post(serial, [self = shared_from_this(), &r] {
      if (self->running && !r.retired)  // (a removed probe's reader lives until after this)
        self->drain_slice(r);
    });
    return;
  }
  arm(r);
}

bool Engine::Impl::after_wakeup() {
  // Every ring gets a pass at least once per flush interval. One due within half an interval is
  // made now, on this wakeup, and the timer pushed back: the wakeups of busy rings flush the
  // quiet ones too, and the timer wakes the engine only when no ring has for half an interval
  // (a timer wakeup costs as much as a ring's).
  if (pass_due()) {
    drain_all();
    arm_timer();
  }
  if (check_handler_failure()) {
    stop();
    return false;
  }
  return true;
}

bool Engine::Impl::round_reached() noexcept {
  for (const auto& r : readers) {
    const perf::Ring& ring = r->reader.ring();
    // (An overwrite ring is read whole at the end; a corrupt one is read no further.)
    if (!ring.overwrite() && !r->reader.corrupt() && ring.read_position() < r->round_head)
      return false;
  }
  if (delivery && delivery->ring_buffer() != nullptr &&
      delivery->ring_buffer()->consumer_pos() < ringbuf_round_head)
    return false;
  return true;
}

void Engine::Impl::mark_round() noexcept {
  for (auto& r : readers) {
    if (!r->reader.ring().overwrite())
      r->round_head = r->reader.ring().load_head();
  }
  if (delivery && delivery->ring_buffer() != nullptr)
    ringbuf_round_head = delivery->ring_buffer()->producer_pos();
}

bool Engine::Impl::pass_due() const noexcept {
  return std::chrono::steady_clock::now() - last_pass >=
         std::chrono::microseconds(std::uint64_t{opts.flush_interval_ms} * 500);
}

void Engine::Impl::arm_timer() {
  if (!running)
    return;
  // Re-arming cancels a pending wait (it completes with operation_aborted); one that had
  // already expired and is queued completes without error, and is told apart by generation.
  const std::uint64_t generation = ++timer_generation;
  flush_timer.expires_after(std::chrono::milliseconds(opts.flush_interval_ms));
  flush_timer.async_wait(
      [self = shared_from_this(), generation](const boost::system::error_code& ec) {
        if (ec || !self->running || generation != self->timer_generation)
          return;
        ++self->timer_passes;
        self->drain_all();

        if (self->check_handler_failure()) {
          self->stop();

          return;
        }
        self->arm_timer();
      });
}

void Engine::Impl::watch_exit(pid_t pid) {
  targets.watch_exit(serial, pid, [self = shared_from_this(), pid](bool reapable) {
    if (!self->running)
      return;
    self->target_exited = true;
    if (reapable)
      self->targets.reap_command();
    // The exit is known at exit_notify(), before the task's final switch: a delivered probe
    // would lose the events the task still makes on its way out (its last sched_switch).
    self->stop_once_freed(pid, std::chrono::steady_clock::now() + std::chrono::milliseconds(200));
  });
}

void Engine::Impl::stop_once_freed(pid_t tgid, std::chrono::steady_clock::time_point deadline) {
  if (!running)
    return;
  const auto key = static_cast<std::uint32_t>(tgid);
  const bool in_map =
      delivery &&
      delivery->object().lookup_elem("tgids", std::as_bytes(std::span(&key, 1))).has_value();
  if (!in_map || std::chrono::steady_clock::now() >= deadline) {
    stop();
    return;
  }
  free_wait.expires_after(std::chrono::milliseconds(2));
  free_wait.async_wait(
      [self = shared_from_this(), tgid, deadline](const boost::system::error_code& ec) {
        if (!ec)
          self->stop_once_freed(tgid, deadline);
      });
}

void Engine::Impl::drain_all(bool complete) noexcept {
  last_pass = std::chrono::steady_clock::now();
  ++passes;
  const bool hold = !complete && held();
  if (!hold) {
    for (auto& r : readers) {
      if (stopping)
        r->reader.yield_at(stop_deadline);
      else if (complete)
        r->reader.yield_at(std::chrono::steady_clock::time_point::max());
      else
        r->reader.yield_at(std::chrono::steady_clock::now() +
                           std::chrono::milliseconds(opts.drain_slice_ms));
      drain_reader(*r);
    }
    drain_ringbuf(complete);
  } else {
    ++held_passes;
  }
  // A pass ends a round only once every ring was read up to its head at the last round's end:
  // a pass cut by its time slice (a busy ring, a descheduled reactor) that ended one anyway
  // released a COMM record's time before the BPF ring's samples older than it were read, which
  // then counted under the new name.
  const bool round = round_reached();
  if (round)
    mark_round();
  else if (!hold)
    ++partial_passes;
  if (pass_handler) {
    try {
      pass_handler(round);
    } catch (...) {
      if (!failure)
        failure = std::current_exception();
    }
  }
  {
    const auto ns = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now() - last_pass)
                                                   .count());
    pass_ns += ns;
    ++pass_us_log2[std::min<std::size_t>(std::bit_width(ns / 1000), pass_us_log2.size() - 1)];
  }
  if (hold) {
    post_held_pass();
    return;
  }
  for (auto& r : readers) {
    if (r->parked && running && !stopping) {
      r->parked = false;
      arm(*r);
    }
  }
  if (ringbuf_parked && running && !stopping) {
    ringbuf_parked = false;
    arm_ringbuf();
  }
}

void Engine::Impl::post_held_pass() {
  if (hold_posted || !running || stopping)
    return;
  hold_posted = true;
  asio::post(serial, [self = shared_from_this()] {
    self->hold_posted = false;
    if (!self->running || self->stopping)
      return;
    self->drain_all();
    if (self->check_handler_failure())
      self->stop();
  });
}

bool Engine::Impl::check_handler_failure() {
  for (auto& r : readers) {
    if (auto e = r->reader.handler_failure()) {
      if (!failure)
        failure = e;
    }
  }
  return failure != nullptr;
}

void Engine::Impl::stop(std::function<void()>* later) {
  if (stopped)
    return;
  const bool was_running = running;
  // The hit counters' last read comes just before the events stop (and their first just after
  // the events started): a hit they count was one the events were on for, so `missed` never
  // counts the edges. A delivered probe's counts are read again once its program is detached.
  read_kernel_counts(hit_final, drop_final, false);
  // Stop producing, then read everything that was produced.
  for (auto& per_cpu : events) {
    for (auto& ce : per_cpu) {
      for (auto& ev : ce.events) {
        [[maybe_unused]] const auto st = ev.disable();  // best effort: the fd closes anyway
      }
    }
  }
  if (output) {
    [[maybe_unused]] const auto st = output->disable();
  }
  // The delivery program runs for every hit while it is attached (its events are never
  // enabled): detached now, it counts and writes no hit after the drain below, so that every
  // hit it counted is delivered or lost (a hit between the drain and the final read of its
  // counts was one more than the events).
  if (delivery) {
    delivery->detach();
    // Its counts are final now: a delivered probe's hits and drops are read here, not with the
    // hit counters above (a hit between that read and the detach was delivered and not counted:
    // two more events than hits in a run beside two busy loops).
    for (std::size_t p = 0; p < delivered.size() && p < hit_final.size(); ++p) {
      if (delivered[p]) {
        hit_final[p] = read_hits(p);
        drop_final[p] = read_drops(p);
      }
    }
  }
  // What the rings hold, for stop_drain_ms at most: the rest is given up and counted, so that a
  // stop is honoured on time however slow the pipeline. Held rings (the stages are behind: their
  // queue already holds what they run in the stop's time) are given up at once, counted.
  const bool behind = held();
  stopping = true;
  stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(opts.stop_drain_ms);
  if (!behind) {
    drain_all();
  } else if (delivery && delivery->ring_buffer() != nullptr) {
    delivery->discard();
  }
  for (auto& r : readers) {
    if (behind || r->reader.more())
      r->reader.discard_rest();
  }
  check_handler_failure();
  final_stats = collect_stats();
  running = false;
  stopped = true;
  cleanup(later);
  if (was_running && done_handler)
    asio::post(serial, done_handler);
}

void Engine::Impl::cleanup(std::function<void()>* later) noexcept {
  boost::system::error_code ignored;
  [[maybe_unused]] const auto n = flush_timer.cancel(ignored);
  [[maybe_unused]] const auto m = free_wait.cancel(ignored);
  for (auto& r : readers)
    r->wait.cancel();
  if (ringbuf_wait) {
    [[maybe_unused]] const auto ec = ringbuf_wait->cancel(ignored);
    ringbuf_wait.reset();  // closes its duplicate of the map fd
  }
  ringbuf_armed = false;
  targets.cancel_watch();
  // Readers before events: the rings unmap, then the fds close.
  readers.clear();
  for (auto& per_cpu : events) {
    for (auto& ce : per_cpu)
      ce.reader = nullptr;
  }
  output_readers.clear();
  output.reset();  // clears its PERF_EVENT_ARRAY entries, closes the bpf-output events
  // The links and events close side by side (ConcurrentRelease): a link's close and a
  // tracepoint's last event's wait for grace periods (12 tracepoints took 1.3 s one by one).
  // Handed over (`later`), the dynamic tracefs probes go after the events there too.
  try {
    auto release = std::make_shared<common::ConcurrentRelease>();
    release->add_each(closings);  // removed probes' rings and events not closed yet
    release->add_each(trial_events);
    hit_counter.detach(*release);
    if (delivery)
      delivery->detach(*release);
    release->add_each(follow_events);
    for (auto& per_cpu : events)
      release->add_each(per_cpu);
    if (later != nullptr) {
      auto tracefs_probes =
          std::make_shared<std::optional<tracefs::DynamicProbes>>(std::move(dynamic));
      auto added = std::make_shared<std::vector<std::unique_ptr<tracefs::DynamicProbes>>>(
          std::move(added_dynamic));
      dynamic.reset();
      added_dynamic.clear();
      *later = [release, tracefs_probes, added] {
        release->run();
        tracefs_probes->reset();  // EBUSY until no event holds them
        added->clear();
      };
    } else {
      release->run();
    }
  } catch (...) {  // NOLINT(bugprone-empty-catch): no memory: what is left closes below
  }
  closings.clear();
  trial_events.clear();
  hit_counter.detach();
  if (delivery)
    delivery->detach();
  follow_events.clear();
  events.clear();
  // Dynamic tracefs probes can only be removed once no perf event holds them (EBUSY).
  dynamic.reset();
  added_dynamic.clear();
  delivery.reset();  // its rings were unmapped with the readers
  // The BPF object stays: its programs were detached with their events, and its maps stay
  // readable until the engine is destroyed (the final read of in-kernel aggregations comes
  // after stop(): Engine::maps()).
  targets.close();  // the cgroup fd; a command still running is ended
}

Engine::Engine(asio::any_io_executor executor, EngineOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

Engine::~Engine() {
  if (impl_)
    impl_->stop();
}

void Engine::on_batch(BatchHandler handler) {
  impl_->batch_handler = std::move(handler);
}

void Engine::on_in_place(InPlaceHandler handler, std::function<bool(std::uint32_t)> takes) {
  impl_->in_place_handler = std::move(handler);
  impl_->in_place_takes = std::move(takes);
}

void Engine::on_done(std::function<void()> handler) {
  impl_->done_handler = std::move(handler);
}

void Engine::hold_while(std::function<bool()> backlogged) {
  impl_->backlogged = std::move(backlogged);
}

void Engine::on_round(std::function<void()> handler) {
  if (!handler) {
    impl_->pass_handler = {};
    return;
  }
  impl_->pass_handler = [handler = std::move(handler)](bool round) {
    if (round)
      handler();
  };
}

void Engine::on_pass(std::function<void(bool round)> handler) {
  impl_->pass_handler = std::move(handler);
}

void Engine::before_enable(std::function<void()> handler) {
  impl_->before_enable = std::move(handler);
}

void Engine::drain_now() {
  if (impl_->running)
    impl_->drain_all(true);
}

void Engine::start() {
  impl_->start();
}

void Engine::prepare() {
  impl_->prepare();
}

void Engine::go() {
  impl_->go();
}

void Engine::stop() {
  impl_->stop();
}

std::function<void()> Engine::stop_deferring_close() {
  std::function<void()> later;
  impl_->stop(&later);
  return later;
}

bool Engine::target_exited() const noexcept {
  return impl_->target_exited;
}

bool Engine::running() const noexcept {
  return impl_->running;
}

std::span<const ProbeInfo> Engine::probes() const noexcept {
  return impl_->probes;
}

Stats Engine::stats() const {
  return impl_->stopped ? impl_->final_stats : impl_->collect_stats();
}

std::vector<ProbeInfo> Engine::check(std::vector<std::string>* notes) {
  if (impl_->prepared || impl_->running || impl_->stopped) {
    // Its BPF object would replace the one start() attached (and whose maps stay readable).
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: check() goes before start()");
  }
  auto& o = impl_->opts;
  core::ResolveContext ctx;
  const std::vector<core::ResolvedProbe> resolved = impl_->resolve(ctx);
  std::vector<ProbeInfo> out;
  for (const auto& r : resolved)
    out.push_back(r.info);
  impl_->trial_open(resolved);
  if (o.bpf) {
    const BpfOptions& b = *o.bpf;
    impl_->load_bpf(b, resolved, /*scratch=*/true);  // a check writes nothing
    for (std::size_t p = 0; p < o.probes.size(); ++p) {
      const auto& po = o.probes[p];
      if (po.bpf_program.empty())
        continue;
      [[maybe_unused]] const int fd = impl_->program_fd(p);  // throws: no such program
      if (notes != nullptr && po.kind == ProbeKind::kTracepoint) {
        notes->push_back(fmt::format(
            "probe '{}': program '{}' runs on every {} event system-wide, and its return value "
            "gates the samples of every perf consumer of that tracepoint (a 0 silences perf "
            "record too); tracer's shipped programs return 1 and filter by tgid inside",
            po.name, po.bpf_program, po.spec));
      }
    }
    if (const auto& obj = impl_->bpf_object; notes != nullptr && obj.has_value()) {
      const auto maps = obj->map_names();
      if (std::find(maps.begin(), maps.end(), "tgids") == maps.end()) {
        notes->emplace_back(
            "the [bpf] object has no `tgids` map: its programs do not test the target (-p, -- "
            "CMD), so what they emit comes from every process; #include \"tracer_target.h\" "
            "and return early unless tracer_in_target() (configs/opens.bpf.c does)");
      }
    }
    if (auto info = impl_->check_output_channel(b, static_cast<std::uint32_t>(out.size())))
      out.push_back(std::move(*info));
    // The loaded object stays (nothing is attached to it) so that maps() can answer the
    // pipelines' questions about map names and layouts; start() loads a fresh one.
  }
  return out;  // ctx's dynamic tracefs probes, if any, are removed here
}

void Engine::Impl::trial_open(const std::vector<core::ResolvedProbe>& resolved) {
  // What run() would refuse of the recipe itself, the kernel says here: each probe's event is
  // opened (disabled, on one CPU, never enabled or mapped) with its tracefs filter.
  // A sample frequency past kernel.perf_event_max_sample_rate, an offset past a uprobe's file,
  // a filter the kernel does not parse: errors at the probe, as run() gives them.
  // The events stay open until start() has opened the probes' own (trial_events): the last
  // close of a tracepoint's perf event waits for grace periods, one tracepoint after another
  // (the kernel holds its event_mutex through the wait: 12 tracepoints added 0.4 s to a start).
  const auto online = perf::online_cpus();
  const int cpu = online && !online->empty() ? online->front() : 0;
  // A dynamic tracefs probe's event closes now: check() removes the probe (EBUSY while open).
  trial_events.clear();
  for (const auto& rp : resolved) {
    auto ev = trial_open_one(rp, cpu);
    if (rp.info.kind == ProbeKind::kTracepoint)
      trial_events.push_back(std::move(ev));
  }
}

perf::Event Engine::Impl::trial_open_one(const core::ResolvedProbe& rp, int cpu) const {
  {
    const auto& o = opts.probes[rp.info.index];
    perf::EventAttr attr = rp.attr;
    attr.flag(perf::Flag::kDisabled)
        .flag(perf::Flag::kInherit, false)
        .flag(perf::Flag::kEnableOnExec, false);
    if (rp.config1_is_attr_string)
      attr.config1(reinterpret_cast<std::uint64_t>(rp.attr_string.c_str()));
    auto ev = perf::Event::open(attr, {.pid = -1, .cpu = cpu});
    if (!ev) {
      const int err = ev.error().errno_value();
      if (err == EACCES || err == EPERM)
        return {};  // not privileged to try: run() says which capability
      // EINVAL: the kernel refuses what the recipe asks of this event (a recipe error).
      throw_failure(err == ENOENT   ? ErrorCategory::kUnsupported
                    : err == EINVAL ? ErrorCategory::kUsage
                                    : ErrorCategory::kRuntime,
                    ev.error(), fmt::format("probe '{}'", rp.info.name), about(rp.info.index));
    }
    if (!o.filter.empty() && rp.info.format) {
      if (auto st = ev->set_filter(tracefs::kernel_filter(o.filter, *rp.info.format)); !st)
        throw_failure(ErrorCategory::kUsage, st.error(), fmt::format("probe '{}'", rp.info.name),
                      about(rp.info.index, "filter"));
    }
    return std::move(*ev);
  }
}

std::vector<Error> Engine::check_probes() {
  if (impl_->prepared || impl_->running || impl_->stopped) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: check_probes() goes before start()");
  }
  const auto& o = impl_->opts;
  core::ResolveContext ctx;
  impl_->prepare(ctx);
  const auto online = perf::online_cpus();
  const int cpu = online && !online->empty() ? online->front() : 0;
  std::vector<Error> out;
  common::ConcurrentRelease release;
  for (std::size_t i = 0; i < o.probes.size(); ++i) {
    try {
      const auto rp = core::resolve_probe(o.probes[i], static_cast<std::uint32_t>(i), ctx);
      release.add(impl_->trial_open_one(rp, cpu));
    } catch (Error& e) {
      impl_->mark(e, i);
      out.push_back(e);
    }
  }
  return out;  // ctx's dynamic tracefs probes, if any, are removed here
}

std::exception_ptr Engine::failure() const noexcept {
  return impl_->failure;
}

std::string Engine::ring_note() const {
  return impl_->ring_note;
}

std::optional<DeliveryChannel> Engine::delivery_channel() const {
  return impl_->used_channel;
}

pid_t Engine::command_pid() const noexcept {
  return impl_->targets.command_pid();
}

std::optional<int> Engine::command_exit_code() const noexcept {
  const auto st = impl_->targets.command_status();
  if (!st)
    return std::nullopt;
  if (WIFEXITED(*st))
    return WEXITSTATUS(*st);
  if (WIFSIGNALED(*st))
    return 128 + WTERMSIG(*st);
  return std::nullopt;
}

}  // namespace tracer
