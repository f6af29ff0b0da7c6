// The OTLP/HTTP transport of the otlp stage: request bodies queued (bounded) and POSTed to a
// collector from a thread of their own, with retries and backoff, so that a slow or absent
// collector never holds the pipeline. What the queue has no room for, and what a collector
// refused for good, is counted by records.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include <boost/beast/core/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "tracer/result.hpp"

namespace tracer::stages {

/// "http://host:port[/base]" (https is not spoken: a local collector or agent forwards).
struct OtlpEndpoint {
  std::string host;
  std::string port = "4318";
  std::string base;  // "" or "/prefix", without a trailing '/'
};
[[nodiscard]] Result<OtlpEndpoint> parse_otlp_endpoint(std::string_view url);

/// The HTTP status of a collector's answer as `parser` read it with `ec` (a body over the
/// parser's limit still has the status of its header), or -1. (Separate for the fuzzer.)
[[nodiscard]] int otlp_response_status(
    const boost::beast::http::response_parser<boost::beast::http::string_body>& parser,
    boost::beast::error_code ec);

class OtlpSender {
 public:
  static constexpr std::size_t kMaxAnswerHeader = std::size_t{16} << 10;
  static constexpr std::size_t kMaxAnswerBody = std::size_t{64} << 10;
  /// The longest `timeout` a recipe may give a request.
  static constexpr std::chrono::seconds kMaxTimeout{60};
  struct Options {
    OtlpEndpoint endpoint{};
    std::string content_type = "application/x-protobuf";
    std::size_t queue = 64;  // requests waiting at most (beyond: dropped, counted)
    std::chrono::milliseconds timeout{5000};
    int attempts = 5;  // per request, with backoff between them (100 ms doubling, 5 s at most)
  };
  struct Stats {
    std::uint64_t sent_records = 0, sent_requests = 0;
    std::uint64_t dropped_records = 0;  // the queue was full, or every attempt failed, or a stop
    /// Written whole to the collector when the stop came, its answer not read: it may have them.
    std::uint64_t unconfirmed_records = 0;
    std::uint64_t failed_attempts = 0;  // connection errors, timeouts, non-2xx answers
    std::string last_error;
  };

  explicit OtlpSender(Options options);
  ~OtlpSender();
  OtlpSender(const OtlpSender&) = delete;
  OtlpSender& operator=(const OtlpSender&) = delete;

  /// Queues `body` for POST `path` ("/v1/logs"); it holds `records` records. Never blocks: a
  /// full queue drops it (counted). False when dropped.
  bool send(std::string path, std::string body, std::uint64_t records);
  /// Sends what is queued for at most `budget`, then stops the thread; what is left is counted
  /// as dropped. Idempotent.
  void close(std::chrono::milliseconds budget);
  [[nodiscard]] Stats stats() const;

 private:
  struct Request {
    std::string path, body;
    std::uint64_t records = 0;
  };
  void run();
  /// One POST: the HTTP status, or -1 with `error` set; `written` once the request was sent
  /// whole.
  int post(const Request& r,
           std::string& error,
           std::chrono::milliseconds timeout,
           bool& written) const;
  /// When a stop's budget ends (time_point::max() before a stop).
  [[nodiscard]] std::chrono::steady_clock::time_point stop_deadline() const;

  Options o_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Request> queue_;
  bool closing_ = false;
  std::chrono::steady_clock::time_point deadline_{};
  Stats stats_;
  std::thread thread_;
};

}  // namespace tracer::stages
