// What a recipe needs the running system for: `tracer check`'s look at tracepoints, binaries and
// files (Recipe::check_system), and the engine's options with tracepoint globs expanded
// (Recipe::to_engine_options).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>

#include "recipe_schema.hpp"
#include "recipe_system.hpp"
#include "tracer/bpf/object.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/recipe.hpp"

#include "tracer/event_names.hpp"
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/symbols/usdt.hpp"
#include "tracer/tracefs/filter.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using core::near_names;
using core::plain_list;
using core::quoted_list;

/// Whether a tracepoint spec is a shell glob ("syscalls:sys_enter_*"): one probe per match.
bool is_tracepoint_glob(std::string_view spec) {
  return spec.find_first_of("*?[") != std::string_view::npos;
}

/// The glob with its wildcard characters removed, as a name to look near matches up with.
tracefs::TracepointName glob_as_name(std::string_view glob) {
  std::string plain;
  for (char c : glob) {
    if (c != '*' && c != '?' && c != '[' && c != ']')
      plain.push_back(c);
  }
  if (auto tp = tracefs::split_tracepoint(plain))
    return *tp;
  return {.system = {}, .event = plain};
}

/// A glob that matches nothing, at the spec's position, with what it may have meant.
void no_match(const RecipeProbe& p, const tracefs::Tracefs& fs, Diagnostics& diagnostics) {
  const auto near = fs.near_matches(glob_as_name(p.options.spec));
  diagnostics.add(p.where_of(to_string(p.options.kind)),
                  fmt::format("no tracepoint matches '{}'", p.options.spec),
                  near.empty() ? std::string("see `tracer list tracepoints 'GLOB'`")
                               : fmt::format("near matches: {}", plain_list(near)));
}

/// The kernel answers a filter naming a field its event lacks with a bare EINVAL: name the
/// field here, at the filter's position, with the fields it may have meant.
void check_filter_fields(const RecipeProbe& p,
                         const tracefs::Format& format,
                         Diagnostics& diagnostics) {
  std::vector<std::string> names;
  for (const auto& f : format.fields)
    names.push_back(f.name);
  for (const auto& ff : tracefs::filter_fields(p.options.filter)) {
    if (format.field(ff.name) != nullptr || tracefs::is_generic_filter_field(ff.name))
      continue;
    const auto near = near_names(ff.name, names);
    std::vector<std::string> own;  // the event's own fields, without common_*
    for (const auto& f : format.fields) {
      if (!f.is_common)
        own.push_back(f.name);
    }
    const std::string hint =
        !near.empty() ? fmt::format("did you mean {}?", quoted_list(near))
                      : fmt::format("{} has the fields {} (and common_pid, cpu, comm, ...)",
                                    p.options.spec, plain_list(own));
    diagnostics.add(p.where_of("filter"),
                    fmt::format("filter of probe '{}': {} has no field '{}' (at offset {} of "
                                "the filter)",
                                p.options.name, p.options.spec, ff.name, ff.offset),
                    hint, ErrorSubject{.option = "filter"});
  }
}

/// A tracepoint probe: its event exists (each match of a glob), and its filter's fields are
/// the event's. `tracefs` is opened at the first tracepoint.
void check_tracepoint(const RecipeProbe& p,
                      std::optional<Result<tracefs::Tracefs>>& tracefs,
                      Diagnostics& diagnostics) {
  const ProbeOptions& o = p.options;
  const SourceRegion& where = p.where_of(to_string(o.kind));
  if (!tracefs) {
    tracefs = tracefs::Tracefs::open();
    if (!*tracefs) {
      diagnostics.add(where, fmt::format("cannot check tracepoints: {}", tracefs->error().message),
                      tracefs->error().hint);
    }
  }
  if (!*tracefs)
    return;
  if (is_tracepoint_glob(o.spec)) {
    auto matches = (*tracefs)->list_tracepoints(o.spec);
    if (!matches) {
      diagnostics.add(where, matches.error().message, matches.error().hint);
    } else if (matches->empty()) {
      no_match(p, **tracefs, diagnostics);
    } else if (!o.filter.empty()) {
      // The filter goes to every match: each must have its fields.
      for (const auto& m : *matches) {
        if (auto format = (*tracefs)->format(m)) {
          Diagnostics one;
          check_filter_fields(p, *format, one);
          if (!one.empty()) {
            for (const auto& d : one.items())
              diagnostics.add(d.where, d.message, d.hint, d.subject);
            break;  // one event lacking the field says it
          }
        }
      }
    }
    return;
  }
  const auto tp = tracefs::split_tracepoint(o.spec);
  if (!tp) {
    diagnostics.add(where, fmt::format("malformed tracepoint '{}'", o.spec),
                    "write it as system:event, e.g. \"syscalls:sys_enter_openat\"");
    return;
  }
  auto format = (*tracefs)->format(*tp);
  if (!format) {
    diagnostics.add(where,
                    format.error().errno_value() == ENOENT
                        ? fmt::format("unknown tracepoint '{}'", o.spec)
                        : format.error().message,
                    format.error().hint);
  } else if (!o.filter.empty()) {
    check_filter_fields(p, *format, diagnostics);
  }
}

