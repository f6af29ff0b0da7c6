#include "tracer/perfdata/format.hpp"

#include <array>

namespace tracer::perfdata {

std::string_view feature_name(std::uint32_t bit) noexcept {
  static constexpr std::array<std::string_view, 32> kNames = {
      "reserved",        "tracing_data", "build_id",     "hostname",     "osrelease",
      "version",         "arch",         "nrcpus",       "cpudesc",      "cpuid",
      "total_mem",       "cmdline",      "event_desc",   "cpu_topology", "numa_topology",
      "branch_stack",    "pmu_mappings", "group_desc",   "auxtrace",     "stat",
      "cache",           "sample_time",  "mem_topology", "clockid",      "dir_format",
      "bpf_prog_info",   "bpf_btf",      "compressed",   "cpu_pmu_caps", "clock_data",
      "hybrid_topology", "pmu_caps"};
  return bit < kNames.size() ? kNames[bit] : std::string_view{"unknown"};
}

std::string_view user_record_name(std::uint32_t type) noexcept {
  static constexpr std::array<std::string_view, 20> kNames = {"HEADER_ATTR",
                                                              "HEADER_EVENT_TYPE",
                                                              "HEADER_TRACING_DATA",
                                                              "HEADER_BUILD_ID",
                                                              "FINISHED_ROUND",
                                                              "ID_INDEX",
                                                              "AUXTRACE_INFO",
                                                              "AUXTRACE",
                                                              "AUXTRACE_ERROR",
                                                              "THREAD_MAP",
                                                              "CPU_MAP",
                                                              "STAT_CONFIG",
                                                              "STAT",
                                                              "STAT_ROUND",
                                                              "EVENT_UPDATE",
                                                              "TIME_CONV",
                                                              "HEADER_FEATURE",
                                                              "COMPRESSED",
                                                              "FINISHED_INIT",
                                                              "COMPRESSED2"};
  if (type < kHeaderAttr || type - kHeaderAttr >= kNames.size())
    return "UNKNOWN";
  return kNames[type - kHeaderAttr];
}

}  // namespace tracer::perfdata
