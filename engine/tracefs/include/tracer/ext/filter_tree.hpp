// The filter tree and its two grammars, below every layer that reads one: the filter stage's
// expression (plugins/stages/filter.hpp) and a probe's tracefs filter (the kernel's
// trace_events_filter.c syntax), which an in-kernel program must apply itself (the tracefs filter
// gates only a perf event's samples). One parser for both; the filter stage binds the operands
// to its fields, the planner (engine/kernel/placement.cpp) to a probe's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
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

struct FilterError {
  std::size_t column = 0;  // 1-based, in the expression text
  std::string message;
};

/// A parsed filter: its nodes, operands by name (what a field is bound to comes later).
struct FilterTree {
  using Operand = FilterOperand<std::monostate>;
  using Node = FilterNode<Operand>;
  std::vector<Node> nodes;
  int root = -1;
};

enum class FilterGrammar : std::uint8_t {
  /// The filter stage's: or := and ("||" and)*, and := unary ("&&" unary)*, unary := "!" unary |
  /// "(" or ")" | operand (cmp operand)?, cmp := == != < <= > >=; operand := field | field[i] |
  /// integer (decimal, 0x hex, leading -) | "string" | 'string'. A string holding * ? or [ is a
  /// glob.
  kTracer,
  /// A tracefs filter: the same, and `~` (a glob match of a string field: the pattern quoted);
  /// the right side of a comparison is a value (a bare word is a string); `==` compares whole
  /// strings. The bitwise `&` has no form: an error.
  kTracefs,
};

/// At most 1,024 nodes and 64 levels of nesting (an error at the position past them).
/// @return the tree, or nullopt with `error` describing the first problem.
[[nodiscard]] std::optional<FilterTree> parse_filter(std::string_view text,
                                                     FilterGrammar grammar,
                                                     FilterError& error);

}  // namespace tracer

#pragma GCC visibility pop
