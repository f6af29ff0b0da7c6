// How this kernel creates kprobes and uprobes: through the kprobe/uprobe PMUs (4.17+,
// perf_kprobe_init()/perf_uprobe_init() in kernel/trace/trace_event_perf.c), through tracefs
// dynamic events (kprobe_events/uprobe_events, see tracer/tracefs/dynamic_probes.hpp), or not at
// all. Never assume the PMU types: they are assigned at boot and differ between machines.
//
// Usage:
//   const auto backend = core::choose_probe_backend(core::ProbeFamily::kUprobe, {});
//   if (backend.kind == core::ProbeBackendKind::kPmu) {
//     const std::string path = "/usr/bin/bash";              // must outlive the open
//     auto attr = core::uprobe_attr(backend, path, offset, /*retprobe=*/false);
//     attr.sample_period(1).sample_type(PERF_SAMPLE_TID);
//     auto ev = perf::Event::open(attr, {.pid = -1, .cpu = 0});
//   } else if (backend.kind == core::ProbeBackendKind::kTracefs) {
//     // tracefs::DynamicProbes::add_uprobe(), then a PERF_TYPE_TRACEPOINT event on its id
//   } else {
//     // backend.reason says why neither exists
//   }
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "tracer/perf/event_attr.hpp"

namespace tracer::core {

enum class ProbeFamily : std::uint8_t {
  kKprobe,  // kprobe and kretprobe
  kUprobe,  // uprobe and uretprobe
};

enum class ProbeBackendKind : std::uint8_t {
  kPmu,          // perf_event_open on the "kprobe"/"uprobe" PMU
  kTracefs,      // tracefs kprobe_events/uprobe_events, then a tracepoint event
  kUnsupported,  // neither: `reason` says why
};

/// Where to look; tests point these at fake trees.
struct BackendRoots {
  std::filesystem::path devices_dir = "/sys/bus/event_source/devices";
  /// tracefs root; empty: find it (tracefs::Tracefs::open(), which mounts it if it may).
  std::filesystem::path tracefs_root{};
  /// Kernel config (gzip or plain) used to explain a missing backend; empty: /proc/config.gz,
  /// then /boot/config-<release>.
  std::filesystem::path kernel_config{};
};

struct ProbeBackend {
  ProbeFamily family = ProbeFamily::kUprobe;
  ProbeBackendKind kind = ProbeBackendKind::kUnsupported;
  /// kPmu: the PMU's `type` (attr.type).
  std::uint32_t pmu_type = 0;
  /// kPmu: the config bit that makes a return probe, from format/retprobe ("config:0").
  /// When the file is missing the kernel's PERF_PROBE_CONFIG_IS_RETPROBE (bit 0) is assumed.
  unsigned retprobe_bit = 0;
  /// kPmu, uprobes: the first config bit of the semaphore offset, from format/ref_ctr_offset
  /// ("config:32-63", 4.20+); nullopt when the kernel has none.
  std::optional<unsigned> ref_ctr_shift{};
  /// kTracefs: the tracefs root (kprobe_events/uprobe_events live in it).
  std::filesystem::path tracefs_root{};
  /// Why this backend was chosen, or (kUnsupported) why none could be.
  std::string reason;
};

/// "kprobe" or "uprobe".
[[nodiscard]] const char* family_name(ProbeFamily family) noexcept;

/// Picks the backend: the PMU when <devices_dir>/<kprobe|uprobe>/type exists, else tracefs
/// dynamic events when <tracefs>/<kprobe|uprobe>_events exists, else kUnsupported with a reason
/// such as "this kernel has neither the kprobe PMU nor tracefs kprobe_events (CONFIG_KPROBES is
/// off)" (the parenthesis comes from the kernel config when it is readable).
/// @return the backend; never fails (an unreadable or malformed PMU directory is reported as
/// kUnsupported or leads to the tracefs fallback, with the reason saying so).
[[nodiscard]] ProbeBackend choose_probe_backend(ProbeFamily family, const BackendRoots& roots = {});

/// A uprobe/uretprobe attr for the PMU backend: type = pmu_type, config1 = the path's address
/// (uprobe_path), config2 = the file offset (probe_offset), config = the retprobe bit when
/// `retprobe`. Sampling fields are left to the caller.
/// Precondition: backend.kind == kPmu and backend.family == kUprobe (checked).
/// `path` is read by the kernel during perf_event_open(), so it must outlive the open call.
/// @return the attr (no failure path).
[[nodiscard]] perf::EventAttr uprobe_attr(const ProbeBackend& backend,
                                          const std::string& path,
                                          std::uint64_t offset,
                                          bool retprobe);

/// A kprobe/kretprobe attr for the PMU backend: config1 = the function name's address
/// (kprobe_func), config2 = the offset inside it (probe_offset); with an empty `symbol`,
/// config1 = 0 and config2 = `offset` taken as an absolute kernel address (kprobe_addr).
/// Precondition: backend.kind == kPmu and backend.family == kKprobe (checked).
/// `symbol` must outlive the perf_event_open() call.
/// @return the attr (no failure path).
[[nodiscard]] perf::EventAttr kprobe_attr(const ProbeBackend& backend,
                                          const std::string& symbol,
                                          std::uint64_t offset,
                                          bool retprobe);

}  // namespace tracer::core
