#include "tracer/perf/event.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>
#include <csignal>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "tracer/perf/pmu.hpp"

namespace tracer::perf {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

constexpr int kCapSysAdmin = 21;
constexpr int kCapPerfmon = 38;

std::string event_name(const EventAttr& attr) {
  const auto pmu = pmu_name_for_type(attr.type());
  return fmt::format("{} event ({})", pmu.value_or(fmt::format("type {}", attr.type())),
                     attr.describe());
}

Failure explain(int err, const EventAttr& attr, const OpenTarget& t) {
  Failure f{std::error_code(err, std::generic_category()), {}, {}};
  const std::string what = event_name(attr);
  const std::string where =
      t.pid == -1
          ? fmt::format("cpu {}", t.cpu)
          : fmt::format("{} {}{}", (t.flags & PERF_FLAG_PID_CGROUP) != 0U ? "cgroup fd" : "pid",
                        t.pid, t.cpu >= 0 ? fmt::format(" on cpu {}", t.cpu) : "");
  f.message = fmt::format("perf_event_open: {} for {} on {}", errno_text(err), what, where);
  switch (err) {
    case EACCES:
    case EPERM: {
      const auto paranoid = perf_event_paranoid();
      const auto perfmon = has_capability(kCapPerfmon);
      const auto admin = has_capability(kCapSysAdmin);
      std::string caps = fmt::format("CAP_PERFMON {}, CAP_SYS_ADMIN {}",
                                     perfmon.value_or(false) ? "present" : "missing",
                                     admin.value_or(false) ? "present" : "missing");
      if (t.pid > 0 && (t.flags & PERF_FLAG_PID_CGROUP) == 0U && ::kill(t.pid, 0) != 0 &&
          errno == EPERM) {
        // Another user's task: the kernel checks ptrace access (PTRACE_MODE_READ_REALCREDS)
        // for per-task events, which CAP_PERFMON does not grant.
        f.hint = fmt::format(
            "process {} belongs to another user than tracer's (uid {}): perf events on a task "
            "need ptrace access to it. Run tracer as that user, or with CAP_SYS_PTRACE beside "
            "CAP_BPF and CAP_PERFMON ({})",
            t.pid, ::geteuid(), caps);
      } else if (!perfmon.value_or(false) && !admin.value_or(false)) {
        f.hint = fmt::format(
            "kernel.perf_event_paranoid is {} and this process lacks privileges ({}). Run as "
            "root, grant CAP_PERFMON (setcap cap_perfmon,cap_bpf,cap_dac_read_search+ep tracer: "
            "tracepoints read tracefs too), or lower the "
            "setting: sysctl kernel.perf_event_paranoid={}",
            paranoid ? std::to_string(*paranoid) : "unknown", caps,
            attr.raw()->exclude_kernel != 0U ? 1 : -1);
      } else if (attr.type() == PERF_TYPE_TRACEPOINT) {
        f.hint = fmt::format(
            "privileges look sufficient ({}); tracepoints also need read access "
            "to tracefs. A security module (lockdown, SELinux) may forbid it.",
            caps);
      } else if (attr.has(Flag::kSigtrap) && !attr.has(Flag::kRemoveOnExec)) {
        f.hint = "sigtrap requires remove_on_exec";
      } else {
        f.hint = fmt::format(
            "privileges look sufficient ({}); the kernel refused this configuration (kernel "
            "lockdown or a security module, or exclusive access to the PMU)",
            caps);
      }
      break;
    }
    case ENOENT:
      if ((t.flags & PERF_FLAG_PID_CGROUP) != 0U) {
        // perf_cgroup_connect: the directory is a cgroup without a perf_event state (a cgroup
        // v1 hierarchy other than perf_event's); the event itself is not in question.
        f.hint =
            "the cgroup has no perf_event controller. On cgroup v2 the kernel gives new cgroups "
            "the (implicit) perf_event controller only once the root's cgroup.subtree_control "
            "has been written (systemd does it at boot): e.g. `echo +pids > "
            "/sys/fs/cgroup/cgroup.subtree_control`, then create the cgroup again. On cgroup v1, "
            "give a cgroup of the perf_event hierarchy";
      } else if (attr.type() == PERF_TYPE_HARDWARE || attr.type() == PERF_TYPE_HW_CACHE) {
        f.hint =
            "this machine exposes no hardware PMU for this counter (common in virtual "
            "machines); use a software event such as cpu-clock instead";
      } else if (attr.type() == PERF_TYPE_TRACEPOINT) {
        f.hint = fmt::format("no tracepoint with id {} exists in this kernel", attr.config());
      } else if (!pmu_name_for_type(attr.type())) {
        f.hint = fmt::format(
            "no PMU with type {} exists on this machine "
            "(see /sys/bus/event_source/devices/*/type)",
            attr.type());
      } else {
        f.hint = fmt::format("the PMU does not know config {:#x}", attr.config());
      }
      break;
    case EOPNOTSUPP:
      f.hint = attr.raw()->sample_period != 0
                   ? "this PMU cannot sample (no overflow interrupt) or lacks a requested feature "
                     "(branch stack, exclude_* bits, precise_ip, AUX); try counting mode"
                   : "this PMU lacks a requested feature (exclude_* bits, branch stack, AUX)";
      break;
    case EINVAL: {
      std::string hint;
      if (attr.has(Flag::kInherit) && (attr.sample_type() & PERF_SAMPLE_READ) != 0U) {
        // perf_event_open refuses inherit with PERF_SAMPLE_READ before Linux 6.12 (7e8b255650fc).
        utsname u{};
        hint = fmt::format(
            "samples that read counters (PERF_SAMPLE_READ: a probe's `read` events) of a task "
            "and its children (inherit: a pid or command target) need Linux 6.12; this kernel is "
            "{}. Run the recipe system-wide (the `read` events are then counted per CPU), or on "
            "6.12 or later",
            ::uname(&u) == 0 ? u.release : "older");
      } else if (attr.type() == PERF_TYPE_TRACEPOINT && !(t.pid == -1 && t.cpu == -1)) {
        hint = fmt::format(
            "no tracepoint with id {} exists in this kernel (ids come from "
            "tracefs events/<system>/<event>/id)",
            attr.config());
      } else if (t.pid == -1 && t.cpu == -1) {
        hint = "pid -1 and cpu -1 together are not allowed: trace a task, or one CPU at a time";
      } else if (t.cpu >= 0 && t.cpu >= ::sysconf(_SC_NPROCESSORS_CONF)) {
        hint = fmt::format("cpu {} does not exist", t.cpu);
      } else if ((attr.sample_type() & ~(abi::kSampleMax - 1)) != 0U) {
        hint = fmt::format("sample_type has bits this ABI does not define: {:#x}",
                           attr.sample_type() & ~(abi::kSampleMax - 1));
      } else if (attr.raw()->precise_ip != 0U) {
        hint = fmt::format("precise_ip={} may exceed what the PMU offers", attr.raw()->precise_ip);
      } else if (attr.has(Flag::kFreq) && attr.raw()->sample_freq != 0) {
        hint = "sample_freq may exceed kernel.perf_event_max_sample_rate";
      } else if (attr.has(Flag::kUseClockid)) {
        hint = fmt::format("clockid {} may not be supported for perf events", attr.raw()->clockid);
      } else {
        hint =
            "the kernel rejected a field of the attr; compare with `tracer list pmus` and the "
            "PMU's format terms";
      }
      f.hint = std::move(hint);
      break;
    }
    case EMFILE: {
      rlimit rl{};
      ::getrlimit(RLIMIT_NOFILE, &rl);
      f.hint = fmt::format(
          "the per-process fd limit is reached (RLIMIT_NOFILE soft {}, hard {}); each CPU and "
          "probe needs an fd: raise it with `ulimit -n {}`",
          rl.rlim_cur, rl.rlim_max,
          rl.rlim_max == RLIM_INFINITY ? std::string("unlimited") : std::to_string(rl.rlim_max));
      break;
    }
    case ENFILE:
      f.hint = "the system-wide file table is full (fs.file-max)";
      break;
    case ESRCH:
      f.hint = fmt::format("no process with pid {} (it may have exited)", t.pid);
      break;
    case ENODEV:
      f.hint = "the PMU does not support this CPU or mode (check the PMU's cpumask)";
      break;
    case EBUSY:
      f.hint = "the PMU is in exclusive use by another event (e.g. another tracer on intel_pt)";
      break;
    case EBADF:
      f.hint =
          fmt::format("group_fd {} / cgroup fd is not a valid perf event or cgroup fd", t.group_fd);
      break;
    default:
      break;
  }
  return f;
}

Status ioctl_status(int fd, unsigned long req, unsigned long arg, const char* name) {
  if (::ioctl(fd, req, arg) == 0)
    return {};
  const int err = errno;
  return fail(err, fmt::format("perf: ioctl {} on fd {}: {}", name, fd, errno_text(err)));
}

}  // namespace

