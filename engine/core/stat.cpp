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
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <thread>

#include "tracer/common/proc_mounts.hpp"
#include "tracer/error.hpp"
#include "tracer/event_names.hpp"
#include "tracer/perf/counter_set.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::core {

perf::EventAttr resolve_stat_event(const std::string& text, std::optional<tracefs::Tracefs>& fs) {
  return resolve_event_name(text, fs);
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
  std::vector<std::vector<double>> slot_values;  // [counter][slot], with per_cpu/per_thread
  std::vector<std::vector<StatRuntime>> slot_runtime;
};

Error open_failed(const std::string& name, const perf::EventAttr& a, const Failure& f) {
  const int err = f.errno_value();
  if (err == ESRCH) {
    return {ErrorCategory::kUsage, f.code, fmt::format("{}: {}", name, f.message),
            "the process or thread to count has exited"};
  }
  if ((a.type() == PERF_TYPE_HARDWARE || a.type() == PERF_TYPE_HW_CACHE ||
       a.type() == PERF_TYPE_RAW) &&
      (err == ENOENT || err == EOPNOTSUPP)) {
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
    const auto duration = opts_.duration;
    const auto interval = opts_.interval;
    const bool command = !opts_.command.empty();
    const bool system_wide = opts_.system_wide();
    HeldCommand held;
    if (command)
      held = fork_held(opts_.command);
    open_counters(system_wide ? -1 : held.pid, system_wide ? counted_cpus() : std::vector{-1});
    start_ = clock::now();
    if (opts_.on_counting && !counting_said_) {
      counting_said_ = true;  // the first run only
      opts_.on_counting();
    }
    if (command)
      held.release();
    const PidWatch watch(command || system_wide ? std::vector<pid_t>{} : watched_tasks());
    RunResult result;
    bool child_done = false;
    int child_status = 0;
    auto next_tick = start_ + interval;
    prev_ = empty_snapshot();
    rusage usage{};
    for (;;) {
      if (stop.load()) {
        result.stopped = true;
        break;
      }
      if (duration.count() > 0 && clock::now() - start_ >= duration)
        break;
      if (held.pid > 0 && ::wait4(held.pid, &child_status, WNOHANG, &usage) == held.pid) {
        held.pid = -1;
        child_done = true;
        break;
      }
      if (watch.all_gone()) {
        result.target_exited = true;
        break;
      }
      if (interval.count() > 0 && clock::now() >= next_tick) {
        emit_interval(std::chrono::duration<double>(interval).count(), on_interval);
        next_tick += interval;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    // The last, partial interval up to the end, as perf stat prints it (what came after the
    // last full one would be in no interval).
    if (interval.count() > 0) {
      const auto since = clock::now() - (next_tick - interval);
      if (since > std::chrono::milliseconds(1))
        emit_interval(std::chrono::duration<double>(since).count(), on_interval);
    }
    result.seconds = std::chrono::duration<double>(clock::now() - start_).count();
    read_totals(result);
    bool stopped_child = false;  // ended here (the duration, a signal): reaped, its rusage read
    if (held.pid > 0) {          // stopped early: do not leave the command behind
      ::kill(held.pid, SIGTERM);
      ::wait4(held.pid, &child_status, 0, &usage);
      held.pid = -1;
      stopped_child = true;
    }
    if (command)
      finish_command(held, child_done, stopped_child, child_status, usage, result);
    return result;
  }

 private:
  using clock = std::chrono::steady_clock;

  /// A command forked and held on a pipe until its counters exist (enable_on_exec); a second
  /// pipe carries exec's errno back ("cannot run" is not the command's own 127). What is left
  /// of it at the end is killed and reaped.
  struct HeldCommand {
    pid_t pid = -1;
    UniqueFd go;    // written once: the command execs
    UniqueFd exec;  // exec's errno, when it failed
    HeldCommand() = default;
    HeldCommand(const HeldCommand&) = delete;
    HeldCommand& operator=(const HeldCommand&) = delete;
    HeldCommand(HeldCommand&& o) noexcept
        : pid(std::exchange(o.pid, -1)), go(std::move(o.go)), exec(std::move(o.exec)) {}
    HeldCommand& operator=(HeldCommand&& o) noexcept {
      std::swap(pid, o.pid);
      go = std::move(o.go);
      exec = std::move(o.exec);
      return *this;
    }
    ~HeldCommand() {
      if (pid > 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
    }
    /// Lets the command exec.
    void release() {
      char c = 'g';
      if (::write(go.get(), &c, 1) != 1)
        throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()},
                    "cannot start the command");
      go = UniqueFd();
    }
  };

  static HeldCommand fork_held(const std::vector<std::string>& command) {
    int go_pipe[2] = {-1, -1};
    int err_pipe[2] = {-1, -1};
    if (::pipe2(go_pipe, O_CLOEXEC) != 0)
      throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "pipe2 failed");
    UniqueFd go_read(go_pipe[0]), go_write(go_pipe[1]);
    if (::pipe2(err_pipe, O_CLOEXEC) != 0)
      throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "pipe2 failed");
    UniqueFd err_read(err_pipe[0]), err_write(err_pipe[1]);
    HeldCommand h;
    h.pid = ::fork();
    if (h.pid < 0)
      throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "fork failed");
    if (h.pid == 0) {
      go_write = UniqueFd();  // the parent's end: its exit is the read's end of file
      err_read = UniqueFd();
      char c;
      if (::read(go_read.get(), &c, 1) != 1)
        ::_exit(127);
      std::vector<char*> argv;
      for (const auto& s : command)
        argv.push_back(const_cast<char*>(s.c_str()));
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      const int err = errno;
      [[maybe_unused]] auto n = ::write(err_write.get(), &err, sizeof err);
      ::_exit(127);
    }
    h.go = std::move(go_write);
    h.exec = std::move(err_read);
    return h;
  }

  /// The CPUs a system-wide count opens on: every online one, or -C's (each must be online).
  [[nodiscard]] std::vector<int> counted_cpus() const {
    auto online = perf::online_cpus();
    if (!online)
      throw Error(ErrorCategory::kRuntime, online.error());
    if (opts_.cpus.empty())
      return *online;
    for (int c : opts_.cpus) {
      if (std::find(online->begin(), online->end(), c) == online->end()) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    fmt::format("-C: CPU {} is not online", c),
                    fmt::format("online CPUs: {}", fmt::join(*online, ",")));
      }
    }
    return opts_.cpus;
  }

  /// -p's processes and -t's threads: the count ends when every one has exited.
  [[nodiscard]] std::vector<pid_t> watched_tasks() const {
    std::vector<pid_t> watched = opts_.pids;
    watched.insert(watched.end(), opts_.tids.begin(), opts_.tids.end());
    return watched;
  }

  /// Tasks watched through pidfds (readable once a task has exited, reaped or not), as perf
  /// stat -p ends with its process; kill(0) where no pidfd opens.
  class PidWatch {
   public:
    explicit PidWatch(std::vector<pid_t> tasks) : tasks_(std::move(tasks)) {
      for (pid_t p : tasks_)
        fds_.emplace_back(static_cast<int>(::syscall(SYS_pidfd_open, p, 0)));
    }
    /// True when there are tasks and every one has exited.
    [[nodiscard]] bool all_gone() const {
      if (tasks_.empty())
        return false;
      for (std::size_t k = 0; k < fds_.size(); ++k) {
        if (fds_[k].get() < 0) {
          if (!(::kill(tasks_[k], 0) != 0 && errno == ESRCH))
            return false;
          continue;
        }
        pollfd p{fds_[k].get(), POLLIN, 0};
        if (::poll(&p, 1, 0) != 1)
          return false;
      }
      return true;
    }

   private:
    std::vector<pid_t> tasks_;
    std::vector<UniqueFd> fds_;
  };

  static StatRuntime runtime_of(std::uint64_t running, std::uint64_t enabled) {
    return StatRuntime{
        .running_ns = running,
        .pct = enabled == 0 ? 100.0
                            : 100.0 * static_cast<double>(running) / static_cast<double>(enabled)};
  }

  /// One interval's deltas since the previous (`length_s`: how long it was).
  void emit_interval(double length_s, const std::function<void(const StatInterval&)>& on_interval) {
    auto now = read_counters();
    std::vector<double> delta(now.total.size());
    std::vector<StatRuntime> runtime(now.total.size());
    std::vector<std::vector<double>> slot_delta(now.total.size());
    for (std::size_t i = 0; i < now.total.size(); ++i) {
      // Each slot's interval scaled by its own times (perf stat -I's), then summed.
      std::uint64_t running = 0, enabled = 0;
      for (std::size_t k = 0; k < now.slot[i].size(); ++k) {
        const auto d = now.slot[i][k].since(prev_.slot[i][k]);
        delta[i] += d.scaled;
        running += d.running;
        enabled += d.enabled;
        if (per_slot())
          slot_delta[i].push_back(d.scaled);
      }
      runtime[i] = runtime_of(running, enabled);
    }
    prev_ = std::move(now);
    if (on_interval) {
      on_interval(StatInterval{
          .counters = infos_,
          .elapsed_s = std::chrono::duration<double>(clock::now() - start_).count(),
          .interval_s = length_s,
          .deltas = std::move(delta),
          .runtime = std::move(runtime),
          .slot_labels = slot_labels_,
          .slot_deltas = per_slot() ? std::move(slot_delta) : std::vector<std::vector<double>>{}});
    }
  }

  /// The run's totals, and per slot with per_cpu/per_thread.
  void read_totals(RunResult& result) const {
    const Snapshot total = read_counters();
    for (std::size_t i = 0; i < total.total.size(); ++i) {
      result.totals.push_back(total.total[i].scaled);
      result.runtime.push_back(runtime_of(total.total[i].running, total.total[i].enabled));
      if (!per_slot())
        continue;
      result.slot_values.emplace_back();
      result.slot_runtime.emplace_back();
      for (const auto& r : total.slot[i]) {
        result.slot_values.back().push_back(r.scaled);
        result.slot_runtime.back().push_back(runtime_of(r.running, r.enabled));
      }
    }
  }

  /// The command's CPU time (its children's included), exec's failure, its exit status.
  void finish_command(const HeldCommand& held,
                      bool child_done,
                      bool stopped_child,
                      int child_status,
                      const rusage& usage,
                      RunResult& result) const {
    if (child_done || stopped_child) {
      const auto secs = [](const timeval& t) {
        return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
      };
      result.user_s = secs(usage.ru_utime);
      result.sys_s = secs(usage.ru_stime);
    }
    int exec_errno = 0;
    if (::read(held.exec.get(), &exec_errno, sizeof exec_errno) == sizeof exec_errno) {
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

 public:
  [[nodiscard]] const std::vector<StatCounter>& counters() const noexcept { return infos_; }
  [[nodiscard]] const std::vector<std::string>& slot_labels() const noexcept {
    return slot_labels_;
  }

 private:
  /// A counter set and where its counters are in infos_; none when it cannot count here.
  struct CounterSetAt {
    std::optional<perf::CounterSet> set;
    std::size_t first = 0;  // its first counter's index
    std::size_t size = 0;
    std::vector<std::size_t> slot_of;  // the set's slot k is slots_[slot_of[k]]
  };
  /// Every counter's reading, summed and per slot ([counter][slot]).
  struct Snapshot {
    std::vector<perf::CounterReading> total;
    std::vector<std::vector<perf::CounterReading>> slot;
  };

  [[nodiscard]] bool per_slot() const noexcept { return opts_.per_cpu || opts_.per_thread; }

  [[nodiscard]] Snapshot empty_snapshot() const {
    return {std::vector<perf::CounterReading>(infos_.size()),
            std::vector<std::vector<perf::CounterReading>>(
                infos_.size(), std::vector<perf::CounterReading>(slots_.size()))};
  }

  [[nodiscard]] Snapshot read_counters() const {
    Snapshot s = empty_snapshot();
    for (const auto& at : sets_) {
      if (!at.set)
        continue;
      const perf::CounterSetReading r = at.set->read();
      for (std::size_t i = 0; i < at.size; ++i) {
        s.total[at.first + i] = r.counters[i];
        for (std::size_t k = 0; k < r.per_slot.size(); ++k)
          s.slot[at.first + i][at.slot_of[k]] = r.per_slot[k][i];
      }
    }
    return s;
  }

  /// The slots every set counts on: each CPU (system-wide, or a cgroup on each CPU), the
  /// command, or every thread of -p's processes and -t's threads.
  void plan_slots(pid_t command_pid, const std::vector<int>& cpus) {
    slots_.clear();
    slot_labels_.clear();
    if (command_pid > 0) {
      slots_.push_back({.pid = command_pid, .cpu = -1});
      slot_labels_.push_back(fmt::format("{}-{}", task_comm(command_pid), command_pid));
      return;
    }
    if (opts_.system_wide()) {
      if (!opts_.cgroup.empty() && !cgroup_fd_)
        cgroup_fd_ = open_cgroup(opts_.cgroup);
      for (int cpu : cpus) {
        perf::CounterSlot slot{.pid = -1, .cpu = cpu};
        if (cgroup_fd_) {
          slot.pid = cgroup_fd_.get();
          slot.flags = PERF_FLAG_PID_CGROUP;
        }
        slots_.push_back(slot);
        slot_labels_.push_back(fmt::format("CPU{}", cpu));
      }
      return;
    }
    std::vector<pid_t> tasks;
    for (pid_t p : opts_.pids) {
      // Every thread of the process now (a perf event counts one task; inherit adds the ones
      // it makes later), as perf stat -p.
      auto threads = perf::process_threads(p);
      if (!threads)
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::no_such_process),
                    fmt::format("-p: no process {}", p), "ps -e lists the processes");
      tasks.insert(tasks.end(), threads->begin(), threads->end());
    }
    for (pid_t t : opts_.tids) {
      if (::kill(t, 0) != 0 && errno == ESRCH)
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::no_such_process),
                    fmt::format("-t: no thread {}", t), "ps -eL lists the threads");
      tasks.push_back(t);
    }
    for (pid_t t : tasks) {
      slots_.push_back({.pid = t, .cpu = -1});
      slot_labels_.push_back(fmt::format("{}-{}", task_comm(t), t));
    }
  }

  static std::string task_comm(pid_t tid) {
    std::ifstream in(fmt::format("/proc/{}/comm", tid));
    std::string comm;
    std::getline(in, comm);
    return comm.empty() ? "?" : comm;
  }

  static UniqueFd open_cgroup(const std::string& name) {
    const std::string root = detail::cgroup2_root().string();
    const std::string path = name.starts_with('/') ? name : root + "/" + name;
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW));
    if (!fd) {
      throw Error(ErrorCategory::kUsage, {errno, std::generic_category()},
                  fmt::format("-G {}: cannot open {}: {}", name, path, std::strerror(errno)),
                  fmt::format("name a directory of the cgroup v2 hierarchy, relative to {} "
                              "(e.g. -G system.slice) or as a path",
                              root));
    }
    return fd;
  }

  /// Resolves the -e lists and opens a counter set per entry on the slots. An entry this
  /// machine cannot count (no hardware PMU, a modifier refused) is kept with supported false
  /// while the others count, as perf stat keeps it (even when none can).
  void open_counters(pid_t command_pid, const std::vector<int>& cpus) {
    plan_slots(command_pid, cpus);
    infos_.clear();
    sets_.clear();
    const bool command = command_pid > 0;
    const bool system_wide = opts_.system_wide();
    for (const auto& list : opts_.events) {
      for (const EventGroupSpec& g : parse_event_list(list)) {
        perf::CounterSetOptions o;
        o.group = g.grouped;
        o.weak = g.weak;
        o.slots = slots_;
        o.inherit = !system_wide && !opts_.no_inherit;
        // A command's own events start at its exec. System-wide events (-a -- CMD) count
        // every CPU for the command's life: an event of no task is never enabled by an exec.
        o.enable_on_exec = command && !system_wide;
        CounterSetAt at;
        at.first = infos_.size();
        at.size = g.events.size();
        for (const auto& name : g.events) {
          o.events.push_back({name, resolve_event_name(name, fs_)});
          infos_.push_back({.name = name,
                            .unit = event_unit(name),
                            .group = g.grouped ? g.text : std::string{},
                            .grouped = g.grouped});
        }
        auto set = perf::CounterSet::open(o);
        if (!set) {
          Error e = open_failed(g.grouped ? g.text : g.events.front(), o.events.front().attr,
                                set.error());
          if (e.category() != ErrorCategory::kUnsupported)
            throw e;
          // The others count; these are perf stat's "<not supported>" rows.
          for (std::size_t i = 0; i < at.size; ++i) {
            infos_[at.first + i].supported = false;
            infos_[at.first + i].why = e.message();  // perf stat says no hint either
          }
        } else {
          for (const auto& slot : set->slots()) {
            const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const auto& s) {
              return s.pid == slot.pid && s.cpu == slot.cpu;
            });
            at.slot_of.push_back(static_cast<std::size_t>(it - slots_.begin()));
          }
          for (std::size_t i = 0; i < at.size; ++i)
            infos_[at.first + i].grouped = set->grouped();
          // Opened disabled: system-wide and task counters start now, a command's at its exec.
          if (!o.enable_on_exec) {
            if (auto st = set->enable(); !st)
              throw Error(ErrorCategory::kRuntime, st.error());
          }
          at.set = std::move(*set);
        }
        sets_.push_back(std::move(at));
      }
    }
    // None countable is not an error either: as perf stat, the command runs and each row says
    // <not supported> (the reason is said once).
  }

 private:
  const StatOptions& opts_;
  bool counting_said_ = false;  // opts_.on_counting was called
  clock::time_point start_{};   // of the run's count
  Snapshot prev_;               // the reading at the previous interval's end
  std::optional<tracefs::Tracefs> fs_;
  std::vector<StatCounter> infos_;  // each counter's name, unit, group
  std::vector<CounterSetAt> sets_;  // a set per -e entry (a group, or one event)
  std::vector<perf::CounterSlot> slots_;
  std::vector<std::string> slot_labels_;
  UniqueFd cgroup_fd_;
};

}  // namespace

StatResult count_events(const StatOptions& options,
                        const std::atomic<bool>& stop,
                        const std::function<void(const StatInterval&)>& on_interval) {
  Measurement m(options);
  std::vector<std::vector<double>> per_counter;
  std::vector<double> seconds, user, sys;
  StatResult result;
  for (unsigned run = 0; run < options.repeat; ++run) {
    RunResult r = m.run(stop, on_interval);
    per_counter.resize(r.totals.size());
    for (std::size_t i = 0; i < r.totals.size(); ++i)
      per_counter[i].push_back(r.totals[i]);
    result.slot_values = std::move(r.slot_values);
    result.slot_runtime = std::move(r.slot_runtime);
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
  if (options.per_cpu || options.per_thread)
    result.slot_labels = m.slot_labels();
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
