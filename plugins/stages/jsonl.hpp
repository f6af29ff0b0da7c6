// jsonl: one JSON object per line: per event {"probe":..,"time":..,...} (only the fields the
// event's probe has), or per aggregation row {"stage":..,"interval":..,"keys":{..},<values>}
// with histogram rows carrying "buckets":[{"lo":..,"hi":..,"count":..}] (null for open ends).
#pragma once

#include "output.hpp"

namespace tracer::stages {

class Jsonl : public OutputStage {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void on_table(const Table& table) override;
};

}  // namespace tracer::stages