std::optional<bool> has_capability(int cap) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("CapEff:")) {
      const std::uint64_t eff = std::stoull(line.substr(7), nullptr, 16);
      return (eff >> cap & 1U) != 0;
    }
  }
  return std::nullopt;
}

long sys_perf_event_open(perf_event_attr* attr,
                         pid_t pid,
                         int cpu,
                         int group_fd,
                         unsigned long flags) noexcept {
  return ::syscall(SYS_perf_event_open, attr, pid, cpu, group_fd, flags);
}

std::optional<int> perf_event_paranoid() {
  std::ifstream in("/proc/sys/kernel/perf_event_paranoid");
  int v = 0;
  if (in >> v)
    return v;
  return std::nullopt;
}

Result<UniqueFd> open_event(EventAttr& attr, const OpenTarget& target, PerfEventOpenFn fn) {
  const unsigned long flags = target.flags | PERF_FLAG_FD_CLOEXEC;
  for (int attempt = 0; attempt < 4; ++attempt) {
    const std::uint32_t asked = attr.size();
    const long fd = fn(attr.raw(), target.pid, target.cpu, target.group_fd, flags);
    if (fd >= 0)
      return UniqueFd(static_cast<int>(fd));
    const int err = errno;
    if (err == EINTR)
      continue;
    if (err != E2BIG)
      return fail(explain(err, attr, target));

    // Kernel counterpart: perf_copy_attr() writes its sizeof(attr) back on E2BIG.
    const std::uint32_t kernel_size = attr.size();
    if (kernel_size == 0 || kernel_size >= asked) {
      attr.size(asked);
      return fail(E2BIG, fmt::format("perf_event_open: the kernel rejected attr.size {} ({})",
                                     asked, event_name(attr)));
    }
    if (attr.required_size() > kernel_size) {
      const auto field = attr.first_field_set_from(kernel_size);
      attr.size(asked);
      return fail(E2BIG,
                  fmt::format("perf_event_open: this kernel's perf_event_attr is {} bytes and does "
                              "not know field '{}' that this event sets ({})",
                              kernel_size, field, event_name(attr)),
                  "the feature needs a newer kernel; drop the option that sets it");
    }
    attr.size(kernel_size);  // retry with what the kernel understands
  }
  return fail(EINTR, "perf_event_open: interrupted too many times");
}

