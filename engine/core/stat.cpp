// Counting events as perf stat does (see stat.hpp).
#include "tracer/stat.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <string_view>
#include <thread>

#include "tracer/common/edit_distance.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/hw_events.hpp"
#include "tracer/perf/software.hpp"

namespace tracer::core {
namespace {

struct Counter {
  StatCounter info;
  std::vector<perf::Event> events;  // one per CPU, or one for a task
};

/// An -e event split into its name and perf's modifier suffix ("page-faults:u" ->
/// "page-faults", "u"; "sched:sched_switch:k" -> "sched:sched_switch", "k").
struct EventSpec {
  std::string name;
  std::string modifiers;
};

constexpr std::string_view kModifierChars = "ukhHGp";

bool is_generic_event(std::string_view name) {
  return perf::find_software_event(name).has_value() ||
         perf::find_hardware_event(name).has_value() || perf::find_cache_event(name).has_value();
}

EventSpec split_modifiers(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return {text, {}};
  const std::string base = text.substr(0, colon);
  const std::string mods = text.substr(colon + 1);
  // A software/hardware event has no colon of its own; a tracepoint has one (system:event), so
  // its modifiers follow a second one, as in perf.
  const bool generic = is_generic_event(base);
  const bool tracepoint = base.find(':') != std::string::npos;
  if (generic || tracepoint)
    return {base, mods};
  return {text, {}};
}

/// perf's modifiers (tools/perf/util/parse-events.c): u, k and h keep only the privilege
/// levels named, H and G only host or guest counting, p asks for more precision.
void apply_modifiers(perf::EventAttr& a, const EventSpec& spec, const std::string& text) {
  bool u = false, k = false, h = false, host = false, guest = false;
  std::uint8_t precise = 0;
  for (char c : spec.modifiers) {
    switch (c) {
      case 'u':
        u = true;
        break;
      case 'k':
        k = true;
        break;
      case 'h':
        h = true;
        break;
      case 'H':
        host = true;
        break;
      case 'G':
        guest = true;
        break;
      case 'p':
        ++precise;
        break;
      default:
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    fmt::format("event '{}': unknown modifier '{}'", text, c),
                    fmt::format("modifiers are letters of '{}' after the event, as in perf: "
                                "page-faults:u (user only), sched:sched_switch:k (kernel only)",
                                kModifierChars));
    }
  }
  if (spec.modifiers.empty())
    return;
  if (u || k || h) {
    a.flag(perf::Flag::kExcludeUser, !u).flag(perf::Flag::kExcludeKernel, !k);
    a.flag(perf::Flag::kExcludeHv, !h);
  }
  if (host != guest) {
    a.flag(perf::Flag::kExcludeGuest, host).flag(perf::Flag::kExcludeHost, guest);
  }
  if (precise > 3) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("event '{}': at most 3 'p' modifiers", text));
  }
  if (precise > 0)
    a.precise_ip(precise);
}

std::vector<std::string> generic_event_names() {
  std::vector<std::string> out;
  for (const auto& e : perf::software_events())
    out.emplace_back(e.name);
  for (const auto& e : perf::hardware_events())
    out.emplace_back(e.name);
  return out;
}

}  // namespace

perf::EventAttr resolve_stat_event(const std::string& text, std::optional<tracefs::Tracefs>& fs) {
  const EventSpec spec = split_modifiers(text);
  const std::string& name = spec.name;
  perf::EventAttr a;
  if (auto sw = perf::find_software_event(name)) {
    a.type(PERF_TYPE_SOFTWARE).config(sw->config);
  } else if (auto hw = perf::find_hardware_event(name)) {
    a.type(PERF_TYPE_HARDWARE).config(*hw);
  } else if (auto cache = perf::find_cache_event(name)) {
    a.type(PERF_TYPE_HW_CACHE).config(*cache);
  } else if (auto tp = tracefs::split_tracepoint(name)) {
    if (!fs) {
      auto opened = tracefs::Tracefs::open();
      if (!opened)
        throw Error(ErrorCategory::kRuntime, opened.error());
      fs = std::move(*opened);
    }
    auto id = fs->tracepoint_id(*tp);
    // A tracepoint named on the command line that does not exist is a usage error (exit 2).
    if (!id) {
      throw Error(
          id.error().errno_value() == ENOENT ? ErrorCategory::kUsage : ErrorCategory::kRuntime,
          id.error());
    }
    a.type(PERF_TYPE_TRACEPOINT).config(*id);
  } else {
    const auto names = generic_event_names();
    const auto near =
        tracer::detail::nearest(name, names, {.max_distance = 2, .related_only = false});
    std::string hint;
    if (!near.empty()) {
      hint = fmt::format("did you mean '{}'?", near.front());
    } else {
      std::string list;
      for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
      hint = fmt::format(
          "use a software or hardware event ({}) or a tracepoint system:event "
          "(see `tracer list tracepoints`), optionally with a modifier (:u, :k, ...)",
          list);
    }
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("unknown event '{}'", text), hint);
  }
  apply_modifiers(a, spec, text);
  return a;
}

