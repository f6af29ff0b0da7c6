// Running with less: tracer serve --user drops to an unprivileged user once its probes are
// attached, keeping only the capabilities a reload needs.
#pragma once

#include <string>

namespace tracer::cli {

/// Becomes `user` (its uid, gid and groups) keeping CAP_BPF, CAP_PERFMON, CAP_DAC_READ_SEARCH
/// (tracefs formats), CAP_IPC_LOCK and CAP_SYS_RESOURCE (ring and map memory) in the permitted
/// and effective sets, and nothing else. Throws tracer::Error (kUsage for an unknown user,
/// kRuntime with the errno of the step that failed). @return the capabilities kept, as
/// "cap_bpf,cap_perfmon,...".
std::string drop_to_user(const std::string& user);

}  // namespace tracer::cli
