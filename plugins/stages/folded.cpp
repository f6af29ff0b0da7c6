#include "folded.hpp"

#include <algorithm>
#include <ranges>

namespace tracer::stages {

std::vector<PathFrame> collapsed_path(const TableRow& row) {
  std::vector<PathFrame> path;
  std::vector<const Stack*> user, kernel;
  for (const auto& k : row.keys) {
    if (const auto* s = std::get_if<Stack>(&k)) {
      const bool all_kernel =
          !s->frames.empty() && std::all_of(s->frames.begin(), s->frames.end(),
                                            [](const symbols::Frame& f) { return f.kernel; });
      (all_kernel ? kernel : user).push_back(s);
    } else {
      path.push_back({.name = to_text(k), .kernel = false});
    }
  }
  for (const auto* group : {&user, &kernel}) {
    for (const Stack* s : *group) {
      for (const auto& f : std::views::reverse(s->frames))
        path.push_back(
            {.name = symbols::frame_label(f, /*with_offset=*/false), .kernel = f.kernel});
    }
  }
  return path;
}

std::uint64_t row_weight(const TableRow& row) {
  if (!row.values.empty()) {
    const Cell& v = row.values.front();
    if (const auto* u = std::get_if<std::uint64_t>(&v))
      return *u;
    if (const auto* i = std::get_if<std::int64_t>(&v))
      return *i > 0 ? static_cast<std::uint64_t>(*i) : 0;
    if (const auto* d = std::get_if<double>(&v))
      return *d > 0 ? static_cast<std::uint64_t>(*d) : 0;
  }
  std::uint64_t n = 0;
  for (const auto& b : row.buckets)
    n += b.count;
  return n;
}

std::string folded_line(const std::vector<PathFrame>& path) {
  std::string out;
  for (const auto& f : path) {
    if (!out.empty())
      out += ';';
    for (const char c : f.name)
      out += c == ';' || c == '\n' ? ':' : c;
  }
  return out;
}

void StackOutput::configure_stack_output(StageOptions& opts) {
  path_ = opts.string("path");
  path_where_ = opts.where("path");
  events_opt_ = false;  // tables only
}

void StackOutput::bind_format(BindContext& ctx, Diagnostics& diags) {
  if (!ctx.upstream_aggregates) {
    diags.add(
        ctx.where, "this stage writes the stacks of an aggregation's table, and none precedes it",
        R"(put an aggregation keyed by a stack before it: [[stage]] use = "count" by = ["ustack", "kstack"])");
  }
}

StageSpec Folded::spec() {
  return {.name = "folded",
          .summary =
              "collapsed stacks (frame;frame;frame count) of the aggregation before it, "
              "for flame graphs",
          .options = {{.name = "path",
                       .type = OptionSpec::Type::kString,
                       .required = false,
                       .help = "write to this file instead of stdout"}},
          .needs = {}};
}

void Folded::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_stack_output(opts);
}

void Folded::on_table(const Table& table) {
  std::map<std::string, std::uint64_t> lines;
  for (const auto* part : {&table.rows, &table.rest})  // every row, whatever `top` kept
    for (const auto& row : *part) {
      if (const std::uint64_t w = row_weight(row); w != 0)
        lines[folded_line(collapsed_path(row))] += w;
    }
  buf_.clear();
  for (const auto& [line, n] : lines)
    fmt::format_to(fmt::appender(buf_), "{} {}\n", line.empty() ? "[none]" : line, n);
  write_buffer();
}

}  // namespace tracer::stages
