// Prometheus's text exposition format (see prometheus.hpp).
#include "tracer/exporter/prometheus.hpp"

#include <fmt/format.h>

#include <cctype>
#include <cmath>

namespace tracer::exporter {
namespace {

bool name_char(char c, bool colon) noexcept {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || (colon && c == ':');
}

std::string sanitize(std::string_view text, bool colon) {
  std::string out;
  out.reserve(text.size() + 1);
  if (text.empty() || std::isdigit(static_cast<unsigned char>(text.front())) != 0)
    out.push_back('_');
  for (char c : text)
    out.push_back(name_char(c, colon) ? c : '_');
  return out;
}

std::string_view type_name(MetricType t) noexcept {
  switch (t) {
    case MetricType::kCounter:
      return "counter";
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kUntyped:
      break;
  }
  return "untyped";
}

}  // namespace

std::string metric_name(std::string_view text) {
  return sanitize(text, true);
}

std::string label_name(std::string_view text) {
  std::string out = sanitize(text, false);
  if (out.starts_with("__"))
    out.insert(out.begin(), 'x');
  return out;
}

std::string escape_label_value(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

std::string escape_help(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '\n')
      out += "\\n";
    else
      out.push_back(c);
  }
  return out;
}

std::string format_value(double v) {
  if (std::isnan(v))
    return "NaN";
  if (std::isinf(v))
    return v > 0 ? "+Inf" : "-Inf";
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (v == std::trunc(v) && std::fabs(v) <= kExact)
    return fmt::format("{}", static_cast<std::int64_t>(v));
  return fmt::format("{}", v);  // shortest round-trip form
}

void render(std::span<const Family> families, std::string& out) {
  for (const Family& f : families) {
    if (f.samples.empty())
      continue;
    fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", f.name,
                   escape_help(f.help), f.name, type_name(f.type));
    for (const Sample& s : f.samples) {
      out += f.name;
      out += s.suffix;
      if (!s.labels.empty()) {
        out.push_back('{');
        for (std::size_t i = 0; i < s.labels.size(); ++i) {
          if (i != 0)
            out.push_back(',');
          out += s.labels[i].name;
          out += "=\"";
          out += escape_label_value(s.labels[i].value);
          out.push_back('"');
        }
        out.push_back('}');
      }
      out.push_back(' ');
      out += format_value(s.value);
      out.push_back('\n');
    }
  }
}

}  // namespace tracer::exporter
