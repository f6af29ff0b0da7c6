// PMU discovery from /sys/bus/event_source/devices, perf term encoding and capability probing.
#include "tracer/perf/pmu.hpp"
#include "tracer/common/cpu_list.hpp"
#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <fmt/core.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <system_error>
#include <utility>

#include "tracer/common/kernel_config.hpp"
#include "tracer/common/proc_mounts.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::perf {
namespace {

namespace fs = std::filesystem;

// sysfs attribute files are at most a page.
constexpr std::size_t kMaxFileBytes = 1 << 16;

/// perf's term values: decimal or 0x-prefixed hex.
std::optional<std::uint64_t> parse_term_value(std::string_view s) {
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    return detail::parse_uint<std::uint64_t>(s.substr(2), 16);
  return detail::parse_uint<std::uint64_t>(s, 10);
}

/// "config1:0-7,32-35" -> {1, {{0,7},{32,35}}}; the format is what perf's pmu.y accepts.
std::optional<PmuFormatTerm> parse_format_spec(std::string name, std::string_view spec) {
  PmuFormatTerm t;
  t.name = std::move(name);
  t.spec = std::string(spec);
  const auto colon = spec.find(':');
  if (colon == std::string_view::npos)
    return std::nullopt;
  const std::string_view field = spec.substr(0, colon);
  if (field == "config") {
    t.config_field = 0;
  } else if (field == "config1") {
    t.config_field = 1;
  } else if (field == "config2") {
    t.config_field = 2;
  } else if (field == "config3") {
    t.config_field = 3;
  } else {
    return std::nullopt;
  }
  std::string_view ranges = spec.substr(colon + 1);
  if (ranges.empty())
    return std::nullopt;
  while (!ranges.empty()) {
    const auto comma = ranges.find(',');
    const std::string_view r = ranges.substr(0, comma);
    ranges = comma == std::string_view::npos ? std::string_view{} : ranges.substr(comma + 1);
    if (comma != std::string_view::npos && ranges.empty())
      return std::nullopt;  // "0-7,"
    const auto dash = r.find('-');
    const auto lo = detail::parse_uint<int>(r.substr(0, dash));
    const auto hi =
        dash == std::string_view::npos ? lo : detail::parse_uint<int>(r.substr(dash + 1));
    if (!lo || !hi || *lo < 0 || *hi > 63 || *lo > *hi)
      return std::nullopt;
    t.bits.emplace_back(*lo, *hi);
  }
  return t;
}

/// Mask of every bit a term writes in its config word.
std::uint64_t term_mask(const PmuFormatTerm& t) {
  std::uint64_t mask = 0;
  for (const auto& [lo, hi] : t.bits) {
    const int width = hi - lo + 1;
    const std::uint64_t ones = width >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << width) - 1;
    mask |= ones << lo;
  }
  return mask;
}

/// "0-3,8" (cpumask/cpus files) -> {0,1,2,3,8}; empty on anything unexpected.
std::vector<int> parse_cpu_list(std::string_view s) {
  return cpus::parse_list(s).value_or(std::vector<int>{});
}

