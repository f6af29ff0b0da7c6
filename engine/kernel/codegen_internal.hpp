// Private to the code generator (engine/kernel/codegen*.cpp): its limits, the helpers every
// pass shares, the C text writer, and the passes' entry points. The passes, in the order
// generate() runs them:
//   codegen_check.cpp   check(): what the kernel cannot run is an error naming the probe;
//   codegen_layout.cpp  plan_columns(), make_layout(): the key columns, maps and value cells;
//   codegen_maps.cpp    the prelude, the maps, the shared helper functions, the fork program;
//   codegen_probe.cpp   one probe's program (ProbeGen);
//   codegen.cpp         generate() (the driver), compile(), set_targets().
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "tracer/kernel/codegen.hpp"

namespace tracer::kernel::gen {

inline constexpr std::uint32_t kCommLen = 16;          // TASK_COMM_LEN
inline constexpr std::uint32_t kMaxStringKey = 256;    // bytes of one string key or buffer
inline constexpr std::uint32_t kMaxKeySize = 320;      // the key lives on the 512-byte BPF stack
inline constexpr std::uint32_t kMaxValueSize = 32768;  // a per-CPU value: PCPU_MIN_UNIT_SIZE
inline constexpr std::uint32_t kMaxProbes = 64;
inline constexpr std::uint32_t kMaxStackDepth = 1024;  // frames of one stack map entry
inline constexpr std::uint32_t kMaxFilterNodes = 256;
inline constexpr int kMaxFilterDepth = 64;
/// The buffer name (Field::offset) of usdt argument N's string: past every record offset.
inline constexpr std::uint32_t kUsdtStringBuffer = 1U << 20;
inline constexpr std::uint64_t kPercpuPreallocBudget = 64ULL << 20;  // both generations, every CPU

enum class VType : std::uint8_t { kNone, kInt, kUint, kString, kStack };

inline VType type_of(const Field& f) {
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
    case Source::kUsdtArg:
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

inline bool is_kprobe_family(ProbeKind k) {
  return k == ProbeKind::kKprobe || k == ProbeKind::kKretprobe || is_user_probe(k);
}
inline bool is_return_probe(ProbeKind k) {
  return k == ProbeKind::kKretprobe || k == ProbeKind::kUretprobe;
}
inline bool is_uprobe(ProbeKind k) {
  return is_user_probe(k);  // a USDT call site is a uprobe
}
inline std::string_view kind_name(ProbeKind k) {
  switch (k) {
    case ProbeKind::kTracepoint:
      return "tracepoint";
    case ProbeKind::kKprobe:
      return "kprobe";
    case ProbeKind::kKretprobe:
      return "kretprobe";
    case ProbeKind::kUprobe:
    case ProbeKind::kUsdt:  // a uprobe at each call site
      return "uprobe";
    case ProbeKind::kUretprobe:
      return "uretprobe";
    default:
      return is_perf_event(k) ? "perf event" : "?";
  }
}

inline Role role_of(const KernelPlan& plan, std::uint32_t i) {
  if (plan.latency) {
    if (i == plan.latency->entry_probe)
      return Role::kLatencyEntry;
    if (i == plan.latency->exit_probe)
      return Role::kLatencyExit;
  }
  return Role::kAggregate;
}

/// "probe 'NAME' (KIND)": the subject of the errors.
inline std::string where(const ProbePlan& p) {
  return fmt::format("probe '{}' ({})", p.name, kind_name(p.kind));
}

/// The C type of an integer of `size` bytes ("__u32", "__s64").
inline std::string c_int_type(std::uint32_t size, bool is_signed) {
  return fmt::format("__{}{}", is_signed ? 's' : 'u', size * 8);
}

// The storage of one key column, merged over the probes that aggregate.
struct ColumnPlan {
  KeyColumn col;
  VType type = VType::kNone;
  std::uint32_t align = 1;
  bool any_missing = false;
};

/// The key columns of the plan, merged over the probes that aggregate (their storage).
[[nodiscard]] Result<std::vector<ColumnPlan>> plan_columns(const KernelPlan& plan);
[[nodiscard]] Layout make_layout(const KernelPlan& plan,
                                 const std::vector<ColumnPlan>& cols_in,
                                 std::uint32_t possible_cpus);
/// Whether probes of role `r` update the aggregation (a latency entry only stores a time).
inline bool aggregates(Role r) {
  return r != Role::kLatencyEntry;
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
                std::string_view inc);
/// The kernel ABI's types and constants the programs use (no kernel headers needed).
extern const std::string_view kPrelude;
void emit_maps(const KernelPlan& plan, const Layout& l, bool tgid_map, Writer& w);
void emit_helpers(const KernelPlan& plan, const Layout& l, Writer& w);
void emit_fork(const KernelPlan& plan, Writer& w);
/// Probe `index`'s program, named `fn`.
void emit_probe(const KernelPlan& plan,
                const Layout& layout,
                std::uint32_t index,
                const std::string& fn,
                bool tgid_map,
                Writer& w,
                std::span<const UsdtOperand> usdt);

}  // namespace tracer::kernel::gen
