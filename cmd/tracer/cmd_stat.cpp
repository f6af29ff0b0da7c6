// tracer stat: count events (software, tracepoints) system-wide, for a pid, or for a command
// started by tracer, with interval output. The live counting demo of the README.
#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
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
  std::vector<std::string> command;
};

struct Counter {
  std::string name;
  std::string unit;
  std::vector<perf::Event> events;  // one per CPU, or one for a task
  double last = 0;
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

perf::EventAttr resolve(const std::string& name, std::optional<tracefs::Tracefs>& fs) {
  perf::EventAttr a;
  if (auto sw = perf::find_software_event(name)) {
    a.type(PERF_TYPE_SOFTWARE).config(sw->config);
    return a;
  }
  if (auto tp = tracefs::split_tracepoint(name)) {
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
    return a;
  }
  std::string names;
  for (const auto& e : perf::software_events())
    names += std::string(names.empty() ? "" : ", ") + std::string(e.name);
  throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
              fmt::format("unknown event '{}'", name),
              fmt::format("use a software event ({}) or a tracepoint system:event "
                          "(see `tracer list tracepoints`)",
                          names));
}

std::chrono::nanoseconds duration_option(const std::string& text, const char* what) {
  auto d = parse_duration(text);
  if (!d) {
    throw Error(ErrorCategory::kUsage, d.error().code,
                fmt::format("--{}: {}", what, d.error().message), d.error().hint);
  }
  return *d;
}

void print_counts(const std::vector<Counter>& counters,
                  const std::vector<double>& values,
                  double seconds) {
  for (std::size_t i = 0; i < counters.size(); ++i) {
    const auto& c = counters[i];
    const double v = values[i];
    if (c.unit == "ns") {
      fmt::print("{:>18.2f} msec  {:<28} # {:8.3f} CPUs utilized\n", v / 1e6, c.name,
                 seconds > 0 ? v / 1e9 / seconds : 0.0);
    } else {
      fmt::print("{:>18.0f}       {:<28} # {:10.1f}/s\n", v, c.name,
                 seconds > 0 ? v / seconds : 0.0);
    }
  }
}

int run_stat(const StatOptions& opts) {
  using clock = std::chrono::steady_clock;
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

  // A command is forked first and held on a pipe until its counters exist (enable_on_exec).
  pid_t child = -1;
  int go_pipe[2] = {-1, -1};
  if (command) {
    if (::pipe2(go_pipe, O_CLOEXEC) != 0)
      throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "pipe2 failed");
    child = ::fork();
    if (child == 0) {
      ::close(go_pipe[1]);
      char c;
      if (::read(go_pipe[0], &c, 1) != 1)
        ::_exit(127);
      std::vector<char*> argv;
      for (const auto& s : opts.command)
        argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "tracer: cannot run %s: %s\n", argv[0], std::strerror(errno));
      ::_exit(127);
    }
    ::close(go_pipe[0]);
  }

  std::optional<tracefs::Tracefs> fs;
  std::vector<int> cpus = {-1};
  if (system_wide) {
    auto online = perf::online_cpus();
    if (!online)
      throw Error(ErrorCategory::kRuntime, online.error());
    cpus = *online;
  }
  std::vector<Counter> counters;
  for (const auto& name : names) {
    perf::EventAttr a = resolve(name, fs);
    a.read_format(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
    Counter c{name, {}, {}, 0};
    if (auto sw = perf::find_software_event(name))
      c.unit = std::string(sw->unit);
    if (!system_wide)
      a.flag(perf::Flag::kInherit);
    if (command)
      a.flag(perf::Flag::kDisabled).flag(perf::Flag::kEnableOnExec);
    for (int cpu : cpus) {
      const pid_t pid = system_wide ? -1 : (command ? child : opts.pid);
      auto ev = perf::Event::open(a, {.pid = pid, .cpu = cpu});
      if (!ev) {
        if (child > 0)
          ::kill(child, SIGKILL);
        throw Error(ErrorCategory::kRuntime, ev.error());
      }
      c.events.push_back(std::move(*ev));
    }
    counters.push_back(std::move(c));
  }

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  const auto start = clock::now();
  if (command) {
    char c = 'g';
    if (::write(go_pipe[1], &c, 1) != 1)
      throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()},
                  "cannot start the command");
    ::close(go_pipe[1]);
  }
  auto read_all = [&] {
    std::vector<double> v(counters.size(), 0.0);
    for (std::size_t i = 0; i < counters.size(); ++i) {
      for (const auto& ev : counters[i].events) {
        auto r = ev.read();
        if (r)
          v[i] += r->values.at(0).scaled;
      }
    }
    return v;
  };

  // A -p process is watched through a pidfd (readable once it has exited, reaped or not): the
  // count ends with it, as perf stat -p's does.
  const bool watch_pid = !command && opts.pid > 0;
  const int pidfd = watch_pid ? static_cast<int>(::syscall(SYS_pidfd_open, opts.pid, 0)) : -1;
  const auto target_gone = [&] {
    if (!watch_pid)
      return false;
    if (pidfd < 0)
      return ::kill(opts.pid, 0) != 0 && errno == ESRCH;
    pollfd p{pidfd, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  };
  bool target_exited = false;
  int child_status = 0;
  auto next_tick = start + interval;
  std::vector<double> prev(counters.size(), 0.0);
  for (;;) {
    if (g_stop.load())
      break;
    if (duration.count() > 0 && clock::now() - start >= duration)
      break;
    if (child > 0 && ::waitpid(child, &child_status, WNOHANG) == child) {
      child = -1;
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
      fmt::print("--- {:.3f}s ---\n", std::chrono::duration<double>(clock::now() - start).count());
      print_counts(counters, delta, std::chrono::duration<double>(interval).count());
      std::fflush(stdout);
      next_tick += interval;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  const auto totals = read_all();
  std::string target = system_wide ? "system wide" : fmt::format("process {}", opts.pid);
  if (command) {
    target.clear();
    for (const auto& s : opts.command)
      target += (target.empty() ? "" : " ") + s;
  }
  fmt::print("\n Counter stats for '{}' ({:.2f} s):\n\n", target, seconds);
  print_counts(counters, totals, seconds);
  if (pidfd >= 0)
    ::close(pidfd);
  if (target_exited)
    fmt::print(stderr, "tracer: process {} exited\n", opts.pid);
  if (child > 0) {  // stopped early: do not leave the command behind
    ::kill(child, SIGTERM);
    ::waitpid(child, &child_status, 0);
  }
  if (command && WIFEXITED(child_status) && WEXITSTATUS(child_status) != 0) {
    fmt::print(stderr, "tracer: the command exited with status {}\n", WEXITSTATUS(child_status));
    if (WEXITSTATUS(child_status) == 127)
      return kExitRuntime;  // it could not be started
  }
  return kExitOk;
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