std::vector<std::string> sorted_entries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<Pmu> read_pmu(const fs::path& dir, std::string name) {
  Pmu pmu;
  pmu.name = std::move(name);
  pmu.dir = dir;
  TRACER_ASSIGN_OR_RETURN(const std::string type_text,
                          detail::read_text_file(dir / "type", "pmu", kMaxFileBytes));
  const auto type = detail::parse_uint<std::uint32_t>(detail::trim(type_text));
  if (!type)
    return fail(EINVAL, fmt::format("pmu {}: {} does not hold a number: '{}'", pmu.name,
                                    (dir / "type").string(), detail::trim(type_text)));
  pmu.type = *type;

  for (auto& term : sorted_entries(dir / "format")) {
    TRACER_ASSIGN_OR_RETURN(const std::string spec,
                            detail::read_text_file(dir / "format" / term, "pmu", kMaxFileBytes));
    auto parsed = parse_format_spec(term, detail::trim(spec));
    if (!parsed)
      return fail(EINVAL,
                  fmt::format("pmu {}: format/{} has an unrecognised spec '{}'", pmu.name, term,
                              detail::trim(spec)),
                  "expected e.g. config:0-7, config1:0-63 or config:0-7,32-35");
    pmu.formats.push_back(std::move(*parsed));
  }

  const fs::path events = dir / "events";
  for (auto& ev : sorted_entries(events)) {
    // <name>.unit, .scale, .per-pkg and .snapshot qualify the alias <name>.
    if (ev.find('.') != std::string::npos)
      continue;
    auto terms = detail::read_text_file(events / ev, "pmu", kMaxFileBytes);
    if (!terms)
      continue;  // some aliases are root-only or unreadable on this CPU model
    PmuEventAlias alias{
        .name = ev, .terms = std::string(detail::trim(*terms)), .unit = {}, .scale = {}};
    if (auto unit = detail::read_text_file(events / (ev + ".unit"), "pmu", kMaxFileBytes))
      alias.unit = std::string(detail::trim(*unit));
    if (auto scale = detail::read_text_file(events / (ev + ".scale"), "pmu", kMaxFileBytes))
      alias.scale = std::string(detail::trim(*scale));
    pmu.events.push_back(std::move(alias));
  }

  if (auto mask = detail::read_text_file(dir / "cpumask", "pmu", kMaxFileBytes)) {
    pmu.cpus = parse_cpu_list(*mask);
  } else if (auto cpus = detail::read_text_file(dir / "cpus", "pmu", kMaxFileBytes)) {
    pmu.cpus = parse_cpu_list(*cpus);
  }
  if (auto nr = detail::read_text_file(dir / "nr_addr_filters", "pmu", kMaxFileBytes))
    pmu.nr_addr_filters = detail::parse_uint<std::uint32_t>(detail::trim(*nr)).value_or(0);
  for (auto& cap : sorted_entries(dir / "caps")) {
    if (auto value = detail::read_text_file(dir / "caps" / cap, "pmu", kMaxFileBytes))
      pmu.caps.emplace_back(cap, std::string(detail::trim(*value)));
  }
  return pmu;
}

/// Sets `value` into the bits of `term`, in ascending bit order like perf's pmu_format_value().
Status apply_term(const Pmu& pmu, const PmuFormatTerm& term, std::uint64_t value, PmuConfig& out) {
  const std::uint64_t mask = term_mask(term);
  const int width = std::popcount(mask);
  if (width < 64 && (value >> width) != 0)
    return fail(EINVAL,
                fmt::format("pmu {}: value {:#x} for term '{}' does not fit its {} bit{} ({})",
                            pmu.name, value, term.name, width, width == 1 ? "" : "s", term.spec));
  std::uint64_t scattered = 0;
  int vbit = 0;
  for (int bit = 0; bit < 64; ++bit) {
    if (!(mask & (std::uint64_t{1} << bit)))
      continue;
    if (value & (std::uint64_t{1} << vbit))
      scattered |= std::uint64_t{1} << bit;
    ++vbit;
  }
  std::uint64_t* word = term.config_field == 0   ? &out.config
                        : term.config_field == 1 ? &out.config1
                        : term.config_field == 2 ? &out.config2
                                                 : &out.config3;
  *word = (*word & ~mask) | scattered;  // a repeated term overrides the earlier value
  return {};
}

