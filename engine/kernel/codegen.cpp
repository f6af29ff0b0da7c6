// bpf::gen: KernelPlan -> BPF C text. See codegen.hpp for the API and docs/architecture.md
// ("In-kernel recipes (codegen)") for the design: why C text compiled by clang, the map layout,
// and the generation flip.
#include "tracer/kernel/codegen.hpp"

#include <bpf/libbpf.h>

#include <unistd.h>
#include <algorithm>
#include <array>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <fmt/format.h>

namespace tracer::kernel::gen {

using bpf::CompileOptions;
using bpf::default_cache_dir;
using bpf::make_cache_dir;
using bpf::Object;

Field Field::missing(std::string name) {
  return {.source = Source::kMissing, .name = std::move(name)};
}
Field Field::arg(std::uint32_t n) {
  return {.source = Source::kArg, .name = fmt::format("arg{}", n), .index = n};
}
Field Field::tp_int(std::string name, std::uint32_t offset, std::uint32_t size, bool is_signed) {
  return {.source = Source::kTpInt,
          .name = std::move(name),
          .offset = offset,
          .size = size,
          .is_signed = is_signed};
}
Field Field::tp_string(std::string name, std::uint32_t offset, std::uint32_t len) {
  return {.source = Source::kTpString, .name = std::move(name), .offset = offset, .size = len};
}
Field Field::tp_data_loc(std::string name, std::uint32_t offset, bool rel) {
  return {.source = Source::kTpDataLoc,
          .name = std::move(name),
          .offset = offset,
          .size = 4,
          .rel_loc = rel};
}

Field Field::tp_string_pointer(std::string name, std::uint32_t offset, bool user) {
  return {.source = Source::kTpDataLoc,
          .name = std::move(name),
          .offset = offset,
          .size = 8,
          .pointer = true,
          .user = user};
}

namespace {

constexpr std::uint32_t kHistBuckets = 66;      // plugins/stages/hist.hpp Hist::kBuckets
constexpr std::uint32_t kCommLen = 16;          // TASK_COMM_LEN
constexpr std::uint32_t kMaxStringKey = 256;    // bytes of one string key or buffer
constexpr std::uint32_t kMaxKeySize = 320;      // the key lives on the 512-byte BPF stack
constexpr std::uint32_t kMaxValueSize = 32768;  // a per-CPU value: PCPU_MIN_UNIT_SIZE
constexpr std::uint32_t kMaxProbes = 64;
constexpr std::uint32_t kMaxStackDepth = 1024;  // frames of one stack map entry
constexpr std::uint32_t kMaxFilterNodes = 256;
constexpr int kMaxFilterDepth = 64;
constexpr std::uint64_t kPercpuPreallocBudget = 64ULL << 20;  // both generations, every CPU

enum class VType : std::uint8_t { kNone, kInt, kUint, kString, kStack };

VType type_of(const Field& f) {
  switch (f.source) {
    case Source::kMissing:
      return VType::kNone;
    case Source::kPid:
    case Source::kTid:
    case Source::kCpu:
    case Source::kRetval:
      return VType::kInt;
    case Source::kUid:
    case Source::kGid:
    case Source::kCgroup:
    case Source::kArg:
    case Source::kDuration:
      return VType::kUint;
    case Source::kTpInt:
      return f.is_signed ? VType::kInt : VType::kUint;
    case Source::kComm:
    case Source::kProbe:
    case Source::kTpString:
    case Source::kTpDataLoc:
      return VType::kString;
    case Source::kKernelStack:
    case Source::kUserStack:
    case Source::kCallchain:
      return VType::kStack;
  }
  return VType::kNone;
}

bool is_kprobe_family(ProbeKind k) {
  return k == ProbeKind::kKprobe || k == ProbeKind::kKretprobe || k == ProbeKind::kUprobe ||
         k == ProbeKind::kUretprobe;
}
bool is_return_probe(ProbeKind k) {
  return k == ProbeKind::kKretprobe || k == ProbeKind::kUretprobe;
}
bool is_uprobe(ProbeKind k) {
  return k == ProbeKind::kUprobe || k == ProbeKind::kUretprobe;
}
bool needs_value(AggKind k) {
  return k != AggKind::kCount;
}
std::string_view kind_name(ProbeKind k) {
  switch (k) {
    case ProbeKind::kTracepoint:
      return "tracepoint";
    case ProbeKind::kKprobe:
      return "kprobe";
    case ProbeKind::kKretprobe:
      return "kretprobe";
    case ProbeKind::kUprobe:
      return "uprobe";
    case ProbeKind::kUretprobe:
      return "uretprobe";
    case ProbeKind::kPerfEvent:
      return "perf event";
  }
  return "?";
}
std::string_view agg_name(AggKind k) {
  static constexpr std::string_view kNames[] = {"count", "sum",  "min",   "max",
                                                "avg",   "hist", "lhist", "quantiles"};
  return kNames[static_cast<std::size_t>(k)];
}

Role role_of(const KernelPlan& plan, std::uint32_t i) {
  if (plan.latency) {
    if (i == plan.latency->entry_probe)
      return Role::kLatencyEntry;
    if (i == plan.latency->exit_probe)
      return Role::kLatencyExit;
  }
  return Role::kAggregate;
}

}  // namespace

std::uint64_t min_max_xor(AggKind kind) {
  // Sign bit flipped: signed order becomes unsigned order (max). All but the sign bit flipped:
  // the order reversed (min).
  return kind == AggKind::kMin ? 0x7fffffffffffffffULL : 0x8000000000000000ULL;
}

namespace {

std::uint32_t lhist_inner(const Aggregation& a) {
  if (a.lhist_step <= 0 || a.lhist_max <= a.lhist_min)
    return 0;
  const auto span = static_cast<unsigned __int128>(static_cast<__int128>(a.lhist_max) -
                                                   static_cast<__int128>(a.lhist_min));
  const auto n = (span + static_cast<unsigned __int128>(a.lhist_step) - 1) /
                 static_cast<unsigned __int128>(a.lhist_step);
  return n > 1'000'000 ? 1'000'000 : static_cast<std::uint32_t>(n);
}

// ---------------------------------------------------------------------------------------------
// check

std::string where(const ProbePlan& p) {
  return fmt::format("probe '{}' ({})", p.name, kind_name(p.kind));
}

std::optional<std::string> check_field(const ProbePlan& p, const Field& f, bool exit_probe) {
  const auto bad = [&](std::string why) {
    return fmt::format("{}: field '{}': {}", where(p), f.name, why);
  };
  switch (f.source) {
    case Source::kTpInt:
    case Source::kTpString:
    case Source::kTpDataLoc:
      if (p.kind != ProbeKind::kTracepoint)
        return bad("a tracepoint field on a probe that is not a tracepoint");
      if (f.offset < 8)
        return bad(
            "the record's first 8 bytes (common fields) are not readable by a BPF program (the "
            "kernel keeps its pt_regs pointer there): use pid/tid/cpu");
      if (f.source == Source::kTpInt && f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8)
        return bad(fmt::format("an integer of {} bytes (1, 2, 4 or 8 can be read)", f.size));
      if (f.source == Source::kTpString && (f.size == 0 || f.size > kMaxStringKey))
        return bad(
            fmt::format("a char array of {} bytes (1..{} can be read)", f.size, kMaxStringKey));
      if (p.record_size != 0 &&
          f.offset + (f.source == Source::kTpDataLoc && !f.pointer ? 4 : f.size) > p.record_size)
        return bad(fmt::format("bytes [{}, {}) lie past the record's {} bytes", f.offset,
                               f.offset + f.size, p.record_size));
      break;
    case Source::kArg:
      if (!is_kprobe_family(p.kind) || is_return_probe(p.kind))
        return bad("arguments are read at a kprobe or uprobe entry");
      if (f.index > 5)
        return bad("only arg0..arg5 are passed in registers");
      break;
    case Source::kRetval:
      if (!is_return_probe(p.kind))
        return bad("retval is read at a kretprobe or uretprobe");
      break;
    case Source::kDuration:
      if (!exit_probe)
        return bad("duration exists on the latency stage's exit probe only");
      break;
    default:
      break;
  }
  return std::nullopt;
}

bool has_only_trailing_star(const std::string& s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '?' || c == '[' || (c == '*' && i + 1 != s.size()))
      return false;
  }
  return !s.empty() && s.back() == '*';
}

// The depth of the tree under `idx` (a cycle counts as too deep).
int filter_depth(const Filter& f, int idx, std::vector<int>& memo, std::vector<char>& state) {
  constexpr int kCycle = 1 << 20;
  const auto i = static_cast<std::size_t>(idx);
  if (state[i] == 1)
    return kCycle;
  if (state[i] == 2)
    return memo[i];
  state[i] = 1;
  const FilterNode& n = f.nodes[i];
  int d = 1;
  if (n.kind == FilterNode::Kind::kOr || n.kind == FilterNode::Kind::kAnd ||
      n.kind == FilterNode::Kind::kNot)
    d = 1 + filter_depth(f, n.lhs, memo, state);
  if (n.kind == FilterNode::Kind::kOr || n.kind == FilterNode::Kind::kAnd)
    d = std::max(d, 1 + filter_depth(f, n.rhs, memo, state));
  state[i] = 2;
  memo[i] = std::min(d, kCycle);
  return memo[i];
}

