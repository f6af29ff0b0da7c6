#include "tracer/perf/software.hpp"

#include "tracer/common/cpu_list.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>

#include <array>
#include <charconv>
#include <fstream>
#include <string>

namespace tracer::perf {
namespace {

// Names as perf spells them (tools/perf/util/parse-events.c event_symbols_sw).
constexpr std::array kSoftware = {
    SoftwareEvent{"cpu-clock", PERF_COUNT_SW_CPU_CLOCK, "ns"},
    SoftwareEvent{"task-clock", PERF_COUNT_SW_TASK_CLOCK, "ns"},
    SoftwareEvent{"page-faults", PERF_COUNT_SW_PAGE_FAULTS, ""},
    SoftwareEvent{"faults", PERF_COUNT_SW_PAGE_FAULTS, ""},
    SoftwareEvent{"context-switches", PERF_COUNT_SW_CONTEXT_SWITCHES, ""},
    SoftwareEvent{"cs", PERF_COUNT_SW_CONTEXT_SWITCHES, ""},
    SoftwareEvent{"cpu-migrations", PERF_COUNT_SW_CPU_MIGRATIONS, ""},
    SoftwareEvent{"migrations", PERF_COUNT_SW_CPU_MIGRATIONS, ""},
    SoftwareEvent{"minor-faults", PERF_COUNT_SW_PAGE_FAULTS_MIN, ""},
    SoftwareEvent{"major-faults", PERF_COUNT_SW_PAGE_FAULTS_MAJ, ""},
    SoftwareEvent{"alignment-faults", PERF_COUNT_SW_ALIGNMENT_FAULTS, ""},
    SoftwareEvent{"emulation-faults", PERF_COUNT_SW_EMULATION_FAULTS, ""},
    SoftwareEvent{"dummy", PERF_COUNT_SW_DUMMY, ""},
    SoftwareEvent{"bpf-output", PERF_COUNT_SW_BPF_OUTPUT, ""},
    SoftwareEvent{"cgroup-switches", 11 /* PERF_COUNT_SW_CGROUP_SWITCHES, 5.13 */, ""},
};

}  // namespace

std::span<const SoftwareEvent> software_events() noexcept {
  return kSoftware;
}

std::optional<SoftwareEvent> find_software_event(std::string_view name) noexcept {
  for (const auto& e : kSoftware) {
    if (e.name == name)
      return e;
  }
  return std::nullopt;
}

Result<std::vector<int>> online_cpus() {
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string text;
  if (!std::getline(in, text)) {
    return fail(ENOENT, "cpus: cannot read /sys/devices/system/cpu/online");
  }
  return cpus::parse_list(text);
}

}  // namespace tracer::perf
