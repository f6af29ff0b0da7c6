// folded: the tables of the aggregation before it as collapsed stacks, one line per distinct
// stack: "root;frame;...;leaf COUNT" (the input of flamegraph.pl, speedscope and inferno). The
// key cells that are not stacks (comm, pid, ...) become the first frames, then the user stack
// outermost first, then the kernel stack; rows that collapse to the same line (the same stack in
// two processes) are summed.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "output.hpp"

namespace tracer::stages {

/// One frame of a collapsed path: its label and whether it is a kernel frame.
struct PathFrame {
  std::string name;
  bool kernel = false;
};

/// The path of a table row, root first: its non-stack keys, its user stacks, its kernel stacks
/// (each stack outermost frame first).
[[nodiscard]] std::vector<PathFrame> collapsed_path(const TableRow& row);
/// The weight of a row: its first value when it is a number (count, sum), else the sum of its
/// histogram buckets; 0 for none.
[[nodiscard]] std::uint64_t row_weight(const TableRow& row);
/// The folded text of a path ("a;b;c"): ';' inside a name becomes ':' so the line parses back.
[[nodiscard]] std::string folded_line(const std::vector<PathFrame>& path);

/// Base of the stack outputs (folded, flamegraph): a file or stdout, tables only.
class StackOutput : public OutputStage {
 protected:
  void configure_stack_output(StageOptions& opts);
  void bind_format(BindContext& ctx, Diagnostics& diags) override;
};

class Folded : public StackOutput {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  void on_table(const Table& table) override;
};

}  // namespace tracer::stages