std::optional<std::string> check_filter(const ProbePlan& p, const Filter& f, bool exit_probe) {
  if (f.empty())
    return std::nullopt;
  if (f.nodes.size() > kMaxFilterNodes)
    return fmt::format("{}: the filter has {} nodes (at most {} go into the kernel)", where(p),
                       f.nodes.size(), kMaxFilterNodes);
  const auto n = static_cast<int>(f.nodes.size());
  if (f.root >= n)
    return fmt::format("{}: the filter's root is not a node", where(p));
  for (int i = 0; i < n; ++i) {
    const FilterNode& node = f.nodes[static_cast<std::size_t>(i)];
    const auto child_ok = [&](int c) { return c >= 0 && c < n && c != i; };
    switch (node.kind) {
      case FilterNode::Kind::kOr:
      case FilterNode::Kind::kAnd:
        if (!child_ok(node.lhs) || !child_ok(node.rhs))
          return fmt::format("{}: filter node {} has no operands", where(p), i);
        continue;
      case FilterNode::Kind::kNot:
        if (!child_ok(node.lhs))
          return fmt::format("{}: filter node {} has no operand", where(p), i);
        continue;
      case FilterNode::Kind::kTruth:
      case FilterNode::Kind::kCmp:
        break;
    }
    const bool cmp = node.kind == FilterNode::Kind::kCmp;
    for (const Operand* o : {&node.a, &node.b}) {
      if (o == &node.b && !cmp)
        break;
      if (o->kind == Operand::Kind::kField) {
        if (auto why = check_field(p, o->field, exit_probe))
          return why;
      } else if (o->kind == Operand::Kind::kString) {
        if (o->text.size() >= kMaxStringKey)
          return fmt::format("{}: the filter's string \"{}...\" is longer than {} bytes", where(p),
                             o->text.substr(0, 16), kMaxStringKey - 1);
        if (o->text.find('\0') != std::string::npos)
          return fmt::format("{}: the filter's string holds a NUL byte", where(p));
        if (o->glob && !has_only_trailing_star(o->text))
          return fmt::format(
              R"({}: the glob "{}" (only a prefix pattern such as "name*" runs in the kernel))",
              where(p), o->text);
      }
    }
    if (!cmp)
      continue;
    const auto type = [](const Operand& o) {
      switch (o.kind) {
        case Operand::Kind::kField:
          return type_of(o.field);
        case Operand::Kind::kInt:
          return VType::kInt;
        case Operand::Kind::kUint:
          return VType::kUint;
        case Operand::Kind::kString:
          return VType::kString;
      }
      return VType::kNone;
    };
    const VType ta = type(node.a), tb = type(node.b);
    if (ta == VType::kStack || tb == VType::kStack)
      return fmt::format("{}: the filter reads a stack (stacks are keys, not compared)", where(p));
    if (ta == VType::kNone || tb == VType::kNone)
      continue;  // a missing field: the comparison is false
    const bool sa = ta == VType::kString, sb = tb == VType::kString;
    if (sa != sb)
      return fmt::format("{}: the filter compares a string with a number", where(p));
    if (!sa)
      continue;
    if (node.op != Cmp::kEq && node.op != Cmp::kNe)
      return fmt::format("{}: the filter orders strings (only == and != run in the kernel)",
                         where(p));
    const bool la = node.a.kind == Operand::Kind::kString,
               lb = node.b.kind == Operand::Kind::kString;
    if (la == lb)
      return fmt::format(
          "{}: the filter compares two string {} (a string field compares with a literal in the "
          "kernel)",
          where(p), la ? "literals" : "fields");
  }
  std::vector<int> memo(f.nodes.size(), 0);
  std::vector<char> state(f.nodes.size(), 0);
  if (filter_depth(f, f.root, memo, state) > kMaxFilterDepth)
    return fmt::format("{}: the filter nests deeper than {} (or loops)", where(p), kMaxFilterDepth);
  return std::nullopt;
}

// The storage of one key column, merged over the probes that aggregate.
struct ColumnPlan {
  KeyColumn col;
  VType type = VType::kNone;
  std::uint32_t align = 1;
  bool any_missing = false;
};

std::uint32_t int_storage(const Field& f) {
  switch (f.source) {
    case Source::kPid:
    case Source::kTid:
    case Source::kCpu:
    case Source::kUid:
    case Source::kGid:
      return 4;
    case Source::kTpInt:
      return f.size;
    default:
      return 8;
  }
}

std::uint32_t string_storage(const Field& f, const Aggregation& a) {
  switch (f.source) {
    case Source::kComm:
      return kCommLen;
    case Source::kTpString:
      return f.size;
    case Source::kTpDataLoc:
      return a.string_key_bytes;
    case Source::kProbe:
      return 4;  // the probe's index
    default:
      return 0;
  }
}

bool aggregates(Role r) {
  return r != Role::kLatencyEntry;
}

// Columns of the key, or the reason they cannot be laid out.
Result<std::vector<ColumnPlan>> plan_columns(const KernelPlan& plan) {
  const Aggregation& agg = plan.aggregation;
  std::vector<ColumnPlan> cols(agg.key_names.size());
  for (std::size_t c = 0; c < cols.size(); ++c) {
    ColumnPlan& cp = cols[c];
    cp.col.name = agg.key_names[c];
    bool first = true;
    std::uint32_t int_size = 0;
    bool int_signed = false, same_int = true;
    for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
      if (!aggregates(role_of(plan, i)))
        continue;
      const ProbePlan& p = plan.probes[i];
      const Field& f = p.keys[c];
      const VType t = type_of(f);
      if (t == VType::kNone) {
        cp.any_missing = true;
        continue;
      }
      const bool is_probe = f.source == Source::kProbe;
      if (t == VType::kStack) {
        if (!first && (cp.type != t || cp.col.stack != f.source))
          return fail(EINVAL, fmt::format("key '{}' is a different stack on {} ({})", cp.col.name,
                                          where(p), f.name));
        cp.type = t;
        cp.col.stack = f.source;
        first = false;
        continue;
      }
      if (first) {
        cp.type = t;
        cp.col.probe_name = is_probe;
        cp.col.syscall_id = f.syscall_id;
        int_size = t == VType::kString ? 0 : int_storage(f);
        int_signed = f.source == Source::kTpInt ? f.is_signed : t == VType::kInt;
        first = false;
      } else if (t != cp.type || is_probe != cp.col.probe_name ||
                 f.syscall_id != cp.col.syscall_id) {
        return fail(EINVAL, fmt::format("key '{}' has different types on the probes (on {}: {})",
                                        cp.col.name, where(p), f.name));
      }
      if (t == VType::kString) {
        if (!is_probe)
          cp.col.size = std::max(cp.col.size, string_storage(f, agg));
      } else if (int_storage(f) != int_size ||
                 (f.source == Source::kTpInt ? f.is_signed : t == VType::kInt) != int_signed) {
        same_int = false;
      }
    }
    switch (cp.type) {
      case VType::kStack:  // {kernel hash, user hash, tgid, 0}
        cp.col.type = KeyColumn::Type::kStack;
        cp.col.size = 24;
        cp.align = 8;
        break;
      case VType::kNone:  // no probe has it: every key cell is none
        cp.col.type = KeyColumn::Type::kInt;
        cp.col.size = 1;
        cp.align = 1;
        break;
      case VType::kString:
        if (cp.col.probe_name) {
          cp.col.type = KeyColumn::Type::kString;
          cp.col.size = 4;
          cp.col.is_signed = false;
          cp.align = 4;
        } else {
          cp.col.type = KeyColumn::Type::kString;
          cp.align = 1;
        }
        break;
      case VType::kInt:
      case VType::kUint:
        cp.col.type = cp.type == VType::kInt ? KeyColumn::Type::kInt : KeyColumn::Type::kUint;
        cp.col.size = same_int ? int_size : 8;
        cp.col.is_signed = same_int ? int_signed : cp.type == VType::kInt;
        cp.align = cp.col.size;
        break;
    }
  }
  return cols;
}

}  // namespace

std::optional<std::string> check(const KernelPlan& plan) {
  const Aggregation& agg = plan.aggregation;
  if (plan.probes.empty())
    return "no probe";
  if (plan.probes.size() > kMaxProbes)
    return fmt::format("{} probes (at most {} in one program)", plan.probes.size(), kMaxProbes);
  if (plan.latency) {
    const Latency& l = *plan.latency;
    if (l.entry_probe >= plan.probes.size() || l.exit_probe >= plan.probes.size())
      return "latency: the entry or exit probe is not one of the plan's";
    if (l.entry_probe == l.exit_probe)
      return "latency: the entry and the exit are the same probe";
    if (l.max_pending == 0)
      return "latency: max_pending must be positive";
  }
  if (agg.max_keys == 0)
    return "max_keys must be positive";
  if (agg.max_stacks == 0)
    return "max_stacks must be positive";
  if (agg.stack_depth == 0 || agg.stack_depth > kMaxStackDepth)
    return fmt::format("stack depth {} (1..{} frames)", agg.stack_depth, kMaxStackDepth);
  if (agg.string_key_bytes == 0 || agg.string_key_bytes > kMaxStringKey)
    return fmt::format("string_key_bytes {} (1..{})", agg.string_key_bytes, kMaxStringKey);
  if (agg.kind == AggKind::kLhist) {
    if (agg.lhist_step <= 0)
      return "lhist: step must be positive";
    if (agg.lhist_max <= agg.lhist_min)
      return "lhist: max must be above min";
    const std::uint64_t buckets = std::uint64_t{lhist_inner(agg)} + 2;
    if (buckets * 8 > kMaxValueSize)
      return fmt::format(
          "lhist: {} buckets per key (at most {} fit in a BPF map value): raise step or narrow "
          "[min, max)",
          buckets, kMaxValueSize / 8);
  }
  bool any_value = !needs_value(agg.kind);
  for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
    const ProbePlan& p = plan.probes[i];
    const Role role = role_of(plan, i);
    const bool exit_probe = role == Role::kLatencyExit;
    if (auto why = check_filter(p, p.probe_filter, false))
      return why;
    if (auto why = check_filter(p, p.filter, false))
      return why;
    if (role == Role::kLatencyEntry || exit_probe) {
      if (auto why = check_field(p, p.latency_key, false))
        return why;
      const VType t = type_of(p.latency_key);
      if (t != VType::kInt && t != VType::kUint)
        return fmt::format("{}: latency key '{}' is not an integer (tid, pid or an integer field)",
                           where(p), p.latency_key.name);
    }
    if (!aggregates(role))
      continue;
    if (auto why = check_filter(p, p.post_filter, exit_probe))
      return why;
    if (p.keys.size() != agg.key_names.size())
      return fmt::format("{}: {} key sources for {} keys", where(p), p.keys.size(),
                         agg.key_names.size());
    for (const Field& k : p.keys) {
      if (auto why = check_field(p, k, exit_probe))
        return why;
    }
    if (needs_value(agg.kind)) {
      const VType t = type_of(p.value);
      if (t == VType::kString || t == VType::kStack)
        return fmt::format("{}: {} of '{}', a {}", where(p), agg_name(agg.kind), p.value.name,
                           t == VType::kString ? "string" : "stack");
      if (t != VType::kNone) {
        if (auto why = check_field(p, p.value, exit_probe))
          return why;
        any_value = true;
      }
    }
  }
  if (!any_value)
    return fmt::format("{}: no probe has the field '{}'", agg_name(agg.kind), agg.value_name);
  auto cols = plan_columns(plan);
  if (!cols)
    return cols.error().message;
  std::uint32_t key = 1;  // the missing byte, at most
  for (const auto& c : *cols)
    key += c.col.size + 7;
  if (key > kMaxKeySize)
    return fmt::format("the key is {} bytes (at most {} on the BPF stack): lower string_key_bytes",
                       key, kMaxKeySize);
  return std::nullopt;
}

