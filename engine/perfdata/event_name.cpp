// Event names for files without HEADER_EVENT_DESC, derived from the attr the way perf's
// evsel__name() does (tools/perf/util/evsel.c: evsel__hw_name, evsel__sw_name,
// evsel__hw_cache_name, evsel__bp_name, evsel__add_modifiers), so that `tracer replay` names
// them as `perf script` does.
#include <fmt/core.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>

#include <array>
#include <string>
#include <string_view>

#include "tracer/perfdata/reader.hpp"

namespace tracer::perfdata {
namespace {

constexpr std::array<std::string_view, 10> kHardware = {"cycles",
                                                        "instructions",
                                                        "cache-references",
                                                        "cache-misses",
                                                        "branches",
                                                        "branch-misses",
                                                        "bus-cycles",
                                                        "stalled-cycles-frontend",
                                                        "stalled-cycles-backend",
                                                        "ref-cycles"};
constexpr std::array<std::string_view, 12> kSoftware = {
    "cpu-clock",        "task-clock",   "page-faults",  "context-switches",
    "cpu-migrations",   "minor-faults", "major-faults", "alignment-faults",
    "emulation-faults", "dummy",        "bpf-output",   "cgroup-switches"};
constexpr std::array<std::string_view, 7> kCacheNames = {"L1-dcache", "L1-icache", "LLC", "dTLB",
                                                         "iTLB",      "branch",    "node"};
// perf's evsel__hw_cache_op[op][0] ("load") and [1] ("loads").
constexpr std::array<std::array<std::string_view, 2>, 3> kCacheOps = {
    {{"load", "loads"}, {"store", "stores"}, {"prefetch", "prefetches"}}};

/// evsel__add_modifiers(): ":u", ":k", ":p", ":HG" as perf prints them.
std::string modifiers(const perf_event_attr& a) {
  std::string m;
  bool exclude_guest_default = false;
  const auto mod = [&m](bool excluded, char c) {
    if (!excluded)
      m += c;
  };
  if (a.exclude_kernel || a.exclude_user || a.exclude_hv) {
    mod(a.exclude_kernel, 'k');
    mod(a.exclude_user, 'u');
    mod(a.exclude_hv, 'h');
    exclude_guest_default = true;
  }
  for (unsigned i = 0; i < a.precise_ip; ++i)
    m += 'p';
  if (a.exclude_host || static_cast<bool>(a.exclude_guest) == exclude_guest_default) {
    mod(a.exclude_host, 'H');
    mod(a.exclude_guest, 'G');
  }
  return m.empty() ? m : ":" + m;
}

}  // namespace

std::string event_name(const perf::EventAttr& attr, const TracingData* tracing) {
  const perf_event_attr& a = *attr.raw();
  switch (a.type) {
    case PERF_TYPE_HARDWARE:
      if (a.config < kHardware.size())
        return std::string(kHardware[a.config]) + modifiers(a);
      return fmt::format("unknown-hardware:{}", a.config) + modifiers(a);
    case PERF_TYPE_SOFTWARE:
      if (a.config < kSoftware.size())
        return std::string(kSoftware[a.config]) + modifiers(a);
      return fmt::format("unknown-software:{}", a.config) + modifiers(a);
    case PERF_TYPE_TRACEPOINT:
      if (tracing != nullptr) {
        if (const auto* f = tracing->find(static_cast<std::uint32_t>(a.config)))
          return f->system + ":" + f->name;
      }
      return "unknown tracepoint";  // no TRACING_DATA: perf's name too
    case PERF_TYPE_HW_CACHE: {
      const auto type = a.config & 0xff, op = (a.config >> 8) & 0xff,
                 result = (a.config >> 16) & 0xff;
      if (type >= kCacheNames.size() || op >= kCacheOps.size() || result > 1)
        return fmt::format("invalid-cache:{:#x}", a.config) + modifiers(a);
      if (result == PERF_COUNT_HW_CACHE_RESULT_ACCESS)
        return fmt::format("{}-{}", kCacheNames[type], kCacheOps[op][1]) + modifiers(a);
      return fmt::format("{}-{}-misses", kCacheNames[type], kCacheOps[op][0]) + modifiers(a);
    }
    case PERF_TYPE_BREAKPOINT: {
      std::string rwx;
      if ((a.bp_type & HW_BREAKPOINT_R) != 0)
        rwx += 'r';
      if ((a.bp_type & HW_BREAKPOINT_W) != 0)
        rwx += 'w';
      if ((a.bp_type & HW_BREAKPOINT_X) != 0)
        rwx += 'x';
      return fmt::format("mem:{:#x}:{}", a.bp_addr, rwx) + modifiers(a);
    }
    case PERF_TYPE_RAW:
      return fmt::format("raw {:#x}", a.config) + modifiers(a);
    default:
      return fmt::format("unknown attr type: {}", a.type);
  }
}

}  // namespace tracer::perfdata
