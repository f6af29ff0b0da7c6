// `tracer list tracepoints [GLOB]` and `tracer list pmus`.
#include <fmt/core.h>
#include <algorithm>
#include <cerrno>
#include <filesystem>

#include <memory>
#include <string>
#include <string_view>

#include "commands.hpp"
#include "tracer/common/json.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/recipe.hpp"
#include "tracer/result.hpp"
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/symbols/usdt.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::cli {
namespace {

int report(const Failure& f) {
  fmt::print(stderr, "tracer: {}\n", f.message);
  if (!f.hint.empty())
    fmt::print(stderr, "  hint: {}\n", f.hint);
  return kExitRuntime;
}

/// The glob with its wildcard characters removed, as a tracepoint name to compare against.
tracefs::TracepointName glob_as_name(std::string_view glob) {
  std::string plain;
  for (char c : glob)
    if (c != '*' && c != '?' && c != '[' && c != ']')
      plain.push_back(c);
  if (auto tp = tracefs::split_tracepoint(plain))
    return *tp;
  return {.system = {}, .event = plain};
}

/// A format field as bpftrace -lv shows it: "char prev_comm[16]", "__data_loc char[] name".
std::string field_line(const tracefs::Field& f) {
  if (f.is_data_loc || f.is_rel_loc) {
    std::string type = f.type;
    if (type.starts_with("__data_loc ") || type.starts_with("__rel_loc "))
      return fmt::format("{} {}", type, f.name);
    return fmt::format("{} {}[] {}", f.is_data_loc ? "__data_loc" : "__rel_loc", type, f.name);
  }
  if (f.array_len)
    return fmt::format("{} {}[{}]", f.type, f.name, *f.array_len);
  return fmt::format("{} {}", f.type, f.name);
}

int list_tracepoints(const std::string& glob, bool verbose) {
  auto fs = tracefs::Tracefs::open();
  if (!fs)
    return report(fs.error());
  auto tps = fs->list_tracepoints(glob);
  if (!tps)
    return report(tps.error());
  if (tps->empty()) {
    fmt::print(stderr, "tracer: no tracepoint matches {}\n", glob);
    const auto near = fs->near_matches(glob_as_name(glob));
    if (!near.empty()) {
      fmt::print(stderr, "  near matches:\n");
      for (const auto& n : near)
        fmt::print(stderr, "    {}\n", n);
    }
    return kExitRuntime;
  }
  std::string out;
  for (const auto& tp : *tps) {
    out += tp.system;
    out += ':';
    out += tp.event;
    out += '\n';
    if (!verbose)
      continue;
    // As bpftrace -lv: the event's own fields (common_* are in every event).
    auto format = fs->format(tp);
    if (!format) {
      out += fmt::format("    (no format: {})\n", format.error().message);
      continue;
    }
    for (const auto& f : format->fields) {
      if (!f.is_common)
        out += fmt::format("    {}\n", field_line(f));
    }
  }
  fmt::print("{}", out);
  return kExitOk;
}

std::string cpu_list(const std::vector<int>& cpus) {
  std::string s;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1)
      ++j;
    if (!s.empty())
      s += ',';
    s += j == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]);
    i = j + 1;
  }
  return s;
}