/// A uprobe's binary exists and its offset is inside it.
void check_uprobe(const RecipeProbe& p, std::optional<pid_t> pid, Diagnostics& diagnostics) {
  const ProbeOptions& o = p.options;
  const SourceRegion& where = p.where_of(to_string(o.kind));
  if (o.kind == ProbeKind::kUsdt) {
    if (auto usdt = symbols::parse_usdt_spec(o.spec, pid); !usdt)
      diagnostics.add(where, usdt.error().message, usdt.error().hint);
    return;
  }
  auto target = symbols::parse_uprobe_spec(o.spec, pid);
  std::error_code ec;
  if (!target) {
    diagnostics.add(where, target.error().message, target.error().hint);
  } else if (const auto size = std::filesystem::file_size(target->path, ec);
             !ec && target->sites.front().offset >= size) {
    // The kernel refuses an offset past the file with a bare EINVAL.
    diagnostics.add(where,
                    fmt::format("offset {:#x} is past the end of {} ({} bytes)",
                                target->sites.front().offset, target->path.string(), size),
                    "a uprobe offset is a file offset inside the binary: name a symbol "
                    "(path:function) or an offset that `objdump -d` shows");
  }
}

/// The events of [[counter]] groups and of probes' `read`: tracepoints that exist (a near
/// match in the hint), at each one's string.
void check_counted_events(const Recipe& r, Diagnostics& diagnostics) {
  std::optional<tracefs::Tracefs> event_fs;
  const auto check_event = [&](const std::string& event, const SourceRegion& where) {
    try {
      [[maybe_unused]] const auto attr = resolve_event_name(event, event_fs);
    } catch (const Error& e) {
      diagnostics.add(where, e.message(), e.hint());
    }
  };
  for (const auto& c : r.counters) {
    for (std::size_t i = 0; i < c.events.size(); ++i)
      check_event(c.events[i], i < c.event_where.size() ? c.event_where[i] : c.where);
  }
  for (const auto& p : r.probes) {
    for (const auto& event : p.options.read_events)
      check_event(event, p.where_of("read"));
  }
}

/// [bpf]: its files exist, a builtin is shipped, a source compiles (into the cache `run`
/// loads it from, or nowhere for `check`: Writes::kNone).
void check_bpf(const RecipeBpf& bpf, Recipe::Writes writes, Diagnostics& diagnostics) {
  const auto at = [&](std::string_view key) {
    const auto it = bpf.value_where.find(key);
    return it != bpf.value_where.end() ? it->second : bpf.where;
  };
  const auto check_file = [&](const fs::path& file, std::string_view key) {
    if (file.empty())
      return;
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) {
      diagnostics.add(at(key), fmt::format("bpf {} '{}' not found", key, file.string()),
                      "paths in [bpf] are relative to the recipe's directory");
    }
  };
  // Both: the object is the source built ahead; when it is there the source is not needed.
  std::error_code ec;
  const bool object_there =
      !bpf.object.empty() && fs::symlink_status(bpf.object, ec).type() != fs::file_type::not_found;
  const bool compile = !bpf.source.empty() && !object_there;
  if (compile)
    check_file(bpf.source, "source");
  if (bpf.source.empty() || object_there)
    check_file(bpf.object, "object");
  if (!bpf.builtin.empty()) {
    std::vector<std::string> names;
    for (const auto& p : bpf::shipped_programs())
      names.emplace_back(p.name);
    if (std::find(names.begin(), names.end(), bpf.builtin) == names.end()) {
      diagnostics.add(at("builtin"),
                      fmt::format("no BPF program '{}' is shipped with tracer", bpf.builtin),
                      fmt::format("shipped programs: {}", fmt::join(names, ", ")));
    }
  }
  // clang's errors are the recipe's, at its `source`, with what clang says about that file.
  if (compile && fs::is_regular_file(bpf.source, ec)) {
    if (auto obj =
            bpf::Object::compile_and_open(bpf.source, {.scratch = writes == Recipe::Writes::kNone});
        !obj) {
      std::string_view message = obj.error().message;
      if (message.starts_with("bpf: "))
        message.remove_prefix(5);
      std::string hint = obj.error().hint;
      if (!bpf.object.empty()) {  // both, and the object is not there
        hint += fmt::format(
            "{}or put the object built from it ahead at '{}' (tracer's build "
            "makes the shipped recipes' objects; cmake --install puts them "
            "beside the recipes)",
            hint.empty() ? "" : "; ", bpf.object.string());
      }
      diagnostics.add(at("source"), std::string(message), hint);
    }
  }
}

}  // namespace

