// tracer stat: count events (software, tracepoints) system-wide, for a pid, or for a command
// started by tracer, with interval output. The live counting demo of the README.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tracer/common/cpu_list.hpp"
#include "tracer/common/json.hpp"
#include "tracer/counter_expr.hpp"
#include "tracer/duration.hpp"
#include "tracer/error.hpp"
#include "tracer/output_file.hpp"
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
  std::string pid_list;     // -p
  std::string tid_list;     // -t
  bool per_cpu = false;     // -A
  bool per_thread = false;  // --per-thread
  std::string cgroup;       // -G
  std::string duration;
  std::string interval;
  unsigned repeat = 1;
  std::vector<std::string> command;
  int ready_fd = -1;
  std::string separator;             // -x: CSV with this separator
  bool json = false;                 // -j
  std::string output;                // -o FILE
  bool unknown_option = false;       // the command's first word is an option stat does not know
  std::string cpu_list;              // -C
  bool no_inherit = false;           // -i
  std::vector<std::string> metrics;  // -M
};

/// -M: a metric by name, computed from the counts of its events (counted as a group).
struct StatMetric {
  std::string name;
  std::vector<std::string> events;
  std::string expr;  // tracer::CounterExpr over `events` and `seconds`
};

/// tracer's metrics (perf's come from the CPU vendor's tables, all of them hardware ones): the
/// common ratios of the hardware events, and the software rates of perf stat's default output.
const std::vector<StatMetric>& builtin_metrics() {
  static const std::vector<StatMetric> kMetrics = {
      {"IPC", {"instructions", "cycles"}, "instructions / cycles"},
      {"CPI", {"cycles", "instructions"}, "cycles / instructions"},
      {"branch_miss_ratio", {"branch-misses", "branches"}, "branch-misses / branches"},
      {"cache_miss_ratio", {"cache-misses", "cache-references"}, "cache-misses / cache-references"},
      {"CPUs_utilized", {"task-clock"}, "task-clock / (seconds * 1000000000)"},
      {"cs_per_second", {"context-switches"}, "context-switches / seconds"},
      {"migrations_per_second", {"cpu-migrations"}, "cpu-migrations / seconds"},
      {"page_faults_per_second", {"page-faults"}, "page-faults / seconds"},
      {"major_faults_ratio", {"major-faults", "page-faults"}, "major-faults / page-faults"},
  };
  return kMetrics;
}

/// -M's words: a built-in metric's name, or NAME=EXPRESSION over events (each named event is
/// counted). Throws kUsage for an unknown name or a malformed expression.
StatMetric resolve_metric(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos) {
    for (const auto& m : builtin_metrics()) {
      if (m.name == text)
        return m;
    }
    std::string names;
    for (const auto& m : builtin_metrics())
      names += (names.empty() ? "" : ", ") + m.name;
    throw Error(
        ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
        fmt::format("-M: no metric '{}'", text),
        fmt::format("tracer's metrics: {}; or your own: -M 'name=page-faults / seconds'", names));
  }
  StatMetric m{.name = text.substr(0, eq), .events = {}, .expr = text.substr(eq + 1)};
  // The expression's names are its events: every word that is not a number or `seconds`.
  std::string word;
  const auto flush = [&] {
    if (!word.empty() && word != "seconds" &&
        !(std::isdigit(static_cast<unsigned char>(word.front())) != 0 || word.front() == '.') &&
        std::find(m.events.begin(), m.events.end(), word) == m.events.end())
      m.events.push_back(word);
    word.clear();
  };
  for (char c : m.expr) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':' || c == '.' ||
        (c == '-' && !word.empty()))
      word += c;
    else
      flush();
  }
  flush();
  if (m.name.empty() || m.events.empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("-M '{}': a metric is NAME=EXPRESSION over events", text),
                "e.g. -M 'faults_per_ms=page-faults / task-clock * 1000000'");
  }
  if (auto e = CounterExpr::parse(m.expr, m.events); !e) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("-M '{}': {}", text, e.error().message), e.error().hint);
  }
  return m;
}

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