namespace {

// ---------------------------------------------------------------------------------------------
// generate

Layout make_layout(const KernelPlan& plan,
                   const std::vector<ColumnPlan>& cols_in,
                   std::uint32_t cpus) {
  const Aggregation& agg = plan.aggregation;
  Layout l;
  l.probes = static_cast<std::uint32_t>(plan.probes.size());
  l.keyless = cols_in.empty();
  if (!l.keyless) {
    // Keys known from the probe alone when the target is one constant process: its pid.
    bool known = true;
    for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
      if (!aggregates(role_of(plan, i)))
        continue;
      for (const Field& f : plan.probes[i].keys) {
        known = known && (f.source == Source::kProbe || f.source == Source::kMissing ||
                          (f.source == Source::kPid && plan.tgids.size() == 1));
      }
    }
    l.by_probe = known && !plan.follow_children;
    l.own_slot = known && plan.follow_children;
  }
  // Widest alignment first: every integer at a multiple of its size, strings after them.
  std::vector<std::size_t> order(cols_in.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  // Widest first, written order among equals (std::sort with the index as tie-break: libstdc++'s
  // stable_sort uses the deprecated get_temporary_buffer).
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (cols_in[a].align != cols_in[b].align)
      return cols_in[a].align > cols_in[b].align;
    return a < b;
  });
  std::uint32_t at = 0, max_align = 1;
  bool any_missing = false, any_string = false;
  for (const std::size_t i : order) {
    const ColumnPlan& cp = cols_in[i];
    at = (at + cp.align - 1) / cp.align * cp.align;
    max_align = std::max(max_align, cp.align);
    any_missing = any_missing || cp.any_missing;
    any_string = any_string || (cp.type == VType::kString && !cp.col.probe_name);
    l.stacks = l.stacks || cp.type == VType::kStack;
    at += cp.col.size;
  }
  l.columns.resize(cols_in.size());
  at = 0;
  int bit = 0;
  for (const std::size_t i : order) {
    const ColumnPlan& cp = cols_in[i];
    at = (at + cp.align - 1) / cp.align * cp.align;
    KeyColumn c = cp.col;
    c.offset = at;
    if (cp.any_missing)
      c.missing_bit = bit++;
    at += c.size;
    l.columns[i] = c;
  }
  if (any_missing) {
    l.missing_offset = at;
    at += 1;  // up to 8 bits: checked by generate()
  }
  l.key_size =
      l.keyless ? 4 : std::max<std::uint32_t>(1, (at + max_align - 1) / max_align * max_align);
  switch (agg.kind) {
    case AggKind::kCount:
      l.value_size = 8;
      break;
    case AggKind::kSum:
    case AggKind::kMin:
    case AggKind::kMax:
    case AggKind::kAvg:
      l.value_size = 16;
      break;
    case AggKind::kHist:
      l.buckets = kHistBuckets;
      l.value_size = 8 * l.buckets;
      break;
    case AggKind::kLhist:
      l.lhist_inner = lhist_inner(agg);
      l.buckets = l.lhist_inner + 2;
      l.value_size = 8 * l.buckets;
      break;
    case AggKind::kQuantiles:
      // ~30 KiB a key: a per-CPU value fits the per-CPU allocator's unit (32 KiB); the shared
      // hash allocates keys as they come (BPF_F_NO_PREALLOC), not max_keys of them up front.
      l.buckets = kQuantileBuckets;
      l.value_size = 8 * l.buckets + 16;
      break;
  }
  const std::uint64_t percpu_bytes = 2ULL * ((std::uint64_t{l.value_size} + 7) / 8 * 8) * cpus *
                                     (l.keyless    ? 1
                                      : l.by_probe ? l.probes
                                                   : agg.max_keys);
  // String keys are wide and many: one shared value per key, updated atomically. Fixed-width
  // keys: a value per CPU, updated without atomics, unless that preallocates too much.
  l.percpu = !any_string && percpu_bytes <= kPercpuPreallocBudget;
  return l;
}

// A tiny C text writer with indentation.
class Writer {
 public:
  template <typename... Args>
  void line(fmt::format_string<Args...> f, Args&&... args) {
    out_.append(static_cast<std::size_t>(indent_), '\t');
    out_ += fmt::format(f, std::forward<Args>(args)...);
    out_ += '\n';
  }
  void raw(std::string_view text) { out_ += text; }
  void blank() { out_ += '\n'; }
  void in() { ++indent_; }
  void out() { --indent_; }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  std::string out_;
  int indent_ = 0;
};

/// `target = max(target, e)`: plainly (a per-CPU value of a program that does not nest) or by
/// a bounded compare-and-swap loop (a shared value), its give-ups counted as `contended`.
void emit_raise(Writer& w,
                std::string_view target,
                std::string_view e,
                bool cas,
                std::string_view inc) {
  if (cas) {
    w.line("__u64 old = {};", target);
    w.line("int i;");
    w.line("for (i = 0; i < 64 && {} > old; i++) {{", e);
    w.line("\t__u64 seen = __sync_val_compare_and_swap(&{}, old, {});", target, e);
    w.line("\tif (seen == old)");
    w.line("\t\tbreak;");
    w.line("\told = seen;");
    w.line("}}");
    w.line("if (i == 64)");
    w.line("\t{}(&st->contended);", inc);
  } else {
    w.line("if ({} > {})", e, target);
    w.line("\t{} = {};", target, e);
  }
}

constexpr std::string_view kPrelude =
    R"C(/* Types and constants of the kernel ABI this program uses (linux/bpf.h, the x86-64
 * pt_regs layout): spelled out so that clang does not parse vmlinux.h or system headers. */
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1 };
enum { BPF_F_NO_PREALLOC = 1 };
#define TR_EEXIST 17
#define TR_EFAULT 14
#define TR_F_USER_STACK (1ULL << 8) /* BPF_F_USER_STACK */
#include <bpf/bpf_helpers.h>

#if !defined(__TARGET_ARCH_x86)
#error "generated for x86-64 (pt_regs layout)"
#endif
/* arch/x86/include/uapi/asm/ptrace.h struct pt_regs (x86-64): PT_REGS_PARM1..6 are di si dx cx
 * r8 r9, PT_REGS_RC is ax. */
struct tr_pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip,
		cs, flags, sp, ss;
};

char LICENSE[] SEC("license") = "GPL";

)C";

constexpr const char* kArgRegs[] = {"di", "si", "dx", "cx", "r8", "r9"};

std::string c_int_type(std::uint32_t size, bool is_signed) {
  return fmt::format("__{}{}", is_signed ? 's' : 'u', size * 8);
}

// The generator of one probe's program: field reads as C expressions, locals declared once.
class ProbeGen {
 public:
  ProbeGen(const KernelPlan& plan, const Layout& layout, std::uint32_t index, Writer& w)
      : plan_(plan), layout_(layout), p_(plan.probes[index]), index_(index), w_(w) {}

  void emit(const std::string& fn, bool tgid_map) {
    const Role role = role_of(plan_, index_);
    const bool kp = is_kprobe_family(p_.kind);
    w_.line("SEC(\"{}\")", p_.kind == ProbeKind::kPerfEvent ? "perf_event"
                           : kp                             ? "kprobe"
                                                            : "tracepoint");
    w_.line("int {}(void *ctx)", fn);
    w_.line("{{");
    w_.in();
    w_.line("__u64 tr_pid_tgid = bpf_get_current_pid_tgid();");
    w_.line("__u32 tr_tgid = tr_pid_tgid >> 32;");
    if (plan_.arm_on_exec && !plan_.tgids.empty()) {
      // The first target (a command) counts from its exec on; its children and the other
      // targets are in tr_tgids.
      w_.line("if (tr_tgid == {}u) {{ /* the command, once it exec'd */", plan_.tgids[0]);
      w_.line("	if (!*(volatile __u32 *)&tr_armed)");
      w_.line("		{}", ret());
      if (tgid_map) {
        w_.line("}} else if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid)) {{");
      } else {
        w_.line("}} else {{");
      }
      w_.line("	{}", ret());
      w_.line("}}");
    } else if (tgid_map && !plan_.tgids.empty()) {
      // The first target (the command or pid) is a constant: its events skip the map lookup;
      // its children and the other targets are in tr_tgids.
      w_.line("if (tr_tgid != {}u && !bpf_map_lookup_elem(&tr_tgids, &tr_tgid))", plan_.tgids[0]);
      w_.line("\t{}", ret());
    } else if (tgid_map) {
      w_.line("if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid))");
      w_.line("\t{}", ret());
    } else if (plan_.tgids.size() == 1) {
      w_.line("if (tr_tgid != {}u) /* the target process */", plan_.tgids[0]);
      w_.line("\t{}", ret());
    } else if (plan_.tgids.empty() && plan_.exclude_tgid != 0) {
      w_.line("if (tr_tgid == {}u) /* tracer itself */", plan_.exclude_tgid);
      w_.line("\t{}", ret());
    }
    // The strings the filters and keys read, each copied once (at its largest size): those of
    // the first filters before them, the others after them (a rejected event does not pay for
    // them). Without a probe filter they are read after the hit is counted (fewer values live
    // across the stats lookup: a long string compare then fits the 512-byte BPF stack).
    const auto collect_all = [&] {
      collect_strings(p_.probe_filter, /*early=*/true);
      collect_strings(p_.filter, /*early=*/true);
      if (aggregates(role)) {
        collect_strings(p_.post_filter, false);
        for (const Field& k : p_.keys)
          use_string(k, plan_.aggregation.string_key_bytes, false);
      }
    };
    if (!p_.probe_filter.empty()) {
      collect_all();
      load_strings(/*early_only=*/true);
      emit_filter(p_.probe_filter);  // not one of the probe's events: not a hit either
    }
    w_.line("__u32 tr_slot = {};", index_);
    w_.line("struct tr_stats *tr_st = bpf_map_lookup_elem(&tr_stats, &tr_slot);");
    w_.line("if (!tr_st)");
    w_.line("\t{}", ret());
    w_.line("TR_INC{}(&tr_st->hits);", atomic_suffix());
    // A `char *` string read before the stats (by the probe filter) that failed: counted now.
    stats_ready_ = true;
    for (const auto& [off, b] : data_loc_) {
      if (b.pointer && b.loaded)
        count_fault(off);
    }
    if (role != Role::kAggregate) {
      w_.line("__u64 tr_now = bpf_ktime_get_ns();");
    }
    if (aggregates(role)) {
      w_.line(
          "/* Read once: every update of this event goes to one generation (the flip's grace "
          "period, bpf/kernel_reader.cpp). */");
      w_.line("__u32 tr_g = *(volatile __u32 *)&tr_gen;");
    }
    if (p_.probe_filter.empty()) {
      collect_all();
      load_strings(/*early_only=*/true);
    }
    emit_filter(p_.filter);
    load_strings(false);
    if (role == Role::kLatencyEntry) {
      emit_entry();
      w_.line("{}", ret());
      w_.out();
      w_.line("}}");
      w_.blank();
      return;
    }
    if (role == Role::kLatencyExit)
      emit_exit();
    emit_filter(p_.post_filter);
    emit_aggregate();
    w_.line("{}", ret());
    w_.out();
    w_.line("}}");
    w_.blank();
  }

