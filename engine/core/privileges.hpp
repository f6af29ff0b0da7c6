// What the current process may do, and a precise complaint when it may not.
#pragma once

#include <optional>

#include "tracer/result.hpp"

namespace tracer::core {

struct Needs {
  bool cpu_wide = false;     // events on every CPU (pid -1)
  bool tracepoints = false;  // tracepoint or probe events (tracefs ids, raw samples)
  bool kernel = false;       // kernel-space samples/callchains
  bool bpf = false;          // loading BPF programs
};

inline constexpr int kCapSysAdmin = 21;
inline constexpr int kCapPerfmon = 38;
inline constexpr int kCapBpf = 39;

/// Checks `needs` against capabilities and kernel.perf_event_paranoid before anything is opened.
/// @return ok, or EPERM with a message naming each missing capability and the setting that
/// would allow it.
[[nodiscard]] Status check_privileges(const Needs& needs);

}  // namespace tracer::core