/// How the counts are written: perf stat's text, its CSV (-x SEP) or its JSON lines (-j).
enum class Format : std::uint8_t { kText, kCsv, kJson };

/// One counter's line: its value (the clocks' in ns), how long it ran, its variation over the
/// runs.
struct Line {
  const core::StatCounter& counter;
  std::string slot{};  // -A's "CPU0", --per-thread's "comm-tid"; "" for a summed value
  double value = 0;
  core::StatRuntime runtime{};
  std::optional<double> variance_pct{};
};

/// perf stat's metric beside a count (tools/perf/util/stat-shadow.c): a clock's "CPUs utilized"
/// (its time over the wall time), any other count's rate per second of the clock counted
/// beside it (task-clock, else cpu-clock); none without a clock.
struct Metric {
  std::optional<double> value;
  std::string unit;
};

Metric metric_of(const Line& l, std::optional<double> clock_ns, double wall_s) {
  if (!l.counter.supported || l.runtime.running_ns == 0)
    return {};
  if (l.counter.unit == "ns")
    return {wall_s > 0 ? std::optional(l.value / 1e9 / wall_s) : std::nullopt, "CPUs utilized"};
  if (!clock_ns || *clock_ns <= 0)
    return {};
  const double rate = l.value / (*clock_ns / 1e9);
  if (rate > 1e9)
    return {rate / 1e9, "G/sec"};
  if (rate > 1e6)
    return {rate / 1e6, "M/sec"};
  if (rate > 1e3)
    return {rate / 1e3, "K/sec"};
  return {rate, "/sec"};
}

/// The clock a rate is per second of: task-clock's count, else cpu-clock's.
std::optional<double> clock_of(const std::vector<Line>& lines) {
  for (const char* name : {"task-clock", "cpu-clock"}) {
    for (const auto& l : lines) {
      if (l.counter.supported && l.counter.name == name)
        return l.value;
    }
  }
  return std::nullopt;
}

class Printer {
 public:
  std::vector<StatMetric> metrics;  // -M: shown in the metric column of their first event
  /// `cgroup`: -G's, a column after the event as perf stat -G prints it.
  Printer(std::FILE* out, Format format, std::string sep, std::string cgroup)
      : out_(out), format_(format), sep_(std::move(sep)), cgroup_(std::move(cgroup)) {}

  /// The counts of a run or an interval (`interval_at`: its time since the start).
  /// (A rate is per second of the clock of the same slot: -A's CPU, --per-thread's thread.)
  void counts(const std::vector<Line>& lines, double wall_s, std::optional<double> interval_at) {
    for (const auto& l : lines) {
      std::vector<Line> same_slot;
      for (const auto& o : lines) {
        if (o.slot == l.slot)
          same_slot.push_back(o);
      }
      Metric m = metric_of(l, clock_of(same_slot), wall_s);
      for (const auto& metric : metrics) {
        if (metric.events.front() == l.counter.name)
          m = metric_value(metric, same_slot, wall_s);
      }
      switch (format_) {
        case Format::kText:
          text(l, m, interval_at);
          break;
        case Format::kCsv:
          csv(l, m, interval_at);
          break;
        case Format::kJson:
          json(l, m, interval_at);
          break;
      }
    }
  }
  [[nodiscard]] bool text() const noexcept { return format_ == Format::kText; }

  /// A -M metric over the counts of one slot; none when an input did not count.
  static Metric metric_value(const StatMetric& metric,
                             const std::vector<Line>& lines,
                             double wall_s) {
    std::vector<double> values;
    for (const auto& e : metric.events) {
      const auto it = std::find_if(lines.begin(), lines.end(),
                                   [&](const Line& l) { return l.counter.name == e; });
      if (it == lines.end() || !it->counter.supported || it->runtime.running_ns == 0)
        return {std::nullopt, metric.name};
      values.push_back(it->value);
    }
    auto expr = CounterExpr::parse(metric.expr, metric.events);
    if (!expr)
      return {std::nullopt, metric.name};
    return {expr->eval(values, wall_s), metric.name};
  }
  [[nodiscard]] std::FILE* file() const noexcept { return out_; }

