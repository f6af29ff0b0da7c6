// Probe resolution: a ProbeOptions (kind + spec + sampling options) to the perf attr, ring
// options and schema the engine opens per CPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/probe.hpp"
#include "tracer/tracefs/dynamic_probes.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {

struct ResolvedProbe {
  ProbeInfo info;
  perf::EventAttr attr;
  /// The string a probe-PMU attr points at in config1 (uprobe path, kprobe symbol). Set
  /// config1 from it right before opening (a moved std::string may move its buffer).
  std::string attr_string;
  bool config1_is_attr_string = false;
  bool counting = false;
  perf::RingOptions ring;
  /// ProbeOptions::read_events resolved: the members of the group this probe's event leads.
  std::vector<perf::EventAttr> members;
};

/// Shared state of one resolution pass (tracefs is opened once, on first need).
struct ResolveContext {
  std::optional<tracefs::Tracefs> tracefs;
  /// Dynamic kprobe/uprobe events created for probes without a probe PMU (owned by the engine
  /// afterwards; removed when it stops).
  std::optional<tracefs::DynamicProbes> dynamic;
  /// The traced process, for "lib:symbol" uprobes resolved through /proc/PID/maps.
  std::optional<pid_t> pid;
  /// argv[0] of a command target (breakpoints on its symbols).
  std::string command{};
  /// Use tracefs dynamic events even where a probe PMU exists.
  bool prefer_tracefs_probes = false;
  /// Data pages of a ring whose probe sets no ring_pages (0: 64), from the locked-memory budget
  /// (core::plan_rings).
  std::uint32_t default_ring_pages = 0;
  const tracefs::Tracefs& fs();
  tracefs::DynamicProbes& dynamic_probes();
};

/// Resolves one probe. Throws tracer::Error: kUsage for a malformed spec or option, kNotFound
/// for a tracepoint/PMU/event that does not exist (with near matches), kUnsupported for what
/// this machine cannot do (and why).
[[nodiscard]] ResolvedProbe resolve_probe(const ProbeOptions& opts,
                                          std::uint32_t index,
                                          ResolveContext& ctx);

/// Breakpoint spec "0xADDR[:rwx[:len]]" or "symbol[+off][:rwx[:len]]" -> bp_type, addr, len.
struct BreakpointSpec {
  std::uint64_t addr = 0;  // 0 when `symbol` is set (resolved against the traced program)
  std::string symbol{};    // "counter", "counter+8"
  std::uint32_t type = 0;  // HW_BREAKPOINT_R|W|X
  std::uint64_t len = 0;
  bool len_given = false;  // else 8, or the variable's size when it is 1, 2, 4 or 8
};
[[nodiscard]] Result<BreakpointSpec> parse_breakpoint(std::string_view spec);

}  // namespace tracer::core
