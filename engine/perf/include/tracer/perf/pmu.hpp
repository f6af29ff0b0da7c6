// PMUs as the kernel lists them under /sys/bus/event_source/devices.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "tracer/result.hpp"

namespace tracer::perf {

/// One `format/<term>` file: e.g. term "event", value "config:0-7" -> field config, bits 0..7.
struct PmuFormatTerm {
  std::string name;
  std::string spec;  // the file's text, e.g. "config:0-7,32-35"
  /// Which attr field the term writes: 0 = config, 1 = config1, 2 = config2, 3 = config3.
  int config_field = 0;
  /// Bit ranges [lo, hi] inside that field, in order of the spec.
  std::vector<std::pair<int, int>> bits;
};

/// One `events/<name>` alias: e.g. "cpu-cycles" -> "event=0x3c".
struct PmuEventAlias {
  std::string name;
  std::string terms;
  std::string unit;   // events/<name>.unit if present
  std::string scale;  // events/<name>.scale if present
};

struct Pmu {
  std::string name;
  std::uint32_t type = 0;
  std::filesystem::path dir;
  std::vector<PmuFormatTerm> formats;
  std::vector<PmuEventAlias> events;
  std::vector<int> cpus;  // from `cpumask` or `cpus`; empty means all CPUs
  /// nr_addr_filters file present and > 0 (AUX-capable PMUs such as intel_pt have it).
  std::uint32_t nr_addr_filters = 0;
  /// caps/ directory entries (e.g. "max_precise", "aux_output"), as name=value.
  std::vector<std::pair<std::string, std::string>> caps;
};

/// Options for tests: point the scan at a fake sysfs tree.
struct PmuScanOptions {
  std::filesystem::path devices_dir = "/sys/bus/event_source/devices";
};

/// Lists every PMU with its type, format terms and event aliases, sorted by type.
/// @return the PMUs, or a Failure when the devices directory cannot be read.
[[nodiscard]] Result<std::vector<Pmu>> list_pmus(const PmuScanOptions& opts = {});

/// Reads one PMU by name (e.g. "uprobe", "kprobe", "intel_pt").
/// @return the PMU, or a Failure with ENOENT when it does not exist here.
[[nodiscard]] Result<Pmu> find_pmu(const std::string& name, const PmuScanOptions& opts = {});

/// The name of the PMU whose `type` file holds `type`; std::nullopt when none does.
/// Built-in types (hardware=0, software=1, tracepoint=2, hw_cache=3, raw=4, breakpoint=5) get
/// their ABI names even when sysfs lacks a directory for them.
[[nodiscard]] std::optional<std::string> pmu_name_for_type(std::uint32_t type,
                                                           const PmuScanOptions& opts = {});

/// Encodes "term=value,term=value" (perf's syntax, terms from the PMU's format/ files, plus the
/// builtin config/config1/config2/config3 terms) into attr config words.
struct PmuConfig {
  std::uint64_t config = 0;
  std::uint64_t config1 = 0;
  std::uint64_t config2 = 0;
  std::uint64_t config3 = 0;
};
/// @return the encoded config, or a Failure (EINVAL) naming the unknown term or the value that
/// does not fit the term's bits.
[[nodiscard]] Result<PmuConfig> encode_pmu_terms(const Pmu& pmu, const std::string& terms);

/// What this machine offers, in the spirit of the perfmon properties: each capability with
/// whether it is available and why (not).
struct PmuCapability {
  std::string name;  // "hardware counters", "AUX tracing", "kprobe", "uprobe", "breakpoint", ...
  bool available = false;
  std::string reason;
};
[[nodiscard]] std::vector<PmuCapability> probe_capabilities(const std::vector<Pmu>& pmus,
                                                            const PmuScanOptions& opts = {});

/// The perfmon properties query (../shared/seeds/fuchsia-perfmon.h.txt,
/// perfmon_ioctl_properties_t) answered for this machine: the counters the CPU has and their
/// widths, and whether last-branch records exist.
struct PmuProperties {
  std::uint16_t api_version = 3;     // PERFMON_API_VERSION of the seed
  std::uint16_t pm_version = 0;      // x86: the architectural perfmon version (CPUID.0AH:EAX[7:0])
  std::uint16_t max_num_events = 0;  // fixed + programmable
  std::uint16_t max_num_fixed_events = 0, max_fixed_counter_width = 0;
  std::uint16_t max_num_programmable_events = 0, max_programmable_counter_width = 0;
  std::uint16_t max_num_misc_events = 0, max_misc_counter_width = 0;  // none known
  bool has_last_branch = false;         // PERFMON_PROPERTY_FLAG_HAS_LAST_BRANCH
  std::uint32_t last_branch_depth = 0;  // the core PMU's caps/branches (sysfs)
  bool kernel_pmu = false;  // a core PMU driver in sysfs (cpu, cpu_core, cpu_atom, armv8_*)
  std::string source;       // where the numbers come from, or why there are none
};
/// From CPUID leaf 0xA's EAX and EDX (x86: version, programmable counters and width in EAX,
/// fixed counters and width in EDX from version 2) and the core PMU's LBR depth.
[[nodiscard]] PmuProperties properties_from_cpuid(std::uint32_t eax,
                                                  std::uint32_t edx,
                                                  std::uint32_t last_branch_depth);
/// This machine's: CPUID on x86-64, sysfs for the LBR depth and the core PMU.
[[nodiscard]] PmuProperties pmu_properties(const std::vector<Pmu>& pmus);

}  // namespace tracer::perf
