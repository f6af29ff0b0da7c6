// CounterSet: counting groups per CPU or task, read at once and scaled (see counter_set.hpp).
#include "tracer/perf/counter_set.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>

namespace tracer::perf {

namespace {

double scale(std::uint64_t raw, std::uint64_t enabled, std::uint64_t running) {
  if (running == 0)
    return 0;
  if (running >= enabled)
    return static_cast<double>(raw);
  return static_cast<double>(raw) * static_cast<double>(enabled) / static_cast<double>(running);
}

}  // namespace

CounterReading CounterReading::since(const CounterReading& earlier) const noexcept {
  CounterReading d;
  d.raw = raw - std::min(raw, earlier.raw);
  d.enabled = enabled - std::min(enabled, earlier.enabled);
  d.running = running - std::min(running, earlier.running);
  d.scaled = scale(d.raw, d.enabled, d.running);
  return d;
}

CounterSetReading CounterSetReading::since(const CounterSetReading& earlier) const {
  CounterSetReading d;
  d.counters.resize(counters.size());
  d.per_slot.resize(per_slot.size());
  for (std::size_t s = 0; s < per_slot.size(); ++s) {
    for (std::size_t i = 0; i < per_slot[s].size(); ++i) {
      const bool had = s < earlier.per_slot.size() && i < earlier.per_slot[s].size();
      const CounterReading r = had ? per_slot[s][i].since(earlier.per_slot[s][i]) : per_slot[s][i];
      d.per_slot[s].push_back(r);
      if (i < d.counters.size()) {
        d.counters[i].raw += r.raw;
        d.counters[i].scaled += r.scaled;
        d.counters[i].enabled += r.enabled;
        d.counters[i].running += r.running;
      }
    }
  }
  return d;
}

namespace {

constexpr std::uint64_t kTimes = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;

EventAttr prepared(const CounterSetOptions& o, std::size_t i, bool grouped) {
  EventAttr a = o.events[i].attr;
  const bool leader = i == 0 || !grouped;
  a.read_format(grouped ? (kTimes | PERF_FORMAT_GROUP | PERF_FORMAT_ID) : kTimes);
  a.sample_period(0);
  a.flag(Flag::kInherit, o.inherit);
  // Members follow their leader's state; only a leader is disabled, pinned or exclusive.
  a.flag(Flag::kDisabled, leader);
  a.flag(Flag::kEnableOnExec, leader && o.enable_on_exec);
  a.flag(Flag::kPinned, leader && o.pinned);
  a.flag(Flag::kExclusive, leader && o.exclusive);
  return a;
}

/// Opens every event on every slot, grouped or not.
Result<std::pair<std::vector<CounterSlot>, std::vector<std::vector<Event>>>> open_all(
    const CounterSetOptions& o,
    bool grouped) {
  std::vector<CounterSlot> slots;
  std::vector<std::vector<Event>> per_slot;
  for (const CounterSlot& slot : o.slots) {
    std::vector<Event> events;
    bool gone = false;
    for (std::size_t i = 0; i < o.events.size(); ++i) {
      EventAttr a = prepared(o, i, grouped);
      OpenTarget t{.pid = slot.pid, .cpu = slot.cpu, .flags = slot.flags};
      if (grouped && i > 0)
        t.group_fd = events.front().fd();
      auto ev = Event::open(a, t);
      if (!ev) {
        Failure f = std::move(ev).error();
        // A thread listed a moment ago that has exited: nothing of it to count.
        if (f.errno_value() == ESRCH && slot.pid > 0 && (slot.flags & PERF_FLAG_PID_CGROUP) == 0 &&
            o.slots.size() > 1) {
          gone = true;
          break;
        }
        f.message = fmt::format("{}: {}", o.events[i].name, f.message);
        return fail(std::move(f));
      }
      events.push_back(std::move(*ev));
    }
    if (gone)
      continue;
    slots.push_back(slot);
    per_slot.push_back(std::move(events));
  }
  if (slots.empty())
    return fail(ESRCH, "perf: every task to count has exited");
  return std::make_pair(std::move(slots), std::move(per_slot));
}

}  // namespace

Result<std::vector<pid_t>> process_threads(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.empty() && name.size() < 10 &&
        std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }))
      out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  if (out.empty())
    return fail(ESRCH, fmt::format("perf: no process {}", pid), "ps -e lists the processes");
  std::sort(out.begin(), out.end());
  return out;
}

