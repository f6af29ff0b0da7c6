#include "probe_resolver.hpp"

#include <asm/perf_regs.h>
#include <fmt/format.h>
#include <linux/hw_breakpoint.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <ctime>
#include <filesystem>
#include <limits>

#include "probe_backend.hpp"
#include "tracer/error.hpp"
#include "tracer/event_names.hpp"
#include "tracer/perf/hw_events.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/symbols/usdt.hpp"

namespace tracer::core {
namespace {

constexpr std::uint32_t kDefaultRingPages = 64;  // 256 KiB per CPU
constexpr std::uint64_t kDefaultFreq = 4000;     // perf record's default sampling rate
constexpr std::uint64_t kDefaultAuxBytes = 4 << 20;

[[noreturn]] void usage_error(const ProbeOptions& o,
                              const std::string& what,
                              const std::string& hint = {}) {
  throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
              fmt::format("probe '{}': {}", o.name, what), hint);
}

[[noreturn]] void rethrow(const ProbeOptions& o, const Failure& f, ErrorCategory cat) {
  throw Error(cat, f.code, fmt::format("probe '{}': {}", o.name, f.message), f.hint);
}

ErrorCategory category_for(const Failure& f) {
  switch (f.errno_value()) {
    case ENOENT:
      return ErrorCategory::kNotFound;
    case EPERM:
    case EACCES:
      return ErrorCategory::kPermission;
    case EOPNOTSUPP:
      return ErrorCategory::kUnsupported;
    case EINVAL:
      return ErrorCategory::kUsage;
    default:
      return ErrorCategory::kRuntime;
  }
}

bool parse_u64(std::string_view s, std::uint64_t& out) {
  int base = 10;
  if (s.starts_with("0x") || s.starts_with("0X")) {
    s.remove_prefix(2);
    base = 16;
  }
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return !s.empty() && ec == std::errc() && p == s.data() + s.size();
}

std::string software_names() {
  std::string out;
  for (const auto& e : perf::software_events()) {
    out += std::string(out.empty() ? "" : ", ") + std::string(e.name);
  }
  return out;
}

}  // namespace

tracefs::DynamicProbes& ResolveContext::dynamic_probes() {
  if (!dynamic) {
    auto d = tracefs::DynamicProbes::create(fs());
    if (!d)
      throw Error(ErrorCategory::kRuntime, d.error());
    dynamic.emplace(std::move(*d));
  }
  return *dynamic;
}

const tracefs::Tracefs& ResolveContext::fs() {
  if (!tracefs) {
    auto opened = tracefs::Tracefs::open();
    if (!opened)
      throw Error(ErrorCategory::kRuntime, opened.error());
    tracefs = std::move(*opened);
  }
  return *tracefs;
}

Result<BreakpointSpec> parse_breakpoint(std::string_view spec) {
  BreakpointSpec bp;
  const auto c1 = spec.find(':');
  const auto where = spec.substr(0, c1);
  const bool numeric = !where.empty() && where[0] >= '0' && where[0] <= '9';
  if (numeric ? !parse_u64(where, bp.addr) || bp.addr == 0 : where.empty()) {
    return fail(
        EINVAL,
        fmt::format("breakpoint '{}': expected an address like 0x7ffd1234 or a symbol", spec),
        "write ADDRESS[:rwx[:LEN]] or SYMBOL[+OFF][:rwx[:LEN]], e.g. 0x601040:w:8 or "
        "counter:w");
  }
  if (!numeric)
    bp.symbol = std::string(where);
  std::string_view access = "w";
  std::string_view len = "8";
  if (c1 != std::string_view::npos) {
    const auto rest = spec.substr(c1 + 1);
    const auto c2 = rest.find(':');
    access = rest.substr(0, c2);
    if (c2 != std::string_view::npos) {
      len = rest.substr(c2 + 1);
      bp.len_given = true;
    }
  }
  for (char c : access) {
    if (c == 'r') {
      bp.type |= HW_BREAKPOINT_R;
    } else if (c == 'w') {
      bp.type |= HW_BREAKPOINT_W;
    } else if (c == 'x') {
      bp.type |= HW_BREAKPOINT_X;
    } else {
      return fail(EINVAL,
                  fmt::format("breakpoint '{}': access '{}' is not r, w, x or rw", spec, access));
    }
  }
  // Kernel rule (hw_breakpoint_arch_parse): execute breakpoints cannot be combined with r/w.
  if ((bp.type & HW_BREAKPOINT_X) != 0U && bp.type != HW_BREAKPOINT_X) {
    return fail(EINVAL, fmt::format("breakpoint '{}': x cannot be combined with r or w", spec));
  }
  if (!parse_u64(len, bp.len) || (bp.len != 1 && bp.len != 2 && bp.len != 4 && bp.len != 8)) {
    return fail(EINVAL, fmt::format("breakpoint '{}': length must be 1, 2, 4 or 8", spec));
  }
  if (bp.type == HW_BREAKPOINT_X)
    bp.len = sizeof(long);  // the kernel requires this for x
  return bp;
}