Counts Counts::from(const ReadView& v) {
  Counts c;
  c.time_enabled = v.time_enabled();
  c.time_running = v.time_running();
  const std::uint64_t n = v.count();
  c.values.reserve(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    c.values.push_back({v.value(i), v.id(i), v.lost(i), v.scaled(i)});
  }
  return c;
}

Result<Event> Event::open(EventAttr attr, const OpenTarget& target) {
  TRACER_ASSIGN_OR_RETURN(UniqueFd fd, open_event(attr, target));
  return Event(std::move(fd), attr.read_format());
}

Status Event::enable(bool group) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_ENABLE, group ? PERF_IOC_FLAG_GROUP : 0, "ENABLE");
}
Status Event::disable(bool group) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_DISABLE, group ? PERF_IOC_FLAG_GROUP : 0, "DISABLE");
}
Status Event::refresh(int n) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_REFRESH, static_cast<unsigned long>(n), "REFRESH");
}
Status Event::reset(bool group) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_RESET, group ? PERF_IOC_FLAG_GROUP : 0, "RESET");
}
Status Event::period(std::uint64_t n) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_PERIOD, reinterpret_cast<unsigned long>(&n), "PERIOD");
}
Status Event::set_output(int target_fd) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_SET_OUTPUT, static_cast<unsigned long>(target_fd),
                      "SET_OUTPUT");
}
Status Event::set_filter(const std::string& filter) const {
  if (::ioctl(fd(), PERF_EVENT_IOC_SET_FILTER, filter.c_str()) == 0)
    return {};
  const int err = errno;
  return fail(err,
              fmt::format("perf: tracepoint filter '{}' rejected: {}", filter, errno_text(err)),
              "tracefs filters compare fields of the format file: `field == 1 && name ~ \"x*\"`");
}
Result<std::uint64_t> Event::id() const {
  std::uint64_t id = 0;
  if (::ioctl(fd(), PERF_EVENT_IOC_ID, &id) == 0)
    return id;
  const int err = errno;
  return fail(err, fmt::format("perf: ioctl ID on fd {}: {}", fd(), errno_text(err)));
}
Status Event::set_bpf(int prog_fd) const {
  if (::ioctl(fd(), PERF_EVENT_IOC_SET_BPF, prog_fd) == 0)
    return {};
  const int err = errno;
  std::string hint;
  if (err == EEXIST) {
    hint = "a tracepoint takes one program: attach it once, on one CPU's event";
  } else if (err == EINVAL) {
    hint = "the program type does not match the event (tracepoint, kprobe/uprobe, perf_event)";
  }
  return fail(err,
              fmt::format("perf: attaching BPF program fd {} to event fd {}: {}", prog_fd, fd(),
                          errno_text(err)),
              std::move(hint));
}
Status Event::pause_output(bool pause) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_PAUSE_OUTPUT, pause ? 1 : 0, "PAUSE_OUTPUT");
}
Status Event::modify_attributes(EventAttr& attr) const {
  return ioctl_status(fd(), PERF_EVENT_IOC_MODIFY_ATTRIBUTES,
                      reinterpret_cast<unsigned long>(attr.raw()), "MODIFY_ATTRIBUTES");
}

