// In-kernel placement: what a stage computes, in the form the planner (engine/kernel/
// placement.cpp) compiles to BPF (tracer/kernel/codegen.hpp), and the rows an in-kernel run
// hands back.
// A stage describes itself by field *names*; the planner resolves them per probe and says why
// a stage stays in user space when a field or an option has no kernel form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// The filter tree, one shape from the filter stage (plugins/stages/filter.hpp, its operands bound
// to FieldRefs) through KernelForm (operands by name) to the generator (tracer/kernel/codegen.hpp,
// operands resolved to a probe's Fields): only what an operand's field is bound to differs.
enum class FilterCmp : std::uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
enum class FilterNodeKind : std::uint8_t { kOr, kAnd, kNot, kCmp, kTruth };
enum class OperandKind : std::uint8_t { kField, kInt, kUint, kString };

/// A field, an integer or a string literal; `Bound` is what the field is bound to.
template <typename Bound>
struct FilterOperand {
  using Kind = OperandKind;
  Kind kind = Kind::kInt;
  std::string text{};  // kField: the field's name; kString: the literal
  std::int64_t ival = 0;
  std::uint64_t uval = 0;
  bool glob = false;       // kString: a glob pattern (holds * ? or [)
  Bound field{};           // kField: the field as the holder binds it
  std::size_t column = 0;  // 1-based, in the expression's text (0: not from a text)

  /// The operand with its field bound to `b` instead.
  template <typename To>
  [[nodiscard]] FilterOperand<To> rebound(To b = To{}) const {
    return {.kind = kind,
            .text = text,
            .ival = ival,
            .uval = uval,
            .glob = glob,
            .field = std::move(b),
            .column = column};
  }
};

/// kOr, kAnd: lhs and rhs (node indexes); kNot: lhs; kCmp: a op b; kTruth: a (non-zero,
/// non-empty).
template <typename Operand>
struct FilterNode {
  using Kind = FilterNodeKind;
  Kind kind = Kind::kTruth;
  int lhs = -1, rhs = -1;
  FilterCmp op = FilterCmp::kEq;
  Operand a{}, b{};
};

/// An in-kernel aggregation's own integer options, by name, in the order the stage set them.
struct AggParams {
  std::vector<std::pair<std::string, std::int64_t>> items{};

  void set(std::string name, std::int64_t v) { items.emplace_back(std::move(name), v); }
  /// The value of `name`, or `fallback` when the stage did not set it.
  [[nodiscard]] std::int64_t get(std::string_view name, std::int64_t fallback) const noexcept {
    for (const auto& [n, v] : items)
      if (n == name)
        return v;
    return fallback;
  }
  friend bool operator==(const AggParams&, const AggParams&) = default;
};

/// A stage's kernel form: a filter, an aggregation, a latency pairing, or none (and why not).
struct KernelForm {
  enum class Kind : std::uint8_t { kNone, kFilter, kAggregate, kLatency };
  Kind kind = Kind::kNone;
  std::string why_not{};  // kNone: why the stage runs in user space

  // kFilter: the filter stage's tree, field operands by name.
  using Cmp = FilterCmp;
  using Operand = FilterOperand<std::monostate>;
  using Node = FilterNode<Operand>;
  std::vector<Node> nodes{};
  int root = -1;

  // kAggregate: one number (or histogram) per `by` key. `agg` names the in-kernel aggregation
  // that computes it: the kernel layer's record of that name (engine/kernel/kernel_aggs.cpp:
  // its map value, its update in C, its rows back). A name the kernel layer lacks keeps the
  // stage in user space, with the reason. `params` are the aggregation's own options by name
  // (lhist: min, max, step), read by its record.
  std::string agg{};
  AggParams params{};
  std::vector<std::string> by{};
  std::string value{};               // the aggregated field (all but count)
  std::uint32_t max_keys = 10240;    // the kernel map's size per interval
  std::uint32_t max_stacks = 16384;  // stack keys: distinct stacks the run's stack map holds

  // kLatency: entry/exit pairing; the exit hands `duration` on.
  std::string entry{}, exit{}, key{}, exit_key{};
  std::uint32_t max_pending = 65536;
};

/// A stack key of an in-kernel aggregation: its addresses as a callchain value holds them
/// (IpList: leaf first; `callchain` with its PERF_CONTEXT_* markers) and the process that
/// symbolizes its user addresses.
struct KernelIps {
  std::vector<std::uint64_t> ips;
  std::uint32_t pid = 0;
  friend bool operator==(const KernelIps&, const KernelIps&) = default;
};

/// A key cell of an in-kernel aggregation's row: none (the probe lacks the field), an integer, a
/// double, a string, or a stack.
using KernelCell =
    std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string, KernelIps>;

/// One key's state an in-kernel aggregation computed over an interval (Aggregation::absorb).
struct KernelRow {
  std::vector<KernelCell> keys{};
  std::uint64_t count = 0;            // events aggregated
  std::int64_t value = 0;             // sum (sum, avg), min, max
  std::vector<std::uint64_t> counts;  // hist, lhist, quantiles: every bucket
  std::uint64_t min = 0, max = 0;     // quantiles: the exact extremes (of count > 0 values)
};

/// Counters of an in-kernel latency pairing since the run began (Stage::absorb_counters).
struct KernelLatencyCounters {
  std::uint64_t paired = 0, unmatched_exits = 0, unmatched_entries = 0, out_of_order = 0,
                entries_dropped = 0, pending = 0;
};

}  // namespace tracer

#pragma GCC visibility pop