namespace {

/// A usdt probe's arguments as tracefs fetch arguments of each call site ("arg0=%di:s32
/// arg1=+0(-8(%bp)):string"): argument N is field argN of the probe's tracefs event, of the
/// note's size and sign, or the string it points to when `string_args` names it. An argument
/// is a field only where every site has it in a readable form of the same size and sign (the
/// sites' events share one format); a string argument that is not is an error.
std::vector<std::string> usdt_fetch_args(const ProbeOptions& o,
                                         const std::vector<symbols::UsdtSite>& sites) {
  using K = symbols::UsdtArg::Kind;
  std::size_t count = std::numeric_limits<std::size_t>::max();
  for (const auto& site : sites)
    count = std::min(count, site.arg_list.size());
  if (sites.empty())
    count = 0;
  std::vector<bool> readable(count, true);
  for (std::size_t i = 0; i < count; ++i) {
    for (const auto& site : sites) {
      const auto& a = site.arg_list[i];
      const auto& first = sites.front().arg_list[i];
      if (a.kind == K::kUnsupported || a.size != first.size || a.is_signed != first.is_signed)
        readable[i] = false;
    }
  }
  std::vector<bool> as_string(count, false);
  for (const auto& name : o.string_args) {
    std::size_t n = 0;
    const bool named = name.starts_with("arg") &&
                       std::from_chars(name.data() + 3, name.data() + name.size(), n).ptr ==
                           name.data() + name.size() &&
                       name.size() > 3;
    std::string why;
    if (!named)
      why = "usdt arguments are named arg0, arg1, ...";
    else if (n >= count)
      why = fmt::format("the probe has {} argument{}", count, count == 1 ? "" : "s");
    else if (!readable[n])
      why = fmt::format("its call sites keep it in forms tracer does not read alike ({})",
                        sites.front().args);
    else if (sites.front().arg_list[n].size != 8 || sites.front().arg_list[n].kind == K::kConstant)
      why = fmt::format("it is not a pointer ({})", sites.front().args);
    if (!why.empty())
      throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                  fmt::format("probe '{}': string argument '{}': {}", o.name, name, why),
                  "`tracer list usdt BINARY` lists each probe's arguments");
    as_string[n] = true;
  }
  std::vector<std::string> out;
  for (const auto& site : sites) {
    std::string args;
    for (std::size_t i = 0; i < count; ++i) {
      if (!readable[i])
        continue;
      const auto& a = site.arg_list[i];
      std::string where;
      switch (a.kind) {
        case K::kRegister:
          where = "%" + a.reg;
          break;
        case K::kConstant: {  // tracefs takes an unsigned immediate: the value's own bytes
          const auto bits = static_cast<std::uint64_t>(a.value);
          where = fmt::format("\\{:#x}", a.size == 8 ? bits : bits & ((1ULL << (a.size * 8)) - 1));
          break;
        }
        case K::kMemory:
          where = fmt::format("{:+d}(%{})", a.value, a.reg);
          break;
        case K::kUnsupported:
          break;
      }
      if (as_string[i])
        args += fmt::format(" arg{}=+0({}):string", i, where);
      else
        args += fmt::format(" arg{}={}:{}{}", i, where, a.is_signed ? 's' : 'u', a.size * 8);
    }
    out.push_back(std::move(args));
  }
  return out;
}