StatSummary summarize(const std::vector<double>& runs) {
  StatSummary s;
  if (runs.empty())
    return s;
  for (double v : runs)
    s.mean += v;
  s.mean /= static_cast<double>(runs.size());
  if (runs.size() < 2)
    return s;
  double var = 0;
  for (double v : runs)
    var += (v - s.mean) * (v - s.mean);
  var /= static_cast<double>(runs.size() - 1);
  const double stddev_of_mean = std::sqrt(var / static_cast<double>(runs.size()));
  s.rel_stddev_pct = s.mean != 0 ? 100.0 * stddev_of_mean / s.mean : 0.0;
  return s;
}

namespace {

/// What one measurement gave.
struct RunResult {
  std::vector<double> totals;
  std::vector<StatRuntime> runtime;
  std::optional<double> user_s, sys_s;  // a command's rusage
  double seconds = 0;
  int exit_code = 0;           // the command's, as a shell reports it (128+N for signal N)
  bool stopped = false;        // `stop` was set (SIGINT/SIGTERM)
  bool target_exited = false;  // the pid target exited
};

Error open_failed(const std::string& name, const perf::EventAttr& a, const Failure& f) {
  const int err = f.errno_value();
  if (a.type() == PERF_TYPE_HARDWARE && (err == ENOENT || err == EOPNOTSUPP)) {
    // A VM or a CPU without a (virtualised) PMU: the name is right, the machine lacks it.
    return {ErrorCategory::kUnsupported, f.code,
            fmt::format("{}: no hardware PMU on this machine (perf_event_open {})", name,
                        err == ENOENT ? "ENOENT" : "EOPNOTSUPP"),
            "count software events (cpu-clock, task-clock, page-faults, ...) or "
            "tracepoints instead; `tracer list pmus` shows what this machine has"};
  }
  if ((err == EINVAL || err == EOPNOTSUPP) &&
      (a.has(perf::Flag::kExcludeKernel) || a.has(perf::Flag::kExcludeUser) ||
       a.has(perf::Flag::kExcludeHv) || a.raw()->precise_ip != 0)) {
    return {ErrorCategory::kUnsupported, f.code,
            fmt::format("{}: this event does not take its modifier here: {}", name, f.message),
            "leave out the modifier"};
  }
  return {err == EACCES || err == EPERM ? ErrorCategory::kPermission : ErrorCategory::kRuntime,
          f.code, fmt::format("{}: {}", name, f.message), f.hint};
}

class Measurement {
 public:
  explicit Measurement(const StatOptions& opts) : opts_(opts) {}