Status encode_into(const Pmu& pmu, std::string_view terms, PmuConfig& out, bool allow_alias) {
  if (detail::trim(terms).empty())
    return {};
  std::size_t pos = 0;
  while (pos <= terms.size()) {
    auto comma = terms.find(',', pos);
    if (comma == std::string_view::npos)
      comma = terms.size();
    const std::string_view term = detail::trim(terms.substr(pos, comma - pos));
    pos = comma + 1;
    if (term.empty())
      return fail(EINVAL, fmt::format("pmu {}: empty term in '{}'", pmu.name, terms));
    const auto eq = term.find('=');
    const std::string_view key = detail::trim(term.substr(0, eq));
    const bool bare = eq == std::string_view::npos;
    if (key == "name")
      continue;               // perf's display name; not part of the encoding
    std::uint64_t value = 1;  // a bare flag term ("pt", "retprobe") means =1
    if (!bare) {
      const std::string_view text = detail::trim(term.substr(eq + 1));
      const auto v = parse_term_value(text);
      if (!v)
        return fail(EINVAL,
                    fmt::format("pmu {}: term '{}' has a bad value '{}'", pmu.name, key, text),
                    "values are decimal or 0x-prefixed hex");
      value = *v;
    }
    if (key == "config" || key == "config1" || key == "config2" || key == "config3") {
      if (bare)
        return fail(EINVAL, fmt::format("pmu {}: term '{}' needs a value", pmu.name, key));
      (key == "config"    ? out.config
       : key == "config1" ? out.config1
       : key == "config2" ? out.config2
                          : out.config3) = value;
      continue;
    }
    const auto fmt_it = std::find_if(pmu.formats.begin(), pmu.formats.end(),
                                     [&](const PmuFormatTerm& t) { return t.name == key; });
    if (fmt_it != pmu.formats.end()) {
      TRACER_TRY(apply_term(pmu, *fmt_it, value, out));
      continue;
    }
    const auto alias_it = std::find_if(pmu.events.begin(), pmu.events.end(),
                                       [&](const PmuEventAlias& a) { return a.name == key; });
    if (alias_it != pmu.events.end() && bare && allow_alias) {
      // One level only: an alias that names another alias would otherwise risk a cycle.
      TRACER_TRY(encode_into(pmu, alias_it->terms, out, /*allow_alias=*/false));
      continue;
    }
    std::string known;
    for (const auto& t : pmu.formats)
      known += (known.empty() ? "" : ", ") + t.name;
    for (const auto& a : pmu.events)
      known += (known.empty() ? "" : ", ") + a.name;
    return fail(EINVAL, fmt::format("pmu {}: unknown term '{}'", pmu.name, key),
                known.empty() ? std::string("this PMU has no format terms or event aliases; use "
                                            "config=, config1=, config2= or config3=")
                              : fmt::format("terms and aliases of {}: {}", pmu.name, known));
  }
  return {};
}

const Pmu* find_in(const std::vector<Pmu>& pmus, std::string_view name) {
  for (const auto& p : pmus)
    if (p.name == name)
      return &p;
  return nullptr;
}

bool has_alias(const Pmu& p, std::string_view name) {
  return std::any_of(p.events.begin(), p.events.end(),
                     [&](const PmuEventAlias& a) { return a.name == name; });
}

/// Where tracefs is mounted, from /proc/mounts (the perf layer does not depend on engine/tracefs).
std::optional<fs::path> tracefs_root() {
  auto mounts = detail::read_text_file("/proc/mounts", "pmu", detail::kMaxMountsBytes);
  if (!mounts)
    return std::nullopt;
  return detail::find_mounted_tracefs(*mounts);
}

std::string errno_name(int err) {
  switch (err) {
    case ENOENT:
      return "ENOENT";
    case ENODEV:
      return "ENODEV";
    case EOPNOTSUPP:
      return "EOPNOTSUPP";
    case EACCES:
      return "EACCES";
    case EPERM:
      return "EPERM";
    case EINVAL:
      return "EINVAL";
    case EBUSY:
      return "EBUSY";
    default:
      return fmt::format("errno {}", err);
  }
}

