// counters: the tables of a [[counter]] group (tracer::CounterSource): at each `every` the
// counts of the interval, at the end the last interval's and the whole run's (Table::total).
// A row per counter (and per CPU with the group's per_cpu): the value scaled where the kernel
// multiplexed it, the raw count, the times enabled and running, the percentage counted; then
// a row per derived metric. Reads no records.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tracer/counter_expr.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/ext/stage_options.hpp"

namespace tracer::stages {

class Counters : public Stage, public Aggregation {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  [[nodiscard]] Aggregation* aggregation() noexcept override { return this; }
  [[nodiscard]] std::optional<std::chrono::nanoseconds> every() const noexcept override {
    return every_;
  }
  void snapshot(Table& out, bool reset) override;
  [[nodiscard]] bool total_at_stop() const noexcept override { return true; }

 private:
  std::string group_name_;
  SourceRegion group_where_{};
  std::optional<std::chrono::nanoseconds> every_;
  bool every_set_ = false;  // the stage's own `every` (else the group's)
  const CounterSource* source_ = nullptr;
  std::size_t group_ = 0;
  std::vector<std::string> names_, units_;
  std::vector<std::pair<std::string, CounterExpr>> metrics_;
  std::optional<CounterGroupReading> prev_;  // the last interval's end
};

}  // namespace tracer::stages
