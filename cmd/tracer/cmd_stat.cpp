// tracer stat: count events (software, tracepoints) system-wide, for a pid, or for a command
// started by tracer, with interval output. The live counting demo of the README.
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "common/edit_distance.hpp"
#include "tracer/duration.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

struct StatOptions {
  std::vector<std::string> events;
  bool all_cpus = false;
  int pid = -1;
  std::string duration;
  std::string interval;
  unsigned repeat = 1;
  std::vector<std::string> command;
};

struct Counter {
  std::string name;
  std::string unit;
  std::vector<perf::Event> events;  // one per CPU, or one for a task
};

const std::vector<std::string> kDefaultEvents = {
    "cpu-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "raw_syscalls:sys_enter",
    "sched:sched_switch",
    "sched:sched_process_exec",
};

struct HardwareEvent {
  std::string_view name;
  std::uint64_t config;
};

// perf's generic hardware event names (tools/perf/util/parse-events.c event_symbols_hw).
constexpr std::array kHardwareEvents = {
    HardwareEvent{"cycles", PERF_COUNT_HW_CPU_CYCLES},
    HardwareEvent{"cpu-cycles", PERF_COUNT_HW_CPU_CYCLES},
    HardwareEvent{"instructions", PERF_COUNT_HW_INSTRUCTIONS},
    HardwareEvent{"cache-references", PERF_COUNT_HW_CACHE_REFERENCES},
    HardwareEvent{"cache-misses", PERF_COUNT_HW_CACHE_MISSES},
    HardwareEvent{"branch-instructions", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    HardwareEvent{"branches", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    HardwareEvent{"branch-misses", PERF_COUNT_HW_BRANCH_MISSES},
    HardwareEvent{"bus-cycles", PERF_COUNT_HW_BUS_CYCLES},
    HardwareEvent{"stalled-cycles-frontend", PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    HardwareEvent{"idle-cycles-frontend", PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    HardwareEvent{"stalled-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    HardwareEvent{"idle-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    HardwareEvent{"ref-cycles", PERF_COUNT_HW_REF_CPU_CYCLES},
};

std::optional<HardwareEvent> find_hardware_event(std::string_view name) {
  for (const auto& h : kHardwareEvents) {
    if (h.name == name)
      return h;
  }
  return std::nullopt;
}

/// An -e event split into its name and perf's modifier suffix ("page-faults:u" ->
/// "page-faults", "u"; "sched:sched_switch:k" -> "sched:sched_switch", "k").
struct EventSpec {
  std::string name;
  std::string modifiers;
};

constexpr std::string_view kModifierChars = "ukhHGp";

bool is_generic_event(std::string_view name) {
  return perf::find_software_event(name).has_value() || find_hardware_event(name).has_value();
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
  for (const auto& e : kHardwareEvents)
    out.emplace_back(e.name);
  return out;
}

perf::EventAttr resolve(const std::string& text, std::optional<tracefs::Tracefs>& fs) {
  const EventSpec spec = split_modifiers(text);
  const std::string& name = spec.name;
  perf::EventAttr a;
  if (auto sw = perf::find_software_event(name)) {
    a.type(PERF_TYPE_SOFTWARE).config(sw->config);
  } else if (auto hw = find_hardware_event(name)) {
    a.type(PERF_TYPE_HARDWARE).config(hw->config);
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

std::chrono::nanoseconds duration_option(const std::string& text, const char* what) {
  auto d = parse_duration(text);
  if (!d) {
    throw Error(ErrorCategory::kUsage, d.error().code,
                fmt::format("--{}: {}", what, d.error().message), d.error().hint);
  }
  return *d;
}

/// One counter's value over the runs: the mean, and perf stat's "+- x%": the standard
/// deviation of the mean relative to the mean (tools/perf/util/stat.c stddev_stats).
struct Summary {
  double mean = 0;
  std::optional<double> rel_stddev_pct;  // with two runs or more
};

Summary summarize(const std::vector<double>& runs) {
  Summary s;
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

std::string stddev_text(const Summary& s) {
  return s.rel_stddev_pct ? fmt::format("  ( +- {:5.2f}% )", *s.rel_stddev_pct) : std::string{};
}

// The counts go to stderr, as perf stat's do: `tracer stat -- cmd >/dev/null` keeps them, and
// the command's own stdout stays its own.
void print_counts(const std::vector<Counter>& counters,
                  const std::vector<Summary>& values,
                  double seconds) {
  for (std::size_t i = 0; i < counters.size(); ++i) {
    const auto& c = counters[i];
    const double v = values[i].mean;
    if (c.unit == "ns") {
      fmt::print(stderr, "{:>18.2f} msec  {:<28} # {:8.3f} CPUs utilized{}\n", v / 1e6, c.name,
                 seconds > 0 ? v / 1e9 / seconds : 0.0, stddev_text(values[i]));
    } else {
      fmt::print(stderr, "{:>18.0f}       {:<28} # {:10.1f}/s{}\n", v, c.name,
                 seconds > 0 ? v / seconds : 0.0, stddev_text(values[i]));
    }
  }
}

std::vector<Summary> single(const std::vector<double>& values) {
  std::vector<Summary> out;
  for (double v : values)
    out.push_back({.mean = v, .rel_stddev_pct = std::nullopt});
  return out;
}

/// What one measurement gave.
struct RunResult {
  std::vector<double> totals;
  double seconds = 0;
  int exit_code = kExitOk;  // the command's, as a shell reports it (128+N for signal N)
  bool stopped = false;     // SIGINT/SIGTERM
};

[[noreturn]] void open_failed(const std::string& name, const perf::EventAttr& a, const Failure& f) {
  const int err = f.errno_value();
  if (a.type() == PERF_TYPE_HARDWARE && (err == ENOENT || err == EOPNOTSUPP)) {
    // A VM or a CPU without a (virtualised) PMU: the name is right, the machine lacks it.
    throw Error(ErrorCategory::kUnsupported, f.code,
                fmt::format("{}: no hardware PMU on this machine (perf_event_open {})", name,
                            err == ENOENT ? "ENOENT" : "EOPNOTSUPP"),
                "count software events (cpu-clock, task-clock, page-faults, ...) or "
                "tracepoints instead; `tracer list pmus` shows what this machine has");
  }
  if ((err == EINVAL || err == EOPNOTSUPP) &&
      (a.has(perf::Flag::kExcludeKernel) || a.has(perf::Flag::kExcludeUser) ||
       a.has(perf::Flag::kExcludeHv) || a.raw()->precise_ip != 0)) {
    throw Error(ErrorCategory::kUnsupported, f.code,
                fmt::format("{}: this event does not take its modifier here: {}", name, f.message),
                "leave out the modifier");
  }
  throw Error(err == EACCES || err == EPERM ? ErrorCategory::kPermission : ErrorCategory::kRuntime,
              f.code, fmt::format("{}: {}", name, f.message), f.hint);
}

class Measurement {
 public:
  Measurement(const StatOptions& opts, const std::vector<std::string>& names)
      : opts_(opts), names_(names) {}

  RunResult run(std::chrono::nanoseconds duration, std::chrono::nanoseconds interval) {
    using clock = std::chrono::steady_clock;
    const bool command = !opts_.command.empty();
    const bool system_wide = opts_.all_cpus || (!command && opts_.pid < 0);

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
    }
    counters_.clear();
    for (const auto& name : names_) {
      perf::EventAttr a = resolve(name, fs_);
      a.read_format(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
      Counter c{name, {}, {}};
      if (auto sw = perf::find_software_event(split_modifiers(name).name))
        c.unit = std::string(sw->unit);
      if (!system_wide)
        a.flag(perf::Flag::kInherit);
      if (command)
        a.flag(perf::Flag::kDisabled).flag(perf::Flag::kEnableOnExec);
      for (int cpu : cpus) {
        const pid_t pid = system_wide ? -1 : (command ? child : opts_.pid);
        auto ev = perf::Event::open(a, {.pid = pid, .cpu = cpu});
        if (!ev)
          open_failed(name, a, ev.error());
        c.events.push_back(std::move(*ev));
      }
      counters_.push_back(std::move(c));
    }

    const auto start = clock::now();
    if (command) {
      char c = 'g';
      if (::write(go_pipe[1], &c, 1) != 1)
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()},
                    "cannot start the command");
      ::close(go_pipe[1]);
      go_guard.fd = -1;
    }
    auto read_all = [&] {
      std::vector<double> v(counters_.size(), 0.0);
      for (std::size_t i = 0; i < counters_.size(); ++i) {
        for (const auto& ev : counters_[i].events) {
          auto r = ev.read();
          if (r)
            v[i] += r->values.at(0).scaled;
        }
      }
      return v;
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
    bool target_exited = false;
    bool child_done = false;
    int child_status = 0;
    auto next_tick = start + interval;
    std::vector<double> prev(counters_.size(), 0.0);
    for (;;) {
      if (g_stop.load()) {
        result.stopped = true;
        break;
      }
      if (duration.count() > 0 && clock::now() - start >= duration)
        break;
      if (child > 0 && ::waitpid(child, &child_status, WNOHANG) == child) {
        child = -1;
        child_done = true;
        break;
      }
      if (target_gone()) {
        target_exited = true;
        break;
      }
      if (interval.count() > 0 && clock::now() >= next_tick) {
        const auto now = read_all();
        std::vector<double> delta(now.size());
        for (std::size_t i = 0; i < now.size(); ++i)
          delta[i] = now[i] - prev[i];
        prev = now;
        fmt::print(stderr, "--- {:.3f}s ---\n",
                   std::chrono::duration<double>(clock::now() - start).count());
        print_counts(counters_, single(delta), std::chrono::duration<double>(interval).count());
        std::fflush(stderr);
        next_tick += interval;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    result.seconds = std::chrono::duration<double>(clock::now() - start).count();
    result.totals = read_all();
    if (target_exited)
      fmt::print(stderr, "tracer: process {} exited\n", opts_.pid);
    if (child > 0) {  // stopped early: do not leave the command behind
      ::kill(child, SIGTERM);
      ::waitpid(child, &child_status, 0);
      child = -1;
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

  [[nodiscard]] const std::vector<Counter>& counters() const noexcept { return counters_; }

 private:
  const StatOptions& opts_;
  const std::vector<std::string>& names_;
  std::optional<tracefs::Tracefs> fs_;
  std::vector<Counter> counters_;
};

int run_stat(const StatOptions& opts) {
  const auto& names = opts.events.empty() ? kDefaultEvents : opts.events;
  const bool command = !opts.command.empty();
  const bool system_wide = opts.all_cpus || (!command && opts.pid < 0);
  std::chrono::nanoseconds duration{0};
  if (!opts.duration.empty())
    duration = duration_option(opts.duration, "duration");
  if (duration.count() == 0 && system_wide && !command && opts.pid < 0)
    duration = std::chrono::seconds(3);
  std::chrono::nanoseconds interval{0};
  if (!opts.interval.empty())
    interval = duration_option(opts.interval, "interval");
  if (opts.repeat == 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "-r/--repeat: give 1 or more runs");
  }
  if (opts.repeat > 1 && interval.count() > 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "-r/--repeat and -I/--interval do not go together", "leave out one of them");
  }
  if (opts.repeat > 1 && opts.pid > 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "-r/--repeat needs a command (or -a with -d), not -p",
                "tracer stat -r 5 -- COMMAND");
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  Measurement m(opts, names);
  std::vector<std::vector<double>> per_counter(names.size());
  std::vector<double> seconds;
  int exit_code = kExitOk;
  for (unsigned run = 0; run < opts.repeat; ++run) {
    const RunResult r = m.run(duration, interval);
    for (std::size_t i = 0; i < r.totals.size(); ++i)
      per_counter[i].push_back(r.totals[i]);
    seconds.push_back(r.seconds);
    exit_code = r.exit_code;
    if (r.stopped)
      break;
  }

  std::string target = system_wide ? "system wide" : fmt::format("process {}", opts.pid);
  if (command) {
    target.clear();
    for (const auto& s : opts.command)
      target += (target.empty() ? "" : " ") + s;
  }
  std::vector<Summary> values;
  for (const auto& runs : per_counter)
    values.push_back(summarize(runs));
  const Summary time = summarize(seconds);
  if (seconds.size() > 1) {
    fmt::print(stderr, "\n Counter stats for '{}' ({} runs):\n\n", target, seconds.size());
  } else {
    fmt::print(stderr, "\n Counter stats for '{}' ({:.2f} s):\n\n", target, time.mean);
  }
  print_counts(m.counters(), values, time.mean);
  if (seconds.size() > 1) {
    fmt::print(stderr, "\n{:>18.6f} +- {:.6f} seconds time elapsed{}\n", time.mean,
               time.rel_stddev_pct.value_or(0) * time.mean / 100.0, stddev_text(time));
  }
  if (command && exit_code != 0)
    fmt::print(stderr, "tracer: the command exited with status {}\n", exit_code);
  return exit_code;
}

}  // namespace

void add_stat_command(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<StatOptions>();
  auto* cmd = app.add_subcommand(
      "stat", "Count events system-wide, for a process, or for a command (like perf stat)");
  cmd->add_option("-e,--event", opts->events,
                  "Event to count: a software event (cpu-clock, page-faults, ...) or a tracepoint "
                  "system:event; repeatable or comma-separated. Default: a useful set")
      ->allow_extra_args(false)
      ->delimiter(',');
  cmd->add_flag("-a,--all-cpus", opts->all_cpus, "Count on every CPU (default without -p/command)");
  cmd->add_option("-p,--pid", opts->pid, "Count for this process (and the children it starts)");
  cmd->add_option("-d,--duration", opts->duration,
                  "Stop after this long (e.g. 3s; default 3s system-wide)");
  cmd->add_option("-I,--interval", opts->interval, "Print counts every interval (e.g. 1s)");
  cmd->add_option("-r,--repeat", opts->repeat,
                  "Run the command this many times and print the mean of each count with its "
                  "variation (+- the standard deviation of the mean, in %)");
  // Everything from the first positional on (or after --) is the command, passed through as is.
  cmd->prefix_command(true);
  cmd->footer("Usage with a command: tracer stat [OPTIONS] [--] COMMAND [ARGS...]");
  cmd->callback([opts, cmd, &run] {
    opts->command = cmd->remaining();
    const auto& tail = trailing_args();
    opts->command.insert(opts->command.end(), tail.begin(), tail.end());
    run = [opts] { return run_stat(*opts); };
  });
}

}  // namespace tracer::cli
