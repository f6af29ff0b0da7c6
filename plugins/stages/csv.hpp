// csv: RFC 4180 rows. Per event: a header of the field names, then one row per event (empty
// cells for fields the event's probe lacks). Aggregations: stage,interval,<keys>,<values>, or
// stage,interval,<keys>,lo,hi,count per histogram bucket; a header whenever the shape changes.
#pragma once

#include "output.hpp"

namespace tracer::stages {

class Csv : public OutputStage {
 public:
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void on_table(const Table& table) override;

 private:
  void bind_format(BindContext& ctx, Diagnostics& diags) override;
  void header(const std::vector<std::string>& names);
  bool event_header_done_ = false;
  std::vector<std::string> last_header_;
};

}  // namespace tracer::stages
