#include "print.hpp"

#include <algorithm>

namespace tracer::stages {

StageSpec Print::spec() {
  StageSpec s{.name = "print",
              .summary = "human text: per-event lines, aligned tables, ASCII histograms",
              .options = {{.name = "format",
                           .type = OptionSpec::Type::kString,
                           .required = false,
                           .help = "per-event line with {field} placeholders ({{ and }} for "
                                   "braces): format = \"{comm} opened {filename}\""}}};
  auto common = output_options(false);
  s.options.insert(s.options.end(), common.begin(), common.end());
  return s;
}

void Print::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_output(opts);
  const auto format = opts.string("format");
  if (!format)
    return;
  has_format_ = true;
  const SourceRegion where = opts.where("format");
  const std::string& f = *format;
  Piece cur;
  for (std::size_t i = 0; i < f.size(); ++i) {
    const char c = f[i];
    if (c == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      cur.literal.push_back('{');
      ++i;
    } else if (c == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      cur.literal.push_back('}');
      ++i;
    } else if (c == '{') {
      const auto close = f.find('}', i);
      if (close == std::string::npos || close == i + 1) {
        SourceRegion at = where;
        at.column += static_cast<std::uint32_t>(i + 1);
        diags.add(at,
                  close == std::string::npos ? "format: '{' without a closing '}'"
                                             : "format: empty placeholder '{}'",
                  "name a field: {comm}; write {{ for a literal brace");
        return;
      }
      cur.field = f.substr(i + 1, close - i - 1);
      cur.where = where;
      cur.where.column += static_cast<std::uint32_t>(i + 2);
      pieces_.push_back(std::move(cur));
      cur = Piece{};
      i = close;
    } else {
      cur.literal.push_back(c);
    }
  }
  cur.literal.push_back('\n');
  pieces_.push_back(std::move(cur));
}

void Print::bind_format(BindContext& ctx, Diagnostics& diags) {
  if (has_format_)
    per_event_ = true;
  piece_fields_.clear();
  for (const auto& p : pieces_) {
    if (p.field.empty())
      continue;
    if (auto f = ctx.schema.bind(p.field, p.where, diags))
      piece_fields_.push_back(std::move(*f));
    else
      piece_fields_.emplace_back();
  }
}

void Print::on_events(std::span<Event* const> events) noexcept {
  if (!per_event_)
    return;
  for (const Event* e : events) {
    buf_.clear();
    if (has_format_) {
      std::size_t fi = 0;
      for (const auto& p : pieces_) {
        buf_.append(p.literal.data(), p.literal.data() + p.literal.size());
        if (!p.field.empty()) {
          const FieldRef& f = piece_fields_[fi++];
          if (f.bound())
            append_text(buf_, f.read(*e));
        }
      }
    } else {
      bool first = true;
      for (const auto& f : fields_) {
        const Value v = f.read(*e);
        if (is_none(v))
          continue;
        if (!first)
          buf_.push_back(' ');
        first = false;
        buf_.append(f.name().data(), f.name().data() + f.name().size());
        buf_.push_back('=');
        append_text(buf_, v);
      }
      buf_.push_back('\n');
    }
    write_buffer();
  }
}

void Print::on_table(const Table& table) {
  const std::string text = render(table);
  sink_->write(text);
}

std::string Print::render_stacks(const Table& t) {
  // A row per block, as perf report -g and bpftrace print stacks: the other keys and the values
  // on one line, then each stack's frames leaf first, indented, a stack apart from the next by a
  // "--" line.
  std::string out;
  for (const auto& row : t.rows) {
    std::vector<std::string> head;
    for (std::size_t k = 0; k < row.keys.size(); ++k) {
      if (!std::holds_alternative<Stack>(row.keys[k]) && k < t.key_names.size())
        head.push_back(fmt::format("{}={}", t.key_names[k], to_text(row.keys[k])));
    }
    for (std::size_t v = 0; v < row.values.size() && v < t.value_names.size(); ++v) {
      const auto* d = std::get_if<double>(&row.values[v]);
      head.push_back(
          fmt::format("{}={}", t.value_names[v],
                      d != nullptr ? fmt::format("{:.2f}", *d) : to_text(row.values[v])));
    }
    out += fmt::format("{}\n", fmt::join(head, " "));
    bool first = true;
    for (const auto& k : row.keys) {
      const auto* stack = std::get_if<Stack>(&k);
      if (stack == nullptr)
        continue;
      if (!first)
        out += "    --\n";
      first = false;
      for (const auto& f : stack->frames) {
        out += fmt::format("    {}{}", f.inlined ? "(inlined) " : "",
                           symbols::frame_label(f, /*with_offset=*/f.offset != 0));
        if (!f.module.empty())
          out += fmt::format(" ({})", f.module);
        if (!f.file.empty())
          out += fmt::format(" {}:{}", f.file, f.line);
        out += '\n';
      }
    }
    out += '\n';
  }
  if (!t.note.empty())
    out += fmt::format("({})\n", t.note);
  return out;
}