  // Whether counters and values of this program need atomic adds: a uprobe's program runs
  // preemptibly (migrate_disable only: bpf_prog_run_array_uprobe), so two tasks on one CPU can
  // interleave in it; tracepoint and kprobe programs run with preemption off and
  // bpf_prog_active keeps them from nesting on a CPU.
  [[nodiscard]] std::string_view atomic_suffix() const {
    return is_uprobe(p_.kind) ? "_ATOMIC" : "";
  }

  // What the program returns: 1 keeps the event's own perf sample (a tracepoint's or a probe's
  // other perf events, other tools' too, still get it); a perf event's program returns 0, so
  // that its samples, aggregated here, are not also written to the event's ring.
  [[nodiscard]] std::string_view ret() const {
    return p_.kind == ProbeKind::kPerfEvent && !p_.keep_samples ? "return 0;" : "return 1;";
  }

 private:
  std::string ctx_at(std::uint32_t off) const { return fmt::format("((char *)ctx + {})", off); }

  // An integer expression (and whether it is signed); nullopt for strings and missing fields.
  struct IntExpr {
    std::string text;
    bool is_signed = false;
  };
  std::optional<IntExpr> int_expr(const Field& f) const {
    switch (f.source) {
      case Source::kPid:
        return IntExpr{"(__s64)tr_tgid", true};
      case Source::kTid:
        return IntExpr{"(__s64)(__u32)tr_pid_tgid", true};
      case Source::kCpu:
        return IntExpr{"(__s64)bpf_get_smp_processor_id()", true};
      case Source::kUid:
        return IntExpr{"(__u64)(__u32)bpf_get_current_uid_gid()", false};
      case Source::kGid:
        return IntExpr{"(__u64)(bpf_get_current_uid_gid() >> 32)", false};
      case Source::kCgroup:
        return IntExpr{"(__u64)bpf_get_current_cgroup_id()", false};
      case Source::kArg:
        return IntExpr{fmt::format("(__u64)((struct tr_pt_regs *)ctx)->{}", kArgRegs[f.index]),
                       false};
      case Source::kRetval:
        return IntExpr{"(__s64)((struct tr_pt_regs *)ctx)->ax", true};
      case Source::kDuration:
        return IntExpr{"tr_duration", false};
      case Source::kTpInt: {
        const std::string t = c_int_type(f.size, f.is_signed);
        // tp_prog_is_valid_access: constant offsets >= 8, aligned to the access size. A
        // misaligned field (packed records) is copied out with the helper.
        if (f.offset % f.size == 0)
          return IntExpr{fmt::format("({})*(volatile {} *){}", f.is_signed ? "__s64" : "__u64", t,
                                     ctx_at(f.offset)),
                         f.is_signed};
        return IntExpr{
            fmt::format("({})tr_read_{}({})", f.is_signed ? "__s64" : "__u64", t, ctx_at(f.offset)),
            f.is_signed};
      }
      default:
        return std::nullopt;
    }
  }

  // Strings: comm and __data_loc fields are copied to the stack once; char arrays are read in
  // place.
  void use_string(const Field& f, std::uint32_t bytes, bool early) {
    if (f.source == Source::kComm) {
      comm_ = true;
      comm_early_ = comm_early_ || early;
    } else if (f.source == Source::kTpDataLoc) {
      auto& b = data_loc_[f.offset];
      b.bytes = std::min(kMaxStringKey, std::max(b.bytes, bytes));
      b.rel = f.rel_loc;
      b.pointer = f.pointer;
      b.user = f.user;
      b.early = b.early || early;
    }
  }
  void collect_strings(const Filter& f, bool early) {
    for (const FilterNode& n : f.nodes) {
      for (const Operand* o : {&n.a, &n.b}) {
        if (o->kind != Operand::Kind::kField)
          continue;
        const Operand& other = o == &n.a ? n.b : n.a;
        // Equality needs the literal, the NUL after it, and one byte more (string_eq).
        const auto need = static_cast<std::uint32_t>(
            other.kind == Operand::Kind::kString ? other.text.size() + 2 : 2);
        use_string(o->field, need, early);
      }
    }
  }
  void load_strings(bool early_only) {
    if (comm_ && !comm_loaded_ && (comm_early_ || !early_only)) {
      w_.line("char tr_comm[16] = {{}};");
      w_.line("bpf_get_current_comm(tr_comm, sizeof(tr_comm));");
      w_.line("if ((__u32)tr_pid_tgid == 0) /* the idle tasks, named as perf and user space do */");
      w_.line("\t__builtin_memcpy(tr_comm, \"swapper\\0\\0\\0\\0\\0\\0\\0\\0\", 16);");
      comm_loaded_ = true;
    }
    for (auto& [off, b] : data_loc_) {
      if (b.loaded || (early_only && !b.early))
        continue;
      b.loaded = true;
      if (b.pointer) {
        // A `char *` field: the string it points to, with its length (NUL included) as
        // __data_loc's; a string longer than the copy reads as the copy's size (cut).
        // One byte more than the string's room: a string that fills it is longer (cut).
        w_.line("char tr_s{}[{}] = {{}};", off, b.bytes + 1);
        w_.line(
            "long tr_r{} = bpf_probe_read_{}_str(tr_s{}, sizeof(tr_s{}), "
            "(const void *)*(volatile __u64 *){});",
            off, b.user ? "user" : "kernel", off, off, ctx_at(off));
        w_.line("__u32 tr_len{} = tr_r{} > 0 ? (__u32)tr_r{} : 0;", off, off, off);
        if (stats_ready_)
          count_fault(off);
        continue;
      }
      // __data_loc: u32 (len << 16 | offset from the record's start); __rel_loc: the offset
      // counts from the end of the field.
      w_.line("char tr_s{}[{}] = {{}};", off, b.bytes);
      w_.line("__u32 tr_loc{} = *(volatile __u32 *){};", off, ctx_at(off));
      w_.line("__u32 tr_len{} = tr_loc{} >> 16;", off, off);
      w_.line(
          "bpf_probe_read_kernel_str(tr_s{}, sizeof(tr_s{}), (char *)ctx + {}(tr_loc{} & 0xffff));",
          off, off, b.rel ? fmt::format("{} + ", off + 4) : "", off);
    }
  }

  // A byte of a string field at `i`, as a C expression.
  std::string byte_at(const Field& f, std::uint32_t i) const {
    switch (f.source) {
      case Source::kComm:
        return fmt::format("(__u8)tr_comm[{}]", i);
      case Source::kTpDataLoc:
        return fmt::format("(__u8)tr_s{}[{}]", f.offset, i);
      case Source::kTpString:
        return fmt::format("*(volatile __u8 *){}", ctx_at(f.offset + i));
      default:
        return "0";
    }
  }
  std::uint32_t string_bytes(const Field& f) const {
    switch (f.source) {
      case Source::kComm:
        return kCommLen;
      case Source::kTpDataLoc:
        return data_loc_.at(f.offset).bytes;
      case Source::kTpString:
        return f.size;
      default:
        return 0;
    }
  }

  // `field == literal` (a prefix when `prefix`), as the user-space filter reads the field: up
  // to its first NUL within its bytes.
  std::string string_eq(const Field& f, const std::string& lit, bool prefix) const {
    if (f.source == Source::kProbe) {
      const bool eq = prefix ? p_.name.starts_with(lit) : p_.name == lit;
      return eq ? "1" : "0";
    }
    const std::uint32_t n = string_bytes(f);
    const auto len = static_cast<std::uint32_t>(lit.size());
    // comm (at most 15 characters) ends with a NUL within its 16 bytes; a char array may fill
    // its bytes. A __data_loc copy holds at least len + 2 bytes (collect_strings), so a NUL at
    // [len] is the string's own, not the one bpf_probe_read_kernel_str ends a cut copy with.
    std::uint32_t room = n;
    if (f.source == Source::kComm)
      room = n - 1;
    else if (f.source == Source::kTpDataLoc)
      room = n >= 2 ? n - 2 : 0;
    if (len > room)
      return "0";
    std::string out = "(1";
    if (f.source == Source::kTpDataLoc)  // the field's own length (NUL included, if any)
      out += fmt::format(" && tr_len{} >= {}", f.offset, len);
    for (std::uint32_t i = 0; i < len; ++i)
      out += fmt::format(" && {} == {}", byte_at(f, i), static_cast<unsigned char>(lit[i]));
    if (!prefix && len < n) {
      if (f.source == Source::kTpDataLoc)
        out += fmt::format(" && (tr_len{} == {} || {} == 0)", f.offset, len, byte_at(f, len));
      else
        out += fmt::format(" && {} == 0", byte_at(f, len));
    }
    out += ")";
    return out;
  }

