// bpf-map: an aggregation kept in the kernel. A BPF program of the recipe counts (or sums) into a
// map; this stage reads the map at each `every` and at the end and emits it as a table, one row
// per entry, key fields then value fields, named by the map's BTF. No event reaches user space
// for it: the cheapest way to count millions of events per second.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "aggregate.hpp"

namespace tracer::stages {

/// Options: map (required), keys, values, sort, clear, top, every.
class BpfMap : public AggregateStage {
 public:
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> /*events*/) noexcept override {}
  void snapshot(Table& out, bool reset) override;

 private:
  struct Column {
    bpf::SchemaField field;
    bool key = false;
  };
  std::string map_;
  SourceRegion map_where_;
  std::vector<std::pair<std::string, SourceRegion>> key_names_, value_names_;
  std::optional<std::pair<std::string, SourceRegion>> sort_;
  bool clear_ = false;
  const MapSource* maps_ = nullptr;
  std::vector<Column> keys_, values_;
  std::size_t sort_column_ = 0;  // index into values_
};

}  // namespace tracer::stages
