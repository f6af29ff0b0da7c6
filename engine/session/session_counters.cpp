// A session's [[counter]] groups (see session_counters.hpp).
#include "session_counters.hpp"
#include "session_impl.hpp"

#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tracer/diagnostics.hpp"
#include "tracer/error.hpp"
#include "tracer/event_names.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {

namespace {

/// What a failed open says at the event's position.
std::string why_not(const perf::CounterSetEvent& e, const Failure& f) {
  const int err = f.errno_value();
  if (e.attr.type() == PERF_TYPE_HARDWARE || e.attr.type() == PERF_TYPE_HW_CACHE ||
      e.attr.type() == PERF_TYPE_RAW) {
    if (err == ENOENT || err == EOPNOTSUPP)
      return fmt::format("{}: no hardware PMU on this machine ({})", e.name, f.message);
  }
  return f.message;
}

}  // namespace

void SessionCounters::open(const Target& target, pid_t command_pid) {
  sets_.clear();
  cpus_.clear();
  if (groups_.empty())
    return;
  Diagnostics diags;
  const bool cpu_wide =
      target.kind == Target::Kind::kAllCpus || target.kind == Target::Kind::kCgroup;
  std::vector<perf::CounterSlot> slots;
  if (cpu_wide) {
    auto online = perf::online_cpus();
    if (!online)
      throw Error(ErrorCategory::kRuntime, online.error());
    cpus_ = *online;
    if (target.kind == Target::Kind::kCgroup && !cgroup_fd_) {
      cgroup_fd_.reset(::open(target.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      if (!cgroup_fd_) {
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()},
                    fmt::format("counters: cannot open cgroup '{}': {}", target.cgroup,
                                std::strerror(errno)));
      }
    }
    for (int cpu : cpus_) {
      perf::CounterSlot s{.pid = -1, .cpu = cpu};
      if (cgroup_fd_) {
        s.pid = cgroup_fd_.get();
        s.flags = PERF_FLAG_PID_CGROUP;
      }
      slots.push_back(s);
    }
  } else if (target.kind == Target::Kind::kCommand) {
    slots.push_back({.pid = command_pid, .cpu = -1});
  } else {
    auto threads = perf::process_threads(target.pid);
    if (!threads)
      throw Error(ErrorCategory::kRuntime, threads.error());
    for (pid_t t : *threads)
      slots.push_back({.pid = t, .cpu = -1});
  }

  std::optional<tracefs::Tracefs> fs;
  for (const RecipeCounter& g : groups_) {
    sets_.emplace_back();
    if (g.per_cpu && !cpu_wide) {
      diags.add(
          g.where_of("per_cpu"),
          fmt::format("counter group '{}': per_cpu needs a system-wide or cgroup target", g.name),
          "a process or command is counted wherever it runs: leave out per_cpu");
      continue;
    }
    perf::CounterSetOptions o;
    o.slots = slots;
    o.pinned = g.pinned;
    o.exclusive = g.exclusive;
    o.weak = g.weak;
    o.inherit = !cpu_wide;
    o.enable_on_exec = target.kind == Target::Kind::kCommand;
    bool resolved = true;
    for (std::size_t i = 0; i < g.events.size(); ++i) {
      try {
        perf::EventAttr a = resolve_event_name(g.events[i], fs);
        for (const auto& x : g.exclude) {
          if (x == "user")
            a.flag(perf::Flag::kExcludeUser);
          else if (x == "kernel")
            a.flag(perf::Flag::kExcludeKernel);
          else if (x == "hv")
            a.flag(perf::Flag::kExcludeHv);
          else if (x == "idle")
            a.flag(perf::Flag::kExcludeIdle);
        }
        o.events.push_back({g.events[i], a});
      } catch (const Error& e) {
        diags.add(i < g.event_where.size() ? g.event_where[i] : g.where, e.message(), e.hint());
        resolved = false;
      }
    }
    if (!resolved)
      continue;
    auto set = perf::CounterSet::open(o);
    if (!set) {
      const Failure& f = set.error();
      if (f.errno_value() == EACCES || f.errno_value() == EPERM)
        throw Error(ErrorCategory::kPermission, f.code, f.message, f.hint);
      // At the event that failed (its name begins the message), else at the group.
      std::size_t at = g.events.size();
      for (std::size_t i = 0; i < g.events.size(); ++i) {
        if (f.message.starts_with(g.events[i] + ":"))
          at = i;
      }
      const std::string msg = at < o.events.size() ? why_not(o.events[at], f) : f.message;
      diags.add(at < g.event_where.size() ? g.event_where[at] : g.where,
                fmt::format("counter group '{}': {}", g.name, msg),
                f.hint.empty() ? "count software events (task-clock, page-faults, ...) or "
                                 "tracepoints; `tracer list pmus` shows what this machine has"
                               : f.hint);
      continue;
    }
    sets_.back() = std::move(*set);
  }
  if (!diags.empty()) {
    close();
    diags.throw_if_any();
  }
  started_ = session_detail::monotonic_now();
}

void SessionCounters::enable() {
  for (auto& s : sets_) {
    if (!s)
      continue;
    if (auto st = s->enable(); !st)
      throw Error(ErrorCategory::kRuntime, st.error());
  }
  started_ = session_detail::monotonic_now();
}

void SessionCounters::close() noexcept {
  sets_.clear();
  cgroup_fd_.reset();
}

CounterGroupReading SessionCounters::read(std::size_t group) const {
  CounterGroupReading r;
  r.time = session_detail::monotonic_now();
  static const std::optional<perf::CounterSet> kNone;
  const std::optional<perf::CounterSet>& opened = group < sets_.size() ? sets_[group] : kNone;
  if (!opened) {
    r.counts.counters.resize(group < groups_.size() ? groups_[group].events.size() : 0);
    return r;
  }
  const perf::CounterSet& set = *opened;
  r.counts = set.read();
  r.grouped = set.grouped() || set.size() == 1;
  for (const auto& s : set.slots())
    r.cpus.push_back(s.cpu);
  return r;
}

}  // namespace tracer
