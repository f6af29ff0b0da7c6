// otlp: events as OpenTelemetry log records and the tables of the aggregations before it as
// OpenTelemetry metrics, sent to a collector over OTLP/HTTP (protobuf, or JSON with
// encoding = "json"): batched, queued (bounded) and sent from a thread of their own with retries,
// so that a slow or absent collector never holds the drain. What is dropped (a full queue,
// a collector that refused or never answered, what a stop had no time for) is counted by
// records: otlp.dropped_records in the summary and in every metrics request.
//
// Tables become metrics named PREFIX.STAGE[.FIELD][.VALUE] ("tracer.count",
// "tracer.hist.offset"): counts and sums are monotonic Sums, hist and lhist Histograms (a bucket
// [lo, hi) of integers has the explicit bound hi - 1: exact), quantiles Summaries, the rest
// Gauges; the table's keys are the attributes. Each table is a delta over the time it covers
// (an interval with `every`, else the whole run, sent at the end); a total is cumulative.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "otlp_sender.hpp"
#include "output.hpp"

namespace tracer::stages {

class Otlp : public OutputStage {
 public:
  Otlp();
  ~Otlp() override;
  [[nodiscard]] static StageSpec spec();
  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void start() override;
  void on_events(std::span<Event* const> events) noexcept override;
  void on_table(const Table& table) override;
  void flush() override;
  void stop() override;
  void counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const override;
  void warnings(std::vector<std::string>& out) const override;

  struct Batch;

 private:
  /// "http://host:port/base" as configured.
  [[nodiscard]] std::string endpoint_text() const;
  /// Why records were not sent: the sender's last error, or what else drops them.
  [[nodiscard]] static std::string reason(const OtlpSender::Stats& st);
  void bind_format(BindContext& ctx, Diagnostics& diags) override;
  /// The log records gathered so far go to the sender as one request.
  void send_logs();
  [[nodiscard]] std::string encode_logs();

  OtlpEndpoint endpoint_{};
  bool json_ = false;
  std::size_t batch_ = 512;
  std::chrono::nanoseconds flush_every_ = std::chrono::seconds(1);
  std::size_t queue_ = 64;
  std::chrono::milliseconds timeout_{5000};
  std::chrono::milliseconds stop_budget_{400};  // a stop is honoured within 0.5 s
  std::string service_ = "tracer";
  std::string prefix_ = "tracer";
  bool dry_run_ = false;
  std::unique_ptr<Batch> batch_state_;
  std::unique_ptr<OtlpSender> sender_;
  std::chrono::steady_clock::time_point first_pending_{};
  std::int64_t realtime_offset_ = 0;  // CLOCK_REALTIME - CLOCK_MONOTONIC at the start, in ns
  std::chrono::nanoseconds run_start_{};
  std::uint64_t encode_failures_ = 0;
};

}  // namespace tracer::stages