  RunResult run(const std::atomic<bool>& stop,
                const std::function<void(const StatInterval&)>& on_interval) {
    using clock = std::chrono::steady_clock;
    const auto duration = opts_.duration;
    const auto interval = opts_.interval;
    const bool command = !opts_.command.empty();
    const bool system_wide = opts_.system_wide();

    // A command is forked first and held on a pipe until its counters exist (enable_on_exec).
    // A second pipe carries exec's errno back: "cannot run" is not the command's own 127.
    pid_t child = -1;
    int go_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    if (command) {
      if (::pipe2(go_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0)
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "pipe2 failed");
      child = ::fork();
      if (child < 0)
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "fork failed");
      if (child == 0) {
        ::close(go_pipe[1]);
        ::close(err_pipe[0]);
        char c;
        if (::read(go_pipe[0], &c, 1) != 1)
          ::_exit(127);
        std::vector<char*> argv;
        for (const auto& s : opts_.command)
          argv.push_back(const_cast<char*>(s.c_str()));
        argv.push_back(nullptr);
        ::execvp(argv[0], argv.data());
        const int err = errno;
        [[maybe_unused]] auto n = ::write(err_pipe[1], &err, sizeof err);
        ::_exit(127);
      }
      ::close(go_pipe[0]);
      ::close(err_pipe[1]);
    }
    struct ChildGuard {
      pid_t& pid;
      ~ChildGuard() {
        if (pid > 0) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, nullptr, 0);
        }
      }
    } guard{child};
    struct FdGuard {
      int fd;
      ~FdGuard() {
        if (fd >= 0)
          ::close(fd);
      }
    } go_guard{go_pipe[1]}, err_guard{err_pipe[0]};

    std::vector<int> cpus = {-1};
    if (system_wide) {
      auto online = perf::online_cpus();
      if (!online)
        throw Error(ErrorCategory::kRuntime, online.error());
      cpus = *online;
      if (!opts_.cpus.empty()) {  // -C: those of them
        for (int c : opts_.cpus) {
          if (std::find(online->begin(), online->end(), c) == online->end()) {
            throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                        fmt::format("-C: CPU {} is not online", c),
                        fmt::format("online CPUs: {}", fmt::join(*online, ",")));
          }
        }
        cpus = opts_.cpus;
      }
    }
    counters_.clear();
    std::optional<Error> unsupported;  // the first event this machine cannot count
    for (const auto& name : opts_.events) {
      perf::EventAttr a = resolve_stat_event(name, fs_);
      a.read_format(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
      Counter c{{name, {}}, {}};
      if (auto sw = perf::find_software_event(split_modifiers(name).name))
        c.info.unit = std::string(sw->unit);
      if (!system_wide && !opts_.no_inherit)
        a.flag(perf::Flag::kInherit);
      // A command's own events start at its exec. System-wide events (-a -- CMD) count every
      // CPU for the command's life: an event of no task is never enabled by an exec, so they
      // count from their open (the command is held until then).
      if (command && !system_wide)
        a.flag(perf::Flag::kDisabled).flag(perf::Flag::kEnableOnExec);
      for (int cpu : cpus) {
        const pid_t pid = system_wide ? -1 : (command ? child : opts_.pid);
        auto ev = perf::Event::open(a, {.pid = pid, .cpu = cpu});
        if (!ev) {
          Error e = open_failed(name, a, ev.error());
          if (e.category() != ErrorCategory::kUnsupported)
            throw e;
          // The others count; this one is perf stat's "<not supported>" row.
          c.info.supported = false;
          c.info.why = e.what();
          c.events.clear();
          if (!unsupported)
            unsupported = std::move(e);
          break;
        }
        c.events.push_back(std::move(*ev));
      }
      counters_.push_back(std::move(c));
    }
    if (unsupported && std::none_of(counters_.begin(), counters_.end(),
                                    [](const Counter& c) { return c.info.supported; }))
      throw *unsupported;
    infos_.clear();
    for (const auto& c : counters_)
      infos_.push_back(c.info);

    const auto start = clock::now();
    if (opts_.on_counting && !counting_said_) {
      counting_said_ = true;  // the first run only
      opts_.on_counting();
    }
    if (command) {
      char c = 'g';
      if (::write(go_pipe[1], &c, 1) != 1)
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()},
                    "cannot start the command");
      ::close(go_pipe[1]);
      go_guard.fd = -1;
    }
    struct Reading {
      std::vector<double> values;
      std::vector<std::uint64_t> running, enabled;
    };
    auto read_all = [&] {
      Reading v{.values = std::vector<double>(counters_.size(), 0.0),
                .running = std::vector<std::uint64_t>(counters_.size(), 0),
                .enabled = std::vector<std::uint64_t>(counters_.size(), 0)};
      for (std::size_t i = 0; i < counters_.size(); ++i) {
        for (const auto& ev : counters_[i].events) {
          auto r = ev.read();
          if (!r)
            continue;
          v.values[i] += r->values.at(0).scaled;
          v.running[i] += r->time_running;
          v.enabled[i] += r->time_enabled;
        }
      }
      return v;
    };
    const auto runtime_of = [](std::uint64_t running, std::uint64_t enabled) {
      return StatRuntime{.running_ns = running,
                         .pct = enabled == 0 ? 100.0
                                             : 100.0 * static_cast<double>(running) /
                                                   static_cast<double>(enabled)};
    };

    // A -p process is watched through a pidfd (readable once it has exited, reaped or not):
    // the count ends with it, as perf stat -p's does.
    const bool watch_pid = !command && opts_.pid > 0;
    const int pidfd = watch_pid ? static_cast<int>(::syscall(SYS_pidfd_open, opts_.pid, 0)) : -1;
    FdGuard pidfd_guard{pidfd};
    const auto target_gone = [&] {
      if (!watch_pid)
        return false;
      if (pidfd < 0)
        return ::kill(opts_.pid, 0) != 0 && errno == ESRCH;
      pollfd p{pidfd, POLLIN, 0};
      return ::poll(&p, 1, 0) == 1;
    };
    RunResult result;
    bool child_done = false;
    bool stopped_child = false;  // ended here (the duration, a signal): reaped, its rusage read
    int child_status = 0;
    auto next_tick = start + interval;
    Reading prev{.values = std::vector<double>(counters_.size(), 0.0),
                 .running = std::vector<std::uint64_t>(counters_.size(), 0),
                 .enabled = std::vector<std::uint64_t>(counters_.size(), 0)};
    rusage usage{};
    // One interval's deltas since the previous (`length_s`: how long it was).
    const auto emit_interval = [&](double length_s) {
      auto now = read_all();
      std::vector<double> delta(now.values.size());
      std::vector<StatRuntime> runtime(now.values.size());
      for (std::size_t i = 0; i < now.values.size(); ++i) {
        delta[i] = now.values[i] - prev.values[i];
        runtime[i] = runtime_of(now.running[i] - prev.running[i], now.enabled[i] - prev.enabled[i]);
      }
      prev = std::move(now);
      if (on_interval) {
        on_interval(
            StatInterval{.counters = infos_,
                         .elapsed_s = std::chrono::duration<double>(clock::now() - start).count(),
                         .interval_s = length_s,
                         .deltas = std::move(delta),
                         .runtime = std::move(runtime)});
      }
    };
    for (;;) {
      if (stop.load()) {
        result.stopped = true;
        break;
      }
      if (duration.count() > 0 && clock::now() - start >= duration)
        break;
      if (child > 0 && ::wait4(child, &child_status, WNOHANG, &usage) == child) {
        child = -1;
        child_done = true;
        break;
      }
      if (target_gone()) {
        result.target_exited = true;
        break;
      }
      if (interval.count() > 0 && clock::now() >= next_tick) {
        emit_interval(std::chrono::duration<double>(interval).count());
        next_tick += interval;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The last, partial interval up to the end, as perf stat prints it (what came after the
    // last full one would be in no interval).
    if (interval.count() > 0) {
      const auto since = clock::now() - (next_tick - interval);
      if (since > std::chrono::milliseconds(1))
        emit_interval(std::chrono::duration<double>(since).count());
    }
    result.seconds = std::chrono::duration<double>(clock::now() - start).count();
    {
      const Reading total = read_all();
      result.totals = total.values;
      for (std::size_t i = 0; i < total.values.size(); ++i)
        result.runtime.push_back(runtime_of(total.running[i], total.enabled[i]));
    }
    if (child > 0) {  // stopped early: do not leave the command behind
      ::kill(child, SIGTERM);
      ::wait4(child, &child_status, 0, &usage);
      child = -1;
      stopped_child = true;
    }
    if (command &&
        (child_done || stopped_child)) {  // the command's CPU time, its children's included
      const auto secs = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
      };
      result.user_s = secs(usage.ru_utime);
      result.sys_s = secs(usage.ru_stime);
    }
    if (command) {
      int exec_errno = 0;
      if (::read(err_pipe[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
        throw Error(
            ErrorCategory::kRuntime, {exec_errno, std::generic_category()},
            fmt::format("cannot run '{}': {}", opts_.command.front(), std::strerror(exec_errno)),
            "check the command's name and PATH");
      }
      // The command's status, as perf stat and a shell report it. A command tracer stopped
      // (--duration) did not fail.
      if (child_done || result.stopped) {
        if (WIFEXITED(child_status))
          result.exit_code = WEXITSTATUS(child_status);
        else if (WIFSIGNALED(child_status))
          result.exit_code = 128 + WTERMSIG(child_status);
      }
    }
    return result;
  }

  [[nodiscard]] const std::vector<StatCounter>& counters() const noexcept { return infos_; }

 private:
  const StatOptions& opts_;
  bool counting_said_ = false;  // opts_.on_counting was called
  std::optional<tracefs::Tracefs> fs_;
  std::vector<Counter> counters_;
  std::vector<StatCounter> infos_;  // counters_' names and units
};

}  // namespace

StatResult count_events(const StatOptions& options,
                        const std::atomic<bool>& stop,
                        const std::function<void(const StatInterval&)>& on_interval) {
  Measurement m(options);
  std::vector<std::vector<double>> per_counter(options.events.size());
  std::vector<double> seconds, user, sys;
  StatResult result;
  for (unsigned run = 0; run < options.repeat; ++run) {
    const RunResult r = m.run(stop, on_interval);
    for (std::size_t i = 0; i < r.totals.size(); ++i)
      per_counter[i].push_back(r.totals[i]);
    seconds.push_back(r.seconds);
    result.runtime = r.runtime;
    if (r.user_s && r.sys_s) {
      user.push_back(*r.user_s);
      sys.push_back(*r.sys_s);
    }
    result.exit_code = r.exit_code;
    result.target_exited = result.target_exited || r.target_exited;
    if (r.stopped)
      break;
  }
  result.counters = m.counters();
  for (const auto& runs : per_counter)
    result.values.push_back(summarize(runs));
  result.seconds = summarize(seconds);
  if (!user.empty()) {
    result.user_s = summarize(user);
    result.sys_s = summarize(sys);
  }
  result.runs = seconds.size();
  return result;
}

}  // namespace tracer::core
