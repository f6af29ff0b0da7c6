#include "output.hpp"
#include "tracer/common/json.hpp"

#include <cmath>

#include "filter.hpp"

namespace tracer::stages {

namespace {
constexpr std::uint64_t kContextMax = static_cast<std::uint64_t>(-4095);

template <typename... Args>
void put(fmt::memory_buffer& out, fmt::format_string<Args...> f, Args&&... args) {
  fmt::format_to(fmt::appender(out), f, std::forward<Args>(args)...);
}
void put_str(fmt::memory_buffer& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}
}  // namespace

std::vector<OptionSpec> output_options(bool with_path) {
  std::vector<OptionSpec> o = {
      {.name = "fields",
       .type = OptionSpec::Type::kFieldList,
       .required = false,
       .help = "fields of per-event output (default: probe, time, cpu, pid, tid, comm and every "
               "payload and derived field)"},
      {.name = "kinds",
       .type = OptionSpec::Type::kStringList,
       .required = false,
       .help = "record kinds written per event (default [\"sample\"])"},
      {.name = "events",
       .type = OptionSpec::Type::kBool,
       .required = false,
       .help = "write every event (default: only when no aggregation precedes)"},
  };
  if (with_path) {
    o.push_back({.name = "path",
                 .type = OptionSpec::Type::kString,
                 .required = false,
                 .help = "write to this file instead of stdout"});
  }
  return o;
}

void OutputStage::configure_output(StageOptions& opts) {
  field_names_ = opts.list("fields");
  kinds_ = read_kinds(opts, kind_bit(RecordKind::kSample), opts.diags());
  path_ = opts.string("path");
  path_where_ = opts.where("path");
  events_opt_ = opts.boolean("events");
}

void OutputStage::bind(BindContext& ctx, Diagnostics& diags) {
  bind_shared(ctx, diags);
  bind_format(ctx, diags);
  // Tables only: no event is written, so none is routed here (and the pipeline may hand
  // delivered samples to the aggregations in place).
  ctx.kinds = per_event_ ? kinds_ : KindMask{0};
  ctx.time_order = per_event_;
}

void OutputStage::bind_shared(BindContext& ctx, Diagnostics& diags) {
  per_event_ = events_opt_.value_or(!ctx.upstream_aggregates);
  sink_ = &ctx.out;
  if (ctx.dry_run) {
    // `tracer check`: no file is opened, created or truncated, and nothing reaches stdout.
    own_.emplace(Sink::to_string(&discard_));
    sink_ = &*own_;
  } else if (path_) {
    auto s = Sink::open(*path_);
    if (s) {
      own_.emplace(std::move(*s));
      sink_ = &*own_;
    } else {
      diags.add(path_where_, s.error().message, s.error().hint);
    }
  }
  fields_.clear();
  if (!per_event_ && field_names_.empty())
    return;  // tables only: no per-event fields to bind (binding comm would order the pipeline)
  auto names = field_names_;
  if (names.empty()) {
    // Default: the common sample fields, then the union of every probe's payload fields, then
    // derived ones; events print only the fields their probe has.
    for (std::string_view n : {"probe", "time", "cpu", "pid", "tid", "comm"})
      names.emplace_back(std::string(n), ctx.where);
    const auto has = [&](const std::string& n) {
      return std::any_of(names.begin(), names.end(), [&](const auto& p) { return p.first == n; });
    };
    for (std::uint32_t p = 0; p < ctx.schema.probes().size(); ++p) {
      for (auto& n : ctx.schema.payload_field_names(p)) {
        if (!has(n))
          names.emplace_back(std::move(n), ctx.where);
      }
    }
    if (!ctx.schema.probes().empty()) {
      const auto all = ctx.schema.field_names(0);
      for (std::size_t i = all.size() - ctx.schema.derived_count(); i < all.size(); ++i) {
        if (!has(all[i]))
          names.emplace_back(all[i], ctx.where);
      }
    }
  }
  for (const auto& [name, where] : names) {
    if (auto f = ctx.schema.bind(name, where, diags))
      fields_.push_back(std::move(*f));
  }
}

void OutputStage::flush() {
  sink_->flush();
}

void OutputStage::stop() {
  sink_->flush();
  own_.reset();
}

void append_text(fmt::memory_buffer& out, const Value& v) {
  std::visit(
      [&out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          put_str(out, x);
        } else if constexpr (std::is_same_v<T, IpList>) {
          bool first = true;
          for (std::uint64_t i = 0; i < x.ips.size; ++i) {
            if (x.ips[i] >= kContextMax)
              continue;
            put(out, "{}{:#x}", first ? "" : ";", x.ips[i]);
            first = false;
          }
        } else {
          put(out, "{}", x);
        }
      },
      v);
}

void append_json_string(fmt::memory_buffer& out, std::string_view s) {
  json::append_string(out, s);
}

void append_json(fmt::memory_buffer& out, const Value& v) {
  std::visit(
      [&out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          put_str(out, "null");
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          append_json_string(out, x);
        } else if constexpr (std::is_same_v<T, IpList>) {
          out.push_back('[');
          bool first = true;
          for (std::uint64_t i = 0; i < x.ips.size; ++i) {
            if (x.ips[i] >= kContextMax)
              continue;
            put(out, "{}\"{:#x}\"", first ? "" : ",", x.ips[i]);
            first = false;
          }
          out.push_back(']');
        } else if constexpr (std::is_same_v<T, double>) {
          if (std::isfinite(x))
            put(out, "{}", x);
          else
            put_str(out, "null");
        } else {
          put(out, "{}", x);
        }
      },
      v);
}

void append_json(fmt::memory_buffer& out, const Stack& stack) {
  out.push_back('[');
  bool first = true;
  for (const auto& f : stack.frames) {
    put(out, R"({}{{"addr":"{:#x}","sym":)", first ? "" : ",", f.addr);
    first = false;
    if (f.symbol.empty())
      put_str(out, "null");
    else
      append_json_string(out, f.symbol);
    put(out, R"(,"offset":{},"module":)", f.offset);
    append_json_string(out, f.module);
    if (!f.file.empty()) {
      put_str(out, ",\"file\":");
      append_json_string(out, f.file);
      put(out, ",\"line\":{}", f.line);
    }
    if (f.inlined)
      put_str(out, ",\"inlined\":true");
    if (f.kernel)
      put_str(out, ",\"kernel\":true");
    out.push_back('}');
  }
  out.push_back(']');
}

void append_json(fmt::memory_buffer& out, const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c)) {
    append_json_string(out, *s);
    return;
  }
  if (const auto* st = std::get_if<Stack>(&c)) {
    append_json(out, *st);
    return;
  }
  std::visit(
      [&out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          put_str(out, "null");
        else if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, Stack>)
          return;  // handled above
        else
          append_json(out, Value{x});
      },
      c);
}

void append_csv(fmt::memory_buffer& out, std::string_view s) {
  const bool quote = s.find_first_of(",\"\r\n") != std::string_view::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) {
    put_str(out, s);
    return;
  }
  out.push_back('"');
  for (const char c : s) {
    if (c == '"')
      out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
}

}  // namespace tracer::stages
