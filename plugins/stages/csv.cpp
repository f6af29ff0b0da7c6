#include "csv.hpp"

namespace tracer::stages {

StageSpec Csv::spec() {
  return {.name = "csv",
          .summary = "comma-separated rows: one per event or per aggregation row",
          .options = output_options(true)};
}

void Csv::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_output(opts);
}

void Csv::bind_format(BindContext& /*ctx*/, Diagnostics& /*diags*/) {
  if (per_event_) {
    std::vector<std::string> names;
    names.reserve(fields_.size());
    for (const auto& f : fields_)
      names.push_back(f.name());
    header(names);
    event_header_done_ = true;
  }
}

void Csv::header(const std::vector<std::string>& names) {
  if (names == last_header_)
    return;
  buf_.clear();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i != 0)
      buf_.push_back(',');
    append_csv(buf_, names[i]);
  }
  buf_.append(std::string_view("\r\n"));
  write_buffer();
  last_header_ = names;
}

void Csv::on_events(std::span<Event* const> events) noexcept {
  if (!per_event_)
    return;
  fmt::memory_buffer cell;
  for (const Event* e : events) {
    buf_.clear();
    for (std::size_t i = 0; i < fields_.size(); ++i) {
      if (i != 0)
        buf_.push_back(',');
      cell.clear();
      append_text(cell, fields_[i].read(*e));
      append_csv(buf_, {cell.data(), cell.size()});
    }
    buf_.append(std::string_view("\r\n"));
    write_buffer();
  }
}

void Csv::on_table(const Table& t) {
  std::vector<std::string> names = {"stage", "interval"};
  names.insert(names.end(), t.key_names.begin(), t.key_names.end());
  if (t.histogram) {
    names.insert(names.end(), {"lo", "hi", "count"});
  } else {
    names.insert(names.end(), t.value_names.begin(), t.value_names.end());
  }
  header(names);
  const auto prefix = [&](const TableRow& row) {
    buf_.clear();
    append_csv(buf_, t.stage);
    if (t.total)  // the whole run's, after the last interval's
      buf_.append(std::string_view(",total"));
    else
      fmt::format_to(fmt::appender(buf_), ",{}", t.interval);
    for (const auto& k : row.keys) {
      buf_.push_back(',');
      append_csv(buf_, to_text(k));
    }
  };
  for (const auto* part : {&t.rows, &t.rest})  // every row, whatever `top` kept
    for (const auto& row : *part) {
      if (t.histogram) {
        for (const auto& b : row.buckets) {
          prefix(row);
          buf_.push_back(',');
          if (!b.lo_unbounded)
            fmt::format_to(fmt::appender(buf_), "{}", b.lo);
          buf_.push_back(',');
          if (!b.hi_unbounded)
            fmt::format_to(fmt::appender(buf_), "{}", b.hi);
          fmt::format_to(fmt::appender(buf_), ",{}\r\n", b.count);
          write_buffer();
        }
      } else {
        prefix(row);
        for (const auto& v : row.values) {
          buf_.push_back(',');
          append_csv(buf_, to_text(v));
        }
        buf_.append(std::string_view("\r\n"));
        write_buffer();
      }
    }
}

}  // namespace tracer::stages