/// The PMUs, the capabilities and the perfmon properties as one JSON object.
int list_pmus_json(const std::vector<perf::Pmu>& pmus) {
  const auto q = [](std::string_view v) { return fmt::format("\"{}\"", json::escape(v)); };
  std::string out = "{\"pmus\":[";
  for (std::size_t i = 0; i < pmus.size(); ++i) {
    const auto& p = pmus[i];
    out += fmt::format(R"({}{{"name":{},"type":{},"cpus":[)", i == 0 ? "" : ",", q(p.name), p.type);
    for (std::size_t c = 0; c < p.cpus.size(); ++c)
      out += fmt::format("{}{}", c == 0 ? "" : ",", p.cpus[c]);
    out += fmt::format(R"(],"nr_addr_filters":{},"format":{{)", p.nr_addr_filters);
    for (std::size_t f = 0; f < p.formats.size(); ++f)
      out += fmt::format("{}{}:{}", f == 0 ? "" : ",", q(p.formats[f].name), q(p.formats[f].spec));
    out += R"(},"events":[)";
    for (std::size_t e = 0; e < p.events.size(); ++e) {
      const auto& ev = p.events[e];
      out += fmt::format(R"({}{{"name":{},"terms":{},"unit":{},"scale":{}}})", e == 0 ? "" : ",",
                         q(ev.name), q(ev.terms), q(ev.unit), q(ev.scale));
    }
    out += R"(],"caps":{)";
    for (std::size_t c = 0; c < p.caps.size(); ++c)
      out += fmt::format("{}{}:{}", c == 0 ? "" : ",", q(p.caps[c].first), q(p.caps[c].second));
    out += "}}";
  }
  out += R"(],"capabilities":[)";
  const auto caps = perf::probe_capabilities(pmus);
  for (std::size_t i = 0; i < caps.size(); ++i) {
    out += fmt::format(R"({}{{"name":{},"available":{},"reason":{}}})", i == 0 ? "" : ",",
                       q(caps[i].name), caps[i].available, q(caps[i].reason));
  }
  const auto pr = perf::pmu_properties(pmus);
  out += fmt::format(
      "],\"properties\":{{\"api_version\":{},\"pm_version\":{},\"max_num_events\":{},"
      "\"max_num_fixed_events\":{},\"max_fixed_counter_width\":{},"
      "\"max_num_programmable_events\":{},\"max_programmable_counter_width\":{},"
      "\"max_num_misc_events\":{},\"max_misc_counter_width\":{},\"has_last_branch\":{},"
      "\"last_branch_depth\":{},\"kernel_pmu\":{},\"source\":{}}}}}",
      pr.api_version, pr.pm_version, pr.max_num_events, pr.max_num_fixed_events,
      pr.max_fixed_counter_width, pr.max_num_programmable_events, pr.max_programmable_counter_width,
      pr.max_num_misc_events, pr.max_misc_counter_width, pr.has_last_branch, pr.last_branch_depth,
      pr.kernel_pmu, q(pr.source));
  fmt::print("{}\n", out);
  return kExitOk;
}

int list_pmus(bool json) {
  auto pmus = perf::list_pmus();
  if (!pmus)
    return report(pmus.error());
  if (json)
    return list_pmus_json(*pmus);
  for (const auto& p : *pmus) {
    fmt::print("{}  (type {})\n", p.name, p.type);
    if (!p.cpus.empty())
      fmt::print("  cpus: {}\n", cpu_list(p.cpus));
    if (p.nr_addr_filters > 0)
      fmt::print("  nr_addr_filters: {}\n", p.nr_addr_filters);
    if (!p.formats.empty()) {
      fmt::print("  format:\n");
      for (const auto& f : p.formats)
        fmt::print("    {:<16} {}\n", f.name, f.spec);
    }
    if (!p.events.empty()) {
      fmt::print("  events:\n");
      for (const auto& e : p.events) {
        fmt::print("    {:<16} {}", e.name, e.terms);
        if (!e.unit.empty())
          fmt::print("  unit={}", e.unit);
        if (!e.scale.empty())
          fmt::print("  scale={}", e.scale);
        fmt::print("\n");
      }
    }
    if (!p.caps.empty()) {
      fmt::print("  caps:\n");
      for (const auto& [name, value] : p.caps)
        fmt::print("    {}={}\n", name, value);
    }
  }
  fmt::print("\ncapabilities:\n");
  for (const auto& cap : perf::probe_capabilities(*pmus))
    fmt::print("  [{}] {}  ({})\n", cap.available ? "yes" : "no ", cap.name, cap.reason);
  // The perfmon properties query, answered for this machine.
  const auto pr = perf::pmu_properties(*pmus);
  fmt::print("\nproperties (perfmon):\n");
  fmt::print("  pm_version {}, {} events at once: {} fixed ({} bits), {} programmable ({} bits)\n",
             pr.pm_version, pr.max_num_events, pr.max_num_fixed_events, pr.max_fixed_counter_width,
             pr.max_num_programmable_events, pr.max_programmable_counter_width);
  fmt::print("  last branch records: {}\n",
             pr.has_last_branch ? fmt::format("yes, {} deep", pr.last_branch_depth) : "no");
  fmt::print("  ({})\n", pr.source);
  return kExitOk;
}

}  // namespace

