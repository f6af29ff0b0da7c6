// print: human text. Per event: a `format` line ("{comm} opened {filename}") or name=value pairs.
// Aggregations: aligned tables, and histograms drawn like bpftrace's:
//   @duration[bash]:
//   [4, 8)                 3 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@|
#pragma once

#include "output.hpp"

namespace tracer::stages {

class Print : public OutputStage {
 public:
  static constexpr int kBarWidth = 52;  // bpftrace's
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void on_table(const Table& table) override;

  /// The text of a table (what on_table writes).
  [[nodiscard]] static std::string render(const Table& table);
  /// A table with stack keys: a block per row, frames one per line.
  [[nodiscard]] static std::string render_stacks(const Table& table);

 private:
  struct Piece {
    std::string literal;
    std::string field;  // empty: literal only
    SourceRegion where;
  };
  void bind_format(BindContext& ctx, Diagnostics& diags) override;
  std::vector<Piece> pieces_;
  std::vector<FieldRef> piece_fields_;  // one per piece with a field (same order)
  bool has_format_ = false;
};

}  // namespace tracer::stages
