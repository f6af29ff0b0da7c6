#include "recipe_probe.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

#include <algorithm>
#include <bit>
#include <limits>
#include <optional>
#include <string>

#include "recipe_schema.hpp"
#include "tracer/event_names.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {
namespace {

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30) && bytes % (1ULL << 30) == 0)
    return fmt::format("{}GiB", bytes >> 30);
  if (bytes >= (1ULL << 20) && bytes % (1ULL << 20) == 0)
    return fmt::format("{}MiB", bytes >> 20);
  if (bytes >= (1ULL << 10) && bytes % (1ULL << 10) == 0)
    return fmt::format("{}KiB", bytes >> 10);
  return fmt::format("{}", bytes);
}

std::uint64_t page_bytes() {
  const long ps = ::sysconf(_SC_PAGESIZE);
  return ps > 0 ? static_cast<std::uint64_t>(ps) : 4096;
}

/// Every general-purpose user register perf can sample (perf's PERF_REGS_MASK for x86-64:
/// the segment registers DS, ES, FS, GS are not sampled by the kernel).
std::uint64_t all_user_regs() {
#if defined(__x86_64__)
  return ((1ULL << PERF_REG_X86_64_MAX) - 1) &
         ~((1ULL << PERF_REG_X86_DS) | (1ULL << PERF_REG_X86_ES) | (1ULL << PERF_REG_X86_FS) |
           (1ULL << PERF_REG_X86_GS));
#else
  return 0;
#endif
}

class ProbeReader {
 public:
  ProbeReader(std::span<const RecipeProbe> earlier, Diagnostics& diags)
      : earlier_(earlier), diags_(diags), keys_(diags) {}

  RecipeProbe read(const ConfigValue& node, std::size_t index) {
    const ConfigTable& t = *node.table();
    RecipeProbe probe;
    probe.where = node.where;
    ProbeOptions& o = probe.options;
    const auto keys = names_of(kProbeKeys);
    const auto kinds = kind_names();

    std::string label = fmt::format("probe #{}", index + 1);
    if (const auto* n = node.find("name"); n != nullptr && n->string() != nullptr)
      label = fmt::format("probe '{}'", *n->string());

    const Entry* kind = nullptr;
    bool kind_reported = false;
    ring_bytes_.reset();
    dwarf_unwind_ = false;
    for (const auto& e : t) {
      const auto& [key, v] = e;
      if (find_spec(kProbeKeys, key) == nullptr) {
        auto near = near_names(key, keys);
        if (!near.empty() && find_kind(near.front()) != nullptr) {
          diags_.add(v.key_where, fmt::format("unknown probe kind '{}'", key),
                     fmt::format("did you mean {}?", quoted_list(near)));
          kind_reported = true;
        } else {
          keys_.unknown_key(e, "[[probe]]", keys);
        }
        continue;
      }
      probe.value_where[key] = v.where;
      if (const auto* k = find_kind(key)) {
        if (kind != nullptr) {
          diags_.add(
              v.key_where, fmt::format("{} has two kinds: '{}' and '{}'", label, kind->first, key),
              fmt::format("a probe has exactly one of {}; split it into two [[probe]] tables",
                          plain_list(kinds)));
          kind_reported = true;
          continue;
        }
        kind = &e;
        o.kind = k->kind;
        if (const auto* s = keys_.string(e)) {
          o.spec = *s;
          check_spec(e, k->kind);
        }
        continue;
      }
      if (!read_sampling_key(e, o) && !read_stack_key(e, o))
        read_ring_key(e, o);
    }

    if (node.find("name") == nullptr)
      diags_.add(node.where, fmt::format("missing required key 'name' in {}", label),
                 "add name = \"...\" (unique; shown in stats and used by --set probe.NAME.KEY)");
    if (kind == nullptr && !kind_reported)
      diags_.add(node.where, fmt::format("{} has no kind", label),
                 fmt::format("add one of {} with its spec, e.g. tracepoint = "
                             "\"syscalls:sys_enter_openat\"",
                             plain_list(kinds)));
    if (dwarf_unwind_) {
      // As perf record --call-graph dwarf: 8 KiB of stack unless user_stack says otherwise, and
      // the kernel's frame-pointer walk of the user part left out (tracer unwinds it).
      if (o.sample_stack_user == 0)
        o.sample_stack_user = 8192;
      o.exclude_callchain_user = true;
    }
    check_probe_combinations(node, probe, label, ring_bytes_);

    if (!o.name.empty()) {
      for (const auto& other : earlier_) {
        if (other.options.name == o.name) {
          const auto& first = other.where_of("name");
          diags_.add(probe.where_of("name"), fmt::format("duplicate probe name '{}'", o.name),
                     fmt::format("first used at {}:{}:{}; probe names must be unique", first.path,
                                 first.line, first.column));
          break;
        }
      }
    }
    return probe;
  }

