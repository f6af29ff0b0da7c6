// tracer stat: count events (software, tracepoints) system-wide, for a pid, or for a command
// started by tracer, with interval output. The live counting demo of the README.
#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tracer/duration.hpp"
#include "tracer/error.hpp"
#include "tracer/stat.hpp"

namespace tracer::cli {
namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  g_stop.store(true);
}

struct StatCliOptions {
  std::vector<std::string> events;
  bool all_cpus = false;
  int pid = -1;
  std::string duration;
  std::string interval;
  unsigned repeat = 1;
  std::vector<std::string> command;
  int ready_fd = -1;
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

std::chrono::nanoseconds duration_option(const std::string& text, const char* what) {
  auto d = parse_duration(text);
  if (!d) {
    throw Error(ErrorCategory::kUsage, d.error().code,
                fmt::format("--{}: {}", what, d.error().message), d.error().hint);
  }
  return *d;
}

std::string stddev_text(const core::StatSummary& s) {
  return s.rel_stddev_pct ? fmt::format("  ( +- {:5.2f}% )", *s.rel_stddev_pct) : std::string{};
}

// The counts go to stderr, as perf stat's do: `tracer stat -- cmd >/dev/null` keeps them, and
// the command's own stdout stays its own.
void print_counts(const std::vector<core::StatCounter>& counters,
                  const std::vector<core::StatSummary>& values,
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

std::vector<core::StatSummary> single(const std::vector<double>& values) {
  std::vector<core::StatSummary> out;
  for (double v : values)
    out.push_back({.mean = v, .rel_stddev_pct = std::nullopt});
  return out;
}

int run_stat(const StatCliOptions& opts) {
  core::StatOptions so{.events = opts.events.empty() ? kDefaultEvents : opts.events,
                       .all_cpus = opts.all_cpus,
                       .pid = opts.pid,
                       .command = opts.command,
                       .repeat = opts.repeat};
  check_ready_fd(opts.ready_fd);
  int ready_fd = opts.ready_fd;
  so.on_counting = [&ready_fd] { signal_ready(ready_fd); };
  const bool command = !opts.command.empty();
  const bool system_wide = so.system_wide();
  if (!opts.duration.empty())
    so.duration = duration_option(opts.duration, "duration");
  if (so.duration.count() == 0 && system_wide && !command && opts.pid < 0)
    so.duration = std::chrono::seconds(3);
  if (!opts.interval.empty()) {
    // perf stat's habit: -I takes milliseconds; a unit (500ms, 1s) is accepted too.
    const bool bare = std::all_of(opts.interval.begin(), opts.interval.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
    so.interval = duration_option(bare ? opts.interval + "ms" : opts.interval, "interval");
    if (so.interval < std::chrono::milliseconds(10)) {
      throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                  "-I/--interval: at least 10 ms", "-I 1000 prints every second");
    }
  }
  if (opts.repeat == 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "-r/--repeat: give 1 or more runs");
  }
  if (opts.repeat > 1 && so.interval.count() > 0) {
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

  const core::StatResult r = core::count_events(so, g_stop, [](const core::StatInterval& i) {
    fmt::print(stderr, "--- {:.3f}s ---\n", i.elapsed_s);
    print_counts(i.counters, single(i.deltas), i.interval_s);
    std::fflush(stderr);
  });
  if (r.target_exited)
    fmt::print(stderr, "tracer: process {} exited\n", opts.pid);

  std::string target = system_wide ? "system wide" : fmt::format("process {}", opts.pid);
  if (command) {
    target.clear();
    for (const auto& s : opts.command)
      target += (target.empty() ? "" : " ") + s;
  }
  const core::StatSummary& time = r.seconds;
  if (r.runs > 1) {
    fmt::print(stderr, "\n Counter stats for '{}' ({} runs):\n\n", target, r.runs);
  } else {
    fmt::print(stderr, "\n Counter stats for '{}' ({:.2f} s):\n\n", target, time.mean);
  }
  print_counts(r.counters, r.values, time.mean);
  if (r.runs > 1) {
    fmt::print(stderr, "\n{:>18.6f} +- {:.6f} seconds time elapsed{}\n", time.mean,
               time.rel_stddev_pct.value_or(0) * time.mean / 100.0, stddev_text(time));
  }
  if (command && r.exit_code != 0)
    fmt::print(stderr, "tracer: the command exited with status {}\n", r.exit_code);
  return r.exit_code;
}

}  // namespace

void add_stat_command(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<StatCliOptions>();
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
  cmd->add_option("-I,--interval", opts->interval,
                  "Print counts every interval, in milliseconds as perf stat's -I (e.g. 500), or "
                  "with a unit (1s)");
  cmd->add_option("-r,--repeat", opts->repeat,
                  "Run the command this many times and print the mean of each count with its "
                  "variation (+- the standard deviation of the mean, in %)");
  add_ready_fd_option(cmd, opts->ready_fd, "once every counter is open and counting");
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
