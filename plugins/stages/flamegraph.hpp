// flamegraph: an SVG flame graph of the stacks of the aggregation before it, written at the end
// of the run (every table of the run summed, so `every` intervals add up). The root frame "all"
// at the bottom, callers below callees, widths proportional to the row weights (count, sum, or a
// histogram's total); each frame a <g> with a <title> (name, samples, share: a browser shows it
// on hover), a rect and a label; clicking a frame zooms to it, clicking "all" resets, and the
// hovered frame's details show at the bottom.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "folded.hpp"

namespace tracer::stages {

struct FlameNode {
  std::string name;
  bool kernel = false;
  std::uint64_t count = 0;
  std::map<std::string, std::unique_ptr<FlameNode>> children{};  // by name: siblings sorted
};

struct FlameOptions {
  std::string title = "Flame Graph";
  std::uint32_t width = 1200;
};

/// The SVG of a tree whose root is "all".
[[nodiscard]] std::string render_flamegraph(const FlameNode& root, const FlameOptions& options);

class Flamegraph : public StackOutput {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  void on_table(const Table& table) override;
  void stop() override;

 private:
  FlameNode root_{.name = "all"};
  FlameOptions options_;
  bool written_ = false;
};

}  // namespace tracer::stages
