// One table of perf's generic hardware and cache event names (recipes and tracer stat).
#include "tracer/perf/hw_events.hpp"

#include <linux/perf_event.h>

#include <array>

namespace tracer::perf {
namespace {

constexpr std::array kHardware = {
    HardwareEvent{"cycles", PERF_COUNT_HW_CPU_CYCLES},
    HardwareEvent{"cpu-cycles", PERF_COUNT_HW_CPU_CYCLES},
    HardwareEvent{"instructions", PERF_COUNT_HW_INSTRUCTIONS},
    HardwareEvent{"cache-references", PERF_COUNT_HW_CACHE_REFERENCES},
    HardwareEvent{"cache-misses", PERF_COUNT_HW_CACHE_MISSES},
    HardwareEvent{"branches", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    HardwareEvent{"branch-instructions", PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
    HardwareEvent{"branch-misses", PERF_COUNT_HW_BRANCH_MISSES},
    HardwareEvent{"bus-cycles", PERF_COUNT_HW_BUS_CYCLES},
    HardwareEvent{"stalled-cycles-frontend", PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    HardwareEvent{"idle-cycles-frontend", PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
    HardwareEvent{"stalled-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    HardwareEvent{"idle-cycles-backend", PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
    HardwareEvent{"ref-cycles", PERF_COUNT_HW_REF_CPU_CYCLES},
};

struct Named {
  std::string_view name;
  std::uint64_t config;
};

// tools/perf/util/evsel.c evsel__hw_cache / evsel__hw_cache_op / evsel__hw_cache_result.
constexpr std::array kCacheIds = {
    Named{"L1-dcache", PERF_COUNT_HW_CACHE_L1D}, Named{"L1-icache", PERF_COUNT_HW_CACHE_L1I},
    Named{"LLC", PERF_COUNT_HW_CACHE_LL},        Named{"dTLB", PERF_COUNT_HW_CACHE_DTLB},
    Named{"iTLB", PERF_COUNT_HW_CACHE_ITLB},     Named{"branch", PERF_COUNT_HW_CACHE_BPU},
    Named{"node", PERF_COUNT_HW_CACHE_NODE},
};
constexpr std::array kCacheOps = {
    Named{"loads", PERF_COUNT_HW_CACHE_OP_READ},
    Named{"load", PERF_COUNT_HW_CACHE_OP_READ},
    Named{"stores", PERF_COUNT_HW_CACHE_OP_WRITE},
    Named{"store", PERF_COUNT_HW_CACHE_OP_WRITE},
    Named{"prefetches", PERF_COUNT_HW_CACHE_OP_PREFETCH},
    Named{"prefetch", PERF_COUNT_HW_CACHE_OP_PREFETCH},
};
constexpr std::array kCacheResults = {
    Named{"refs", PERF_COUNT_HW_CACHE_RESULT_ACCESS},
    Named{"misses", PERF_COUNT_HW_CACHE_RESULT_MISS},
    Named{"miss", PERF_COUNT_HW_CACHE_RESULT_MISS},
};

template <std::size_t N>
std::optional<std::uint64_t> lookup(const std::array<Named, N>& table,
                                    std::string_view name) noexcept {
  for (const auto& n : table) {
    if (n.name == name)
      return n.config;
  }
  return std::nullopt;
}

}  // namespace

std::span<const HardwareEvent> hardware_events() noexcept {
  return kHardware;
}

std::optional<std::uint64_t> find_hardware_event(std::string_view name) noexcept {
  for (const auto& h : kHardware) {
    if (h.name == name)
      return h.config;
  }
  return std::nullopt;
}

std::optional<std::uint64_t> find_cache_event(std::string_view name) noexcept {
  // "<id>-<op>-<result>" or "<id>-<op>" (accesses), e.g. L1-dcache-load-misses, LLC-loads.
  for (const auto& id : kCacheIds) {
    if (!name.starts_with(id.name) || name.size() <= id.name.size() ||
        name[id.name.size()] != '-') {
      continue;
    }
    const std::string_view rest = name.substr(id.name.size() + 1);
    const auto dash = rest.find('-');
    const auto op = lookup(kCacheOps, rest.substr(0, dash));
    if (!op)
      return std::nullopt;
    std::uint64_t result = PERF_COUNT_HW_CACHE_RESULT_ACCESS;
    if (dash != std::string_view::npos) {
      const auto r = lookup(kCacheResults, rest.substr(dash + 1));
      if (!r)
        return std::nullopt;
      result = *r;
    }
    return id.config | (*op << 8) | (result << 16);
  }
  return std::nullopt;
}

std::string hardware_event_names() {
  std::string out;
  for (const auto& h : kHardware)
    out += std::string(out.empty() ? "" : ", ") + std::string(h.name);
  return out;
}

std::string_view cache_event_grammar() noexcept {
  return "write CACHE-OP[-RESULT]: CACHE in L1-dcache, L1-icache, LLC, dTLB, iTLB, branch, "
         "node; OP in load(s), store(s), prefetch(es); RESULT in refs, misses (e.g. "
         "L1-dcache-load-misses)";
}

}  // namespace tracer::perf
