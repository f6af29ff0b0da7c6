// Derived metrics of a counter group: arithmetic over its counters' values, as perf stat's
// metrics (IPC = instructions / cycles, a rate per second, a ratio in percent).
//
// Grammar: expr := term (('+' | '-') term)* ; term := factor (('*' | '/') factor)* ;
// factor := number | name | '(' expr ')' | '-' factor. A name is a counter of the group as
// written in `events` ("page-faults", "sched:sched_switch", "cycles:u"), or `seconds` (the
// interval's wall time). Names may hold '-' and ':': a minus between two names needs spaces
// ("a - b"), as in perf's metric expressions.
//
// Usage:
//   auto e = CounterExpr::parse("page-faults / seconds", {"task-clock", "page-faults"});
//   if (!e) report e.error() (its message says where);  e->eval({ns, faults}, 0.5) -> 1234.0
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"

namespace tracer {

class CounterExpr {
 public:
  /// Parses `text` against the group's counter names. A Failure (EINVAL) names the column of
  /// the problem (1-based) and what was expected, with the known names in its hint.
  [[nodiscard]] static Result<CounterExpr> parse(std::string_view text,
                                                 std::span<const std::string> names);
  /// The value for the counters' `values` (in the names' order) over `seconds`; nullopt when
  /// it divides by zero (a counter that did not count).
  [[nodiscard]] std::optional<double> eval(std::span<const double> values, double seconds) const;
  /// The counters it reads (indices into the names).
  [[nodiscard]] const std::vector<std::size_t>& inputs() const noexcept { return inputs_; }

  struct Node;

 private:
  std::shared_ptr<const Node> root_;
  std::vector<std::size_t> inputs_;
};

}  // namespace tracer
