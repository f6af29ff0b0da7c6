// Where stages write: a Sink (stdout, a file, a string), and the tables aggregations hand to
// the outputs after them (Table, its rows and cells).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracer/result.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/value.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// Output: a sink is given by the caller (stdout, a file, or a string in tests).

class Sink {
 public:
  /// Writes to `file` (not owned, not closed).
  [[nodiscard]] static Sink to_file(std::FILE* file) noexcept;
  /// Appends to `*text` (tests).
  [[nodiscard]] static Sink to_string(std::string* text) noexcept;
  /// Writes nowhere: a host that takes the events and tables as values (Session::on_event,
  /// on_table) and wants no text.
  [[nodiscard]] static Sink discard() noexcept;
  /// Creates or truncates `path` (closed on destruction).
  /// @return the sink, or a Failure with the errno of fopen.
  [[nodiscard]] static Result<Sink> open(const std::string& path);

  void write(std::string_view bytes) noexcept;
  void flush() noexcept;
  /// The errno of the first write or flush that failed (a full disk, a closed pipe), else 0.
  [[nodiscard]] int error() const noexcept { return error_; }

 private:
  int error_ = 0;
  struct Closer {
    void operator()(std::FILE* f) const noexcept;
  };
  std::FILE* file_ = nullptr;
  std::string* text_ = nullptr;
  std::unique_ptr<std::FILE, Closer> owned_;
};

/// A stack in a table: frames leaf first, symbolized when the table was made.
struct Stack {
  std::vector<symbols::Frame> frames;
  friend bool operator==(const Stack&, const Stack&) = default;
};

/// A cell of an aggregation row (owned: rows outlive the records they came from).
using Cell = std::variant<std::monostate, std::int64_t, std::uint64_t, double, std::string, Stack>;

struct HistBucket {
  std::int64_t lo = 0, hi = 0;  // [lo, hi)
  bool lo_unbounded = false;    // (..., hi)
  bool hi_unbounded = false;    // [lo, ...)
  std::uint64_t count = 0;
  std::string label;  // "[4, 8)", "[1K, 2K)", "[0]", "(..., 0)": as the stage renders it
};

struct TableRow {
  std::vector<Cell> keys;
  std::vector<Cell> values;         // one per Table::value_names
  std::vector<HistBucket> buckets;  // histograms: from the first to the last non-empty bucket
};

/// What a value column means to the exporters (Prometheus, OTLP): how it adds up across
/// intervals and merged rows, and which metric it is. Set by the stage with its value names.
enum class ValueKind : std::uint8_t {
  kGauge,     // a level (an average, a rate, a spread): never added up
  kCount,     // events: a counter; a histogram's or a summary's count
  kSum,       // a sum of values: a counter; a histogram's or a summary's sum
  kMin,       // the smallest value: a gauge; merged rows keep the smallest
  kMax,       // the largest value: a gauge; merged rows keep the largest
  kQuantile,  // the next of Table::quantiles: a summary's quantile
  kLabel,     // text (the counters stage's unit): a label of the row, not a number
};

/// What an aggregation stage emits at each interval and at stop.
struct Table {
  std::string stage;  // "count"
  std::string title;  // "count by comm", "hist of duration"
  std::string field;  // the field it aggregates ("duration"); empty for a count of events
  /// The quantiles stage: the q (0.5, 0.99, ...) of its values named "p50", "p99", ... in order.
  std::vector<double> quantiles;
  std::vector<std::string> key_names;
  std::vector<std::string> value_names;
  /// One per value_names: what each is (empty: value_kinds_of() infers them from the names, for
  /// the tables of stages that declare none: a C plugin's, a BPF map's).
  std::vector<ValueKind> value_kinds;
  bool histogram = false;
  /// The values are one summary (a count, a sum, the quantiles; the extremes beside it), not a
  /// metric each.
  bool summary = false;
  std::vector<TableRow> rows;  // ordered (top N first), already cut to `top`
  /// The rows `top` cut, in the same order: outputs that need every row (folded stacks, flame
  /// graphs, CSV) read rows then rest; a table on a terminal shows rows only.
  std::vector<TableRow> rest;
  std::chrono::nanoseconds since{};  // the interval this table covers: [since, time)
  std::chrono::nanoseconds time{};
  std::uint32_t interval = 0;  // 0, 1, 2 ... per emitting stage
  /// The whole run's, after the last interval's table (Aggregation::total_at_stop): `since` is
  /// the start of the run.
  bool total = false;
  std::string note;  // e.g. the quantile error bound
};

/// The kinds of `t`'s values: its value_kinds, or, when the stage declared none, from the names
/// ("count" a count, "sum" a sum, "min" and "max" the extremes, "unit" a label, "pNN" a
/// quantile, anything else a gauge; a histogram's first value its count).
[[nodiscard]] std::vector<ValueKind> value_kinds_of(const Table& t);

/// A stack as one line, outermost frame first, frames by name without offsets and separated by
/// ';' (the folded form of flamegraph.pl's stackcollapse; unknown frames as "0x...").
[[nodiscard]] std::string folded_text(const Stack& s);
/// Renders a cell for text output ("" for none; a stack as "outer;...;leaf", folded order).
[[nodiscard]] std::string to_text(const Cell& c);
/// A numeric cell as a double (exporters' values); nullopt for none, a string or a stack.
[[nodiscard]] std::optional<double> to_number(const Cell& c) noexcept;

}  // namespace tracer

#pragma GCC visibility pop
