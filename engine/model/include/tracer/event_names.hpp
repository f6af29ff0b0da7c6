// Event names as perf stat -e writes them, resolved to perf_event_attr: generic software,
// hardware and cache events, tracepoints "system:event", perf's modifiers after a colon, and
// perf's event lists with {group} syntax. What `tracer stat -e` and a recipe's [[counter]]
// groups both read.
//
// Usage:
//   auto groups = tracer::parse_event_list("{task-clock,page-faults}:u,context-switches");
//   std::optional<tracefs::Tracefs> fs;                     // opened on the first tracepoint
//   for (auto& g : groups) for (auto& e : g.events) attrs.push_back(resolve_event_name(e, fs));
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/perf/event_attr.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {

/// An event named as perf stat -e names it: a software or hardware event ("page-faults",
/// "cycles"), a cache event ("L1-dcache-load-misses") or a tracepoint "system:event",
/// a PMU event in perf's syntax "pmu/term=value,.../" (terms from the PMU's sysfs format, or
/// config=, config1=...), a raw CPU event "rNNNN",
/// optionally with perf's modifiers after a colon (u, k, h: only those privilege levels; H, G:
/// host or guest; p: precision), e.g. "page-faults:u", "sched:sched_switch:k". `fs` is opened
/// on the first tracepoint.
/// Throws tracer::Error: kUsage for an unknown event (with a near name), tracepoint or modifier;
/// kRuntime when tracefs cannot be opened or read.
[[nodiscard]] perf::EventAttr resolve_event_name(const std::string& text,
                                                 std::optional<tracefs::Tracefs>& fs);

/// The event's name without its modifiers ("page-faults:u" -> "page-faults").
[[nodiscard]] std::string event_base_name(const std::string& text);
/// "ns" for the software clocks (cpu-clock, task-clock), "" for the others.
[[nodiscard]] std::string event_unit(const std::string& text);
/// Whether `text` is well formed without looking at the system: a known generic event or a
/// "system:event" form, with known modifiers. The problem and its hint when not.
struct EventNameProblem {
  std::string message;
  std::string hint;
};
[[nodiscard]] std::optional<EventNameProblem> check_event_name(const std::string& text);

/// One entry of an -e list: an event alone, or a {group} of events counted together.
struct EventGroupSpec {
  std::vector<std::string> events;  // each with the group's modifiers appended (perf's rule)
  bool grouped = false;             // written as {a,b}
  bool weak = false;                // the group's :W modifier (separate events if it won't fit)
  std::string text;                 // as written
};
/// Splits perf's -e syntax: "a,b" (each alone), "{a,b}" (a group), "{a,b}:u" (the group's
/// modifiers apply to each member; W makes it weak), several -e joined by commas.
/// Throws tracer::Error (kUsage) for unbalanced braces, nested groups or an empty name.
[[nodiscard]] std::vector<EventGroupSpec> parse_event_list(std::string_view text);

}  // namespace tracer
