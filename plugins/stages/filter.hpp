// filter: keeps the events for which an expression holds.
//
// Grammar (precedence low to high):  or := and ("||" and)*   and := unary ("&&" unary)*
//   unary := "!" unary | "(" or ")" | operand (cmp operand)?     cmp := == != < <= > >=
//   operand := field | field[i] | integer (decimal, 0x hex, leading -) | "string" | 'string'
// Strings compare by equality, or as a shell glob (* ? [a-z] [!x]) when the literal holds one of
// * ? [. An operand alone is a truth test (non-zero, non-empty). A field missing on a probe makes
// every comparison on it false. Field-to-field comparisons are allowed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/ext/stage.hpp"

namespace tracer::stages {

using tracer::FilterError;

/// `*`, `?`, `[set]`, `[!set]`/`[^set]` and ranges, over the whole of `text` (as fnmatch without
/// flags, but on string_views and without allocation).
[[nodiscard]] bool glob_match(std::string_view pattern, std::string_view text) noexcept;

class FilterExpr {
 public:
  /// @return the expression, or nullopt with `error` describing the first problem.
  [[nodiscard]] static std::optional<FilterExpr> parse(std::string_view text, FilterError& error);
  /// A probe's tracefs filter (the kernel's trace_events_filter.c syntax) as an expression of
  /// this kind, for a probe whose events an in-kernel program reads (the tracefs filter gates
  /// only the perf event's samples): `~` is a glob match, the right side of a comparison is a
  /// value (a bare word a string), `==` compares whole strings. The bitwise `&` has no form:
  /// it is an error.
  [[nodiscard]] static std::optional<FilterExpr> parse_tracefs(std::string_view text,
                                                               FilterError& error);
  /// Binds field operands and checks operand types. `where` is the expression string's position
  /// (its opening quote): diagnostics point at the column of the operand.
  bool bind(const Schema& schema, const SourceRegion& where, Diagnostics& diags);
  [[nodiscard]] bool eval(const Event& e) const noexcept;
  /// The tree as an s-expression, for tests: (&& (== comm "bash") (! (> pid 5))).
  [[nodiscard]] std::string dump() const;
  /// The tree with field operands by name, for the in-kernel planner.
  void to_kernel(KernelForm& out) const;

  // The tree's shape is tracer/ext/kernel_form.hpp's (one from here to the generator).
  using Cmp = FilterCmp;
  using Operand = FilterOperand<FieldRef>;
  using Node = FilterNode<Operand>;

 private:
  /// The parsed tree with its operands to be bound (nullopt stays nullopt).
  [[nodiscard]] static std::optional<FilterExpr> from_tree(std::optional<FilterTree> tree);
  [[nodiscard]] bool eval_node(int n, const Event& e) const noexcept;
  [[nodiscard]] std::string dump_node(int n) const;
  std::vector<Node> nodes_;
  int root_ = -1;
};

class Filter : public Stage, public InKernel {
 public:
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  [[nodiscard]] KernelForm kernel_form() const override;

 private:
  std::optional<FilterExpr> expr_;
  SourceRegion where_;
  KindMask kinds_ = kind_bit(RecordKind::kSample);
  bool bound_ = false;
};

/// Reads a `kinds` option ("sample", "lost", ...) into a mask; unknown names are diagnostics.
[[nodiscard]] KindMask read_kinds(const StageOptions& opts, KindMask fallback, Diagnostics& diags);

}  // namespace tracer::stages
