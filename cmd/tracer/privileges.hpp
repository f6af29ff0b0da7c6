// Running with less: tracer serve --user drops to an unprivileged user once its probes are
// attached, keeping only the capabilities a reload needs.
#pragma once

#include <string>

namespace tracer::cli {

/// Becomes `user` (its uid, gid and groups) keeping CAP_BPF, CAP_PERFMON, CAP_IPC_LOCK and
/// CAP_SYS_RESOURCE (ring and map memory) in the permitted and effective sets, and
/// CAP_DAC_READ_SEARCH (tracefs formats) in the permitted set only (ScopedTracefsAccess raises
/// it for a reload) — those of them the process has, and nothing else: the bounding set is
/// reduced to them and NoNewPrivs is set (an exec gains nothing). Throws tracer::Error
/// (kUsage for an unknown user, kRuntime with the errno of the step that failed). BPF programs
/// compiled after (a reload's) are cached in a fresh private directory the user owns (mkdtemp, its
/// path in XDG_CACHE_HOME): root's cache is not the user's to write, nor the user's to trust.
struct DroppedTo {
  std::string capabilities;  // kept, as "cap_bpf,cap_perfmon,..."
  std::string cache;         // the BPF cache directory made for the user (remove it at the end)
};
DroppedTo drop_to_user(const std::string& user);

/// CAP_DAC_READ_SEARCH in the effective set for as long as it lives, when it is permitted and
/// not effective (after drop_to_user): a reload reads tracefs with it. Nothing otherwise.
class ScopedTracefsAccess {
 public:
  ScopedTracefsAccess();
  ~ScopedTracefsAccess();
  ScopedTracefsAccess(const ScopedTracefsAccess&) = delete;
  ScopedTracefsAccess& operator=(const ScopedTracefsAccess&) = delete;

 private:
  bool raised_ = false;
};

}  // namespace tracer::cli