int list_stages() {
  for (const auto* spec : stage_registry().specs()) {
    fmt::print("{:<10} {}\n", spec->name, spec->summary);
    for (const auto& o : spec->options) {
      fmt::print("    {:<12}{} {}\n", o.name, o.required ? " (required)" : "", o.help);
    }
  }
  // Stage plugins in TRACER_PLUGIN_PATH, each loaded to read its descriptor.
  const auto plugins = find_plugins();
  if (!plugins.empty())
    fmt::print("\nplugins (TRACER_PLUGIN_PATH; a recipe names one as plugin = \"NAME.so\"):\n");
  for (const auto& p : plugins) {
    if (p.problem.empty())
      fmt::print("{:<10} {} (ABI {}.{}, {})\n", p.name, p.summary, p.abi_major, p.abi_minor,
                 p.path);
    else
      fmt::print("{:<10} cannot be loaded: {}\n", p.path, p.problem);
  }
  return kExitOk;
}

/// Where the shipped recipes are: beside an installed binary (../share/tracer/configs), else
/// the source tree this binary was built from.
std::filesystem::path recipes_dir() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto installed = exe.parent_path().parent_path() / "share" / "tracer" / "configs";
    if (std::filesystem::is_directory(installed))
      return installed;
  }
  return TRACER_CONFIGS_DIR;
}

int list_recipes() {
  const auto dir = recipes_dir();
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".toml")
      files.push_back(e.path());
  }
  if (ec) {
    fmt::print(stderr, "tracer: cannot read {}: {}\n", dir.string(), ec.message());
    return kExitRuntime;
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      const Recipe r = Recipe::load(f);
      fmt::print("{:<28} {}\n", f.stem().string(), r.description);
    } catch (const Error& e) {
      fmt::print("{:<28} (does not load: {})\n", f.stem().string(), e.message());
    }
  }
  fmt::print("\n({}; run one with: tracer run {}/NAME.toml)\n", dir.string(), dir.string());
  return kExitOk;
}

/// `tracer list uprobes PATH [PATTERN]`: the functions a uprobe spec "PATH:PATTERN" would
/// probe, demangled, with their file offsets.
int list_uprobes(const std::string& binary, const std::string& pattern) {
  auto path = symbols::resolve_binary(binary, std::nullopt);
  if (!path) {
    fmt::print(stderr, "tracer: {}\n", path.error().describe());
    return kExitUsage;
  }
  auto matches = symbols::match_functions(*path, pattern);
  if (!matches) {
    fmt::print(stderr, "tracer: {}\n", matches.error().describe());
    return matches.error().errno_value() == ENOENT ? kExitUsage : kExitRuntime;
  }
  for (const auto& m : *matches)
    fmt::print("{:#10x} {}{}\n", m.file_offset, m.demangled,
               m.mangled != m.demangled ? fmt::format("  ({})", m.mangled) : "");
  fmt::print("\n({} functions; probe them with uprobe = \"{}:{}\")\n", matches->size(),
             path->string(), pattern);
  return kExitOk;
}