 private:
  /// "<not supported>", "<not counted>" (it never ran), or nothing: the value counts.
  static std::string_view absent(const Line& l) {
    if (!l.counter.supported)
      return "<not supported>";
    if (l.runtime.running_ns == 0)
      return "<not counted>";
    return {};
  }
  static bool clock(const Line& l) { return l.counter.unit == "ns"; }

  void text(const Line& l, const Metric& m, std::optional<double> at) {
    if (at)
      fmt::print(out_, "{:>16.9f} ", *at);
    if (!l.slot.empty())
      fmt::print(out_, "{:<16}", l.slot);
    const auto none = absent(l);
    if (!none.empty())
      fmt::print(out_, "{:>18} {:<4} {:<28}", none, clock(l) ? "msec" : "", l.counter.name);
    else if (clock(l))
      fmt::print(out_, "{:>18.2f} msec {:<28}", l.value / 1e6, l.counter.name);
    else
      fmt::print(out_, "{:>18.0f}      {:<28}", l.value, l.counter.name);
    if (!cgroup_.empty())
      fmt::print(out_, " {:<16}", cgroup_);
    if (!none.empty()) {
      fmt::print(out_, "\n");
      return;
    }
    if (m.value)
      fmt::print(out_, " # {:8.3f} {:<15}", *m.value, m.unit);
    if (l.variance_pct)
      fmt::print(out_, "  ( +- {:5.2f}% )", *l.variance_pct);
    if (l.runtime.pct < 99.995)
      fmt::print(out_, "  ({:.2f}%)", l.runtime.pct);
    fmt::print(out_, "\n");
  }

  void csv(const Line& l, const Metric& m, std::optional<double> at) {
    std::string row;
    if (at)
      row += fmt::format("{:>16.9f}{}", *at, sep_);
    if (!l.slot.empty())
      row += l.slot + sep_;
    const auto none = absent(l);
    if (!none.empty())
      row += fmt::format("{}{}{}{}{}", none, sep_, clock(l) ? "msec" : "", sep_, l.counter.name);
    else if (clock(l))
      row += fmt::format("{:.2f}{}msec{}{}", l.value / 1e6, sep_, sep_, l.counter.name);
    else
      row += fmt::format("{:.0f}{}{}{}", l.value, sep_, sep_, l.counter.name);
    if (!cgroup_.empty())
      row += sep_ + cgroup_;
    if (l.variance_pct)
      row += fmt::format("{}{:.2f}%", sep_, *l.variance_pct);
    row += fmt::format("{}{}{}{:.2f}{}", sep_, l.runtime.running_ns, sep_,
                       l.counter.supported ? l.runtime.pct : 100.0, sep_);
    if (m.value)
      row += fmt::format("{:.3f}{}{}", *m.value, sep_, m.unit);
    else
      row += sep_;
    fmt::print(out_, "{}\n", row);
  }

  void json(const Line& l, const Metric& m, std::optional<double> at) {
    std::string row = "{";
    if (at)
      row += fmt::format("\"interval\" : {:.9f}, ", *at);
    if (l.slot.starts_with("CPU"))
      row += fmt::format(R"("cpu" : "{}", )", l.slot.substr(3));
    else if (!l.slot.empty())
      row += fmt::format(R"("thread" : "{}", )", json::escape(l.slot));
    const auto none = absent(l);
    const std::string value = !none.empty() ? std::string(none)
                              : clock(l)    ? fmt::format("{:.6f}", l.value / 1e6)
                                            : fmt::format("{:.6f}", l.value);
    row += fmt::format(R"("counter-value" : "{}", "unit" : "{}", "event" : "{}", )", value,
                       clock(l) ? "msec" : "", json::escape(l.counter.name));
    if (!cgroup_.empty())
      row += fmt::format(R"("cgroup" : "{}", )", json::escape(cgroup_));
    if (l.variance_pct)
      row += fmt::format("\"variance\" : {:.2f}, ", *l.variance_pct);
    row += fmt::format(R"("event-runtime" : {}, "pcnt-running" : {:.2f}, )", l.runtime.running_ns,
                       l.counter.supported ? l.runtime.pct : 100.0);
    row += fmt::format(R"("metric-value" : {:.6f}, "metric-unit" : "{}"}})", m.value.value_or(0),
                       m.unit);
    fmt::print(out_, "{}\n", row);
  }

