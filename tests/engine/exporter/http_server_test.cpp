// The /metrics endpoint as an adversary sees it (tracer/exporter/http_server.hpp): slow and
// silent clients — one address holding hundreds of half-sent requests, or a client spread over
// many addresses — never keep a scraper from its answer (each within 1 s); a request begun must
// arrive whole within its deadline; closing the server with every slot held is immediate.
#include "tracer/exporter/http_server.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace tracer::exporter {
namespace {

using Clock = std::chrono::steady_clock;

/// A MetricsServer on 127.0.0.1 (port picked), its loop on a thread of its own.
class Served {
 public:
  Served() : work_(io_.get_executor()) {
    server_ = std::make_unique<MetricsServer>(io_.get_executor(), "127.0.0.1:0",
                                              [] { return std::string("up 1\n"); });
    port_ = server_->port();
    thread_ = std::thread([this] { io_.run(); });
  }
  ~Served() {
    close();
    work_.reset();
    io_.stop();
    thread_.join();
  }
  Served(const Served&) = delete;
  Served& operator=(const Served&) = delete;
  [[nodiscard]] std::uint16_t port() const { return port_; }
  /// close() on the server's loop; how long it took to run there.
  double close() {
    if (closed_)
      return 0;
    closed_ = true;
    std::promise<double> took;
    const auto t0 = Clock::now();
    boost::asio::post(io_, [&] {
      server_->close();
      took.set_value(std::chrono::duration<double>(Clock::now() - t0).count());
    });
    const double s = took.get_future().get();
    boost::asio::post(io_, [this] { server_.reset(); });
    return s;
  }
  MetricsServer::Counters counters() {
    std::promise<MetricsServer::Counters> c;
    boost::asio::post(io_, [&] { c.set_value(server_->counters()); });
    return c.get_future().get();
  }

