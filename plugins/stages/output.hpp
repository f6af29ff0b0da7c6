// Shared machinery of the output stages (print, jsonl, csv): which fields a per-event line shows,
// where output goes (the pipeline's sink or a `path`), and value formatting without allocation.
#pragma once

#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "tracer/ext/stage.hpp"

namespace tracer::stages {

/// Options every output takes: fields, kinds (and path for the file outputs).
[[nodiscard]] std::vector<OptionSpec> output_options(bool with_path);

/// Base of the outputs of events and tables (the Output role).
class OutputStage : public Stage, public Output {
 public:
  /// The shared part (sink, per-event fields), then bind_format; then asks the pipeline for the
  /// `kinds` option's records, in time order when per-event (as perf script prints them).
  void bind(BindContext& ctx, Diagnostics& diags) final;
  void stop() override;
  [[nodiscard]] Output* output() noexcept override { return this; }
  void flush() override;
  /// Per-event output (true) or aggregation rows only (false): `events` option, else per-event
  /// unless an aggregation precedes the output.
  [[nodiscard]] bool per_event() const noexcept { return per_event_; }
  [[nodiscard]] bool writes_events_after_aggregation() const noexcept override {
    return events_opt_.value_or(false);
  }
  [[nodiscard]] std::span<const FieldRef> event_fields() const noexcept override {
    return per_event_ ? std::span<const FieldRef>(fields_) : std::span<const FieldRef>();
  }

 protected:
  void configure_output(StageOptions& opts);
  /// What an output binds of its own after the shared part (a format, a header); it may decide
  /// per_event_.
  virtual void bind_format(BindContext& /*ctx*/, Diagnostics& /*diags*/) {}
  void write_buffer() noexcept { sink_->write({buf_.data(), buf_.size()}); }

  std::vector<std::pair<std::string, SourceRegion>> field_names_;
  std::vector<FieldRef> fields_;
  KindMask kinds_ = kind_bit(RecordKind::kSample);
  std::optional<std::string> path_;
  SourceRegion path_where_;
  std::optional<bool> events_opt_;
  bool per_event_ = true;
  Sink* sink_ = nullptr;
  std::optional<Sink> own_;
  std::string discard_;  // a dry run's sink (BindContext::dry_run)
  fmt::memory_buffer buf_;

 private:
  /// Sink and per-event fields (per_event_ from `events`, or whether an aggregation precedes).
  void bind_shared(BindContext& ctx, Diagnostics& diags);
};

/// Text of a value: numbers in decimal, strings as they are, ip lists as 0x..;0x...
void append_text(fmt::memory_buffer& out, const Value& v);
/// A JSON string literal with every byte escaped that JSON requires (quotes, backslash, control
/// characters) and invalid UTF-8 bytes as \u00XX.
void append_json_string(fmt::memory_buffer& out, std::string_view s);
/// A JSON value (null for a missing value or a non-finite double).
void append_json(fmt::memory_buffer& out, const Value& v);
void append_json(fmt::memory_buffer& out, const Cell& c);
/// A stack as a JSON array of frames, leaf first: {"addr","sym","offset","module"[,"file",
/// "line"][,"inlined"][,"kernel"]}.
void append_json(fmt::memory_buffer& out, const Stack& stack);
/// A CSV field, quoted (RFC 4180) when it holds a comma, quote, CR/LF or edge spaces.
void append_csv(fmt::memory_buffer& out, std::string_view s);

}  // namespace tracer::stages