/// The core PMU (cpu, cpu_core, cpu_atom, armv8_*, or one with a cpu-cycles alias), if any.
const Pmu* core_pmu(const std::vector<Pmu>& pmus) {
  for (const auto& p : pmus) {
    if (p.name == "cpu" || p.name == "cpu_core" || p.name == "cpu_atom" ||
        p.name.starts_with("armv8_") || has_alias(p, "cpu-cycles"))
      return &p;
  }
  return nullptr;
}

PmuCapability probe_hardware(const std::vector<Pmu>& pmus) {
  PmuCapability cap{.name = "hardware counters", .available = false, .reason = {}};
  const Pmu* core = core_pmu(pmus);
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_HARDWARE;
  attr.config = PERF_COUNT_HW_CPU_CYCLES;
  attr.disabled = 1;
  // User-only counting is allowed at perf_event_paranoid <= 2, so the probe means the same thing
  // for root and for ordinary users.
  attr.exclude_kernel = 1;
  attr.exclude_hv = 1;
  const long rc = ::syscall(SYS_perf_event_open, &attr, /*pid=*/0, /*cpu=*/-1, /*group_fd=*/-1,
                            PERF_FLAG_FD_CLOEXEC);
  const int err = rc < 0 ? errno : 0;
  UniqueFd fd(rc < 0 ? -1 : static_cast<int>(rc));

  std::string pmu_part = core ? fmt::format("core PMU {} (type {})", core->name, core->type)
                              : std::string("no core PMU (cpu, cpu_core, armv8_*) in sysfs");
  if (fd && core) {
    cap.available = true;
    cap.reason = fmt::format("{}; counting cpu-cycles works", pmu_part);
    return cap;
  }
  if (fd) {
    cap.reason =
        fmt::format("{}, although perf_event_open(PERF_TYPE_HARDWARE) succeeded", pmu_part);
    return cap;
  }
  std::string why;
  switch (err) {
    case ENOENT:
    case ENODEV:
    case EOPNOTSUPP:
      why = "no hardware PMU driver, e.g. a VM without a virtual PMU";
      break;
    case EACCES:
    case EPERM:
      why = "not permitted: see /proc/sys/kernel/perf_event_paranoid";
      break;
    default:
      why = std::strerror(err);
      break;
  }
  cap.reason = fmt::format(
      "perf_event_open(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES) failed "
      "with {}: {}; {}",
      errno_name(err), why, pmu_part);
  return cap;
}

PmuCapability probe_aux(const std::vector<Pmu>& pmus) {
  PmuCapability cap{.name = "AUX tracing", .available = false, .reason = {}};
  std::string found;
  for (const auto& p : pmus) {
    if (p.nr_addr_filters > 0 || p.name == "intel_pt" || p.name == "intel_bts" ||
        p.name == "cs_etm" || p.name.starts_with("arm_spe"))
      found += fmt::format("{}{} (type {})", found.empty() ? "" : ", ", p.name, p.type);
  }
  if (!found.empty()) {
    cap.available = true;
    cap.reason = found;
  } else {
    cap.reason =
        "no AUX-capable PMU: none named intel_pt, intel_bts, cs_etm or arm_spe*, "
        "and none has nr_addr_filters";
  }
  return cap;
}

PmuCapability probe_probe_pmu(const std::vector<Pmu>& pmus,
                              std::string_view kind,
                              std::string_view config_name) {
  PmuCapability cap{.name = std::string(kind), .available = false, .reason = {}};
  if (const Pmu* p = find_in(pmus, kind)) {
    cap.available = true;
    cap.reason = fmt::format("PMU type {}", p->type);
    return cap;
  }
  const auto root = tracefs_root();
  const std::string events_file = fmt::format("{}_events", kind);
  std::error_code ec;
  if (root && fs::exists(*root / events_file, ec)) {
    cap.available = true;
    cap.reason = fmt::format("no {} PMU; legacy {}", kind, (*root / events_file).string());
    return cap;
  }
  const auto config = detail::kernel_config(config_name);
  if (config && *config == "n") {
    cap.reason = fmt::format("CONFIG_{} is off: no {} PMU and no tracefs {}", config_name, kind,
                             events_file);
  } else if (!root) {
    cap.reason = fmt::format("no {} PMU, and tracefs is not mounted so {} could not be checked",
                             kind, events_file);
  } else {
    cap.reason = fmt::format("no {} PMU and no tracefs {}", kind, events_file);
  }
  return cap;
}

