// Metrics in Prometheus's text exposition format (version 0.0.4): families of samples with
// HELP and TYPE lines, valid names and escaped label values. What `tracer serve` answers a
// scrape of /metrics with.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tracer::exporter {

enum class MetricType : std::uint8_t { kCounter, kGauge, kHistogram, kSummary, kUntyped };

struct Label {
  std::string name;
  std::string value;
  friend bool operator==(const Label&, const Label&) = default;
  friend auto operator<=>(const Label&, const Label&) = default;
};

/// One line: the family's name with `suffix` ("_bucket", "_sum", "_count", or none), its labels
/// and its value.
struct Sample {
  std::string suffix{};
  std::vector<Label> labels{};
  double value = 0;
};

struct Family {
  std::string name;
  std::string help;
  MetricType type = MetricType::kUntyped;
  std::vector<Sample> samples{};
};

/// `text` as a metric name: every character outside [a-zA-Z0-9_:] becomes '_', and a leading
/// digit gets a '_' before it ("sched.wakeup-latency" -> "sched_wakeup_latency").
[[nodiscard]] std::string metric_name(std::string_view text);
/// `text` as a label name: as metric_name without ':', and a name starting "__" (reserved by
/// Prometheus) gets a leading "x".
[[nodiscard]] std::string label_name(std::string_view text);
/// A label value as written between quotes: backslash, double quote and newline escaped.
[[nodiscard]] std::string escape_label_value(std::string_view value);
/// A HELP text: backslash and newline escaped.
[[nodiscard]] std::string escape_help(std::string_view help);
/// A sample value: integers exactly (up to 2^53), "+Inf", "-Inf", "NaN".
[[nodiscard]] std::string format_value(double v);

/// Appends the families in the text format: "# HELP", "# TYPE", then a line per sample. A family
/// without samples is left out; families of the same name must come together (merge first).
void render(std::span<const Family> families, std::string& out);

/// The content type of render()'s text.
inline constexpr std::string_view kContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace tracer::exporter