// kprobe/kretprobe/uprobe/uretprobe: through the probe PMU where there is one, else through a
// tracefs dynamic event (a tracepoint we create), else a clear "not on this kernel".
void resolve_dynamic_probe(const ProbeOptions& o, ResolvedProbe& r, ResolveContext& ctx) {
  const bool uprobe = is_user_probe(o.kind);
  const bool ret = o.kind == ProbeKind::kUretprobe || o.kind == ProbeKind::kKretprobe;
  BackendRoots roots;
  if (auto fs = tracefs::Tracefs::open())
    roots.tracefs_root = fs->root();
  ProbeBackend backend =
      choose_probe_backend(uprobe ? ProbeFamily::kUprobe : ProbeFamily::kKprobe, roots);
  // A usdt probe's arguments are fields of a tracefs event (its fetch arguments decode them at
  // each call site); the PMU has none.
  if (backend.kind == ProbeBackendKind::kPmu &&
      (ctx.prefer_tracefs_probes || o.kind == ProbeKind::kUsdt) &&
      std::filesystem::exists(roots.tracefs_root / (uprobe ? "uprobe_events" : "kprobe_events"))) {
    backend.kind = ProbeBackendKind::kTracefs;
  }
  if (backend.kind == ProbeBackendKind::kUnsupported) {
    throw Error(ErrorCategory::kUnsupported, std::make_error_code(std::errc::not_supported),
                fmt::format("probe '{}': {} '{}' cannot be placed: {}", o.name, to_string(o.kind),
                            o.spec, backend.reason),
                uprobe ? ""
                       : "kprobes need a kernel built with CONFIG_KPROBES; tracepoints "
                         "(`tracer list tracepoints`) cover many of the same places");
  }
  std::string target;                   // uprobe: binary path; kprobe: symbol
  std::vector<std::uint64_t> offsets;   // a uprobe's sites (C++ overloads, a pattern's matches)
  std::vector<std::string> names;       // of each site, as `check` lists them
  std::vector<std::uint64_t> ref_ctrs;  // a USDT site's semaphore (its file offset; 0: none)
  std::vector<std::string> fetch;       // a USDT site's arguments, as tracefs fetches them
  if (o.kind == ProbeKind::kUsdt) {
    auto t = symbols::parse_usdt_spec(o.spec, ctx.pid);
    if (!t)
      rethrow(o, t.error(), category_for(t.error()));
    target = t->path.string();
    for (const auto& site : t->sites) {
      offsets.push_back(site.file_offset);
      ref_ctrs.push_back(site.semaphore_offset);
      names.push_back(
          fmt::format("{}:{} at {:#x} ({})", site.provider, site.name, site.address, site.args));
      r.info.usdt_args.push_back(site.args);
    }
    fetch = usdt_fetch_args(o, t->sites);
    if (backend.kind == ProbeBackendKind::kPmu && !o.string_args.empty())
      throw Error(ErrorCategory::kUnsupported, std::make_error_code(std::errc::not_supported),
                  fmt::format("probe '{}': usdt arguments are read by tracefs uprobe_events, "
                              "which this system does not have",
                              o.name),
                  "mount tracefs (CONFIG_UPROBE_EVENTS)");
  } else if (uprobe) {
    auto t = symbols::parse_uprobe_spec(o.spec, ctx.pid);
    if (!t)
      rethrow(o, t.error(), category_for(t.error()));
    target = t->path.string();
    for (const auto& site : t->sites) {
      offsets.push_back(site.offset);
      names.push_back(site.symbol);
    }
  } else {
    auto s = symbols::parse_symbol_spec(o.spec);
    if (!s)
      rethrow(o, s.error(), ErrorCategory::kUsage);
    target = s->name;
    offsets.push_back(s->offset);
  }
  if (backend.kind == ProbeBackendKind::kPmu) {
    r.attr = uprobe ? uprobe_attr(backend, target, offsets.front(), ret)
                    : kprobe_attr(backend, target, offsets.front(), ret);
    ref_ctrs.resize(offsets.size(), 0);
    const bool semaphores =
        std::any_of(ref_ctrs.begin(), ref_ctrs.end(), [](std::uint64_t c) { return c != 0; });
    // The kernel sets a USDT probe's semaphore while the uprobe exists (4.20+); without it the
    // guarded call sites would never fire.
    if (semaphores && !backend.ref_ctr_shift)
      throw Error(ErrorCategory::kUnsupported, std::make_error_code(std::errc::not_supported),
                  fmt::format("probe '{}': usdt '{}' has a semaphore, and this kernel's uprobe "
                              "PMU takes none (format/ref_ctr_offset: Linux 4.20+)",
                              o.name, o.spec),
                  "its call sites run only while the semaphore is set: use a newer kernel");
    const std::uint64_t base_config = r.attr.config();
    const auto config_of = [&](std::size_t i) {
      return base_config | (ref_ctrs[i] << backend.ref_ctr_shift.value_or(0));
    };
    for (std::size_t i = 0; i < offsets.size() && offsets.size() > 1; ++i)
      r.info.sites.push_back({.symbol = names[i], .config = config_of(i), .config2 = offsets[i]});
    r.attr.config(config_of(0));
    r.attr_string = std::move(target);
    r.config1_is_attr_string = true;
    r.info.pmu = uprobe ? "uprobe" : "kprobe";
    return;
  }
  // A tracefs dynamic event: a tracepoint of our own group, removed when the engine stops; one
  // per site, the same format.
  std::string event = "p" + std::to_string(r.info.index) + "_";
  for (char c : o.name)
    event += std::isalnum(static_cast<unsigned char>(c)) != 0 ? c : '_';
  auto& dyn = ctx.dynamic_probes();
  const std::uint64_t offset = offsets.front();
  ref_ctrs.resize(offsets.size(), 0);
  fetch.resize(offsets.size());
  auto added = uprobe ? dyn.add_uprobe(event, target, offset, ret, ref_ctrs.front(), fetch.front())
                      : dyn.add_kprobe(event, target, offset, ret);
  if (!added)
    rethrow(o, added.error(), category_for(added.error()));
  for (std::size_t i = 0; i < offsets.size() && offsets.size() > 1; ++i) {
    std::uint64_t id = added->id;
    if (i != 0) {
      auto more = dyn.add_uprobe(fmt::format("{}_{}", event, i), target, offsets[i], ret,
                                 ref_ctrs[i], fetch[i]);
      if (!more)
        rethrow(o, more.error(), category_for(more.error()));
      id = more->id;
    }
    r.info.sites.push_back({.symbol = names[i], .config = id, .config2 = 0});
  }
  auto format = ctx.fs().format(added->name);
  if (!format)
    rethrow(o, format.error(), ErrorCategory::kRuntime);
  r.attr.type(PERF_TYPE_TRACEPOINT).config(added->id);
  r.info.format = std::move(*format);
  r.info.pmu = "tracepoint (tracefs " + std::string(uprobe ? "uprobe" : "kprobe") + "_events)";
}