  std::string cond(const Filter& f, int idx, int depth = 0) const {
    const FilterNode& n = f.nodes[static_cast<std::size_t>(idx)];
    if (depth > 64)
      return "0";
    switch (n.kind) {
      case FilterNode::Kind::kOr:
        return fmt::format("({} || {})", cond(f, n.lhs, depth + 1), cond(f, n.rhs, depth + 1));
      case FilterNode::Kind::kAnd:
        return fmt::format("({} && {})", cond(f, n.lhs, depth + 1), cond(f, n.rhs, depth + 1));
      case FilterNode::Kind::kNot:
        return fmt::format("!{}", cond(f, n.lhs, depth + 1));
      case FilterNode::Kind::kTruth:
        return truth(n.a);
      case FilterNode::Kind::kCmp:
        return compare(n);
    }
    return "0";
  }

  std::string truth(const Operand& o) const {
    switch (o.kind) {
      case Operand::Kind::kInt:
        return o.ival != 0 ? "1" : "0";
      case Operand::Kind::kUint:
        return o.uval != 0 ? "1" : "0";
      case Operand::Kind::kString:
        return o.text.empty() ? "0" : "1";
      case Operand::Kind::kField:
        break;
    }
    if (auto e = int_expr(o.field))
      return fmt::format("({} != 0)", e->text);
    if (o.field.source == Source::kProbe)
      return p_.name.empty() ? "0" : "1";
    if (type_of(o.field) == VType::kString)
      return fmt::format("({} != 0)", byte_at(o.field, 0));
    return "0";  // missing
  }

  std::optional<IntExpr> int_operand(const Operand& o) const {
    switch (o.kind) {
      case Operand::Kind::kInt:
        return IntExpr{
            o.ival == INT64_MIN ? "(-0x7fffffffffffffffLL - 1)" : fmt::format("{}LL", o.ival),
            true};
      case Operand::Kind::kUint:
        return IntExpr{fmt::format("{}ULL", o.uval), false};
      case Operand::Kind::kString:
        return std::nullopt;
      case Operand::Kind::kField:
        return int_expr(o.field);
    }
    return std::nullopt;
  }

  std::string compare(const FilterNode& n) const {
    static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    const std::string_view op = kOps[static_cast<std::size_t>(n.op)];
    const bool sa = n.a.kind == Operand::Kind::kString ||
                    (n.a.kind == Operand::Kind::kField && type_of(n.a.field) == VType::kString);
    const bool sb = n.b.kind == Operand::Kind::kString ||
                    (n.b.kind == Operand::Kind::kField && type_of(n.b.field) == VType::kString);
    if (sa && sb) {
      const bool lit_b = n.b.kind == Operand::Kind::kString;
      const Operand& field = lit_b ? n.a : n.b;
      const Operand& lit = lit_b ? n.b : n.a;
      const bool prefix = lit.glob;
      const std::string text = prefix ? lit.text.substr(0, lit.text.size() - 1) : lit.text;
      const std::string eq = string_eq(field.field, text, prefix);
      return n.op == Cmp::kEq ? eq : fmt::format("!{}", eq);
    }
    const auto a = int_operand(n.a), b = int_operand(n.b);
    if (!a || !b)
      return "0";  // a missing field, or a string against a number: false
    if (a->is_signed == b->is_signed) {
      const std::string_view t = a->is_signed ? "__s64" : "__u64";
      return fmt::format("(({}){} {} ({}){})", t, a->text, op, t, b->text);
    }
    // Mixed signedness compares by value (the user-space filter widens both to 128 bits): a
    // negative signed side is below every unsigned value.
    if (a->is_signed) {
      const bool below = n.op == Cmp::kNe || n.op == Cmp::kLt || n.op == Cmp::kLe;
      return fmt::format("(({}) < 0 ? {} : ((__u64)({}) {} {}))", a->text, below ? 1 : 0, a->text,
                         op, b->text);
    }
    const bool above = n.op == Cmp::kNe || n.op == Cmp::kGt || n.op == Cmp::kGe;
    return fmt::format("(({}) < 0 ? {} : ({} {} (__u64)({})))", b->text, above ? 1 : 0, a->text, op,
                       b->text);
  }

  void emit_filter(const Filter& f) {
    if (f.empty())
      return;
    w_.line("if (!{})", cond(f, f.root));
    w_.line("\t{}", ret());
  }

  std::string latency_key() const {
    const auto e = int_expr(p_.latency_key);
    return e ? fmt::format("(__u64){}", e->text) : "0";
  }