 private:
  /// The probe's name and what it samples: period, freq, counting, read, filter, bpf. False for
  /// another key.
  bool read_sampling_key(const Entry& e, ProbeOptions& o) {
    const auto& [key, v] = e;
    if (key == "name") {
      if (const auto* s = keys_.string(e)) {
        if (s->empty())
          diags_.add(v.where, "empty probe name", "name it: name = \"openat\"");
        o.name = *s;
      }
    } else if (key == "period") {
      o.period = keys_.count<std::uint64_t>(e);
    } else if (key == "freq") {
      o.freq = keys_.count<std::uint64_t>(e);
    } else if (key == "counting") {
      if (auto b = keys_.boolean(e))
        o.counting = *b;
    } else if (key == "read") {
      // Timebase sampling: events counted with this probe's, read at each of its samples.
      const ConfigArray* a = v.array();
      if (a != nullptr && a->empty()) {
        diags_.add(v.where, "empty 'read': no event to read at each sample",
                   "read = [\"page-faults\"], or leave the key out");
        return true;
      }
      if (a == nullptr) {
        wrong_type(diags_, v, "read", "an array of event names",
                   "read = [\"page-faults\", \"context-switches\"]: their counts at each "
                   "sample");
        return true;
      }
      for (const auto& ev : *a) {
        const std::string* s = ev.string();
        if (s == nullptr) {
          wrong_type(diags_, ev, "an event of read", "a string", "read = [\"page-faults\"]");
          continue;
        }
        if (auto problem = check_event_name(*s))
          diags_.add(ev.where, problem->message, problem->hint);
        o.read_events.push_back(*s);
      }
    } else if (key == "filter") {
      if (const auto* s = keys_.string(e))
        o.filter = *s;
    } else if (key == "strings") {
      // A usdt probe's `char *` arguments: their fields are the strings they point to.
      const ConfigArray* a = v.array();
      if (a == nullptr) {
        wrong_type(diags_, v, "strings", "an array of argument names",
                   "strings = [\"arg0\"]: arg0 is a `char *`, its field the string");
        return true;
      }
      for (const auto& arg : *a) {
        const std::string* s = arg.string();
        const bool named = s != nullptr && s->size() > 3 && s->starts_with("arg") &&
                           s->find_first_not_of("0123456789", 3) == std::string::npos;
        if (!named) {
          wrong_type(diags_, arg, "an argument of strings", "an argument name (\"arg0\")",
                     "strings = [\"arg0\"]: `tracer list usdt BINARY` lists the arguments");
          continue;
        }
        o.string_args.push_back(*s);
      }
    } else if (key == "bpf") {
      if (const auto* s = keys_.string(e)) {
        if (s->empty())
          diags_.add(v.where, "empty 'bpf' program name",
                     "name a program of the [bpf] object, or leave the key out");
        o.bpf_program = *s;
      }
    } else {
      return false;
    }
    return true;
  }

  /// Stacks and registers: callchain, max_stack, unwind, exclude_callchain_*, user_regs,
  /// user_stack. False for another key.
  bool read_stack_key(const Entry& e, ProbeOptions& o) {
    const auto& [key, v] = e;
    if (key == "callchain") {
      if (auto b = keys_.boolean(e); b && *b)
        o.extra_sample_type |= PERF_SAMPLE_CALLCHAIN;
    } else if (key == "max_stack") {
      if (auto n = keys_.count<std::uint16_t>(e)) {
        // The kernel refuses more than kernel.perf_event_max_stack (127 by default).
        if (*n == 0 || *n > 1023)
          diags_.add(v.where, fmt::format("bad max_stack {}", *n),
                     "write a frame count from 1 to kernel.perf_event_max_stack, e.g. 64");
        else
          o.max_stack = *n;
      }
    } else if (key == "unwind") {
      // "dwarf": user stacks unwound by tracer from each sample's registers and stack copy
      // with the binaries' CFI (perf record --call-graph dwarf); "fp": the kernel's
      // frame-pointer walk (callchain = true).
      if (const auto* how = keys_.string(e)) {
        if (*how == "dwarf") {
          o.sample_regs_user = all_user_regs();
          if (o.sample_regs_user == 0)
            diags_.add(v.where, "'unwind = \"dwarf\"' is supported on x86-64 only",
                       "use unwind = \"fp\" (frame pointers) on this architecture");
          o.extra_sample_type |=
              PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
          dwarf_unwind_ = true;
        } else if (*how == "fp") {
          o.extra_sample_type |= PERF_SAMPLE_CALLCHAIN;
        } else {
          diags_.add(v.where, fmt::format("unknown unwind '{}'", *how),
                     R"(write unwind = "fp" (frame pointers) or unwind = "dwarf")");
        }
      }
    } else if (key == "exclude_callchain_kernel") {
      if (auto b = keys_.boolean(e))
        o.exclude_callchain_kernel = *b;
    } else if (key == "exclude_callchain_user") {
      if (auto b = keys_.boolean(e))
        o.exclude_callchain_user = *b;
    } else if (key == "user_regs") {
      if (auto b = keys_.boolean(e); b && *b) {
        o.sample_regs_user = all_user_regs();
        if (o.sample_regs_user == 0)
          diags_.add(v.where, "'user_regs' is supported on x86-64 only",
                     "leave it out on this architecture");
        o.extra_sample_type |= PERF_SAMPLE_REGS_USER;
      }
    } else if (key == "user_stack") {
      if (auto bytes = keys_.size(e)) {
        // perf_copy_attr(): sample_stack_user must be u64-aligned and below USHRT_MAX.
        if (*bytes == 0 || *bytes % 8 != 0 || *bytes >= 65535) {
          diags_.add(v.where, fmt::format("bad user_stack size {}", *bytes),
                     "the kernel takes a multiple of 8 from 8 to 65528 bytes, e.g. \"8KiB\"");
        } else {
          o.sample_stack_user = static_cast<std::uint32_t>(*bytes);
          o.extra_sample_type |= PERF_SAMPLE_STACK_USER;
        }
      }
    } else {
      return false;
    }
    return true;
  }

