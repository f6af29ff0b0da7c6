// In-kernel placement: what a stage computes, in the form the planner (engine/kernel/
// placement.cpp) compiles to BPF (tracer/kernel/codegen.hpp), and the rows an in-kernel run
// hands back.
// A stage describes itself by field *names*; the planner resolves them per probe and says why
// a stage stays in user space when a field or an option has no kernel form.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

namespace tracer {

/// A stage's kernel form: a filter, an aggregation, a latency pairing, or none (and why not).
struct KernelForm {
  enum class Kind : std::uint8_t { kNone, kFilter, kAggregate, kLatency };
  Kind kind = Kind::kNone;
  std::string why_not{};  // kNone: why the stage runs in user space

  // kFilter: FilterExpr's tree, field operands by name.
  enum class Cmp : std::uint8_t { kEq, kNe, kLt, kLe, kGt, kGe };
  struct Operand {
    enum class Kind : std::uint8_t { kField, kInt, kUint, kString };
    Kind kind = Kind::kInt;
    std::string text{};  // field name or string literal
    std::int64_t ival = 0;
    std::uint64_t uval = 0;
    bool glob = false;
  };
  struct Node {
    enum class Kind : std::uint8_t { kOr, kAnd, kNot, kCmp, kTruth };
    Kind kind = Kind::kTruth;
    int lhs = -1, rhs = -1;
    Cmp op = Cmp::kEq;
    Operand a{}, b{};
  };
  std::vector<Node> nodes{};
  int root = -1;

  // kAggregate: one number (or histogram) per `by` key.
  enum class Agg : std::uint8_t { kCount, kSum, kMin, kMax, kAvg, kHist, kLhist, kQuantiles };
  Agg agg = Agg::kCount;
  std::vector<std::string> by{};
  std::string value{};  // the aggregated field (all but count)
  std::int64_t lhist_min = 0, lhist_max = 0, lhist_step = 1;
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
};

/// One key's state an in-kernel aggregation computed over an interval (Aggregation::absorb).
struct KernelRow {
  std::vector<
      std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string, KernelIps>>
      keys{};
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
