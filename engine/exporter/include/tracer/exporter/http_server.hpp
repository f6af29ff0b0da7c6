// The HTTP endpoint of `tracer serve` (Boost.Beast on the caller's executor): GET /metrics
// answers with the text a callback makes at that moment; / says where the metrics are; anything
// else is 404 (405 for another method). Bounded, so that no client can grow tracer's memory,
// hold its executor or keep another scraper out: a request over 8 KiB is refused; a request
// begun must arrive whole (and its answer be read) within kRequestDeadline; a connection waiting
// for a request is closed past kIdle; one address holds at most kMaxPerAddress connections (more
// are refused), and when kMaxConnections are open a new one closes the oldest that is not being
// answered.
#pragma once

#include <utility>  // Boost 1.74's Asio needs it first (TOOLCHAIN.md)

#include <boost/asio/any_io_executor.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace tracer::exporter {

/// "127.0.0.1:9435", "[::1]:9435", "0.0.0.0:9435", ":9435" (every address), "localhost:9435";
/// port 0 picks a free one. @return the address and port, or a Failure saying what is wrong.
struct ListenAddress {
  std::string host;  // as written ("" for every address)
  std::uint16_t port = 0;
};

class MetricsServer {
 public:
  static constexpr std::size_t kMaxConnections = 32;
  static constexpr std::size_t kMaxPerAddress = 8;
  static constexpr std::chrono::seconds kIdle{30};
  static constexpr std::chrono::seconds kRequestDeadline{5};
  static constexpr std::size_t kMaxRequestBytes = 8192;

  /// The body of a scrape, made when it comes (on the server's executor).
  using Body = std::function<std::string()>;
  /// Listens on `listen` at once. Throws tracer::Error: kUsage for an address that does not
  /// parse or resolve, kRuntime (with the errno and the address) when it cannot be bound.
  MetricsServer(boost::asio::any_io_executor executor, std::string_view listen, Body metrics);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  /// The port it listens on (the one picked for port 0).
  [[nodiscard]] std::uint16_t port() const;
  /// "127.0.0.1:9435" as bound.
  [[nodiscard]] std::string address() const;
  /// What the server answers to `request`, the bytes of one request as a client sends them: 200,
  /// 404, 405, 400 for what does not parse or exceeds the limits, 0 when it is not whole yet.
  /// The connections' parser limits and routing, without a connection (tests, the fuzzer).
  [[nodiscard]] static int status_for(std::string_view request);

  /// Stops accepting and closes every connection. Idempotent.
  void close();

  struct Counters {
    std::uint64_t scrapes = 0;   // GET /metrics answered
    std::uint64_t requests = 0;  // every request answered
    std::uint64_t refused = 0;   // connections over kMaxPerAddress (or all answering), bad requests
    std::uint64_t evicted = 0;   // connections closed to make room for a new one
    std::uint64_t timed_out = 0;     // requests not whole within kRequestDeadline, idle past kIdle
    double last_scrape_seconds = 0;  // how long the last /metrics body took to make
  };
  [[nodiscard]] Counters counters() const noexcept;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tracer::exporter