Result<CounterSet> CounterSet::open(const CounterSetOptions& options) {
  if (options.events.empty())
    return fail(EINVAL, "perf: a counter set needs at least one event");
  if (options.slots.empty())
    return fail(EINVAL, "perf: a counter set needs at least one CPU or task");
  CounterSet set;
  for (const auto& e : options.events)
    set.names_.push_back(e.name);
  const bool want_group = options.group && options.events.size() > 1;
  auto opened = open_all(options, want_group);
  if (!opened && want_group && options.weak) {
    // perf's weak group: what cannot be scheduled as one is counted as separate events.
    set.fallback_reason_ = opened.error().message;
    opened = open_all(options, false);
  }
  if (!opened)
    return fail(std::move(opened).error());
  set.grouped_ = want_group && set.fallback_reason_.empty();
  set.slots_ = std::move(opened->first);
  for (auto& events : opened->second)
    set.per_slot_.push_back({std::move(events)});
  return set;
}

Status CounterSet::enable() const {
  for (const auto& s : per_slot_) {
    if (grouped_) {
      TRACER_TRY(s.events.front().enable(true));
      continue;
    }
    for (const auto& e : s.events)
      TRACER_TRY(e.enable());
  }
  return {};
}

Status CounterSet::disable() const {
  for (const auto& s : per_slot_) {
    if (grouped_) {
      TRACER_TRY(s.events.front().disable(true));
      continue;
    }
    for (const auto& e : s.events)
      TRACER_TRY(e.disable());
  }
  return {};
}

Status CounterSet::reset() const {
  for (const auto& s : per_slot_) {
    if (grouped_) {
      TRACER_TRY(s.events.front().reset(true));
      continue;
    }
    for (const auto& e : s.events)
      TRACER_TRY(e.reset());
  }
  return {};
}

CounterSetReading CounterSet::read() const {
  CounterSetReading r;
  r.counters.resize(names_.size());
  r.per_slot.assign(per_slot_.size(), std::vector<CounterReading>(names_.size()));
  for (std::size_t s = 0; s < per_slot_.size(); ++s) {
    auto& slot = r.per_slot[s];
    if (grouped_) {
      auto c = per_slot_[s].events.front().read();
      if (!c)
        continue;
      for (std::size_t i = 0; i < c->values.size() && i < slot.size(); ++i) {
        slot[i].raw = c->values[i].value;
        slot[i].enabled = c->time_enabled;
        slot[i].running = c->time_running;
      }
    } else {
      for (std::size_t i = 0; i < per_slot_[s].events.size() && i < slot.size(); ++i) {
        auto c = per_slot_[s].events[i].read();
        if (!c || c->values.empty())
          continue;
        slot[i].raw = c->values[0].value;
        slot[i].enabled = c->time_enabled;
        slot[i].running = c->time_running;
      }
    }
    for (std::size_t i = 0; i < slot.size(); ++i) {
      slot[i].scaled = scale(slot[i].raw, slot[i].enabled, slot[i].running);
      r.counters[i].raw += slot[i].raw;
      r.counters[i].scaled += slot[i].scaled;
      r.counters[i].enabled += slot[i].enabled;
      r.counters[i].running += slot[i].running;
    }
  }
  return r;
}

std::size_t CounterSet::fd_count() const noexcept {
  std::size_t n = 0;
  for (const auto& s : per_slot_)
    n += s.events.size();
  return n;
}

}  // namespace tracer::perf
