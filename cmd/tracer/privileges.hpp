// Running with less: tracer serve --user drops to an unprivileged user once its probes are
// attached, keeping only the capabilities a reload needs.
#pragma once

#include <string>

namespace tracer::cli {

/// Becomes `user` (its uid, gid and groups) keeping CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH
/// (tracefs formats), CAP_IPC_LOCK and CAP_SYS_RESOURCE (ring and map memory) in the permitted
/// and effective sets (those of them the process has), and nothing else. Throws tracer::Error
/// (kUsage for an unknown user, kRuntime with the errno of the step that failed). BPF programs
/// compiled after (a reload's) are cached in a fresh private directory the user owns (mkdtemp, its
/// path in XDG_CACHE_HOME): root's cache is not the user's to write, nor the user's to trust.
struct DroppedTo {
  std::string capabilities;  // kept, as "cap_bpf,cap_perfmon,..."
  std::string cache;         // the BPF cache directory made for the user (remove it at the end)
};
DroppedTo drop_to_user(const std::string& user);

}  // namespace tracer::cli