std::string Print::render(const Table& t) {
  std::string out = fmt::format("{}:\n", t.title);
  if (t.histogram) {
    const std::string name = t.value_names.empty() ? std::string() : t.value_names.front();
    for (const auto& row : t.rows) {
      if (row.keys.empty()) {
        out += fmt::format("@{}:\n", name);
      } else {
        std::vector<std::string> keys;
        keys.reserve(row.keys.size());
        for (const auto& k : row.keys)
          keys.push_back(to_text(k));
        out += fmt::format("@{}[{}]:\n", name, fmt::join(keys, ", "));
      }
      std::uint64_t max = 0;
      for (const auto& b : row.buckets)
        max = std::max(max, b.count);
      for (const auto& b : row.buckets) {
        // bpftrace: bar = count / max * 52, truncated.
        const auto bar = max == 0 ? 0 : static_cast<std::size_t>(b.count * kBarWidth / max);
        out += fmt::format("{:<16}{:>8} |{:<52}|\n", b.label, b.count, std::string(bar, '@'));
      }
      out += '\n';
    }
    return out;
  }
  if (std::any_of(t.rows.begin(), t.rows.end(), [](const TableRow& r) {
        return std::any_of(r.keys.begin(), r.keys.end(),
                           [](const Cell& c) { return std::holds_alternative<Stack>(c); });
      }))
    return out + render_stacks(t);
  // An aligned table: keys left-aligned, values right-aligned, two spaces between columns.
  std::vector<std::string> header = t.key_names;
  header.insert(header.end(), t.value_names.begin(), t.value_names.end());
  std::vector<std::vector<std::string>> cells;
  // Numbers right-aligned, text left-aligned: a column is numeric if every cell in it is.
  std::vector<bool> numeric(header.size(), true);
  for (const auto& row : t.rows) {
    std::size_t c = 0;
    for (const auto* part : {&row.keys, &row.values}) {
      for (const auto& cell : *part) {
        // (An empty cell, a metric's raw count, leaves the column as its other cells make it.)
        if (c < numeric.size() && std::holds_alternative<std::string>(cell))
          numeric[c] = false;
        ++c;
      }
    }
  }
  for (const auto& row : t.rows) {
    std::vector<std::string> line;
    for (const auto& k : row.keys)
      line.push_back(to_text(k));
    for (const auto& v : row.values) {
      if (const auto* d = std::get_if<double>(&v))
        line.push_back(fmt::format("{:.2f}", *d));
      else
        line.push_back(to_text(v));
    }
    line.resize(header.size());
    cells.push_back(std::move(line));
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t c = 0; c < header.size(); ++c) {
    width[c] = header[c].size();
    for (const auto& line : cells)
      width[c] = std::max(width[c], line[c].size());
  }
  const auto emit = [&](const std::vector<std::string>& line) {
    std::string text;
    for (std::size_t c = 0; c < line.size(); ++c) {
      if (c != 0)
        text += "  ";
      if (!numeric[c])
        text += fmt::format("{:<{}}", line[c], width[c]);
      else
        text += fmt::format("{:>{}}", line[c], width[c]);
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    out += text;
    out += '\n';
  };
  emit(header);
  for (const auto& line : cells)
    emit(line);
  if (!t.note.empty())
    out += fmt::format("({})\n", t.note);
  out += '\n';
  return out;
}

}  // namespace tracer::stages
