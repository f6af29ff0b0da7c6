#include "privileges.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tracer/perf/event.hpp"

namespace tracer::core {

Status check_privileges(const Needs& needs) {
  const bool admin = perf::has_capability(kCapSysAdmin).value_or(false);
  const bool perfmon = admin || perf::has_capability(kCapPerfmon).value_or(false);
  const bool bpf = admin || perf::has_capability(kCapBpf).value_or(false);
  const int paranoid = perf::perf_event_paranoid().value_or(2);
  std::vector<std::string> missing;
  // Kernel counterpart: perf_allow_cpu()/perf_allow_tracepoint()/perf_allow_kernel() in
  // include/linux/perf_event.h: CAP_PERFMON (or CAP_SYS_ADMIN) lifts each paranoid level.
  if (!perfmon) {
    if (needs.tracepoints && paranoid > -1) {
      missing.emplace_back(fmt::format(
          "tracepoint and probe events need CAP_PERFMON (or kernel.perf_event_paranoid=-1; it is "
          "{})",
          paranoid));
    }
    if (needs.cpu_wide && paranoid > 0) {
      missing.emplace_back(fmt::format(
          "tracing every CPU needs CAP_PERFMON (or kernel.perf_event_paranoid<=0; it is {})",
          paranoid));
    }
    if (needs.kernel && paranoid > 1) {
      missing.emplace_back(fmt::format(
          "kernel samples need CAP_PERFMON (or kernel.perf_event_paranoid<=1; it is {})",
          paranoid));
    }
  }
  if (needs.bpf && !bpf) {
    missing.emplace_back("loading BPF programs needs CAP_BPF (with CAP_PERFMON) or CAP_SYS_ADMIN");
  }
  if (missing.empty())
    return {};
  std::string msg = "insufficient privileges:";
  for (const auto& m : missing)
    msg += "\n  - " + m;
  return fail(EPERM, msg,
              ::geteuid() == 0
                  ? "root without these capabilities: check the container's or "
                    "systemd unit's capability bounding set"
                  : "run as root, or grant them: setcap cap_perfmon,cap_bpf,cap_dac_read_search+ep "
                    "$(command -v tracer)");
}

}  // namespace tracer::core