Result<Counts> Event::read() const {
  // A group read is 8 + 16 + n*24 bytes; 4 KiB covers > 150 members.
  alignas(8) std::byte buf[4096];
  ssize_t n = 0;
  do {
    n = ::read(fd(), buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    return fail(err, fmt::format("perf: read of counter fd {}: {}", fd(), errno_text(err)),
                err == ENOSPC ? "the group has more members than the read buffer holds" : "");
  }
  ReadView view{read_format_, buf, static_cast<std::uint32_t>(n)};
  if (view.count() == 0 ||
      ReadView::size_for(read_format_, view.count()) > static_cast<std::uint32_t>(n)) {
    return fail(EPROTO,
                fmt::format("perf: counter fd {} returned {} bytes, too few for read_format {}",
                            fd(), n, read_format_names(read_format_)));
  }
  return Counts::from(view);
}

Result<Group> Group::open(std::vector<EventAttr> attrs, OpenTarget target) {
  if (attrs.empty())
    return fail(EINVAL, "perf: a group needs at least one event");
  Group g;
  g.events_.reserve(attrs.size());
  for (std::size_t i = 0; i < attrs.size(); ++i) {
    EventAttr& a = attrs[i];
    a.flag(Flag::kDisabled, i == 0);
    OpenTarget t = target;
    t.group_fd = i == 0 ? -1 : g.events_.front().fd();
    auto ev = Event::open(a, t);
    if (!ev) {
      Failure f = std::move(ev).error();
      f.message = fmt::format("group member {}: {}", i, f.message);
      return fail(std::move(f));
    }
    g.events_.push_back(std::move(*ev));
  }
  return g;
}

}  // namespace tracer::perf
