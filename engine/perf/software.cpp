#include "tracer/perf/software.hpp"

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

Result<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' '))
    text.remove_suffix(1);
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t comma = std::min(text.find(',', pos), text.size());
    const std::string_view part = text.substr(pos, comma - pos);
    const std::size_t dash = part.find('-');
    int lo = 0, hi = 0;
    const auto parse = [](std::string_view s, int& out) {
      const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      return ec == std::errc() && p == s.data() + s.size() && out >= 0;
    };
    const bool ok = dash == std::string_view::npos
                        ? parse(part, lo) && (hi = lo, true)
                        : parse(part.substr(0, dash), lo) && parse(part.substr(dash + 1), hi);
    if (!ok || hi < lo) {
      return fail(EINVAL, fmt::format("cpu list: bad element '{}' in '{}'", part, text));
    }
    for (int c = lo; c <= hi; ++c)
      cpus.push_back(c);
    pos = comma + 1;
  }
  return cpus;
}

Result<std::vector<int>> online_cpus() {
  std::ifstream in("/sys/devices/system/cpu/online");
  std::string text;
  if (!std::getline(in, text)) {
    return fail(ENOENT, "cpus: cannot read /sys/devices/system/cpu/online");
  }
  return parse_cpu_list(text);
}

}  // namespace tracer::perf
