// Event names in perf's -e syntax (see event_names.hpp).
#include "tracer/event_names.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <string_view>

#include "tracer/common/edit_distance.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/hw_events.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/perf/software.hpp"

namespace tracer {
namespace {

/// An -e event split into its name and perf's modifier suffix ("page-faults:u" ->
/// "page-faults", "u"; "sched:sched_switch:k" -> "sched:sched_switch", "k").
struct EventSpec {
  std::string name;
  std::string modifiers;
};

constexpr std::string_view kModifierChars = "ukhHGp";

bool is_generic_event(std::string_view name) {
  return perf::find_software_event(name).has_value() ||
         perf::find_hardware_event(name).has_value() || perf::find_cache_event(name).has_value();
}

/// perf's PMU syntax: "pmu/term=value,.../" (the terms may be empty).
bool is_pmu_event(std::string_view name) {
  const auto slash = name.find('/');
  return slash != std::string_view::npos && slash > 0 && name.size() > slash + 1 &&
         name.back() == '/';
}

/// perf's raw event code: "rNNNN" (hex).
bool is_raw_event(std::string_view name) {
  return name.size() > 1 && name.size() <= 17 && name[0] == 'r' &&
         std::all_of(name.begin() + 1, name.end(),
                     [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; });
}

EventSpec split_modifiers(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return {text, {}};
  const std::string base = text.substr(0, colon);
  const std::string mods = text.substr(colon + 1);
  // A software/hardware event has no colon of its own; a tracepoint has one (system:event), so
  // its modifiers follow a second one, as in perf.
  const bool generic = is_generic_event(base) || is_pmu_event(base) || is_raw_event(base);
  const bool tracepoint = base.find(':') != std::string::npos;
  if (generic || tracepoint)
    return {base, mods};
  return {text, {}};
}

/// perf's modifiers (tools/perf/util/parse-events.c): u, k and h keep only the privilege
/// levels named, H and G only host or guest counting, p asks for more precision.
void apply_modifiers(perf::EventAttr& a, const EventSpec& spec, const std::string& text) {
  bool u = false, k = false, h = false, host = false, guest = false;
  std::uint8_t precise = 0;
  for (char c : spec.modifiers) {
    switch (c) {
      case 'u':
        u = true;
        break;
      case 'k':
        k = true;
        break;
      case 'h':
        h = true;
        break;
      case 'H':
        host = true;
        break;
      case 'G':
        guest = true;
        break;
      case 'p':
        ++precise;
        break;
      default:
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    fmt::format("event '{}': unknown modifier '{}'", text, c),
                    fmt::format("modifiers are letters of '{}' after the event, as in perf: "
                                "page-faults:u (user only), sched:sched_switch:k (kernel only)",
                                kModifierChars));
    }
  }
  if (spec.modifiers.empty())
    return;
  if (u || k || h) {
    a.flag(perf::Flag::kExcludeUser, !u).flag(perf::Flag::kExcludeKernel, !k);
    a.flag(perf::Flag::kExcludeHv, !h);
  }
  if (host != guest) {
    a.flag(perf::Flag::kExcludeGuest, host).flag(perf::Flag::kExcludeHost, guest);
  }
  if (precise > 3) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("event '{}': at most 3 'p' modifiers", text));
  }
  if (precise > 0)
    a.precise_ip(precise);
}

std::vector<std::string> generic_event_names() {
  std::vector<std::string> out;
  for (const auto& e : perf::software_events())
    out.emplace_back(e.name);
  for (const auto& e : perf::hardware_events())
    out.emplace_back(e.name);
  return out;
}

}  // namespace

perf::EventAttr resolve_event_name(const std::string& text, std::optional<tracefs::Tracefs>& fs) {
  const EventSpec spec = split_modifiers(text);
  const std::string& name = spec.name;
  perf::EventAttr a;
  if (auto sw = perf::find_software_event(name)) {
    a.type(PERF_TYPE_SOFTWARE).config(sw->config);
  } else if (auto hw = perf::find_hardware_event(name)) {
    a.type(PERF_TYPE_HARDWARE).config(*hw);
  } else if (auto cache = perf::find_cache_event(name)) {
    a.type(PERF_TYPE_HW_CACHE).config(*cache);
  } else if (is_raw_event(name)) {
    std::uint64_t code = 0;
    std::from_chars(name.data() + 1, name.data() + name.size(), code, 16);
    a.type(PERF_TYPE_RAW).config(code);  // a CPU PMU's raw event code, as perf's rNNNN
  } else if (is_pmu_event(name)) {
    const auto slash = name.find('/');
    auto pmu = perf::find_pmu(name.substr(0, slash));
    if (!pmu) {
      throw Error(ErrorCategory::kUsage, pmu.error().code,
                  fmt::format("event '{}': {}", text, pmu.error().message),
                  "`tracer list pmus` shows this machine's PMUs and their terms");
    }
    auto cfg = perf::encode_pmu_terms(*pmu, name.substr(slash + 1, name.size() - slash - 2));
    if (!cfg) {
      throw Error(ErrorCategory::kUsage, cfg.error().code,
                  fmt::format("event '{}': {}", text, cfg.error().message), cfg.error().hint);
    }
    a.type(pmu->type).config(cfg->config).config1(cfg->config1).config2(cfg->config2);
    a.config3(cfg->config3);
  } else if (auto tp = tracefs::split_tracepoint(name)) {
    if (!fs) {
      auto opened = tracefs::Tracefs::open();
      if (!opened)
        throw Error(ErrorCategory::kRuntime, opened.error());
      fs = std::move(*opened);
    }
    auto id = fs->tracepoint_id(*tp);
    // A tracepoint named on the command line that does not exist is a usage error (exit 2).
    if (!id) {
      throw Error(
          id.error().errno_value() == ENOENT ? ErrorCategory::kUsage : ErrorCategory::kRuntime,
          id.error());
    }
    a.type(PERF_TYPE_TRACEPOINT).config(*id);
  } else {
    const auto names = generic_event_names();
    const auto near =
        tracer::detail::nearest(name, names, {.max_distance = 2, .related_only = false});
    std::string hint;
    if (!near.empty()) {
      hint = fmt::format("did you mean '{}'?", near.front());
    } else {
      std::string list;
      for (const auto& n : names)
        list += (list.empty() ? "" : ", ") + n;
      hint = fmt::format(
          "use a software or hardware event ({}) or a tracepoint system:event "
          "(see `tracer list tracepoints`), optionally with a modifier (:u, :k, ...)",
          list);
    }
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("unknown event '{}'", text), hint);
  }
  apply_modifiers(a, spec, text);
  return a;
}