  std::FILE* out_;
  Format format_;
  std::string sep_;
  std::string cgroup_;
};

/// -C's list: "0", "0,2", "0-3", "0-1,3".
std::vector<int> parse_cpu_list(const std::string& text) {
  auto list = cpus::parse_list(text);
  if (!list || list->empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("-C: '{}' is not a CPU list{}", text,
                            list ? std::string() : ": " + list.error().message),
                "e.g. -C 0, -C 0,2 or -C 0-3");
  }
  return *list;
}

/// -p's and -t's lists: "42", "42,43".
std::vector<pid_t> parse_pid_list(const std::string& text, const char* flag) {
  std::vector<pid_t> out;
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t end = std::min(text.find(',', at), text.size());
    const std::string n = text.substr(at, end - at);
    if (n.empty() || n.size() > 9 ||
        !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        std::stol(n) <= 0) {
      throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                  fmt::format("{}: '{}' is not a list of ids", flag, text),
                  fmt::format("e.g. {} 42 or {} 42,43", flag, flag));
    }
    out.push_back(static_cast<pid_t>(std::stol(n)));
    at = end + 1;
  }
  return out;
}

/// -M's metrics, and -e's events with each metric's events added (counted as a group: their
/// ratio then is exact), unless -e has them.
std::vector<std::string> events_with_metrics(const StatCliOptions& opts,
                                             std::vector<StatMetric>& metrics) {
  for (const auto& words : opts.metrics) {
    std::size_t at = 0;
    while (at <= words.size()) {
      const std::size_t end = std::min(words.find(',', at), words.size());
      if (end > at)
        metrics.push_back(resolve_metric(words.substr(at, end - at)));
      at = end + 1;
    }
  }
  std::vector<std::string> events = opts.events;
  if (events.empty() && metrics.empty())
    events = kDefaultEvents;
  for (const auto& m : metrics) {
    bool listed = true;
    for (const auto& e : m.events) {
      listed = listed && std::any_of(events.begin(), events.end(), [&](const std::string& list) {
                 return list == e || list.find("," + e) != std::string::npos ||
                        list.find(e + ",") != std::string::npos ||
                        list.find("{" + e) != std::string::npos;
               });
    }
    if (!listed)
      events.push_back(m.events.size() == 1
                           ? m.events.front()
                           : "{" + fmt::format("{}", fmt::join(m.events, ",")) + "}");
  }
  return events;
}

Error stat_usage(std::string what, std::string hint = {}) {
  return {ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument), std::move(what),
          std::move(hint)};
}