  void emit_entry() {
    // plugins/stages/latency.cpp: an entry replaces a pending one (counted as an unmatched
    // entry); the pending map's exits take and delete.
    w_.line("__u32 tr_pslot = {};", plan_.probes.size());
    w_.line("struct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
    w_.line("if (!tr_ps)");
    w_.line("\t{}", ret());
    w_.line("__u64 tr_lk = {};", latency_key());
    w_.line("__u64 *tr_start_at = bpf_map_lookup_elem(&tr_start, &tr_lk);");
    w_.line("if (tr_start_at) {{");
    w_.line("\tTR_INC{}(&tr_ps->unmatched_entries);", atomic_suffix());
    w_.line("\t*tr_start_at = tr_now;");
    w_.line("}} else if (bpf_map_update_elem(&tr_start, &tr_lk, &tr_now, BPF_ANY) != 0) {{");
    w_.line("\tTR_INC{}(&tr_ps->entries_dropped);", atomic_suffix());
    w_.line("}}");
  }

  void emit_exit() {
    w_.line("__u32 tr_pslot = {};", plan_.probes.size());
    w_.line("struct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
    w_.line("if (!tr_ps)");
    w_.line("\t{}", ret());
    w_.line("__u64 tr_lk = {};", latency_key());
    w_.line("__u64 *tr_start_at = bpf_map_lookup_elem(&tr_start, &tr_lk);");
    w_.line("if (!tr_start_at) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->unmatched_exits);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("__u64 tr_begin = *tr_start_at;");
    w_.line("/* Whoever deletes the entry owns it (an exit racing on another CPU gets ENOENT). */");
    w_.line("if (bpf_map_delete_elem(&tr_start, &tr_lk) != 0) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->unmatched_exits);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("if (tr_now < tr_begin) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->out_of_order);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("TR_INC_ATOMIC(&tr_ps->paired);");
    w_.line("__u64 tr_duration = tr_now - tr_begin;");
  }

  void emit_key() {
    const Aggregation& agg = plan_.aggregation;
    if (layout_.keyless) {
      w_.line("__u32 tr_k = 0;");
      return;
    }
    if (layout_.by_probe) {
      w_.line("__u32 tr_k = {}; /* the key is this probe's (Layout::by_probe) */", index_);
      return;
    }
    w_.line("struct tr_key tr_k;");
    w_.line("__builtin_memset(&tr_k, 0, sizeof(tr_k));");
    for (std::size_t c = 0; c < layout_.columns.size(); ++c) {
      const KeyColumn& col = layout_.columns[c];
      const Field& f = p_.keys[c];
      const std::string member = fmt::format("tr_k.k{}", c);
      if (type_of(f) == VType::kNone) {
        w_.line("tr_k.missing |= {}; /* {}: not on this probe */", 1U << col.missing_bit, col.name);
        continue;
      }
      if (f.source == Source::kProbe) {
        w_.line("{} = {};", member, index_);
        continue;
      }
      if (type_of(f) == VType::kStack) {
        emit_stack(member, f.source);
        continue;
      }
      if (auto e = int_expr(f)) {
        w_.line("{} = ({}){};", member, c_int_type(col.size, col.is_signed), e->text);
        continue;
      }
      switch (f.source) {
        case Source::kComm:
          // bpf_get_current_comm wrote a NUL-terminated name into zeroed bytes.
          w_.line("__builtin_memcpy({}, tr_comm, {});", member, std::min(col.size, kCommLen));
          break;
        case Source::kTpString: {
          const std::uint32_t n = std::min(col.size, f.size);
          w_.line("bpf_probe_read_kernel({}, {}, {});", member, n, ctx_at(f.offset));
          w_.line("tr_zero_after_nul({}, {});", member, n);
          break;
        }
        case Source::kTpDataLoc: {
          const std::uint32_t cap = std::min(col.size, agg.string_key_bytes);
          const std::uint32_t have = data_loc_.at(f.offset).bytes;
          w_.line("__builtin_memcpy({}, tr_s{}, {});", member, f.offset, std::min(cap, have));
          w_.line("{}[{}] = 0;", member, std::min(cap, have) - 1);
          w_.line("if (tr_len{} > {})", f.offset, std::min(cap, have));
          w_.line("\tTR_INC{}(&tr_st->truncated);", atomic_suffix());
          break;
        }
        default:
          break;
      }
    }
  }

  // A stack key: the stack's 64-bit hash, the stack stored under it in tr_stacks (tr_stack_key).
  // No stack (a kernel thread's user stack, a user-mode sample's kernel stack) is hash 0, an
  // empty stack; one that does not fit the map is counted, not aggregated.
  void emit_stack(const std::string& member, Source source) {
    const bool kernel = source != Source::kUserStack, user = source != Source::kKernelStack;
    const auto get = [&](std::string_view part, std::string_view flags) {
      w_.line("if (tr_stack_key{}(ctx, {}, &{}.{}) != 0) {{", atomic_suffix(), flags, member, part);
      w_.line("\tTR_INC{}(&tr_st->stacks_lost);", atomic_suffix());
      w_.line("\t{}", ret());
      w_.line("}}");
    };
    if (kernel)
      get("kernel", "0");
    if (user) {
      get("user", "TR_F_USER_STACK");
      w_.line("{}.tgid = tr_tgid;", member);
    }
  }

  void emit_aggregate() {
    const Aggregation& agg = plan_.aggregation;
    std::string value = "0";
    if (needs_value(agg.kind)) {
      const auto e = int_expr(p_.value);
      if (!e) {
        w_.line("/* '{}' is not on this probe: its events are not aggregated */", agg.value_name);
        w_.line("{}", ret());
        return;
      }
      w_.line("__s64 tr_v = (__s64){};", e->text);
      value = "tr_v";
    }
    const std::string fn = fmt::format("tr_update{}", atomic_suffix());
    if (layout_.own_slot) {
      w_.line("if (tr_tgid == {}u) {{ /* the target itself: its slot (Layout::own_slot) */",
              plan_.tgids[0]);
      w_.line("\t__u32 tr_o = {};", index_);
      w_.line("\tif (tr_g & 1)");
      w_.line("\t\t{}(&tr_own1, &tr_o, {}, tr_st);", fn, value);
      w_.line("\telse");
      w_.line("\t\t{}(&tr_own0, &tr_o, {}, tr_st);", fn, value);
      w_.line("\t{}", ret());
      w_.line("}}");
    }
    emit_key();
    w_.line("if (tr_g & 1)");
    w_.line("\t{}(&tr_agg1, &tr_k, {}, tr_st);", fn, value);
    w_.line("else");
    w_.line("\t{}(&tr_agg0, &tr_k, {}, tr_st);", fn, value);
  }

  /// A `char *` string whose page was not in memory (the read fails: a tracepoint program
  /// cannot fault it in) reads as empty: counted, per probe, in tr_stats.read_faults.
  void count_fault(std::uint32_t off) {
    w_.line("if (tr_r{} < 0)", off);
    w_.line("\tTR_INC{}(&tr_st->read_faults);", atomic_suffix());
  }

  struct Buffer {
    std::uint32_t bytes = 1;
    bool rel = false;
    bool pointer = false, user = false;  // Field::pointer, Field::user
    bool early = false;                  // read by the first filter: copied before it
    bool loaded = false;
  };
  const KernelPlan& plan_;
  const Layout& layout_;
  const ProbePlan& p_;
  std::uint32_t index_;
  Writer& w_;
  bool comm_ = false, comm_early_ = false, comm_loaded_ = false;
  bool stats_ready_ = false;  // tr_st is looked up
  std::map<std::uint32_t, Buffer> data_loc_;
};

void emit_maps(const KernelPlan& plan, const Layout& l, bool tgid_map, Writer& w) {
  const Aggregation& agg = plan.aggregation;
  // Key.
  if (!l.keyless && !l.by_probe) {
    std::uint32_t align = 1;
    for (const auto& c : l.columns)
      align = std::max(align, c.type == KeyColumn::Type::kString && !c.probe_name ? 1U
                              : c.type == KeyColumn::Type::kStack                 ? 8U
                                                                                  : c.size);
    w.line("/* The key: packed, every integer at a multiple of its size, strings after them. */");
    w.line("struct tr_key {{");
    w.in();
    std::vector<std::size_t> order(l.columns.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return l.columns[a].offset < l.columns[b].offset;
    });
    for (const std::size_t i : order) {
      const KeyColumn& c = l.columns[i];
      if (c.type == KeyColumn::Type::kStack)
        w.line(
            "struct {{ __u64 kernel, user; __u32 tgid, pad; }} k{}; /* {}: hashes in tr_stacks */",
            i, c.name);
      else if (c.type == KeyColumn::Type::kString && !c.probe_name)
        w.line("char k{}[{}]; /* {} */", i, c.size, c.name);
      else
        w.line("{} k{}; /* {} */", c_int_type(c.size, c.is_signed), i, c.name);
    }
    if (l.missing_offset != 0 || std::any_of(l.columns.begin(), l.columns.end(),
                                             [](const KeyColumn& c) { return c.missing_bit >= 0; }))
      w.line("__u8 missing; /* bit per key column the probe lacks */");
    w.out();
    w.line("}} __attribute__((packed, aligned({})));", align);
    w.line("_Static_assert(sizeof(struct tr_key) == {}, \"key layout\");", l.key_size);
    for (std::size_t i = 0; i < l.columns.size(); ++i)
      w.line("_Static_assert(__builtin_offsetof(struct tr_key, k{}) == {}, \"key layout\");", i,
             l.columns[i].offset);
    w.blank();
  }
  // Value.
  w.line("struct tr_val {{");
  w.in();
  switch (agg.kind) {
    case AggKind::kCount:
      w.line("__u64 count;");
      break;
    case AggKind::kSum:
    case AggKind::kAvg:
      w.line("__u64 count;");
      w.line("__s64 v; /* the sum */");
      break;
    case AggKind::kMin:
    case AggKind::kMax:
      w.line("__u64 count;");
      w.line("__u64 v; /* the {} as TR_ORDER(v): the largest wins, 0 is none */",
             agg_name(agg.kind));
      break;
    case AggKind::kHist:
    case AggKind::kLhist:
      w.line("__u64 counts[{}];", l.buckets);
      break;
    case AggKind::kQuantiles:
      w.line("__u64 counts[{}];", l.buckets);
      w.line("__u64 vmin; /* ~min: the largest wins, 0 is none */");
      w.line("__u64 vmax; /* max + 1: the largest wins, 0 is none */");
      break;
  }
  w.out();
  w.line("}};");
  w.line("_Static_assert(sizeof(struct tr_val) == {}, \"value layout\");", l.value_size);
  w.blank();
  // What a new key starts from: zeros (a read-only global the helper copies into the map).
  // Arrays start zeroed too, so zero must mean "nothing yet" for every kind: min and max keep
  // an encoding of the value under which the largest wins and no value is 0.
  w.line("const struct tr_val tr_init SEC(\".rodata\");");
  if (agg.kind == AggKind::kMin || agg.kind == AggKind::kMax) {
    w.line(
        "/* min: INT64_MAX -> 0 ... INT64_MIN -> ~0; max: INT64_MIN -> 0 ... INT64_MAX -> ~0 "
        "(bpf/kernel_reader.cpp decodes). */");
    w.line("#define TR_ORDER(v) ((__u64)(v) ^ {:#x}ULL)", min_max_xor(agg.kind));
  }
  w.blank();
  // Aggregation maps, two generations.
  const bool array = l.keyless || l.by_probe;
  const std::string key_type = array ? "__u32" : "struct tr_key";
  std::string type;
  if (array) {
    type = l.percpu ? "BPF_MAP_TYPE_PERCPU_ARRAY" : "BPF_MAP_TYPE_ARRAY";
  } else {
    type = l.percpu ? "BPF_MAP_TYPE_PERCPU_HASH" : "BPF_MAP_TYPE_HASH";
  }
  w.line("/* Two generations: programs update tr_agg<tr_gen & 1>; user space flips tr_gen, waits");
  w.line(" * a grace period, then reads and clears the other one. */");
  for (const char* name : kAggMaps) {
    w.line("struct {{");
    w.line("\t__uint(type, {});", type);
    w.line("\t__uint(max_entries, {});", l.keyless ? 1 : l.by_probe ? l.probes : agg.max_keys);
    w.line("\t__type(key, {});", key_type);
    w.line("\t__type(value, struct tr_val);");
    if (!array && agg.kind == AggKind::kQuantiles)
      w.line("\t__uint(map_flags, BPF_F_NO_PREALLOC);");
    w.line("}} {} SEC(\".maps\");", name);
  }
  if (l.own_slot) {
    w.line("/* The target's own events: a slot per probe, no hashing (Layout::own_slot). */");
    for (const char* name : kOwnMaps) {
      w.line("struct {{");
      w.line("\t__uint(type, {});", l.percpu ? "BPF_MAP_TYPE_PERCPU_ARRAY" : "BPF_MAP_TYPE_ARRAY");
      w.line("\t__uint(max_entries, {});", l.probes);
      w.line("\t__type(key, __u32);");
      w.line("\t__type(value, struct tr_val);");
      w.line("}} {} SEC(\".maps\");", name);
    }
  }
  w.line("__u32 tr_gen SEC(\".bss\");");
  if (plan.arm_on_exec)
    w.line("__u32 tr_armed SEC(\".data.tr_armed\") = 0; /* the command exec'd (tr_exec) */");
  w.blank();
  // Counters, per probe then the pipeline's slot.
  w.line("struct tr_stats {{");
  w.line(
      "\t__u64 hits, map_full, truncated, contended, paired, unmatched_exits, unmatched_entries,");
  w.line("\t\tout_of_order, entries_dropped, targets_dropped, stacks_lost, keys_added,");
  w.line("\t\tread_faults;");
  w.line("}};");
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);");
  w.line("\t__uint(max_entries, {});", plan.probes.size() + 1);
  w.line("\t__type(key, __u32);");
  w.line("\t__type(value, struct tr_stats);");
  w.line("}} {} SEC(\".maps\");", kStatsMap);
  w.blank();
  // The grace period: an update of a map-in-map waits for every running BPF program
  // (kernel/bpf/syscall.c maybe_wait_bpf_programs: synchronize_rcu).
  w.line("struct tr_sync_inner {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_ARRAY);");
  w.line("\t__uint(max_entries, 1);");
  w.line("\t__type(key, __u32);");
  w.line("\t__type(value, __u32);");
  w.line("}} {} SEC(\".maps\");", kSyncInnerMap);
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);");
  w.line("\t__uint(max_entries, 1);");
  w.line("\t__type(key, __u32);");
  w.line("\t__array(values, struct tr_sync_inner);");
  w.line("}} {} SEC(\".maps\") = {{ .values = {{ [0] = &{} }} }};", kSyncMap, kSyncInnerMap);
  w.blank();
  if (l.stacks) {
    w.line(
        "/* Stack keys: a stack is stored under its hash, never removed during the run. The map");
    w.line(
        " * is preallocated: a perf event's program runs in interrupt context, where allocating");
    w.line(" * a new element can fail. */");
    w.line("#define TR_STACK_DEPTH {}", agg.stack_depth);
    w.line("struct tr_stack {{");
    w.line("\t__u64 seq; /* the scratch buffer's writes (a uprobe's program is preemptible) */");
    w.line("\t__u64 ips[TR_STACK_DEPTH];");
    w.line("}};");
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);");
    w.line("\t__uint(max_entries, 1);");
    w.line("\t__type(key, __u32);");
    w.line("\t__type(value, struct tr_stack);");
    w.line("}} tr_scratch SEC(\".maps\");");
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
    w.line("\t__uint(max_entries, {});", agg.max_stacks);
    w.line("\t__type(key, __u64);");
    w.line("\t__uint(value_size, {});", agg.stack_depth * 8);
    w.line("}} {} SEC(\".maps\");", kStacksMap);
    w.blank();
  }
  if (tgid_map) {
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
    w.line("\t__uint(max_entries, {});", plan.max_tgids);
    w.line("\t__type(key, __u32);");
    w.line("\t__type(value, __u8);");
    w.line("}} {} SEC(\".maps\");", kTgidsMap);
    w.blank();
  }
  if (plan.latency) {
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
    w.line("\t__uint(max_entries, {});", plan.latency->max_pending);
    w.line("\t__type(key, __u64);");
    w.line("\t__type(value, __u64);");
    w.line("}} {} SEC(\".maps\");", kStartMap);
    w.blank();
  }
}

