// check(): what a KernelPlan asks that the kernel cannot run, as an error naming the probe.
#include "codegen_internal.hpp"
#include "kernel_code.hpp"

#include <optional>

#include "tracer/common/buckets.hpp"

namespace tracer::kernel::gen {

namespace {

// ---------------------------------------------------------------------------------------------
// check

std::optional<std::string> check_field(const ProbePlan& p, const Field& f, bool exit_probe) {
  const auto bad = [&](std::string why) {
    return fmt::format("{}: field '{}': {}", where(p), f.name, why);
  };
  switch (f.source) {
    case Source::kUsdtArg:
      if (p.kind != ProbeKind::kUsdt || p.usdt_sites.empty() ||
          f.index >= p.usdt_sites.front().size())
        return bad("a usdt argument of another probe");
      break;
    case Source::kTpDataLoc:
      if (f.usdt) {
        if (p.kind != ProbeKind::kUsdt || p.usdt_sites.empty() ||
            f.index >= p.usdt_sites.front().size())
          return bad("a usdt argument of another probe");
        break;
      }
      [[fallthrough]];
    case Source::kTpInt:
    case Source::kTpString:
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
  if (agg.agg == nullptr)
    return "the aggregation has no kernel part";
  const KernelAgg& record = *agg.agg;
  if (auto why = record.check(kMaxValueSize))
    return why;
  if (record.value_size() == 0 || record.value_size() > kMaxValueSize)
    return fmt::format("{}: a value of {} bytes per key (a BPF map value holds at most {})",
                       record.name(), record.value_size(), kMaxValueSize);
  bool any_value = !record.needs_value();
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
    if (record.needs_value()) {
      const VType t = type_of(p.value);
      if (t == VType::kString || t == VType::kStack)
        return fmt::format("{}: {} of '{}', a {}", where(p), agg.kind(), p.value.name,
                           t == VType::kString ? "string" : "stack");
      if (t != VType::kNone) {
        if (auto why = check_field(p, p.value, exit_probe))
          return why;
        any_value = true;
      }
    }
  }
  if (!any_value)
    return fmt::format("{}: no probe has the field '{}'", agg.kind(), agg.value_name);
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

}  // namespace tracer::kernel::gen