  /// Side-band records and the rings: task_records, context_switches, ring, wakeup_*, aux_*. False
  /// for another key.
  bool read_ring_key(const Entry& e, ProbeOptions& o) {
    const auto& [key, v] = e;
    if (key == "task_records") {
      if (auto b = keys_.boolean(e))
        o.task_records = *b;
    } else if (key == "context_switches") {
      if (auto b = keys_.boolean(e))
        o.context_switches = *b;
    } else if (key == "ring") {
      if (auto bytes = keys_.size(e)) {
        if (auto pages = pages_of(v, *bytes, "ring size"))
          o.ring_pages = *pages;
        ring_bytes_ = bytes;
      }
    } else if (key == "wakeup_events") {
      if (auto n = keys_.count<std::uint32_t>(e))
        o.wakeup.events = *n;
    } else if (key == "wakeup_bytes") {
      if (auto bytes = keys_.size(e)) {
        if (*bytes == 0 || *bytes > std::numeric_limits<std::uint32_t>::max())
          diags_.add(v.where, fmt::format("bad wakeup_bytes {}", *bytes),
                     "write a fill level smaller than the ring, e.g. \"64KiB\"");
        else
          o.wakeup.watermark_bytes = static_cast<std::uint32_t>(*bytes);
      }
    } else if (key == "aux_size") {
      if (auto bytes = keys_.size(e)) {
        if (pages_of(v, *bytes, "aux_size"))
          o.aux_bytes = *bytes;
      }
    } else if (key == "aux_snapshot") {
      if (auto b = keys_.boolean(e))
        o.aux_snapshot = *b;
    } else {
      return false;
    }
    return true;
  }