/// tr_stack_key (non-preemptible programs) and tr_stack_key_ATOMIC (uprobes, which may be
/// preempted by another task's run of them on the same CPU), as `want` says: the stack of this
/// event stored in tr_stacks under its 64-bit hash.
void emit_stack_helpers(const std::array<bool, 2>& want, Writer& w) {
  for (const bool guarded : {false, true}) {
    if (!want[guarded ? 1 : 0])
      continue;
    w.raw(
        guarded
            ? R"C(/* The same, for a preemptible program: the scratch buffer is per CPU, so another task's run
 * may write it between this one's writes and reads. Its counter is bumped before and after each
 * write; a run that sees another's bump in between lets its stack go (counted as lost), and
 * takes back the stack it stored from the buffer. */
static __always_inline int tr_stack_key_ATOMIC(void *ctx, __u64 flags, __u64 *key)
)C"
            : R"C(/* *key = the hash of this event's stack (bpf_get_stack: kernel, or user with
 * TR_F_USER_STACK), the stack stored under it; 0 for no stack. Nonzero: it could not be
 * stored (the map is full). */
static __always_inline int tr_stack_key(void *ctx, __u64 flags, __u64 *key)
)C");
    w.raw(R"C({
	__u32 zero = 0;
	struct tr_stack *buf = bpf_map_lookup_elem(&tr_scratch, &zero);
	if (!buf)
		return 1;
)C");
    if (guarded)
      w.raw("\t__u64 seq = __sync_fetch_and_add(&buf->seq, 1) + 2;\n");
    w.raw("\tlong n = bpf_get_stack(ctx, buf->ips, sizeof(buf->ips), flags);\n");
    if (guarded)
      w.raw(R"C(	if (__sync_fetch_and_add(&buf->seq, 1) + 1 != seq)
		return 1;
)C");
    w.raw(R"C(	if (n <= 0) {
		*key = 0;
		return n == 0 || n == -TR_EFAULT ? 0 : 1;
	}
	__u32 nr = n / 8;
	__u64 h = 0x9e3779b97f4a7c15ULL ^ nr;
	for (__u32 i = 0; i < TR_STACK_DEPTH; i++) {
		if (i >= nr)
			break;
		h = (h ^ buf->ips[i]) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	if (h == 0)
		h = 1;
	long err = -TR_EEXIST; /* -EEXIST: stored before; 0: stored by this run */
	if (!bpf_map_lookup_elem(&tr_stacks, &h)) {
		err = bpf_map_update_elem(&tr_stacks, &h, buf->ips, BPF_NOEXIST);
		if (err != 0 && err != -TR_EEXIST)
			return 1;
	}
)C");
    if (guarded) {
      w.raw(R"C(	if (*(volatile __u64 *)&buf->seq != seq) {
		if (err == 0)
			bpf_map_delete_elem(&tr_stacks, &h);
		return 1;
	}
)C");
    }
    w.raw(R"C(	*key = h;
	return 0;
}

)C");
  }
}

void emit_helpers(const KernelPlan& plan, const Layout& l, Writer& w) {
  const Aggregation& agg = plan.aggregation;
  w.raw(R"C(#define TR_INC(p) (*(p) += 1)
#define TR_INC_ATOMIC(p) __sync_fetch_and_add((p), 1)

/* A char array as the user-space stages read it: up to its first NUL (the bytes after it are
 * zeroed so that equal strings are equal keys). */
static __always_inline void tr_zero_after_nul(char *s, int n)
{
	int z = 0;
#pragma unroll
	for (int i = 0; i < n; i++) {
		if (s[i] == 0)
			z = 1;
		if (z)
			s[i] = 0;
	}
}

)C");
  if (l.stacks) {
    std::array<bool, 2> want{};  // plain, guarded (uprobes)
    for (const auto& p : plan.probes)
      want[is_uprobe(p.kind) ? 1 : 0] = true;
    emit_stack_helpers(want, w);
  }
  bool misaligned = false;
  for (const auto& p : plan.probes) {
    const auto visit = [&](const Field& f) {
      misaligned = misaligned || (f.source == Source::kTpInt && f.offset % f.size != 0);
    };
    for (const auto& k : p.keys)
      visit(k);
    visit(p.value);
    visit(p.latency_key);
    for (const auto* filt : {&p.probe_filter, &p.filter, &p.post_filter})
      for (const auto& n : filt->nodes) {
        visit(n.a.field);
        visit(n.b.field);
      }
  }
  if (misaligned) {
    for (const int bits : {16, 32, 64})
      for (const char s : {'s', 'u'})
        w.line(
            "static __always_inline __{0}{1} tr_read___{0}{1}(const void *p) {{ __{0}{1} v = 0; "
            "bpf_probe_read_kernel(&v, sizeof(v), p); return v; }}",
            s, bits);
    w.blank();
  }
  if (agg.kind == AggKind::kHist) {
    w.raw(
        R"C(/* plugins/stages/hist.cpp Hist::bucket: 0 negative, 1 zero, 1 + bit_width(v) above. */
static __always_inline __u32 tr_bucket(__s64 v)
{
	if (v < 0)
		return 0;
	if (v == 0)
		return 1;
	__u64 u = v;
	__u32 w = 1;
	if (u >> 32) { u >>= 32; w += 32; }
	if (u >> 16) { u >>= 16; w += 16; }
	if (u >> 8) { u >>= 8; w += 8; }
	if (u >> 4) { u >>= 4; w += 4; }
	if (u >> 2) { u >>= 2; w += 2; }
	if (u >> 1) { w += 1; }
	return 1 + w;
}

)C");
  } else if (agg.kind == AggKind::kQuantiles) {
    w.raw(
        R"C(/* plugins/stages/quantiles.cpp Quantiles::bucket: values below 128 exactly, then 64
 * sub-buckets per power of two (negative values count as 0). */
static __always_inline __u32 tr_bucket(__s64 v)
{
	if (v < 128)
		return v < 0 ? 0 : (__u32)v;
	__u64 u = v;
	__u32 e = 0; /* bit_width(u) - 1 */
	if (u >> 32) { u >>= 32; e += 32; }
	if (u >> 16) { u >>= 16; e += 16; }
	if (u >> 8) { u >>= 8; e += 8; }
	if (u >> 4) { u >>= 4; e += 4; }
	if (u >> 2) { u >>= 2; e += 2; }
	if (u >> 1) { e += 1; }
	__u32 shift = e - 6;
	__u64 mant = (__u64)v >> shift;
	return 128 + (shift - 1) * 64 + (__u32)(mant - 64);
}

)C");
  } else if (agg.kind == AggKind::kLhist) {
    w.line("/* plugins/stages/lhist.cpp Lhist::bucket: 0 below min, {} at or above max. */",
           l.lhist_inner + 1);
    w.line("static __always_inline __u32 tr_bucket(__s64 v)");
    w.line("{{");
    w.line("\tif (v < {}LL)", agg.lhist_min);
    w.line("\t\treturn 0;");
    w.line("\tif (v >= {}LL)", agg.lhist_max);
    w.line("\t\treturn {};", l.lhist_inner + 1);
    w.line("\treturn 1 + (__u32)(((__u64)v - (__u64)({}LL)) / {}ULL);", agg.lhist_min,
           static_cast<std::uint64_t>(agg.lhist_step));
    w.line("}}");
    w.blank();
  }
  // The update, plain (per-CPU values of non-preemptible programs) and atomic (uprobes), as
  // the probes need them.
  bool want[2] = {false, false};
  for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
    if (aggregates(role_of(plan, i)))
      want[is_uprobe(plan.probes[i].kind) ? 1 : 0] = true;
  }
  for (const bool atomic : {false, true}) {
    if (!want[atomic ? 1 : 0])
      continue;
    const std::string_view inc = atomic ? "TR_INC_ATOMIC" : "TR_INC";
    const bool cas = atomic || !l.percpu;
    const std::string_view vinc = cas ? "TR_INC_ATOMIC" : "TR_INC";
    w.line(
        "static __always_inline void tr_update{}(void *map, void *key, __s64 v, struct tr_stats "
        "*st)",
        atomic ? "_ATOMIC" : "");
    w.line("{{");
    w.in();
    w.line("struct tr_val *p = bpf_map_lookup_elem(map, key);");
    w.line("if (!p) {{");
    w.line("\t/* A new key. Full (E2BIG) or out of memory: the event is counted, not lost. */");
    w.line("\tlong err = bpf_map_update_elem(map, key, &tr_init, BPF_NOEXIST);");
    w.line("\tif (err != 0 && err != -TR_EEXIST) {{");
    w.line("\t\t{}(&st->map_full);", inc);
    w.line("\t\treturn;");
    w.line("\t}}");
    w.line("\tif (err == 0) /* the generation's fill, so the reader drains before it is full */");
    w.line("\t\t{}(&st->keys_added);", inc);
    w.line("\tp = bpf_map_lookup_elem(map, key);");
    w.line("\tif (!p) {{");
    w.line("\t\t{}(&st->map_full);", inc);
    w.line("\t\treturn;");
    w.line("\t}}");
    w.line("}}");
    switch (agg.kind) {
      case AggKind::kCount:
        w.line("{}(&p->count);", vinc);
        break;
      case AggKind::kSum:
      case AggKind::kAvg:
        w.line("{}(&p->count);", vinc);
        if (cas)
          w.line("__sync_fetch_and_add(&p->v, v);");
        else
          w.line("p->v += v;");
        break;
      case AggKind::kMin:
      case AggKind::kMax: {
        w.line("__u64 e = TR_ORDER(v);");
        emit_raise(w, "p->v", "e", cas, inc);
        w.line("{}(&p->count);", vinc);
        break;
      }
      case AggKind::kHist:
      case AggKind::kLhist:
        w.line("__u32 b = tr_bucket(v);");
        w.line("/* Forget what clang knows of b, so that the bound the verifier needs stays. */");
        w.line(R"(asm volatile("" : "+r"(b));)");
        w.line("if (b >= {})", l.buckets);
        w.line("\tb = {};", l.buckets - 1);
        w.line("{}(&p->counts[b]);", vinc);
        break;
      case AggKind::kQuantiles:
        w.line("__u32 b = tr_bucket(v);");
        w.line(R"(asm volatile("" : "+r"(b));)");
        w.line("if (b >= {})", l.buckets);
        w.line("\tb = {};", l.buckets - 1);
        w.line("{}(&p->counts[b]);", vinc);
        w.line("__u64 u = v < 0 ? 0 : (__u64)v;");
        w.line("__u64 e_min = ~u, e_max = u + 1;");
        w.line("{{");
        w.in();
        emit_raise(w, "p->vmin", "e_min", cas, inc);
        w.out();
        w.line("}}");
        w.line("{{");
        w.in();
        emit_raise(w, "p->vmax", "e_max", cas, inc);
        w.out();
        w.line("}}");
        break;
    }
    w.out();
    w.line("}}");
    w.blank();
  }
}

