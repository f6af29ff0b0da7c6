// Dynamic kprobe/uprobe trace events through tracefs (kprobe_events/uprobe_events), for kernels
// without the kprobe/uprobe PMUs or for users who ask for it. Unlike PMU probes, which die with
// their perf fd, these live in the kernel until someone removes them, so every probe is created
// in a group that names its owner, "tracer_<pid>_<starttime>" (starttime: field 22 of
// /proc/<pid>/stat, so a recycled pid is not mistaken for the owner), and a later run can
// remove what a crashed one left (remove_stale()).
//
// Usage:
//   TRACER_ASSIGN_OR_RETURN(auto fs, tracefs::Tracefs::open());
//   TRACER_TRY(tracefs::DynamicProbes::remove_stale(fs));     // leftovers of dead runs
//   TRACER_ASSIGN_OR_RETURN(auto probes, tracefs::DynamicProbes::create(fs));
//   TRACER_ASSIGN_OR_RETURN(auto probe, probes.add_uprobe("readline", "/usr/bin/bash", off,
//   false));
//   // perf_event_open(PERF_TYPE_TRACEPOINT, config = probe.id) ... read ... close the events
//   TRACER_TRY(probes.remove_all());                          // or let the destructor do it
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::tracefs {

/// One probe created through tracefs.
struct DynamicProbe {
  TracepointName name;     // {group, event}: events/<group>/<event>
  std::uint32_t id = 0;    // events/<group>/<event>/id: attr.config of a PERF_TYPE_TRACEPOINT event
  std::string definition;  // the line written, e.g. "p:tracer_1_2/fn /bin/x:0x1139"
  bool kprobe = false;     // in kprobe_events (else uprobe_events)
  bool retprobe = false;
};

/// The group name owned by process `pid`: "tracer_<pid>_<starttime>".
/// @return the name, or the errno of reading /proc/<pid>/stat (ENOENT: no such process).
[[nodiscard]] Result<std::string> owner_group_name(pid_t pid);

/// Owns the dynamic probes it created, and removes them when destroyed.
///
/// Removing a probe fails with EBUSY while a perf event (or ftrace's `enable`) still uses it:
/// close every perf event on these probes (and unmap their rings) before remove_all() or the
/// destructor. Probes that could not be removed stay in the kernel until remove_stale() runs
/// after this process is gone.
class DynamicProbes {
 public:
  /// Probes under this process's group (owner_group_name(getpid())).
  /// @return the owner, or the failure of reading /proc/self/stat.
  [[nodiscard]] static Result<DynamicProbes> create(const Tracefs& fs);

  DynamicProbes(const DynamicProbes&) = delete;
  DynamicProbes& operator=(const DynamicProbes&) = delete;
  DynamicProbes(DynamicProbes&& other) noexcept;
  DynamicProbes& operator=(DynamicProbes&& other) noexcept;
  /// remove_all(), ignoring failures (see the class comment).
  ~DynamicProbes();

  [[nodiscard]] const std::string& group() const noexcept { return group_; }
  [[nodiscard]] const std::vector<DynamicProbe>& probes() const noexcept { return probes_; }

  /// Writes "p:GROUP/NAME PATH:0xOFFSET" ("r:" for a uretprobe) to uprobe_events, with
  /// "(0xREF_CTR)" after it for a `ref_ctr_offset` (a USDT semaphore's file offset, which the
  /// kernel counts up while the probe exists), then `fetch_args` as they are (each with a
  /// space before it: " arg0=%di:s32 arg1=+0(%si):string", the fields of the probe's event).
  /// `name` is a C identifier; `path` an absolute path without whitespace.
  /// @return the probe with its tracepoint id, or: EINVAL for a bad name or path (before
  /// writing), else the kernel's errno for the write, quoting the line and the kernel's
  /// error_log entry (EINVAL: malformed line or offset; ENOENT: no such file; EEXIST: the name
  /// is taken in this group).
  [[nodiscard]] Result<DynamicProbe> add_uprobe(std::string_view name,
                                                const std::filesystem::path& path,
                                                std::uint64_t offset,
                                                bool retprobe,
                                                std::uint64_t ref_ctr_offset = 0,
                                                std::string_view fetch_args = {});

  /// Writes "p:GROUP/NAME SYMBOL+OFFSET" ("r:" for a kretprobe; an empty symbol probes the
  /// absolute address `offset`) to kprobe_events.
  /// @return the probe with its tracepoint id, or the errors of add_uprobe(); ENOENT also when
  /// this kernel has no kprobe_events (CONFIG_KPROBE_EVENTS off).
  [[nodiscard]] Result<DynamicProbe> add_kprobe(std::string_view name,
                                                std::string_view symbol,
                                                std::uint64_t offset,
                                                bool retprobe);

  /// Removes every probe this object created ("-:GROUP/NAME"), retrying EBUSY briefly (the
  /// last perf reference is dropped asynchronously after close()). Probes removed are forgotten;
  /// the others are kept so a later call can retry.
  /// @return success, or the first failure (EBUSY: a perf event still has it open), naming
  /// how many probes could not be removed.
  [[nodiscard]] Status remove_all();
  /// Removes the probes this object created whose event name starts with `prefix` (a probe
  /// removed while the engine runs), as remove_all() does. @return how many were removed, or the
  /// first failure.
  [[nodiscard]] Result<std::size_t> remove_named(std::string_view prefix);

  /// Removes the probes of every group named tracer_<pid>_<starttime> whose owner is dead (no
  /// /proc/<pid>, a different starttime, or a zombie), from uprobe_events and kprobe_events.
  /// Groups of live owners and groups not named like ours are never touched.
  /// @return how many probes were removed, or the first failure (after trying them all).
  [[nodiscard]] static Result<std::size_t> remove_stale(const Tracefs& fs);

 private:
  DynamicProbes(std::filesystem::path root, std::string group)
      : root_(std::move(root)), group_(std::move(group)) {}
  Result<DynamicProbe> add(bool kprobe, std::string_view name, std::string target, bool retprobe);

  std::filesystem::path root_;
  std::string group_;
  std::vector<DynamicProbe> probes_;
};

}  // namespace tracer::tracefs