/// A breakpoint on a symbol of the traced program: its address in the traced process (a pid
/// target: /proc/PID/exe and its load bias) or, for a started command, its link-time address
/// (a PIE has none before it runs: the error says so).
void resolve_breakpoint_symbol(const ProbeOptions& o, BreakpointSpec& bp, ResolveContext& ctx) {
  std::filesystem::path binary;
  if (ctx.pid) {
    std::error_code ec;
    binary = std::filesystem::read_symlink(fmt::format("/proc/{}/exe", *ctx.pid), ec);
    if (ec) {
      usage_error(o, fmt::format("cannot read /proc/{}/exe: {}", *ctx.pid, ec.message()),
                  "is the process still running?");
    }
  } else if (!ctx.command.empty()) {
    auto path = symbols::resolve_binary(ctx.command, std::nullopt);
    if (!path)
      rethrow(o, path.error(), ErrorCategory::kNotFound);
    binary = *path;
  } else {
    usage_error(o, fmt::format("breakpoint on '{}' needs a traced program", bp.symbol),
                "trace a process (-p PID) or a command (-c CMD) whose symbol it is, or give an "
                "address");
  }
  auto addr = symbols::symbol_address(binary, bp.symbol, ctx.pid);
  if (!addr)
    rethrow(
        o, addr.error(),
        addr.error().errno_value() == ENOENT ? ErrorCategory::kNotFound : ErrorCategory::kUsage);
  bp.addr = addr->address;
  if (!bp.len_given && bp.type != HW_BREAKPOINT_X &&
      (addr->size == 1 || addr->size == 2 || addr->size == 4))
    bp.len = addr->size;  // watch the whole variable, no more
}

