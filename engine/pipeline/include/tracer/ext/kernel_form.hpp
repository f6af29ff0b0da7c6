// In-kernel placement: what a stage computes, in the form the planner (engine/kernel/
// placement.cpp) compiles to BPF (tracer/kernel/codegen.hpp), and the rows an in-kernel run
// hands back.
// A stage describes itself by field *names*; the planner resolves them per probe and says why
// a stage stays in user space when a field or an option has no kernel form.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tracer/ext/filter_tree.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// C text of a generated BPF program as an aggregation's kernel part writes it: lines at the
/// writer's indent, and the update's primitives, written plainly for a per-CPU value of a
/// program that does not nest, or atomically for a shared value (the kernel layer's writer,
/// engine/kernel/codegen_internal.hpp, decides which).
class KernelCode {
 public:
  virtual void line(std::string_view text) = 0;
  /// Whole lines as they are (their own newlines, no indent).
  virtual void raw(std::string_view text) = 0;
  virtual void blank() = 0;
  virtual void in() = 0;
  virtual void out() = 0;
  /// `*(ptr) += 1` into the value: "&p->count".
  virtual void count(std::string_view ptr) = 0;
  /// `lvalue += v` (wrapping, 64 bits).
  virtual void add(std::string_view lvalue, std::string_view v) = 0;
  /// `lvalue += v` (unsigned 64 bits), and `carry += 1` when it wrapped: the low word of a
  /// wider sum (atomic on a shared value: the wrap is the one of this very add).
  virtual void add_carry(std::string_view lvalue, std::string_view v, std::string_view carry) = 0;
  /// `target = max(target, e)`, both unsigned 64 bits (a bounded compare-and-swap loop on a
  /// shared value; its give-ups counted as the probe's `contended`).
  virtual void raise(std::string_view target, std::string_view e) = 0;
  /// `counts[tr_bucket(v)] += 1`, the index bounded by `buckets` for the verifier.
  virtual void bucket_add(std::uint32_t buckets) = 0;
  /// Defines `tr_bucket(v)` as `call` of the buckets' C twin (bpf/progs/tracer_buckets.h:
  /// tr_log2_bucket, tr_linear_bucket, tr_quantile_bucket), which it includes.
  virtual void bucket_function(std::string_view call) = 0;

 protected:
  KernelCode() = default;
  ~KernelCode() = default;
  KernelCode(const KernelCode&) = default;
  KernelCode& operator=(const KernelCode&) = default;
};

/// The kernel part of an aggregation stage (KernelForm::agg): the value its map keeps per key
/// (`struct tr_val`, on each CPU or one shared), the C that updates it with each event's value,
/// and what of its configuration the kernel cannot hold. The kernel layer asks it and names no
/// aggregation; the stage reads the values back itself (InKernel::absorb: KernelRow's bytes, laid
/// out as emit_value declares them). A value of zeros must mean "no event yet" (new keys and
/// array slots start zeroed, and a row of zeros is not read).
class KernelAgg {
 public:
  virtual ~KernelAgg() = default;
  /// Its name in plans and messages ("count", "lhist").
  [[nodiscard]] virtual std::string_view name() const noexcept = 0;
  /// Aggregates a field (KernelForm::value), not events alone.
  [[nodiscard]] virtual bool needs_value() const noexcept { return true; }
  /// Why this configuration cannot run in the kernel (a value over `max_value_size` bytes), or
  /// nullopt.
  [[nodiscard]] virtual std::optional<std::string> check(std::uint32_t max_value_size) const {
    (void)max_value_size;
    return std::nullopt;
  }
  /// sizeof(struct tr_val).
  [[nodiscard]] virtual std::uint32_t value_size() const noexcept = 0;
  /// A value so large that a hash map allocates its keys as they come (BPF_F_NO_PREALLOC).
  [[nodiscard]] virtual bool no_prealloc() const noexcept { return false; }
  /// The members of `struct tr_val`.
  virtual void emit_value(KernelCode& c) const = 0;
  /// Macros the update uses, after the value's zero initializer `tr_init`.
  virtual void emit_defines(KernelCode& c) const { (void)c; }
  /// Functions the update calls (KernelCode::bucket_function), before the update.
  virtual void emit_helpers(KernelCode& c) const { (void)c; }
  /// The update of `struct tr_val *p` with `__s64 v` (the event's value; 0 without one).
  virtual void emit_update(KernelCode& c) const = 0;
  /// Whether `other` computes the same (a live change keeps a program that does).
  [[nodiscard]] virtual bool same(const KernelAgg& other) const = 0;

 protected:
  KernelAgg() = default;
  KernelAgg(const KernelAgg&) = default;
  KernelAgg& operator=(const KernelAgg&) = default;
};

/// A little-endian u64 at `p` of a kernel value (KernelRow::value).
[[nodiscard]] inline std::uint64_t kernel_u64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

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

  // kAggregate: one number (or histogram) per `by` key, computed by the stage's kernel part
  // `agg` (its map value, its update in C; the stage absorbs the values).
  std::shared_ptr<const KernelAgg> agg{};
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

/// One key's values as an in-kernel aggregation left them over an interval (InKernel::absorb):
/// its key cells, and its `struct tr_val` (KernelAgg::emit_value) as each CPU holds it, or the
/// one shared value: bytes the stage that wrote the update decodes.
struct KernelRow {
  std::vector<KernelCell> keys{};
  std::vector<std::byte> bytes{};  // values() of them, `stride` bytes apart
  std::uint32_t stride = 0;        // >= KernelAgg::value_size()
  std::uint32_t values = 0;        // CPUs (a per-CPU map), or 1

  /// Value `i` (a CPU's, or the shared one).
  [[nodiscard]] const std::byte* value(std::uint32_t i) const noexcept {
    return bytes.data() + (std::size_t{stride} * i);
  }
};

/// Counters of an in-kernel latency pairing since the run began (Stage::absorb_counters).
struct KernelLatencyCounters {
  std::uint64_t paired = 0, unmatched_exits = 0, unmatched_entries = 0, out_of_order = 0,
                entries_dropped = 0, pending = 0;
};

}  // namespace tracer

#pragma GCC visibility pop
