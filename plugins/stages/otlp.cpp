// otlp: events and tables to an OpenTelemetry collector (see otlp.hpp).
#include "otlp.hpp"
#include "tracer/common/clock.hpp"

#include <fmt/format.h>
#include <google/protobuf/util/json_util.h>
#include <unistd.h>

#include <ctime>

#include "opentelemetry/proto/collector/logs/v1/logs_service.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"

namespace tracer::stages {

namespace otel = opentelemetry::proto;

namespace {

void set_value(otel::common::v1::AnyValue& out, const Value& v) {
  std::visit(
      [&out](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::int64_t>)
          out.set_int_value(x);
        else if constexpr (std::is_same_v<T, std::uint64_t>)
          out.set_int_value(static_cast<std::int64_t>(x));  // OTLP has signed 64-bit ints only
        else if constexpr (std::is_same_v<T, double>)
          out.set_double_value(x);
        else if constexpr (std::is_same_v<T, std::string_view>)
          out.set_string_value(std::string(x));
        else if constexpr (std::is_same_v<T, IpList>) {
          fmt::memory_buffer b;
          append_text(b, Value{x});
          out.set_string_value(fmt::to_string(b));
        }
      },
      v);
}

void set_cell(otel::common::v1::AnyValue& out, const Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c))
    out.set_int_value(*i);
  else if (const auto* u = std::get_if<std::uint64_t>(&c))
    out.set_int_value(static_cast<std::int64_t>(*u));
  else if (const auto* d = std::get_if<double>(&c))
    out.set_double_value(*d);
  else
    out.set_string_value(to_text(c));
}

void attribute(google::protobuf::RepeatedPtrField<otel::common::v1::KeyValue>& out,
               std::string key,
               std::string value) {
  auto* kv = out.Add();
  kv->set_key(std::move(key));
  kv->mutable_value()->set_string_value(std::move(value));
}

void resource(otel::resource::v1::Resource& r, const std::string& service) {
  attribute(*r.mutable_attributes(), "service.name", service);
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0)
    attribute(*r.mutable_attributes(), "host.name", host);
}

void scope(otel::common::v1::InstrumentationScope& s) {
  s.set_name("tracer");
  s.set_version(TRACER_VERSION);
}

/// as_int for an integer cell, else as_double; false for none.
bool set_point(otel::metrics::v1::NumberDataPoint& p, const Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c))
    p.set_as_int(*i);
  else if (const auto* u = std::get_if<std::uint64_t>(&c))
    p.set_as_int(static_cast<std::int64_t>(*u));
  else if (const auto* d = std::get_if<double>(&c))
    p.set_as_double(*d);
  else
    return false;
  return true;
}

template <typename Point>
void keys_as_attributes(Point& p, const Table& t, const TableRow& row) {
  for (std::size_t k = 0; k < row.keys.size() && k < t.key_names.size(); ++k) {
    auto* kv = p.add_attributes();
    kv->set_key(t.key_names[k]);
    set_cell(*kv->mutable_value(), row.keys[k]);
  }
}

std::string serialize(const google::protobuf::Message& m, bool json) {
  std::string out;
  if (!json) {
    m.SerializeToString(&out);
    return out;
  }
  google::protobuf::util::JsonPrintOptions o;
  o.always_print_enums_as_ints = true;  // OTLP/JSON: enums as integers, lowerCamelCase names
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

}  // namespace

struct Otlp::Batch {
  otel::collector::logs::v1::ExportLogsServiceRequest request;
  otel::logs::v1::ScopeLogs* scope = nullptr;
  std::size_t records = 0;
};

Otlp::Otlp() = default;
Otlp::~Otlp() = default;

StageSpec Otlp::spec() {
  StageSpec s{.name = "otlp",
              .summary =
                  "events as OpenTelemetry log records and tables as metrics, to a "
                  "collector over OTLP/HTTP (batched, bounded, retried)",
              .options = output_options(false)};
  const auto opt = [&](const char* name, OptionSpec::Type type, const char* help) {
    s.options.push_back({.name = name, .type = type, .required = false, .help = help});
  };
  opt("endpoint", OptionSpec::Type::kString,
      "the collector's OTLP/HTTP address (default http://127.0.0.1:4318; /v1/logs and "
      "/v1/metrics are added)");
  opt("encoding", OptionSpec::Type::kString, "protobuf (default) or json");
  opt("batch", OptionSpec::Type::kInt, "log records per request at most (default 512)");
  opt("flush", OptionSpec::Type::kDuration,
      "send the records gathered after this long at most (default 1s)");
  opt("queue", OptionSpec::Type::kInt,
      "requests waiting for the collector at most (default 64); past it they are dropped and "
      "counted");
  opt("timeout", OptionSpec::Type::kDuration,
      "per request, connect to answer (default 5s, at most 60s)");
  opt("service", OptionSpec::Type::kString, "the resource's service.name (default tracer)");
  opt("prefix", OptionSpec::Type::kString, "the start of metric names (default tracer)");
  return s;
}

