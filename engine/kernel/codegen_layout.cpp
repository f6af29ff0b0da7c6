// The layout of an in-kernel aggregation: key columns merged over the probes, the maps, and
// the value cells of each generation.
#include "codegen_internal.hpp"
#include "kernel_code.hpp"

#include <algorithm>

namespace tracer::kernel::gen {

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
  l.value_size = kernel_agg(agg).value_size();
  const std::uint64_t percpu_bytes = 2ULL * ((std::uint64_t{l.value_size} + 7) / 8 * 8) * cpus *
                                     (l.keyless    ? 1
                                      : l.by_probe ? l.probes
                                                   : agg.max_keys);
  // String keys are wide and many: one shared value per key, updated atomically. Fixed-width
  // keys: a value per CPU, updated without atomics, unless that preallocates too much.
  l.percpu = !any_string && percpu_bytes <= kPercpuPreallocBudget;
  return l;
}

}  // namespace tracer::kernel::gen