 private:
  boost::asio::io_context io_{1};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::unique_ptr<MetricsServer> server_;
  std::uint16_t port_ = 0;
  bool closed_ = false;
  std::thread thread_;
};

/// A TCP connection from `from` (an address of 127/8) to 127.0.0.1:`port`; -1 if refused.
int connect_from(const char* from, std::uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  ::inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(port);
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// Whether the server closed `fd` (a read gives 0 or an error; nothing to read is open).
bool closed(int fd) {
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  if (::poll(&p, 1, 0) <= 0)
    return false;
  char c = 0;
  return ::recv(fd, &c, 1, MSG_DONTWAIT) <= 0;
}

/// GET /metrics from 127.0.0.1: whether the answer was a whole 200 with the body, and how long
/// it took.
std::pair<bool, double> scrape(std::uint16_t port) {
  const auto t0 = Clock::now();
  const int fd = connect_from("127.0.0.1", port);
  std::string got;
  if (fd >= 0) {
    timeval tv{.tv_sec = 5, .tv_usec = 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const std::string req = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
    ::close(fd);
  }
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  return {got.starts_with("HTTP/1.1 200") && got.ends_with("up 1\n"), took};
}

/// Holds `n` connections from the addresses `from` gives (round robin), each with half a
/// request sent; reopens what the server closes, as fast as it notices, until stopped.
class Slowloris {
 public:
  Slowloris(std::uint16_t port, int n, std::vector<std::string> from)
      : port_(port), from_(std::move(from)), fds_(static_cast<std::size_t>(n), -1) {
    thread_ = std::thread([this] { run(); });
  }
  ~Slowloris() {
    stop_ = true;
    thread_.join();
    for (int fd : fds_)
      if (fd >= 0)
        ::close(fd);
  }
  Slowloris(const Slowloris&) = delete;
  Slowloris& operator=(const Slowloris&) = delete;
  [[nodiscard]] std::uint64_t reopened() const { return reopened_.load(); }

 private:
  void run() {
    const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
    while (!stop_) {
      for (std::size_t i = 0; i < fds_.size() && !stop_; ++i) {
        if (fds_[i] >= 0 && !closed(fds_[i]))
          continue;
        if (fds_[i] >= 0) {
          ::close(fds_[i]);
          ++reopened_;
        }
        fds_[i] = connect_from(from_[i % from_.size()].c_str(), port_);
        if (fds_[i] >= 0)
          (void)::send(fds_[i], half.data(), half.size(), MSG_NOSIGNAL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  std::uint16_t port_;
  std::vector<std::string> from_;
  std::vector<int> fds_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> reopened_{0};
  std::thread thread_;
};

/// Scrapes every 100 ms for `seconds`: every answer must be whole and within 1 s.
void expect_every_scrape_answered(std::uint16_t port, double seconds) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  int n = 0;
  double worst = 0;
  while (Clock::now() < end) {
    const auto [ok, took] = scrape(port);
    EXPECT_TRUE(ok) << "scrape " << n;
    worst = std::max(worst, took);
    ++n;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_GT(n, 20);
  EXPECT_LT(worst, 1.0) << "the slowest of " << n << " scrapes took " << worst << " s";
}

// 200 connections from one client (127.0.0.2), each a request left half-sent and reopened as
// soon as the server closes it, for longer than a request's deadline: a scraper from another
// address gets every answer within 1 s (the client holds at most its address's share).
TEST(MetricsServerPeers, TwoHundredSlowConnectionsFromOneClientDoNotKeepAScraperOut) {
  Served s;
  Slowloris attack(s.port(), 200, {"127.0.0.2"});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the slots taken
  expect_every_scrape_answered(s.port(), 7.0);
  const auto c = s.counters();
  EXPECT_GT(c.refused, 100u) << "over the address's share";
  EXPECT_GT(c.timed_out, 0u) << "half-sent requests past the deadline";
  EXPECT_GT(attack.reopened(), 0u);
  EXPECT_LT(s.close(), 0.5) << "closing with every slot held";
}

// A client spread over 40 addresses (one connection each, more than the server's 32): a new
// connection closes the oldest unanswered one instead of waiting behind it.
TEST(MetricsServerPeers, AClientOverManyAddressesMakesRoomInsteadOfAQueue) {
  Served s;
  std::vector<std::string> from;
  for (int i = 10; i < 50; ++i)
    from.push_back("127.0.0." + std::to_string(i));
  Slowloris attack(s.port(), 40, from);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  expect_every_scrape_answered(s.port(), 3.0);
  EXPECT_GT(s.counters().evicted, 8u);
}

// A request begun (its first line sent) and never finished is closed at the request deadline
// (5 s), not the idle limit (30 s).
TEST(MetricsServerPeers, ARequestMustArriveWholeWithinItsDeadline) {
  Served s;
  const int fd = connect_from("127.0.0.3", s.port());
  ASSERT_GE(fd, 0);
  const std::string half = "GET /metrics HTTP/1.1\r\n";
  ASSERT_EQ(::send(fd, half.data(), half.size(), MSG_NOSIGNAL), static_cast<ssize_t>(half.size()));
  const auto t0 = Clock::now();
  pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
  ASSERT_EQ(::poll(&p, 1, 15000), 1);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_TRUE(closed(fd));
  ::close(fd);
  EXPECT_GT(took, 4.0);
  EXPECT_LT(took, 7.0);
  // Counted by the read's handler, which may run just after the client saw the close.
  for (int i = 0; i < 100 && s.counters().timed_out == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(s.counters().timed_out, 1u);
}

// The parser limits and routing of a connection, as the fuzzer drives them.
TEST(MetricsServerPeers, StatusForParsesAndRoutesAsAConnectionDoes) {
  EXPECT_EQ(MetricsServer::status_for("GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n"), 200);
  EXPECT_EQ(MetricsServer::status_for("HEAD /?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"), 200);
  EXPECT_EQ(MetricsServer::status_for("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 405);
  EXPECT_EQ(MetricsServer::status_for("GET /secret HTTP/1.1\r\n\r\n"), 404);
  EXPECT_EQ(MetricsServer::status_for("GET /metrics HTTP/1.1\r\nHost: a\r\n"), 0);
  EXPECT_EQ(MetricsServer::status_for("\x01\x02 garbage\r\n\r\n"), 400);
  EXPECT_EQ(
      MetricsServer::status_for("GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n"),
      400);
  EXPECT_EQ(MetricsServer::status_for("POST / HTTP/1.1\r\nContent-Length: 99999\r\n\r\n"), 400);
}

}  // namespace
}  // namespace tracer::exporter