namespace core {

void check_against_system(const Recipe& recipe,
                          Diagnostics& diagnostics,
                          SystemScope scope,
                          std::optional<pid_t> pid,
                          Recipe::Writes writes) {
  const bool all = scope == SystemScope::kAll;
  std::optional<Result<tracefs::Tracefs>> tracefs;
  // kernel.perf_event_max_sample_rate: a sampling frequency above it is refused (EINVAL).
  std::optional<std::uint64_t> max_rate;
  if (auto text = detail::read_text_file("/proc/sys/kernel/perf_event_max_sample_rate", "perf"))
    max_rate = detail::parse_uint<std::uint64_t>(detail::trim(*text));
  for (std::size_t pi = 0; pi < recipe.probes.size(); ++pi) {
    // What a probe's checks add is about it: its kind's value, unless an add says which option.
    const std::size_t said = diagnostics.size();
    const RecipeProbe& p = recipe.probes[pi];
    const ProbeOptions& o = p.options;
    if (o.freq && max_rate && *o.freq > *max_rate) {
      diagnostics.add(p.where_of("freq"),
                      fmt::format("freq {} is above this kernel's limit of {} samples a second "
                                  "(kernel.perf_event_max_sample_rate)",
                                  *o.freq, *max_rate),
                      fmt::format("lower it to {} or less, or raise the limit: sysctl "
                                  "kernel.perf_event_max_sample_rate={}",
                                  *max_rate, *o.freq),
                      ErrorSubject{.option = "freq"});
    }
    if (o.kind == ProbeKind::kTracepoint)
      check_tracepoint(p, tracefs, diagnostics);
    else if (all && is_user_probe(o.kind))
      check_uprobe(p, pid, diagnostics);
    diagnostics.about_since(said, {.recipe_probe = pi, .option = std::string(to_string(o.kind))});
  }
  check_counted_events(recipe, diagnostics);
  if (all && recipe.bpf)
    check_bpf(*recipe.bpf, writes, diagnostics);
}

}  // namespace core

void Recipe::check_system(Diagnostics& diagnostics, std::optional<pid_t> pid, Writes writes) const {
  core::check_against_system(*this, diagnostics, core::SystemScope::kAll, pid, writes);
}

EngineOptions Recipe::to_engine_options(const Target& target) const {
  EngineOptions out;
  out.target = target;
  out.probes.reserve(probes.size());
  std::optional<Result<tracefs::Tracefs>> tracefs;
  Diagnostics diags;
  for (std::size_t pi = 0; pi < probes.size(); ++pi) {
    const auto& p = probes[pi];
    if (p.options.kind != ProbeKind::kTracepoint || !is_tracepoint_glob(p.options.spec)) {
      out.probes.push_back(p.options);
      out.probes.back().origin = pi;
      continue;
    }
    // A glob is one probe per matching tracepoint, each its own perf event: "name:event".
    if (!tracefs)
      tracefs = tracefs::Tracefs::open();
    if (!*tracefs) {
      diags.add(p.where_of("tracepoint"),
                fmt::format("cannot expand '{}': {}", p.options.spec, tracefs->error().message),
                tracefs->error().hint);
      continue;
    }
    auto matches = (*tracefs)->list_tracepoints(p.options.spec);
    if (!matches) {
      diags.add(p.where_of("tracepoint"), matches.error().message, matches.error().hint);
      continue;
    }
    if (matches->empty())
      no_match(p, **tracefs, diags);
    for (const auto& m : *matches) {
      ProbeOptions o = p.options;
      o.origin = pi;
      o.name = fmt::format("{}:{}", p.options.name, m.event);
      o.spec = fmt::format("{}:{}", m.system, m.event);
      out.probes.push_back(std::move(o));
    }
  }
  diags.throw_if_any();
  if (bpf) {
    BpfOptions b;
    b.builtin = bpf->builtin;
    b.object = bpf->object;
    b.source = bpf->source;
    b.output_map = bpf->output;
    b.output_optional = !bpf->value_where.contains("output");
    b.payload_struct = bpf->payload_struct;
    b.payload_time = bpf->payload_time;
    if (const auto w = bpf->value_where.find("struct"); w != bpf->value_where.end())
      b.payload_struct_where = w->second;
    if (const auto w = bpf->value_where.find("time"); w != bpf->value_where.end())
      b.payload_time_where = w->second;
    out.bpf = std::move(b);
  }
  out.max_targets = max_targets;
  return out;
}

}  // namespace tracer
