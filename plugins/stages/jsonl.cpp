#include "jsonl.hpp"

namespace tracer::stages {

StageSpec Jsonl::spec() {
  return {.name = "jsonl",
          .summary = "JSON lines: one object per event or per aggregation row",
          .options = output_options(true)};
}

void Jsonl::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_output(opts);
}

void Jsonl::on_events(std::span<Event* const> events) noexcept {
  if (!per_event_)
    return;
  for (const Event* e : events) {
    buf_.clear();
    buf_.push_back('{');
    bool first = true;
    for (const auto& f : fields_) {
      const Value v = f.read(*e);
      if (is_none(v))
        continue;
      if (!first)
        buf_.push_back(',');
      first = false;
      append_json_string(buf_, f.name());
      buf_.push_back(':');
      append_json(buf_, v);
    }
    buf_.append(std::string_view("}\n"));
    write_buffer();
  }
}

void Jsonl::on_table(const Table& t) {
  for (const auto& row : t.rows) {
    buf_.clear();
    buf_.push_back('{');
    buf_.append(std::string_view("\"stage\":"));
    append_json_string(buf_, t.stage);
    fmt::format_to(fmt::appender(buf_), R"(,"interval":{},"time":{},{}"keys":{{)", t.interval,
                   t.time.count(), t.total ? R"("total":true,)" : "");
    for (std::size_t k = 0; k < row.keys.size() && k < t.key_names.size(); ++k) {
      if (k != 0)
        buf_.push_back(',');
      append_json_string(buf_, t.key_names[k]);
      buf_.push_back(':');
      append_json(buf_, row.keys[k]);
    }
    buf_.push_back('}');
    if (t.histogram) {
      if (!row.values.empty()) {
        buf_.append(std::string_view(",\"count\":"));
        append_json(buf_, row.values.front());
      }
      if (row.values.size() > 1) {  // the sum of the values
        buf_.append(std::string_view(",\"sum\":"));
        append_json(buf_, row.values[1]);
      }
      buf_.append(std::string_view(",\"buckets\":["));
      for (std::size_t b = 0; b < row.buckets.size(); ++b) {
        const auto& hb = row.buckets[b];
        if (b != 0)
          buf_.push_back(',');
        buf_.append(std::string_view("{\"lo\":"));
        if (hb.lo_unbounded)
          buf_.append(std::string_view("null"));
        else
          fmt::format_to(fmt::appender(buf_), "{}", hb.lo);
        buf_.append(std::string_view(",\"hi\":"));
        if (hb.hi_unbounded)
          buf_.append(std::string_view("null"));
        else
          fmt::format_to(fmt::appender(buf_), "{}", hb.hi);
        fmt::format_to(fmt::appender(buf_), ",\"count\":{}}}", hb.count);
      }
      buf_.push_back(']');
    } else {
      for (std::size_t v = 0; v < row.values.size() && v < t.value_names.size(); ++v) {
        buf_.push_back(',');
        append_json_string(buf_, t.value_names[v]);
        buf_.push_back(':');
        append_json(buf_, row.values[v]);
      }
    }
    buf_.append(std::string_view("}\n"));
    write_buffer();
  }
}

}  // namespace tracer::stages