void Otlp::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  configure_output(opts);
  if (auto e = opts.string("endpoint")) {
    auto parsed = parse_otlp_endpoint(*e);
    if (parsed)
      endpoint_ = *parsed;
    else
      diags.add(opts.where("endpoint"), parsed.error().message, parsed.error().hint);
  } else {
    endpoint_ = {.host = "127.0.0.1", .port = "4318", .base = ""};
  }
  if (auto enc = opts.string("encoding")) {
    if (*enc == "json")
      json_ = true;
    else if (*enc != "protobuf")
      diags.add(opts.where("encoding"), fmt::format("unknown encoding '{}'", *enc),
                R"(encoding = "protobuf" (the default) or "json")");
  }
  const auto positive = [&](const char* name, std::size_t& into, std::int64_t max) {
    if (auto v = opts.integer(name)) {
      if (*v < 1 || *v > max)
        diags.add(opts.where(name), fmt::format("option '{}' must be in 1..{}", name, max));
      else
        into = static_cast<std::size_t>(*v);
    }
  };
  positive("batch", batch_, 65536);
  positive("queue", queue_, 4096);
  if (auto d = opts.duration("flush")) {
    if (d->count() <= 0)
      diags.add(opts.where("flush"), "option 'flush' must be positive");
    else
      flush_every_ = *d;
  }
  if (auto d = opts.duration("timeout")) {
    if (d->count() <= 0)
      diags.add(opts.where("timeout"), "option 'timeout' must be positive");
    else if (*d > OtlpSender::kMaxTimeout)
      diags.add(opts.where("timeout"),
                fmt::format("option 'timeout' is at most {}s", OtlpSender::kMaxTimeout.count()),
                "a collector that takes longer is down: the request is retried, then dropped "
                "and counted");
    else
      timeout_ = std::chrono::duration_cast<std::chrono::milliseconds>(*d);
  }
  if (auto v = opts.string("service"))
    service_ = *v;
  if (auto v = opts.string("prefix"))
    prefix_ = *v;
}

void Otlp::bind_format(BindContext& ctx, Diagnostics& /*diags*/) {
  dry_run_ = ctx.dry_run;
}

void Otlp::start() {
  realtime_offset_ = clocks::now_ns(CLOCK_REALTIME) - clocks::now_ns(CLOCK_MONOTONIC);
  run_start_ = std::chrono::nanoseconds(clocks::now_ns(CLOCK_MONOTONIC));
  if (dry_run_)
    return;
  sender_ = std::make_unique<OtlpSender>(
      OtlpSender::Options{.endpoint = endpoint_,
                          .content_type = json_ ? "application/json" : "application/x-protobuf",
                          .queue = queue_,
                          .timeout = timeout_,
                          .attempts = 5});
}

void Otlp::on_events(std::span<Event* const> events) noexcept {
  if (!per_event_ || !sender_)
    return;
  try {
    for (const Event* e : events) {
      if (!batch_state_) {
        batch_state_ = std::make_unique<Batch>();
        auto* rl = batch_state_->request.add_resource_logs();
        resource(*rl->mutable_resource(), service_);
        batch_state_->scope = rl->add_scope_logs();
        scope(*batch_state_->scope->mutable_scope());
        first_pending_ = std::chrono::steady_clock::now();
      }
      auto* rec = batch_state_->scope->add_log_records();
      rec->set_severity_number(otel::logs::v1::SEVERITY_NUMBER_INFO);
      rec->set_observed_time_unix_nano(static_cast<std::uint64_t>(clocks::now_ns(CLOCK_REALTIME)));
      for (const auto& f : fields_) {
        const Value v = f.read(*e);
        if (is_none(v))
          continue;
        if (f.name() == "time") {
          if (const auto* t = std::get_if<std::uint64_t>(&v))
            rec->set_time_unix_nano(*t + static_cast<std::uint64_t>(realtime_offset_));
          continue;
        }
        if (f.name() == "probe") {
          if (const auto* p = std::get_if<std::string_view>(&v)) {
            rec->set_event_name(std::string(*p));
            rec->mutable_body()->set_string_value(std::string(*p));
          }
        }
        auto* kv = rec->add_attributes();
        kv->set_key(f.name());
        set_value(*kv->mutable_value(), v);
      }
      if (++batch_state_->records >= batch_)
        send_logs();
    }
  } catch (...) {
    ++encode_failures_;  // allocation failure: the batch so far is dropped and counted
    if (batch_state_)
      encode_failures_ += batch_state_->records;
    batch_state_.reset();
  }
}