void emit_fork(const KernelPlan& plan, Writer& w) {
  if (!plan.follow_children)
    return;
  const ForkTracepoint& f = *plan.follow_children;
  w.line("/* sched:sched_process_fork: a child of a target process is a target. */");
  w.line("SEC(\"tracepoint\")");
  w.line("int {}(void *ctx)", kForkProgram);
  w.line("{{");
  w.in();
  w.line("__u32 tr_tgid = bpf_get_current_pid_tgid() >> 32;");
  w.line("if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid))");
  w.line("\treturn 1;");
  w.line("__u32 tr_child = (__u32)*(volatile {} *)((char *)ctx + {});",
         c_int_type(f.child_pid_size, true), f.child_pid_offset);
  w.line("__u8 tr_one = 1;");
  w.line("if (bpf_map_update_elem(&tr_tgids, &tr_child, &tr_one, BPF_ANY) != 0) {{");
  w.line("\t__u32 tr_pslot = {};", plan.probes.size());
  w.line("\tstruct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
  w.line("\tif (tr_ps)");
  w.line("\t\tTR_INC_ATOMIC(&tr_ps->targets_dropped);");
  w.line("}}");
  w.line("return 1;");
  w.out();
  w.line("}}");
  w.blank();
  // An exited process leaves the map (else the map fills with the dead and later children are
  // not followed); so does a thread the fork program took for a process (sched_process_fork
  // fires for threads too, with the thread's id as child_pid).
  w.line("/* sched:sched_process_exit: an exited target leaves the target map. */");
  w.line("SEC(\"tracepoint\")");
  w.line("int {}(void *ctx)", kExitProgram);
  w.line("{{");
  w.in();
  w.line("__u64 tr_id = bpf_get_current_pid_tgid();");
  w.line("__u32 tr_tid = (__u32)tr_id, tr_tgid = tr_id >> 32;");
  w.line("if (tr_tid != tr_tgid)");
  w.line("\tbpf_map_delete_elem(&tr_tgids, &tr_tid);");
  if (f.group_dead_offset)
    w.line("if (*(volatile __u8 *)((char *)ctx + {}))  /* group_dead */", *f.group_dead_offset);
  else
    w.line("if (tr_tid == tr_tgid)  /* the leader: the kernel has no group_dead */");
  w.line("\tbpf_map_delete_elem(&tr_tgids, &tr_tgid);");
  w.line("return 1;");
  w.out();
  w.line("}}");
  w.blank();
}

std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string summary(const KernelPlan& plan) {
  std::string probes;
  for (const auto& p : plan.probes)
    probes += fmt::format("{}{} {}", probes.empty() ? "" : ", ", kind_name(p.kind), p.name);
  std::string keys;
  for (const auto& k : plan.aggregation.key_names)
    keys += (keys.empty() ? "" : ", ") + k;
  return fmt::format("{}{}{} by [{}] on {}", agg_name(plan.aggregation.kind),
                     plan.aggregation.value_name.empty() ? "" : " of ", plan.aggregation.value_name,
                     keys, probes);
}

}  // namespace

Result<GeneratedProgram> generate(const KernelPlan& plan, std::uint32_t possible_cpus) {
  if (auto why = check(plan))
    return fail(EINVAL, "bpf: this pipeline cannot run in the kernel: " + *why);
  if (possible_cpus == 0) {
    const int n = libbpf_num_possible_cpus();
    possible_cpus = n > 0 ? static_cast<std::uint32_t>(n) : 1;
  }
  TRACER_ASSIGN_OR_RETURN(const auto cols, plan_columns(plan));
  GeneratedProgram out;
  out.plan = plan;
  out.layout = make_layout(plan, cols, possible_cpus);
  int missing_bits = 0;
  for (const auto& c : out.layout.columns)
    missing_bits += c.missing_bit >= 0 ? 1 : 0;
  if (missing_bits > 8)
    return fail(EINVAL,
                "bpf: this pipeline cannot run in the kernel: more than 8 keys are "
                "missing on some probe");
  out.tgid_map = plan.tgids.size() > 1 || plan.follow_children.has_value();

  Writer w;
  w.line("/* Generated by tracer (bpf/codegen.cpp): {}. Do not edit. */", summary(plan));
  w.raw(kPrelude);
  emit_maps(plan, out.layout, out.tgid_map, w);
  emit_helpers(plan, out.layout, w);
  for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
    out.programs.push_back(fmt::format("tr_p{}", i));
    w.line("/* probe {}: {} {} */", i, kind_name(plan.probes[i].kind), plan.probes[i].name);
    ProbeGen(plan, out.layout, i, w).emit(out.programs.back(), out.tgid_map);
  }
  if (plan.follow_children)
    emit_fork(plan, w);
  if (plan.arm_on_exec && !plan.tgids.empty()) {
    w.line("/* sched:sched_process_exec: the command's events count from its exec on. */");
    w.line("SEC(\"tracepoint\")");
    w.line("int {}(void *ctx)", kExecProgram);
    w.line("{{");
    w.line("	if ((__u32)(bpf_get_current_pid_tgid() >> 32) == {}u)", plan.tgids[0]);
    w.line("		tr_armed = 1;");
    w.line("	return 1;");
    w.line("}}");
    w.blank();
  }
  out.source = w.take();
  out.hash = fmt::format("{:016x}", fnv1a64(out.source));
  out.name = "trk_" + out.hash;
  return out;
}

Result<Object> compile(const GeneratedProgram& prog, const CompileOptions& opts_in) {
  namespace fs = std::filesystem;
  CompileOptions opts = opts_in;
  if (opts.cache_dir.empty()) {
    TRACER_ASSIGN_OR_RETURN(opts.cache_dir, default_cache_dir());
  }
  // The text needs no vmlinux.h: an empty directory spares ensure_vmlinux_h reading the BTF.
  if (opts.vmlinux_dir.empty())
    opts.vmlinux_dir = opts.cache_dir / "gen";
  // BPF atomics (cmpxchg, fetch-add) and 32-bit jumps: kernel 5.12+.
  opts.extra_flags.emplace_back("-mcpu=v3");
  const fs::path dir = opts.cache_dir / "gen";
  std::error_code ec;
  TRACER_TRY(make_cache_dir(opts.cache_dir));
  TRACER_TRY(make_cache_dir(dir));
  // Named by the text's hash: two runs of the same plan share it, two different plans never
  // overwrite each other's file. Rewritten unless it holds exactly the text (a file of the same
  // size with other code would compile to another program).
  const fs::path src = dir / (prog.name + ".bpf.c");
  const auto same_text = [&] {
    std::ifstream in(src, std::ios::binary);
    std::string have(prog.source.size() + 1, '\0');
    in.read(have.data(), static_cast<std::streamsize>(have.size()));
    return in.gcount() == static_cast<std::streamsize>(prog.source.size()) &&
           std::string_view(have).substr(0, prog.source.size()) == prog.source;
  };
  if (fs::is_symlink(src, ec) || !fs::is_regular_file(src) || !same_text()) {
    const fs::path tmp = src.string() + fmt::format(".tmp.{}", ::getpid());
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(prog.source.data(), static_cast<std::streamsize>(prog.source.size()));
      if (!f) {
        const int err = errno != 0 ? errno : EIO;
        return fail(err, fmt::format("bpf: cannot write {}", tmp.string()));
      }
    }
    fs::rename(tmp, src, ec);
    if (ec)
      return fail(ec.value(), fmt::format("bpf: cannot rename {} to {}: {}", tmp.string(),
                                          src.string(), ec.message()));
  }
  return Object::compile_and_open(src, opts);
}

Status set_targets(Object& obj,
                   const GeneratedProgram& prog,
                   const std::vector<std::uint32_t>& tgids) {
  if (!prog.tgid_map)
    return fail(EINVAL, "bpf: this program compares one target process; it has no target map");
  for (const std::uint32_t t : tgids)
    TRACER_TRY((obj.update_elem<std::uint32_t, std::uint8_t>(kTgidsMap, t, 1)));
  return {};
}

}  // namespace tracer::kernel::gen
