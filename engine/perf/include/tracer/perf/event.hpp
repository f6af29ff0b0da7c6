// Event: an owned perf event fd with every ioctl; Group: a leader and its members;
// open_event(): perf_event_open(2) whose failures explain themselves.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/result.hpp"
#include "tracer/unique_fd.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

struct OpenTarget {
  pid_t pid = -1;  // -1: any task (needs cpu >= 0); 0: this process; >0: that task; or a cgroup fd
  int cpu = -1;    // -1: any CPU (needs pid >= 0)
  int group_fd = -1;  // leader fd, or -1
  /// PERF_FLAG_* besides FD_CLOEXEC (always added): PERF_FLAG_PID_CGROUP, PERF_FLAG_FD_OUTPUT...
  unsigned long flags = 0;
};

/// The raw syscall, injectable so tests can drive the E2BIG negotiation and error texts.
using PerfEventOpenFn =
    long (*)(perf_event_attr* attr, pid_t pid, int cpu, int group_fd, unsigned long flags);
long sys_perf_event_open(perf_event_attr* attr,
                         pid_t pid,
                         int cpu,
                         int group_fd,
                         unsigned long flags) noexcept;

/// Opens an event. On E2BIG (an older kernel with a smaller perf_event_attr) it retries with the
/// size the kernel wrote back when no field we set lies beyond it, and otherwise fails naming the
/// field the kernel does not know. Every failure carries an explanation and a hint:
/// EACCES/EPERM (perf_event_paranoid, CAP_PERFMON/CAP_SYS_ADMIN), ENOENT/EOPNOTSUPP/EINVAL (which
/// event or field is not supported), EMFILE (the fd limit and how to raise it), ESRCH, E2BIG.
/// `attr` is updated with the size that worked.
/// @return the fd (O_CLOEXEC), or a Failure whose code is the errno.
[[nodiscard]] Result<UniqueFd> open_event(EventAttr& attr,
                                          const OpenTarget& target,
                                          PerfEventOpenFn fn = &sys_perf_event_open);

/// Counter values as read(2) returns them, decoded and copied (setup/interval path, not hot).
struct CounterValue {
  std::uint64_t value = 0;
  std::uint64_t id = 0;
  std::uint64_t lost = 0;
  double scaled = 0;  // value * enabled / running
};
struct Counts {
  std::uint64_t time_enabled = 0;
  std::uint64_t time_running = 0;
  std::vector<CounterValue> values;  // one, or one per group member (leader first)
  [[nodiscard]] static Counts from(const ReadView& v);
};

class Event {
 public:
  Event() = default;
  Event(UniqueFd fd, std::uint64_t read_format) noexcept
      : fd_(std::move(fd)), read_format_(read_format) {}

  /// open_event() wrapped in an Event.
  [[nodiscard]] static Result<Event> open(EventAttr attr, const OpenTarget& target);

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  explicit operator bool() const noexcept { return static_cast<bool>(fd_); }
  [[nodiscard]] std::uint64_t read_format() const noexcept { return read_format_; }
  void close() noexcept { fd_.reset(); }

  // ioctls. `group` adds PERF_IOC_FLAG_GROUP (act on the leader's whole group).
  [[nodiscard]] Status enable(bool group = false) const;
  [[nodiscard]] Status disable(bool group = false) const;
  /// Enable for `n` more overflows, then disable (PERF_EVENT_IOC_REFRESH).
  [[nodiscard]] Status refresh(int n) const;
  [[nodiscard]] Status reset(bool group = false) const;
  /// New sample period (or frequency for freq events).
  [[nodiscard]] Status period(std::uint64_t n) const;
  /// Send this event's records to `target`'s ring (same CPU/task), or -1 to stop.
  [[nodiscard]] Status set_output(int target_fd) const;
  /// tracefs filter expression for a tracepoint (PERF_EVENT_IOC_SET_FILTER).
  [[nodiscard]] Status set_filter(const std::string& filter) const;
  /// The kernel's id for this event (PERF_SAMPLE_ID / IDENTIFIER values).
  [[nodiscard]] Result<std::uint64_t> id() const;
  /// Attach a BPF program (tracepoint, kprobe, uprobe, perf_event program types).
  [[nodiscard]] Status set_bpf(int prog_fd) const;
  /// Pause (true) or resume ring output without disabling the event (4.7+).
  [[nodiscard]] Status pause_output(bool pause) const;
  /// Change a breakpoint's attributes in place (4.17+; only PERF_TYPE_BREAKPOINT).
  [[nodiscard]] Status modify_attributes(EventAttr& attr) const;

  /// read(2) of the counter, decoded per read_format.
  [[nodiscard]] Result<Counts> read() const;

 private:
  UniqueFd fd_;
  std::uint64_t read_format_ = 0;
};

/// A group: the leader is opened first (disabled), members point at it; they are scheduled on
/// the PMU together so their ratios are exact.
class Group {
 public:
  /// Opens attrs[0] as leader and the rest as members, all on `target`. The leader gets
  /// `disabled`; members inherit the group's state.
  /// @return the group, or the first member's Failure (naming its index).
  [[nodiscard]] static Result<Group> open(std::vector<EventAttr> attrs, OpenTarget target);

  [[nodiscard]] Event& leader() noexcept { return events_.front(); }
  [[nodiscard]] std::vector<Event>& events() noexcept { return events_; }
  [[nodiscard]] Status enable() const { return events_.front().enable(true); }
  [[nodiscard]] Status disable() const { return events_.front().disable(true); }
  [[nodiscard]] Status reset() const { return events_.front().reset(true); }
  /// Reads every member at once (the leader needs PERF_FORMAT_GROUP).
  [[nodiscard]] Result<Counts> read() const { return events_.front().read(); }

 private:
  std::vector<Event> events_;
};

/// Whether capability `cap` (CAP_* number) is in this process's effective set; nullopt if
/// /proc/self/status cannot be read.
[[nodiscard]] std::optional<bool> has_capability(int cap);

/// Current /proc/sys/kernel/perf_event_paranoid, or nullopt if unreadable.
[[nodiscard]] std::optional<int> perf_event_paranoid();

}  // namespace tracer::perf

#pragma GCC visibility pop