/// A raw PMU event ("rNNNN", or perf's pmu/term=value,.../) or an AUX one: its type and
/// config, its ring's AUX area.
void resolve_pmu_event(const ProbeOptions& o, ResolvedProbe& r) {
  auto& a = r.attr;
  std::uint64_t raw = 0;
  if (o.kind == ProbeKind::kRawPmu && o.spec.size() > 1 && o.spec[0] == 'r' &&
      parse_u64("0x" + o.spec.substr(1), raw)) {
    a.type(PERF_TYPE_RAW).config(raw);  // perf's "rNNNN": a CPU PMU raw event code
    r.info.pmu = "raw";
  } else {
    // perf syntax: pmu/term=value,.../
    const auto slash = o.spec.find('/');
    if (slash == std::string::npos || o.spec.back() != '/' || slash == o.spec.size() - 1) {
      usage_error(o, fmt::format("'{}' is not a PMU event", o.spec),
                  "write pmu/term=value,.../ (e.g. intel_pt/cyc=1/) or rNNNN; the PMUs and "
                  "their terms are in `tracer list pmus`");
    }
    const std::string pmu_name = o.spec.substr(0, slash);
    const std::string terms = o.spec.substr(slash + 1, o.spec.size() - slash - 2);
    auto pmu = perf::find_pmu(pmu_name);
    if (!pmu) {
      std::string aux_pmus;
      if (auto all = perf::list_pmus()) {
        for (const auto& p : *all) {
          if (p.nr_addr_filters > 0)
            aux_pmus += (aux_pmus.empty() ? "" : ", ") + p.name;
        }
      }
      Failure f = pmu.error();
      if (o.kind == ProbeKind::kAux) {
        f.hint = fmt::format("AUX-capable PMUs here: {}",
                             aux_pmus.empty() ? "none (this machine has no intel_pt, "
                                                "intel_bts, cs_etm or arm_spe)"
                                              : aux_pmus);
      }
      rethrow(o, f,
              o.kind == ProbeKind::kAux ? ErrorCategory::kUnsupported : ErrorCategory::kNotFound);
    }
    auto cfg = perf::encode_pmu_terms(*pmu, terms);
    if (!cfg)
      rethrow(o, cfg.error(), ErrorCategory::kUsage);
    a.type(pmu->type).config(cfg->config).config1(cfg->config1).config2(cfg->config2);
    a.config3(cfg->config3);
    r.info.pmu = pmu->name;
  }
  if (o.kind == ProbeKind::kAux) {
    r.ring.aux_bytes = o.aux_bytes != 0 ? o.aux_bytes : kDefaultAuxBytes;
    r.ring.aux_overwrite = o.aux_snapshot;
  }
}