/// The options' combinations, durations and intervals checked into `so`.
void check_stat_options(const StatCliOptions& opts, core::StatOptions& so) {
  const bool command = !opts.command.empty();
  const bool system_wide = so.system_wide();
  if (!opts.duration.empty())
    so.duration = duration_option(opts.duration, "duration");
  const bool task = !so.pids.empty() || !so.tids.empty();
  if (command && task)
    throw stat_usage("-p/-t and a command do not go together", "count a process or start one");
  if (so.per_cpu && !system_wide) {
    throw stat_usage("-A/--no-aggr needs a system-wide count (-a or -C)",
                     "tracer stat -a -A -- COMMAND counts each CPU");
  }
  if (so.per_thread && (!task || system_wide)) {
    throw stat_usage("--per-thread needs -p or -t (and not -a)", "tracer stat --per-thread -p PID");
  }
  if (so.duration.count() == 0 && system_wide && !command)
    so.duration = std::chrono::seconds(3);
  if (!opts.interval.empty()) {
    // perf stat's habit: -I takes milliseconds; a unit (500ms, 1s) is accepted too.
    const bool bare = std::all_of(opts.interval.begin(), opts.interval.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
    so.interval = duration_option(bare ? opts.interval + "ms" : opts.interval, "interval");
    if (so.interval < std::chrono::milliseconds(10))
      throw stat_usage("-I/--interval: at least 10 ms", "-I 1000 prints every second");
  }
  if (opts.repeat == 0)
    throw stat_usage("-r/--repeat: give 1 or more runs");
  if (opts.repeat > 1 && so.interval.count() > 0) {
    throw stat_usage("-r/--repeat and -I/--interval do not go together", "leave out one of them");
  }
  if (opts.repeat > 1 && task) {
    throw stat_usage("-r/--repeat needs a command (or -a with -d), not -p",
                     "tracer stat -r 5 -- COMMAND");
  }
  if (!opts.separator.empty() && opts.json)
    throw stat_usage("-x and -j do not go together", "CSV (-x SEP) or JSON lines (-j)");
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept {
    if (f != nullptr)
      std::fclose(f);
  }
};
using StatFile = std::unique_ptr<std::FILE, FileCloser>;

/// -o FILE (opened as open_output_file says), or none: the counts go to stderr.
StatFile open_stat_output(const std::string& path) {
  if (path.empty())
    return {};
  auto fd = open_output_file(path);
  if (!fd)
    throw Error(ErrorCategory::kUsage, fd.error());
  StatFile f(::fdopen(fd->release(), "w"));
  if (!f) {
    throw Error(ErrorCategory::kRuntime, std::error_code(errno, std::generic_category()),
                "-o " + path + ": " + std::strerror(errno));
  }
  return f;
}

/// One interval's rows: event by event, each CPU's or thread's row in turn (perf stat -A and
/// --per-thread), or each event's sum.
std::vector<Line> interval_lines(const core::StatInterval& i) {
  std::vector<Line> lines;
  if (!i.slot_deltas.empty()) {
    for (std::size_t k = 0; k < i.counters.size(); ++k) {
      for (std::size_t slot = 0; slot < i.slot_labels.size(); ++slot)
        lines.push_back({.counter = i.counters[k],
                         .slot = i.slot_labels[slot],
                         .value = i.slot_deltas[k][slot],
                         .runtime = k < i.runtime.size() ? i.runtime[k] : core::StatRuntime{}});
    }
  }
  for (std::size_t k = 0; k < i.counters.size() && i.slot_deltas.empty(); ++k)
    lines.push_back({.counter = i.counters[k],
                     .value = i.deltas[k],
                     .runtime = k < i.runtime.size() ? i.runtime[k] : core::StatRuntime{}});
  return lines;
}

/// The run's rows: per CPU or thread, or each event's mean over the runs.
std::vector<Line> total_lines(const core::StatResult& r) {
  std::vector<Line> lines;
  for (std::size_t k = 0; k < r.counters.size() && !r.slot_values.empty(); ++k) {
    for (std::size_t slot = 0; slot < r.slot_labels.size(); ++slot) {
      lines.push_back(
          {.counter = r.counters[k],
           .slot = r.slot_labels[slot],
           .value = r.slot_values.size() > k ? r.slot_values[k][slot] : 0,
           .runtime = r.slot_runtime.size() > k ? r.slot_runtime[k][slot] : core::StatRuntime{}});
    }
  }
  const bool summed = lines.empty();
  for (std::size_t k = 0; k < r.counters.size() && summed; ++k) {
    lines.push_back({.counter = r.counters[k],
                     .value = r.values[k].mean,
                     .runtime = k < r.runtime.size() ? r.runtime[k] : core::StatRuntime{},
                     .variance_pct = r.values[k].rel_stddev_pct});
  }
  return lines;
}

/// What was counted, as perf stat's heading names it.
std::string stat_target(const StatCliOptions& opts, const core::StatOptions& so) {
  if (!opts.command.empty()) {
    std::string target;
    for (const auto& arg : opts.command)
      target += (target.empty() ? "" : " ") + arg;
    return target;
  }
  return so.system_wide()  ? "system wide"
         : so.tids.empty() ? fmt::format("process id '{}'", fmt::join(so.pids, ","))
                           : fmt::format("thread id '{}'", fmt::join(so.tids, ","));
}

/// The summary after the count (with -I the intervals were the output, as perf stat's).
void print_summary(std::FILE* out,
                   Printer& printer,
                   const core::StatResult& r,
                   const std::string& target) {
  const core::StatSummary& time = r.seconds;
  if (printer.text()) {
    if (r.runs > 1)
      fmt::print(out, "\n Performance counter stats for '{}' ({} runs):\n\n", target, r.runs);
    else
      fmt::print(out, "\n Performance counter stats for '{}':\n\n", target);
  }
  printer.counts(total_lines(r), time.mean, std::nullopt);
  if (printer.text()) {
    fmt::print(out, "\n{:>18.9f} seconds time elapsed{}\n", time.mean,
               time.rel_stddev_pct
                   ? fmt::format("                                          ( +- {:5.2f}% )",
                                 *time.rel_stddev_pct)
                   : std::string{});
    if (r.user_s && r.sys_s) {
      fmt::print(out, "\n{:>18.9f} seconds user\n{:>18.9f} seconds sys\n", r.user_s->mean,
                 r.sys_s->mean);
    }
    fmt::print(out, "\n");
  }
}

int run_stat(const StatCliOptions& opts) {
  if (opts.unknown_option) {
    throw stat_usage(fmt::format("stat: unknown option '{}'", opts.command.front()),
                     "tracer stat --help lists the options; a command goes after them (or after "
                     "--)");
  }
  std::vector<StatMetric> metrics;
  const std::vector<std::string> events = events_with_metrics(opts, metrics);
  core::StatOptions so{
      .events = events,
      .all_cpus = opts.all_cpus,
      .pids = opts.pid_list.empty() ? std::vector<pid_t>{} : parse_pid_list(opts.pid_list, "-p"),
      .tids = opts.tid_list.empty() ? std::vector<pid_t>{} : parse_pid_list(opts.tid_list, "-t"),
      .cgroup = opts.cgroup,
      .per_cpu = opts.per_cpu,
      .per_thread = opts.per_thread,
      .command = opts.command,
      .repeat = opts.repeat,
      .cpus = opts.cpu_list.empty() ? std::vector<int>{} : parse_cpu_list(opts.cpu_list),
      .no_inherit = opts.no_inherit};
  check_ready_fd(opts.ready_fd);
  int ready_fd = opts.ready_fd;
  so.on_counting = [&ready_fd] { signal_ready(ready_fd); };
  check_stat_options(opts, so);
  // The counts go to stderr, as perf stat's do (`tracer stat -- cmd >/dev/null` keeps them, and
  // the command's own stdout stays its own), or to -o FILE.
  const StatFile out_file = open_stat_output(opts.output);
  std::FILE* out = out_file ? out_file.get() : stderr;
  const Format format = opts.json                 ? Format::kJson
                        : !opts.separator.empty() ? Format::kCsv
                                                  : Format::kText;
  Printer printer(out, format, opts.separator, opts.cgroup);
  printer.metrics = metrics;

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  bool header = false;
  const core::StatResult r = core::count_events(so, g_stop, [&](const core::StatInterval& i) {
    if (printer.text() && !header) {
      fmt::print(out, "#           time             counts unit events\n");
      header = true;
    }
    printer.counts(interval_lines(i), i.interval_s, i.elapsed_s);
    std::fflush(out);
  });
  if (r.target_exited)
    fmt::print(stderr, "tracer: {} {} exited\n", so.tids.empty() ? "process" : "thread",
               fmt::join(so.tids.empty() ? so.pids : so.tids, ","));
  // What could not be counted says why once (the rows say <not supported>).
  std::vector<std::string> said;  // a group's reason is said once
  for (const auto& c : r.counters) {
    if (!c.supported && std::find(said.begin(), said.end(), c.why) == said.end()) {
      fmt::print(stderr, "tracer: {}\n", c.why);
      said.push_back(c.why);
    }
  }
  if (so.interval.count() == 0)
    print_summary(out, printer, r, stat_target(opts, so));
  std::fflush(out);
  if (!opts.command.empty() && r.exit_code != 0)
    fmt::print(stderr, "tracer: the command exited with status {}\n", r.exit_code);
  return r.exit_code;
}

}  // namespace