  /// Syntax of a kind's spec that needs no system access.
  void check_spec(const Entry& e, ProbeKind kind) {
    const auto& [key, v] = e;
    const std::string& spec = *v.string();
    if (spec.empty()) {
      diags_.add(v.where, fmt::format("empty {} spec", key),
                 "say what to probe, e.g. tracepoint = \"sched:sched_switch\"");
      return;
    }
    if (kind == ProbeKind::kTracepoint && !tracefs::split_tracepoint(spec)) {
      diags_.add(v.where, fmt::format("malformed tracepoint '{}'", spec),
                 "write it as system:event, e.g. \"syscalls:sys_enter_openat\"");
    } else if (kind == ProbeKind::kUprobe || kind == ProbeKind::kUretprobe) {
      const auto colon = spec.rfind(':');
      if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size())
        diags_.add(v.where, fmt::format("malformed {} '{}'", key, spec),
                   "write it as binary:symbol, e.g. \"/usr/bin/bash:readline\" or "
                   "\"libc:malloc+0x10\"");
    } else if (kind == ProbeKind::kUsdt && std::count(spec.begin(), spec.end(), ':') < 2) {
      diags_.add(v.where, fmt::format("malformed usdt '{}'", spec),
                 "write it as path:provider:name, e.g. "
                 "\"/usr/bin/python3:python:function__entry\"");
    }
  }

  /// Bytes as a power-of-two number of pages (what a ring or an AUX area must be).
  std::optional<std::uint32_t> pages_of(const ConfigValue& v,
                                        std::uint64_t bytes,
                                        std::string_view what) {
    const std::uint64_t page = page_bytes();
    const std::uint64_t pages = bytes / page;
    if (bytes % page == 0 && pages > 0 && std::has_single_bit(pages) &&
        pages <= std::numeric_limits<std::uint32_t>::max())
      return static_cast<std::uint32_t>(pages);
    const std::uint64_t lower = pages == 0 ? 1 : std::bit_floor(pages);
    const std::string text = v.string() != nullptr ? *v.string() : std::to_string(bytes);
    const std::string why = bytes % page != 0
                                ? fmt::format("not a whole number of {}-byte pages", page)
                                : fmt::format("{} pages is not a power of two", pages);
    diags_.add(
        v.where, fmt::format("bad {} '{}': {}", what, text, why),
        pages == 0 || lower == pages
            ? fmt::format("use a power of two pages, e.g. {} ({} page)", format_bytes(page), 1)
            : fmt::format("use a power of two pages: {} ({} pages) or {} ({} pages)",
                          format_bytes(lower * page), lower, format_bytes(2 * lower * page),
                          2 * lower));
    return std::nullopt;
  }

  void check_probe_combinations(const ConfigValue& node,
                                const RecipeProbe& probe,
                                const std::string& label,
                                std::optional<std::uint64_t> ring_bytes) {
    const ProbeOptions& o = probe.options;
    const ConfigTable& t = *node.table();
    const bool has_kind = std::any_of(t.begin(), t.end(),
                                      [](const Entry& e) { return find_kind(e.first) != nullptr; });
    if (o.period && o.freq)
      diags_.add(probe.where_of("freq"), fmt::format("{} has both 'period' and 'freq'", label),
                 "keep one: period = N samples every N events, freq = N samples per second");
    if (o.counting && (o.period || o.freq))
      diags_.add(
          probe.where_of(o.period ? "period" : "freq"),
          fmt::format("{} is counting: it takes no '{}'", label, o.period ? "period" : "freq"),
          "a counter is read, not sampled; drop the key or counting = true");
    if (o.counting && !o.read_events.empty())
      diags_.add(probe.where_of("read"), fmt::format("{} is counting: it takes no 'read'", label),
                 "'read' counts events at each sample of a sampling probe; put counters in a "
                 "[[counter]] group");
    if (!o.read_events.empty() && (o.kind == ProbeKind::kAux || o.kind == ProbeKind::kBpfOutput))
      diags_.add(probe.where_of("read"),
                 fmt::format("'read' does not apply to {} probes", to_string(o.kind)),
                 "read the group at the samples of a software, hardware, tracepoint or probe "
                 "event");
    if (has_kind && !o.string_args.empty() && o.kind != ProbeKind::kUsdt)
      diags_.add(probe.where_of("strings"),
                 fmt::format("'strings' does not apply to {} probes", to_string(o.kind)),
                 "it names a usdt probe's `char *` arguments; a tracepoint's `char *` fields "
                 "are strings already");
    const bool tracefs_kind = o.kind == ProbeKind::kTracepoint || o.kind == ProbeKind::kKprobe ||
                              o.kind == ProbeKind::kKretprobe || is_user_probe(o.kind);
    if (has_kind && !o.filter.empty() && !tracefs_kind)
      diags_.add(probe.where_of("filter"),
                 fmt::format("'filter' does not apply to {} probes", to_string(o.kind)),
                 "tracefs filters work on tracepoints and k/u(ret)probes; filter in a pipeline "
                 "stage instead");
    if (has_kind && o.kind != ProbeKind::kAux) {
      for (std::string_view k : {"aux_size", "aux_snapshot"}) {
        if (node.find(k) != nullptr)
          diags_.add(probe.where_of(k),
                     fmt::format("'{}' does not apply to {} probes", k, to_string(o.kind)),
                     "only aux probes map an AUX area");
      }
    }
    if (ring_bytes && o.wakeup.watermark_bytes != 0 && o.wakeup.watermark_bytes >= *ring_bytes)
      diags_.add(probe.where_of("wakeup_bytes"),
                 fmt::format("'wakeup_bytes' ({}) is not smaller than the ring ({})",
                             format_bytes(o.wakeup.watermark_bytes), format_bytes(*ring_bytes)),
                 "the kernel would never wake the reader; use a quarter of the ring");
  }

  std::span<const RecipeProbe> earlier_;
  Diagnostics& diags_;
  std::optional<std::uint64_t> ring_bytes_;  // the probe's ring size as written (read())
  bool dwarf_unwind_ = false;                // unwind = "dwarf" (read())
  KeyReader keys_;
};

}  // namespace

RecipeProbe read_probe(const ConfigValue& node,
                       std::size_t index,
                       std::span<const RecipeProbe> earlier,
                       Diagnostics& diags) {
  return ProbeReader(earlier, diags).read(node, index);
}

}  // namespace tracer::core