/// What the probe's kind makes of its spec: the event's type and config, and the sample
/// fields the kind adds. `every_event`: a default period of 1 (else kDefaultFreq).
std::uint64_t resolve_event(const ProbeOptions& o,
                            ResolvedProbe& r,
                            ResolveContext& ctx,
                            bool& every_event) {
  auto& a = r.attr;
  every_event = true;
  switch (o.kind) {
    case ProbeKind::kTracepoint: {
      auto tp = tracefs::split_tracepoint(o.spec);
      if (!tp) {
        usage_error(o, fmt::format("'{}' is not a tracepoint name", o.spec),
                    "write system:event, e.g. sched:sched_switch (see `tracer list tracepoints`)");
      }
      auto format = ctx.fs().format(*tp);
      if (!format)
        rethrow(o, format.error(), category_for(format.error()));
      a.type(PERF_TYPE_TRACEPOINT).config(format->id);
      r.info.pmu = "tracepoint";
      r.info.format = std::move(*format);
      return PERF_SAMPLE_RAW;
    }
    case ProbeKind::kSoftware: {
      auto sw = perf::find_software_event(o.spec);
      if (!sw) {
        usage_error(o, fmt::format("unknown software event '{}'", o.spec),
                    fmt::format("software events: {}", software_names()));
      }
      a.type(PERF_TYPE_SOFTWARE).config(sw->config);
      r.info.pmu = "software";
      every_event = sw->unit != "ns";  // clocks sample at a frequency
      return PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD;
    }
    case ProbeKind::kHardware: {
      auto cfg = perf::find_hardware_event(o.spec);
      if (!cfg)
        usage_error(o, fmt::format("unknown hardware event '{}'", o.spec),
                    fmt::format("hardware events: {}", perf::hardware_event_names()));
      a.type(PERF_TYPE_HARDWARE).config(*cfg);
      r.info.pmu = "hardware";
      every_event = false;
      return PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD;
    }
    case ProbeKind::kCache: {
      auto cfg = perf::find_cache_event(o.spec);
      if (!cfg)
        usage_error(o, fmt::format("unknown cache event '{}'", o.spec),
                    std::string(perf::cache_event_grammar()));
      a.type(PERF_TYPE_HW_CACHE).config(*cfg);
      r.info.pmu = "hw_cache";
      every_event = false;
      return PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD;
    }
    case ProbeKind::kRawPmu:
    case ProbeKind::kAux:
      resolve_pmu_event(o, r);
      every_event = o.kind == ProbeKind::kAux;
      return PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD;
    case ProbeKind::kBreakpoint: {
      auto bp = parse_breakpoint(o.spec);
      if (!bp)
        rethrow(o, bp.error(), ErrorCategory::kUsage);
      if (!bp->symbol.empty())
        resolve_breakpoint_symbol(o, *bp, ctx);
      a.type(PERF_TYPE_BREAKPOINT).bp_type(bp->type).bp_addr(bp->addr).bp_len(bp->len);
      r.info.pmu = "breakpoint";
      return PERF_SAMPLE_IP | PERF_SAMPLE_ADDR;
    }
    case ProbeKind::kBpfOutput:
      usage_error(o, "the BPF output channel is not a probe of its own",
                  "configure it with the engine's BPF options ([bpf] output in a recipe)");
    case ProbeKind::kKprobe:
    case ProbeKind::kKretprobe:
    case ProbeKind::kUprobe:
    case ProbeKind::kUretprobe:
    case ProbeKind::kUsdt:
      resolve_dynamic_probe(o, r, ctx);
      return PERF_SAMPLE_RAW | PERF_SAMPLE_IP;
  }
  return 0;
}