PmuCapability probe_named(const std::vector<Pmu>& pmus,
                          std::string cap_name,
                          std::string_view pmu_name,
                          std::string_view missing) {
  PmuCapability cap{.name = std::move(cap_name), .available = false, .reason = {}};
  if (const Pmu* p = find_in(pmus, pmu_name)) {
    cap.available = true;
    cap.reason = fmt::format("PMU type {}", p->type);
  } else {
    cap.reason = fmt::format("no '{}' PMU: {}", pmu_name, missing);
  }
  return cap;
}

}  // namespace

Result<std::vector<Pmu>> list_pmus(const PmuScanOptions& opts) {
  std::error_code ec;
  fs::directory_iterator it(opts.devices_dir, ec);
  if (ec)
    return fail(ec.value(),
                fmt::format("pmu: cannot list {}: {}", opts.devices_dir.string(), ec.message()),
                "is sysfs mounted? (mount -t sysfs sysfs /sys)");
  std::vector<Pmu> pmus;
  for (fs::directory_iterator end; it != end; it.increment(ec)) {
    if (ec)
      break;
    const auto& entry = *it;
    // Entries are symlinks into /sys/devices; is_directory follows them.
    if (!entry.is_directory(ec))
      continue;
    if (!fs::exists(entry.path() / "type", ec))
      continue;  // not a PMU
    TRACER_ASSIGN_OR_RETURN(Pmu pmu, read_pmu(entry.path(), entry.path().filename().string()));
    pmus.push_back(std::move(pmu));
  }
  if (ec)
    return fail(ec.value(), fmt::format("pmu: error while listing {}: {}",
                                        opts.devices_dir.string(), ec.message()));
  std::sort(pmus.begin(), pmus.end(), [](const Pmu& a, const Pmu& b) {
    return a.type != b.type ? a.type < b.type : a.name < b.name;
  });
  return pmus;
}

Result<Pmu> find_pmu(const std::string& name, const PmuScanOptions& opts) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    return fail(EINVAL, fmt::format("pmu: invalid PMU name '{}'", name));
  const fs::path dir = opts.devices_dir / name;
  std::error_code ec;
  if (!fs::exists(dir / "type", ec)) {
    std::string hint = "run `tracer list pmus` to see the PMUs of this machine";
    if (name == "kprobe")
      hint = "this kernel has no kprobe PMU (CONFIG_KPROBES off?)";
    return fail(ENOENT,
                fmt::format("pmu: no PMU named '{}' in {}", name, opts.devices_dir.string()),
                std::move(hint));
  }
  return read_pmu(dir, name);
}

std::optional<std::string> pmu_name_for_type(std::uint32_t type, const PmuScanOptions& opts) {
  std::error_code ec;
  std::vector<std::string> matches;
  for (fs::directory_iterator it(opts.devices_dir, ec), end; !ec && it != end; it.increment(ec)) {
    auto text = detail::read_text_file(it->path() / "type", "pmu", kMaxFileBytes);
    if (!text)
      continue;
    if (detail::parse_uint<std::uint32_t>(detail::trim(*text)) == type)
      matches.push_back(it->path().filename().string());
  }
  if (!matches.empty())
    return *std::min_element(matches.begin(), matches.end());
  // include/uapi/linux/perf_event.h enum perf_type_id.
  switch (type) {
    case PERF_TYPE_HARDWARE:
      return "hardware";
    case PERF_TYPE_SOFTWARE:
      return "software";
    case PERF_TYPE_TRACEPOINT:
      return "tracepoint";
    case PERF_TYPE_HW_CACHE:
      return "hw_cache";
    case PERF_TYPE_RAW:
      return "raw";
    case PERF_TYPE_BREAKPOINT:
      return "breakpoint";
    default:
      return std::nullopt;
  }
}