void add_stat_command(CLI::App& app, Runner& run) {
  auto opts = std::make_shared<StatCliOptions>();
  auto* cmd = app.add_subcommand(
      "stat", "Count events system-wide, for a process, or for a command (like perf stat)");
  cmd->add_option("-e,--event", opts->events,
                  "Events to count: software events (cpu-clock, page-faults, ...) or tracepoints "
                  "system:event, with modifiers (:u, :k); comma-separated or repeated; "
                  "{a,b} counts a group together ({a,b}:W a weak group). Default: a useful set")
      ->allow_extra_args(false);
  cmd->add_flag("-a,--all-cpus", opts->all_cpus, "Count on every CPU (default without -p/command)");
  cmd->add_option("-p,--pid", opts->pid_list,
                  "Count these processes (every thread, and the children they start): 42 or "
                  "42,43");
  cmd->add_option("-t,--tid", opts->tid_list, "Count these threads only: 42 or 42,43");
  cmd->add_flag("-A,--no-aggr", opts->per_cpu, "A count per CPU (system-wide), not summed");
  cmd->add_flag("--per-thread", opts->per_thread, "A count per thread of -p/-t, not summed");
  cmd->add_option("-G,--cgroup", opts->cgroup,
                  "Count only the tasks of this cgroup v2 (a path or a name under "
                  "/sys/fs/cgroup), on every CPU");
  cmd->add_option("-d,--duration", opts->duration,
                  "Stop after this long (e.g. 3s; default 3s system-wide)");
  cmd->add_option("-I,--interval", opts->interval,
                  "Print counts every interval, in milliseconds as perf stat's -I (e.g. 500), or "
                  "with a unit (1s)");
  cmd->add_option("-r,--repeat", opts->repeat,
                  "Run the command this many times and print the mean of each count with its "
                  "variation (+- the standard deviation of the mean, in %)");
  cmd->add_option("-C,--cpu", opts->cpu_list,
                  "Count on these CPUs only, system-wide (e.g. 0, 0,2 or 0-3)");
  cmd->add_flag("-i,--no-inherit", opts->no_inherit,
                "Do not count the children of the process or command");
  cmd->add_option("-x,--field-separator", opts->separator,
                  "Print the counts as CSV with this separator, in perf stat -x's columns: value, "
                  "unit, event, [variance,] run time, percentage running, metric, metric unit");
  cmd->add_option("-M,--metrics", opts->metrics,
                  "Metrics to compute, in the metric column of their first event: IPC, CPI, "
                  "branch_miss_ratio, cache_miss_ratio, CPUs_utilized, cs_per_second, "
                  "migrations_per_second, page_faults_per_second, major_faults_ratio, or "
                  "NAME=EXPRESSION over events ('faults_per_ms=page-faults / task-clock * 1e6'); "
                  "their events are counted as a group");
  cmd->add_flag("-j,--json-output", opts->json,
                "Print the counts as JSON lines with perf stat -j's field names");
  cmd->add_option("-o,--output", opts->output,
                  "Write the counts to this file (never through a symbolic link) instead of "
                  "stderr");
  add_ready_fd_option(cmd, opts->ready_fd, "once every counter is open and counting");
  // Everything from the first positional on (or after --) is the command, passed through as is.
  cmd->prefix_command(true);
  cmd->footer("Usage with a command: tracer stat [OPTIONS] [--] COMMAND [ARGS...]");
  cmd->callback([opts, cmd, &run] {
    opts->command = cmd->remaining();
    // An option tracer does not know, before the command (not after "--"): a usage error, not
    // a command named "-z".
    opts->unknown_option = !opts->command.empty() && opts->command.front().starts_with("-");
    const auto& tail = trailing_args();
    opts->command.insert(opts->command.end(), tail.begin(), tail.end());
    run = [opts] { return run_stat(*opts); };
  });
}

}  // namespace tracer::cli