std::string event_base_name(const std::string& text) {
  return split_modifiers(text).name;
}

std::string event_unit(const std::string& text) {
  if (auto sw = perf::find_software_event(split_modifiers(text).name))
    return std::string(sw->unit);
  return {};
}

std::optional<EventNameProblem> check_event_name(const std::string& text) {
  const EventSpec spec = split_modifiers(text);
  if (!is_generic_event(spec.name) && !is_pmu_event(spec.name) && !is_raw_event(spec.name) &&
      !tracefs::split_tracepoint(spec.name)) {
    const auto names = generic_event_names();
    const auto near =
        tracer::detail::nearest(spec.name, names, {.max_distance = 2, .related_only = false});
    return EventNameProblem{
        fmt::format("unknown event '{}'", text),
        near.empty() ? "a software or hardware event (task-clock, page-faults, cycles, ...) or a "
                       "tracepoint system:event, as `tracer list` shows them"
                     : fmt::format("did you mean '{}'?", near.front())};
  }
  for (char c : spec.modifiers) {
    if (kModifierChars.find(c) == std::string_view::npos) {
      return EventNameProblem{fmt::format("event '{}': unknown modifier '{}'", text, c),
                              fmt::format("modifiers are letters of '{}'", kModifierChars)};
    }
  }
  return std::nullopt;
}

namespace {
/// The next comma of an event list at or after `from` that separates events: not one between
/// the slashes of a PMU event's terms ("cpu/event=0x3c,umask=0/").
std::size_t list_comma(std::string_view text, std::size_t from) {
  bool in_terms = false;
  for (std::size_t i = from; i < text.size(); ++i) {
    if (text[i] == '/')
      in_terms = !in_terms;
    else if (text[i] == ',' && !in_terms)
      return i;
  }
  return std::string_view::npos;
}
}  // namespace

std::vector<EventGroupSpec> parse_event_list(std::string_view text) {
  const auto bad = [&](std::string what) {
    return Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                 fmt::format("event list '{}': {}", text, what),
                 "write events separated by commas, a group in braces with its modifiers after "
                 "it: -e '{task-clock,page-faults}:u,context-switches'");
  };
  std::vector<EventGroupSpec> out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',') {
      ++i;
      continue;
    }
    EventGroupSpec g;
    if (text[i] == '{') {
      const auto close = text.find('}', i);
      if (close == std::string_view::npos)
        throw bad("a '{' without its '}'");
      const std::string_view inner = text.substr(i + 1, close - i - 1);
      if (inner.find('{') != std::string_view::npos)
        throw bad("groups do not nest");
      std::size_t end = close + 1;
      std::string mods;
      if (end < text.size() && text[end] == ':') {
        const auto comma = list_comma(text, end);
        const auto stop = comma == std::string_view::npos ? text.size() : comma;
        mods = std::string(text.substr(end + 1, stop - end - 1));
        end = stop;
      }
      std::string kept;  // the group's modifiers without W, for each member
      for (char c : mods) {
        if (c == 'W')
          g.weak = true;
        else
          kept += c;
      }
      std::size_t j = 0;
      while (j <= inner.size()) {
        const auto comma = list_comma(inner, j);
        const auto stop = comma == std::string_view::npos ? inner.size() : comma;
        std::string name(inner.substr(j, stop - j));
        if (name.empty())
          throw bad("an empty event name in a group");
        if (!kept.empty()) {
          // The member's own modifiers and the group's, after one colon (perf's rule).
          const EventSpec spec = split_modifiers(name);
          name = spec.name + ":" + spec.modifiers + kept;
        }
        g.events.push_back(std::move(name));
        j = stop + 1;
      }
      g.grouped = true;
      g.text = std::string(text.substr(i, end - i));
      i = end;
    } else {
      if (text[i] == '}')
        throw bad("a '}' without its '{'");
      const auto comma = list_comma(text, i);
      const auto stop = comma == std::string_view::npos ? text.size() : comma;
      std::string name(text.substr(i, stop - i));
      if (name.find_first_of("{}") != std::string::npos)
        throw bad(fmt::format("'{}' has a brace inside a name", name));
      g.events.push_back(name);
      g.text = std::move(name);
      i = stop;
    }
    out.push_back(std::move(g));
  }
  if (out.empty())
    throw bad("no event");
  return out;
}

}  // namespace tracer