Result<PmuConfig> encode_pmu_terms(const Pmu& pmu, const std::string& terms) {
  PmuConfig out;
  TRACER_TRY(encode_into(pmu, terms, out, /*allow_alias=*/true));
  return out;
}

std::vector<PmuCapability> probe_capabilities(const std::vector<Pmu>& pmus,
                                              const PmuScanOptions& opts) {
  (void)opts;  // the PMU list already reflects opts.devices_dir
  std::vector<PmuCapability> caps;
  caps.push_back(probe_hardware(pmus));
  caps.push_back(probe_aux(pmus));
  caps.push_back(probe_probe_pmu(pmus, "kprobe", "KPROBES"));
  caps.push_back(probe_probe_pmu(pmus, "uprobe", "UPROBES"));
  caps.push_back(probe_named(pmus, "breakpoint", "breakpoint",
                             "hardware breakpoints unsupported (CONFIG_HAVE_HW_BREAKPOINT off)"));
  caps.push_back(probe_named(pmus, "tracepoints", "tracepoint",
                             "kernel built without tracepoint events (CONFIG_EVENT_TRACING off)"));
  caps.push_back(
      probe_named(pmus, "software events", "software", "kernel built without CONFIG_PERF_EVENTS"));
  return caps;
}

PmuProperties properties_from_cpuid(std::uint32_t eax,
                                    std::uint32_t edx,
                                    std::uint32_t last_branch_depth) {
  PmuProperties p;
  p.pm_version = static_cast<std::uint16_t>(eax & 0xffU);
  if (p.pm_version == 0) {
    p.source = "CPUID leaf 0xA: no architectural performance monitoring (version 0)";
  } else {
    p.max_num_programmable_events = static_cast<std::uint16_t>((eax >> 8) & 0xffU);
    p.max_programmable_counter_width = static_cast<std::uint16_t>((eax >> 16) & 0xffU);
    if (p.pm_version >= 2) {  // fixed-function counters are described from version 2
      p.max_num_fixed_events = static_cast<std::uint16_t>(edx & 0x1fU);
      p.max_fixed_counter_width = static_cast<std::uint16_t>((edx >> 5) & 0xffU);
    }
    p.source = fmt::format("CPUID leaf 0xA (architectural perfmon version {})", p.pm_version);
  }
  p.max_num_events =
      static_cast<std::uint16_t>(p.max_num_fixed_events + p.max_num_programmable_events);
  p.last_branch_depth = last_branch_depth;
  p.has_last_branch = last_branch_depth > 0;
  return p;
}

PmuProperties pmu_properties(const std::vector<Pmu>& pmus) {
  const Pmu* core = core_pmu(pmus);
  std::uint32_t depth = 0;
  if (core != nullptr) {
    for (const auto& [name, value] : core->caps) {
      if (name == "branches")
        depth = detail::parse_uint<std::uint32_t>(value).value_or(0);
    }
  }
  std::uint32_t eax = 0, edx = 0;
#if defined(__x86_64__)
  std::uint32_t ebx = 0, ecx = 0;
  if (__get_cpuid_max(0, nullptr) >= 0xa)
    __cpuid(0xa, eax, ebx, ecx, edx);
#endif
  PmuProperties p = properties_from_cpuid(eax, edx, depth);
#if !defined(__x86_64__)
  p.source = "this architecture's counters are not described here (x86-64 CPUID only)";
#endif
  p.kernel_pmu = core != nullptr;
  if (!p.kernel_pmu)
    p.source += "; no core PMU driver in sysfs: the kernel counts none of them";
  return p;
}

}  // namespace tracer::perf