/// The user registers a sample carries: the probe's, or (x86-64 SysV ABI) a uprobe's
/// arguments rdi, rsi, rdx, rcx, r8, r9 and a uretprobe's return value rax.
void set_user_regs(const ProbeOptions& o, ResolvedProbe& r) {
  std::uint64_t regs = o.sample_regs_user;
#if defined(__x86_64__)
  if (regs == 0 && o.kind == ProbeKind::kUprobe) {
    regs = (1ULL << PERF_REG_X86_DI) | (1ULL << PERF_REG_X86_SI) | (1ULL << PERF_REG_X86_DX) |
           (1ULL << PERF_REG_X86_CX) | (1ULL << PERF_REG_X86_R8) | (1ULL << PERF_REG_X86_R9);
  } else if (regs == 0 && o.kind == ProbeKind::kUretprobe) {
    regs = 1ULL << PERF_REG_X86_AX;
  }
#endif
  if (regs != 0) {
    r.attr.sample_regs_user(regs);
    r.attr.add_sample_type(PERF_SAMPLE_REGS_USER);
  }
  r.info.sample_regs_user = regs;
}

/// Stacks, and the side-band records (COMM, FORK/EXIT, MMAP2, switches) the probe carries.
void set_stacks_and_records(const ProbeOptions& o, perf::EventAttr& a) {
  if (o.sample_stack_user != 0)
    a.sample_stack_user(o.sample_stack_user);
  if (o.max_stack != 0)
    a.sample_max_stack(o.max_stack);
  if (o.exclude_callchain_kernel)
    a.flag(perf::Flag::kExcludeCallchainKernel);
  if (o.exclude_callchain_user)
    a.flag(perf::Flag::kExcludeCallchainUser);
  if (o.task_records) {
    a.flag(perf::Flag::kComm).flag(perf::Flag::kCommExec).flag(perf::Flag::kTask);
    // mmap2 selects the MMAP2 layout, but the kernel only generates mmap events at all while
    // some event has mmap or mmap_data (account_event() counts nr_mmap_events for those): set
    // both, as perf record does.
    a.flag(perf::Flag::kMmap).flag(perf::Flag::kMmap2);
    // A DWARF unwind (a stack copy) needs the data mappings too: perf's unwinders read a
    // module's .eh_frame_hdr through the read-only mapping that holds it (perf record
    // --call-graph dwarf records them as well).
    if (o.data_mappings || o.sample_stack_user != 0)
      a.flag(perf::Flag::kMmapData);
  }
  if (o.comm_records && !o.task_records)
    a.flag(perf::Flag::kComm).flag(perf::Flag::kCommExec).flag(perf::Flag::kTask);
  if (o.context_switches)
    a.flag(perf::Flag::kContextSwitch);
}

