// One record per in-kernel aggregation, found by its name (KernelForm::agg, Aggregation::kind):
// its options' check, what its map value holds, the C that buckets and updates it in a generated
// program, and how the reader turns the values back into a row. The generator (codegen_*.cpp),
// the planner (placement.cpp) and the reader (reader.cpp) ask the record and never name a kind:
// a new in-kernel aggregation is one more record in kernel_aggs.cpp (its stage names it in its
// kernel_form()), and its buckets are tracer/common/buckets.hpp's, in C as
// bpf/progs/tracer_buckets.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "codegen_internal.hpp"
#include "tracer/kernel/reader.hpp"

namespace tracer::kernel::gen {

/// How a program's update of one value is written: `cas` with atomics (a shared value, or a
/// preemptible program), `inc` the macro that counts into the stats, `vinc` the one that
/// counts into the value.
struct UpdateStyle {
  bool cas = false;
  std::string_view inc, vinc;
};

/// The row being merged from each CPU's value (or the one shared value).
struct RowMerge {
  Row& row;
  bool first = true;                       // no CPU with events merged yet (min, max)
  std::uint64_t min_enc = 0, max_enc = 0;  // quantiles: ~min and max + 1, 0 is none
};

struct KernelAgg {
  std::string_view name;  // "count", "sum", ...
  /// Aggregates a field (`value`), not events alone.
  bool needs_value = true;
  /// Why the aggregation's params (Aggregation::params) cannot run, or nullopt (nullptr: it
  /// has none to check).
  std::optional<std::string> (*check)(const Aggregation& agg) = nullptr;
  /// Layout::value_size, buckets and lhist_inner.
  void (*layout)(const Aggregation& agg, Layout& l) = nullptr;
  /// The members of `struct tr_val`; with min_max, TR_ORDER after tr_init.
  void (*emit_value)(const Aggregation& agg, const Layout& l, Writer& w) = nullptr;
  /// `tr_bucket(v)` (nullptr: no buckets).
  void (*emit_bucket)(const Aggregation& agg, const Layout& l, Writer& w) = nullptr;
  /// The update of `struct tr_val *p` with `__s64 v`, once p exists.
  void (*emit_update)(const Layout& l, const UpdateStyle& u, Writer& w) = nullptr;
  /// Snapshot::value_names and histogram.
  void (*describe)(const Aggregation& agg, Snapshot& s) = nullptr;
  /// Adds one value (a CPU's, or the shared one) of the key to the row.
  void (*merge)(const Aggregation& agg, const Layout& l, const std::byte* v, RowMerge& m) = nullptr;
  /// Row::values (and buckets) once every value was merged.
  void (*finish)(const Aggregation& agg, const Layout& l, RowMerge& m) = nullptr;
  /// Min and max keep TR_ORDER(v) = (u64)v ^ order_xor (not 0): the largest encoded value wins
  /// and 0 means none, so zeroed array slots and new keys need no initial sentinel.
  std::uint64_t order_xor = 0;
  /// A value so large that a hash map allocates its keys as they come (BPF_F_NO_PREALLOC).
  bool no_prealloc = false;
};

/// The record named `name`, or nullptr.
[[nodiscard]] const KernelAgg* find_kernel_agg(std::string_view name) noexcept;
/// The names of every record, for messages: "count, sum, ...".
[[nodiscard]] std::string kernel_agg_names();
/// The record of a checked aggregation (check() named an unknown kind first).
/// @throws std::logic_error for a kind no record has.
[[nodiscard]] const KernelAgg& kernel_agg(const Aggregation& agg);

}  // namespace tracer::kernel::gen