void Otlp::send_logs() {
  if (!batch_state_ || batch_state_->records == 0)
    return;
  const std::uint64_t records = batch_state_->records;
  std::string body = serialize(batch_state_->request, json_);
  batch_state_.reset();
  sender_->send("/v1/logs", std::move(body), records);
}

void Otlp::on_table(const Table& t) {
  if (!sender_)
    return;
  otel::collector::metrics::v1::ExportMetricsServiceRequest req;
  auto* rm = req.add_resource_metrics();
  resource(*rm->mutable_resource(), service_);
  auto* sm = rm->add_scope_metrics();
  scope(*sm->mutable_scope());
  // Each table covers [since, time): an interval's (with `every`) or the whole run's, a delta
  // either way; a total (the counters stage's) is the run's cumulative.
  const auto temporality = t.total ? otel::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE
                                   : otel::metrics::v1::AGGREGATION_TEMPORALITY_DELTA;
  const auto start_ns = static_cast<std::uint64_t>(t.since.count() + realtime_offset_);
  const auto time_ns = static_cast<std::uint64_t>(t.time.count() + realtime_offset_);
  std::string base = prefix_ + "." + t.stage;
  if (!t.field.empty())
    base += "." + t.field;
  std::size_t points = 0;
  const std::vector<ValueKind> kinds = value_kinds_of(t);
  const auto kind = [&](std::size_t v) { return v < kinds.size() ? kinds[v] : ValueKind::kGauge; };
  const auto rows = [&](auto&& each) {
    for (const auto* part : {&t.rows, &t.rest})
      for (const auto& row : *part)
        each(row);
  };
  if (t.histogram) {
    auto* m = sm->add_metrics();
    m->set_name(base);
    m->set_description(t.title);
    auto* h = m->mutable_histogram();
    h->set_aggregation_temporality(temporality);
    rows([&](const TableRow& row) {
      auto* p = h->add_data_points();
      keys_as_attributes(*p, t, row);
      p->set_start_time_unix_nano(start_ns);
      p->set_time_unix_nano(time_ns);
      std::uint64_t count = 0;
      for (const auto& b : row.buckets) {
        // OTLP bucket i holds (bound[i-1], bound[i]]: integers of [lo, hi) are <= hi - 1.
        if (!b.hi_unbounded)
          p->add_explicit_bounds(static_cast<double>(b.hi) - 1);
        p->add_bucket_counts(b.count);
        count += b.count;
      }
      if (row.buckets.empty() || !row.buckets.back().hi_unbounded)
        p->add_bucket_counts(0);  // (last bound, +inf)
      p->set_count(count);
      for (std::size_t v = 0; v < row.values.size(); ++v) {
        if (kind(v) != ValueKind::kSum)
          continue;
        if (auto s = to_number(row.values[v]))
          p->set_sum(*s);
      }
      ++points;
    });
  } else if (t.summary) {
    auto* m = sm->add_metrics();
    m->set_name(base);
    m->set_description(t.title);
    auto* s = m->mutable_summary();
    rows([&](const TableRow& row) {
      auto* p = s->add_data_points();
      keys_as_attributes(*p, t, row);
      p->set_start_time_unix_nano(start_ns);
      p->set_time_unix_nano(time_ns);
      std::size_t q = 0;
      for (std::size_t v = 0; v < t.value_names.size() && v < row.values.size(); ++v) {
        const auto x = to_number(row.values[v]);
        if (!x)
          continue;
        if (kind(v) == ValueKind::kCount)
          p->set_count(static_cast<std::uint64_t>(*x));
        else if (kind(v) == ValueKind::kSum)
          p->set_sum(*x);
        else if (kind(v) == ValueKind::kQuantile && q < t.quantiles.size()) {
          auto* qv = p->add_quantile_values();
          qv->set_quantile(t.quantiles[q++]);
          qv->set_value(*x);
        }
      }
      ++points;
    });
  } else {
    for (std::size_t v = 0; v < t.value_names.size(); ++v) {
      const std::string& n = t.value_names[v];
      if (kind(v) == ValueKind::kLabel)
        continue;
      auto* m = sm->add_metrics();
      m->set_name(t.value_names.size() == 1 && (n == t.stage) ? base : base + "." + n);
      m->set_description(t.title);
      const bool additive = kind(v) == ValueKind::kCount || kind(v) == ValueKind::kSum;
      google::protobuf::RepeatedPtrField<otel::metrics::v1::NumberDataPoint>* dps = nullptr;
      if (additive) {
        auto* sum = m->mutable_sum();
        sum->set_aggregation_temporality(temporality);
        sum->set_is_monotonic(true);
        dps = sum->mutable_data_points();
      } else {
        dps = m->mutable_gauge()->mutable_data_points();
      }
      rows([&](const TableRow& row) {
        if (v >= row.values.size())
          return;
        otel::metrics::v1::NumberDataPoint p;
        if (!set_point(p, row.values[v]))
          return;
        keys_as_attributes(p, t, row);
        p.set_start_time_unix_nano(start_ns);
        p.set_time_unix_nano(time_ns);
        *dps->Add() = std::move(p);
        ++points;
      });
    }
  }
  // The exporter's own drops, beside the data they concern.
  auto* d = sm->add_metrics();
  d->set_name(prefix_ + ".otlp.dropped_records");
  d->set_description(
      "records the otlp stage dropped: a full queue, a collector that refused "
      "or never answered, a stop with no time left");
  auto* ds = d->mutable_sum();
  ds->set_aggregation_temporality(otel::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
  ds->set_is_monotonic(true);
  auto* dp = ds->add_data_points();
  dp->set_start_time_unix_nano(static_cast<std::uint64_t>(run_start_.count() + realtime_offset_));
  dp->set_time_unix_nano(time_ns);
  dp->set_as_int(static_cast<std::int64_t>(sender_->stats().dropped_records + encode_failures_));
  sender_->send("/v1/metrics", serialize(req, json_), points);
}

void Otlp::flush() {
  if (batch_state_ && sender_ && std::chrono::steady_clock::now() - first_pending_ >= flush_every_)
    send_logs();
}

void Otlp::stop() {
  if (sender_) {
    send_logs();
    sender_->close(stop_budget_);
  }
  OutputStage::stop();
  // A run whose every export failed has failed (exit 1), with the cause; one that lost some
  // says so in its warnings.
  if (sender_) {
    const auto st = sender_->stats();
    if (st.sent_records == 0 && st.unconfirmed_records == 0 && st.dropped_records != 0) {
      throw Error(ErrorCategory::kRuntime, std::make_error_code(std::errc::io_error),
                  fmt::format("otlp: none of {} records reached the collector at {}: {}",
                              st.dropped_records, endpoint_text(), reason(st)),
                  "start the collector (its OTLP/HTTP receiver), or check the endpoint");
    }
  }
}

std::string Otlp::endpoint_text() const {
  return fmt::format("http://{}:{}{}", endpoint_.host, endpoint_.port, endpoint_.base);
}

std::string Otlp::reason(const OtlpSender::Stats& st) {
  return st.last_error.empty() ? std::string("the queue was full or the stop came first")
                               : st.last_error;
}

void Otlp::warnings(std::vector<std::string>& out) const {
  if (!sender_)
    return;
  const auto st = sender_->stats();
  const std::uint64_t dropped = st.dropped_records + encode_failures_;
  const std::uint64_t all = st.sent_records + st.unconfirmed_records + dropped;
  if (dropped != 0) {
    out.push_back(fmt::format("otlp: {} of {} records did not reach the collector at {} ({})",
                              dropped, all, endpoint_text(), reason(st)));
  }
  if (st.unconfirmed_records != 0) {
    out.push_back(fmt::format(
        "otlp: {} records were sent to {} but the stop came before its answer (it may have them)",
        st.unconfirmed_records, endpoint_text()));
  }
}

void Otlp::counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const {
  if (!sender_)
    return;
  const auto s = sender_->stats();
  out.emplace_back("sent_records", s.sent_records);
  out.emplace_back("sent_requests", s.sent_requests);
  out.emplace_back("dropped_records", s.dropped_records + encode_failures_);
  if (s.unconfirmed_records != 0)
    out.emplace_back("unconfirmed_records", s.unconfirmed_records);
  out.emplace_back("failed_attempts", s.failed_attempts);
}

}  // namespace tracer::stages