/// Counting, or sampling at the probe's frequency or period (else every event, or
/// kDefaultFreq).
void set_sampling(const ProbeOptions& o, perf::EventAttr& a, bool every_event) {
  if (o.counting) {
    a.sample_type(0).flag(perf::Flag::kSampleIdAll, false);
    a.read_format(PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
  } else if (o.freq) {
    a.sample_freq(*o.freq);
  } else if (o.period) {
    a.sample_period(*o.period);
  } else if (every_event) {
    a.sample_period(1);
  } else {
    a.sample_freq(kDefaultFreq);
  }
}

/// The ring's size and its wakeups.
void set_ring(const ProbeOptions& o, ResolvedProbe& r, const ResolveContext& ctx) {
  auto& a = r.attr;
  r.ring.data_pages = o.ring_pages != 0             ? o.ring_pages
                      : ctx.default_ring_pages != 0 ? ctx.default_ring_pages
                                                    : kDefaultRingPages;
  const std::uint64_t ring_bytes = static_cast<std::uint64_t>(r.ring.data_pages) * 4096;
  if (o.wakeup.events != 0) {
    a.wakeup_events(o.wakeup.events);
  } else {
    // Batched wakeups: the kernel wakes us when the ring is a quarter full; the engine's flush
    // timer drains rings that fill slower than that.
    const std::uint64_t wm =
        o.wakeup.watermark_bytes != 0 ? o.wakeup.watermark_bytes : ring_bytes / 4;
    if (wm >= ring_bytes) {
      usage_error(o,
                  fmt::format("wakeup watermark {} is not below the ring size {}", wm, ring_bytes));
    }
    a.wakeup_watermark(static_cast<std::uint32_t>(wm));
  }
  if (o.kind == ProbeKind::kAux && r.ring.aux_bytes != 0)
    a.aux_watermark(static_cast<std::uint32_t>(r.ring.aux_bytes / 4));
}

/// Timebase sampling (`read`): each sample reads the group (the leader's count first, then the
/// members', each with its id: an inherited child's counters have ids of their own).
void set_read_group(const ProbeOptions& o, ResolvedProbe& r) {
  if (o.read_events.empty())
    return;
  if (o.counting)
    usage_error(o, "a counting probe samples nothing: 'read' needs a sampling probe");
  r.attr.add_sample_type(PERF_SAMPLE_READ | PERF_SAMPLE_TID);
  r.attr.read_format(PERF_FORMAT_GROUP | PERF_FORMAT_ID | perf::abi::kFormatLost);
  std::optional<tracefs::Tracefs> fs;
  for (const auto& name : o.read_events) {
    perf::EventAttr m = resolve_event_name(name, fs);
    // The kernel (6.12+) takes inherit with PERF_SAMPLE_READ when every member of the group
    // says the same (has_inherit_and_sample_read): the members carry it too; they count,
    // never sample (no period).
    // A group's events share one clock (the kernel refuses a member of another).
    m.read_format(PERF_FORMAT_GROUP | PERF_FORMAT_ID | perf::abi::kFormatLost)
        .sample_type(PERF_SAMPLE_READ | PERF_SAMPLE_TID)
        .clockid(CLOCK_MONOTONIC);
    r.members.push_back(m);
    std::string field = name;
    for (char& c : field) {
      if (std::isalnum(static_cast<unsigned char>(c)) == 0 && c != '_')
        c = '_';
    }
    r.info.read_members.push_back(std::move(field));
  }
}

}  // namespace

ResolvedProbe resolve_probe(const ProbeOptions& o, std::uint32_t index, ResolveContext& ctx) {
  if (o.name.empty())
    usage_error(o, "a probe needs a name");
  if (o.period && o.freq)
    usage_error(o, "set period or freq, not both");
  if (o.ring_pages != 0 && (o.ring_pages & (o.ring_pages - 1)) != 0) {
    usage_error(o, fmt::format("ring_pages {} is not a power of two", o.ring_pages),
                "use 8, 16, 32, 64, 128, ...");
  }
  ResolvedProbe r;
  r.info.index = index;
  r.info.name = o.name;
  r.info.kind = o.kind;
  r.info.spec = o.spec;
  r.counting = o.counting;
  // Every event: the identifier first (routing), time on CLOCK_MONOTONIC so probes and CPUs
  // compare, and the sample_id trailer on every record so losses and task records attribute.
  bool every_event = true;
  const std::uint64_t sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                    PERF_SAMPLE_CPU | resolve_event(o, r, ctx, every_event);
  auto& a = r.attr;
  a.sample_type(sample_type | o.extra_sample_type)
      .flag(perf::Flag::kSampleIdAll)
      .flag(perf::Flag::kDisabled)
      .clockid(CLOCK_MONOTONIC)
      .read_format(PERF_FORMAT_ID | perf::abi::kFormatLost);
  set_user_regs(o, r);
  r.info.counts_to_stages = o.counting && o.bpf_program.empty();
  set_stacks_and_records(o, a);
  // A counting probe's fields are those it would sample: an in-kernel pipeline (tracer::Session
  // placement) reads them in its program, and binds its stages to them.
  const perf::SampleLayout sampled = perf::SampleLayout::from(a);
  set_sampling(o, a, every_event);
  set_ring(o, r, ctx);
  set_read_group(o, r);
  r.info.layout = o.counting ? sampled : perf::SampleLayout::from(a);
  r.info.attr = a;
  return r;
}

}  // namespace tracer::core