/// `tracer list usdt PATH`: a file's USDT probes, each with its call sites, semaphore and
/// arguments.
int list_usdt(const std::string& binary) {
  auto path = symbols::resolve_binary(binary, std::nullopt);
  if (!path) {
    fmt::print(stderr, "tracer: {}\n", path.error().describe());
    return kExitUsage;
  }
  auto sites = symbols::read_usdt(*path);
  if (!sites) {
    fmt::print(stderr, "tracer: {}\n", sites.error().describe());
    return kExitUsage;
  }
  std::string last;
  std::size_t probes = 0;
  for (const auto& s : *sites) {
    const std::string name = s.provider + ":" + s.name;
    if (name != last) {
      ++probes;
      fmt::print("{}{}\n", name,
                 s.semaphore != 0 ? fmt::format("  (semaphore at {:#x})", s.semaphore) : "");
      last = name;
    }
    std::string args;
    for (std::size_t i = 0; i < s.arg_list.size(); ++i) {
      const auto& a = s.arg_list[i];
      args += fmt::format("{}arg{}: {}{} {}", i == 0 ? "" : ", ", i, a.is_signed ? "s" : "u",
                          a.size * 8, a.operand);
    }
    fmt::print("    {:#10x}  {}\n", s.address, args.empty() ? s.args : args);
  }
  fmt::print("\n({} probes, {} call sites in {}; probe one with usdt = \"{}:PROVIDER:NAME\")\n",
             probes, sites->size(), path->string(), path->string());
  return kExitOk;
}

void add_list_command(CLI::App& app, Runner& run) {
  auto* list =
      app.add_subcommand("list", "List tracepoints, PMUs, uprobe functions, stages and recipes");
  list->require_subcommand(1);

  auto glob = std::make_shared<std::string>();
  auto verbose = std::make_shared<bool>(false);
  auto* tps = list->add_subcommand("tracepoints", "List tracepoints as system:event");
  tps->add_option("glob", *glob, "Shell glob on system:event, e.g. 'sched:*'");
  tps->add_flag("-v,--verbose", *verbose,
                "Also list each tracepoint's fields with their C types (as bpftrace -lv)");
  tps->callback([&run, glob, verbose] {
    run = [glob, verbose] { return list_tracepoints(*glob, *verbose); };
  });

  auto* pmus = list->add_subcommand(
      "pmus", "List PMUs, their format terms, capabilities and perfmon properties");
  auto json = std::make_shared<bool>(false);
  pmus->add_flag("--json", *json, "One JSON object: pmus, capabilities, properties");
  pmus->callback([&run, json] { run = [json] { return list_pmus(*json); }; });

  auto binary = std::make_shared<std::string>();
  auto pattern = std::make_shared<std::string>("*");
  auto* ups = list->add_subcommand(
      "uprobes", "List the functions of a binary a uprobe can name, C++ names demangled");
  ups->add_option("binary", *binary, "An executable or library: a path, a name in $PATH, libc")
      ->required();
  ups->add_option("pattern", *pattern,
                  "A function name or pattern: 'ns::Class::*', 'Class::get(int)' (default *)");
  ups->callback([&run, binary, pattern] {
    run = [binary, pattern] { return list_uprobes(*binary, *pattern); };
  });

  auto usdt_binary = std::make_shared<std::string>();
  auto* usdt = list->add_subcommand("usdt", "List a binary's USDT probes and their arguments");
  usdt->add_option("binary", *usdt_binary,
                   "An executable or library: a path, a name in $PATH, libc")
      ->required();
  usdt->callback([&run, usdt_binary] { run = [usdt_binary] { return list_usdt(*usdt_binary); }; });

  list->add_subcommand("stages", "List pipeline stages and their options")->callback([&run] {
    run = [] { return list_stages(); };
  });
  list->add_subcommand("recipes", "List the recipes shipped in configs/")->callback([&run] {
    run = [] { return list_recipes(); };
  });
}

}  // namespace tracer::cli
