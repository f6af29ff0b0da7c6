// The otlp stage against hostile collectors: one that accepts and never answers cannot hold a
// stop past 0.5 s (whatever the request timeout); one that answers 200 with a body that never
// ends costs a bounded amount of memory (the answer is read up to a cap and thrown away) and the
// request counts as sent; a timeout over the maximum is a recipe error at its position.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <regex>
#include <string>
#include <thread>

#include "plugins/stages/otlp_sender.hpp"
#include "support/cli.hpp"
#include "support/temp_dir.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;
using testing::slurp;

/// A socket listening on 127.0.0.1 (port picked). `answer` decides what its thread does with
/// each connection: nothing (the connection is accepted by the kernel, never read or answered),
/// or a handler of the accepted descriptor.
class Collector {
 public:
  using Handler = void (*)(int fd, const std::atomic<bool>& stop);
  explicit Collector(Handler answer = nullptr) : answer_(answer) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (answer_ != nullptr)
      thread_ = std::thread([this] { serve(); });
  }
  ~Collector() {
    stop_ = true;
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable())
      thread_.join();
    ::close(fd_);
  }
  Collector(const Collector&) = delete;
  Collector& operator=(const Collector&) = delete;
  [[nodiscard]] std::uint16_t port() const { return port_; }

 private:
  void serve() {
    while (!stop_) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0)
        return;
      std::thread([c, this] {
        answer_(c, stop_);
        ::close(c);
      }).detach();
    }
  }
  int fd_ = -1;
  std::uint16_t port_ = 0;
  Handler answer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// Reads the request head, then answers 200 with a chunked body that never ends (64 KiB chunks
/// until the client goes).
void endless_body(int fd, const std::atomic<bool>& stop) {
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[65536];
  if (::recv(fd, buf, sizeof buf, 0) <= 0)
    return;
  const std::string head =
      "HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nTransfer-Encoding: "
      "chunked\r\n\r\n";
  if (::send(fd, head.data(), head.size(), MSG_NOSIGNAL) < 0)
    return;
  const std::string chunk = "10000\r\n" + std::string(65536, 'x') + "\r\n";
  while (!stop && ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL) > 0) {
  }
}

/// Reads the request head and answers 200 at once, without a body.
void well_behaved(int fd, const std::atomic<bool>& /*stop*/) {
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[65536];
  if (::recv(fd, buf, sizeof buf, 0) <= 0)
    return;
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
}

/// Log records a slow collector received (counted in the JSON bodies it read whole), and the
/// requests it was sent.
std::atomic<std::uint64_t> g_slow_received{0}, g_slow_requests{0};

/// Reads the whole request (head and Content-Length body), counts its log records, then
/// answers 200: the first request at once, the others 5 s later (after the stop).
void slow_answer(int fd, const std::atomic<bool>& stop) {
  timeval tv{.tv_sec = 5, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  char buf[65536];
  std::size_t want = std::string::npos;
  while (want == std::string::npos || got.size() < want) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0)
      return;
    got.append(buf, static_cast<std::size_t>(n));
    const auto head = got.find("\r\n\r\n");
    if (want == std::string::npos && head != std::string::npos) {
      std::smatch m;
      const std::string h = got.substr(0, head);
      if (!std::regex_search(h, m, std::regex(R"(Content-Length: (\d+))", std::regex::icase)))
        return;
      want = head + 4 + std::stoul(m[1]);
    }
  }
  std::uint64_t records = 0;
  for (auto at = got.find("\"severityNumber\""); at != std::string::npos;
       at = got.find("\"severityNumber\"", at + 1))
    ++records;
  g_slow_received += records;
  const bool first = g_slow_requests.fetch_add(1) == 0;
  for (int i = 0; i < 500 && !stop && !first; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
  (void)::send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
}

/// The lseek calls of the syscaller (on this test's own fd: system-wide, another copy of the
/// workload beside the test is not counted) as OTLP log records, 100 a request.
std::string recipe(std::uint16_t port, const std::string& extra) {
  return "[recipe]\nname = \"peer\"\n"
         "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
         "filter = \"fd == " +
         std::to_string(testing::own_fd()) +
         "\"\n"
         "[[stage]]\nuse = \"otlp\"\nendpoint = \"http://127.0.0.1:" +
         std::to_string(port) + "\"\nfields = [\"pid\", \"offset\"]\nbatch = 100\n" + extra;
}

/// VmHWM of `pid` in KiB (0 once it is gone).
long peak_kib(pid_t pid) {
  const std::string status = slurp("/proc/" + std::to_string(pid) + "/status");
  std::smatch m;
  return std::regex_search(status, m, std::regex(R"(VmHWM:\s+(\d+) kB)")) ? std::stol(m[1]) : 0;
}

/// Runs `tracer run RECIPE --json` (stdout, stderr into `dir`) while the syscaller makes 2,000
/// lseek calls, then (the drain done) stops it with SIGTERM: how long the stop took, its exit
/// code and peak memory. (A stop after the workload, not a duration: a loaded machine may start
/// the workload late.)
struct Ran {
  double late = 0;
  int code = -1;
  long peak_kib = 0;
};
Ran run_then_stop(const testing::TempDir& dir) {
  Ran r;
  fs::remove(dir.path() / "out");  // readiness is a line of `err`: not an earlier run's
  fs::remove(dir.path() / "err");
  const pid_t pid = testing::spawn_tracer_ready({"run", (dir.path() / "r.toml").string(), "--json"},
                                                dir.path() / "out", dir.path() / "err");
  if (pid < 0)
    return r;
  (void)testing::run_syscaller("lseek 2000", /*own=*/true);
  const auto sample_until = [&](Clock::time_point until) {
    int status = 0;
    while (Clock::now() < until || until == Clock::time_point::max()) {
      r.peak_kib = std::max(r.peak_kib, peak_kib(pid));
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  };
  if (sample_until(Clock::now() + std::chrono::milliseconds(500)))
    return r;  // it ended on its own: a failure the caller sees in `code`
  const auto stop = Clock::now();
  ::kill(pid, SIGTERM);
  sample_until(Clock::time_point::max());
  r.late = std::chrono::duration<double>(Clock::now() - stop).count();
  return r;
}

// A collector that accepts and never answers, with a request timeout of 30 s: SIGTERM ends the
// run within 1 s (the stop cancels the request in flight: its budget is 0.4 s), every record
// accounted for.
TEST(OtlpPeers, ASilentCollectorCannotHoldTheStop) {
  testing::TempDir dir;
  Collector silent;
  dir.write("r.toml", recipe(silent.port(), "timeout = \"30s\"\n"));
  const Ran r = run_then_stop(dir);
  const std::string out = slurp(dir.path() / "out");
  const std::string err = slurp(dir.path() / "err");
  ASSERT_EQ(r.code, 0) << err;
  EXPECT_LT(r.late, 1.0) << "the stop took " << r.late << " s";
  EXPECT_THAT(out, HasSubstr(R"("otlp.sent_records":0)")) << out;
  // The request in flight was written whole (the kernel took it): unconfirmed, not dropped;
  // the rest never left the queue. Each said, with the cause.
  std::smatch m, u;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"("otlp.dropped_records":(\d+))"))) << out;
  ASSERT_TRUE(std::regex_search(out, u, std::regex(R"("otlp.unconfirmed_records":(\d+))"))) << out;
  EXPECT_EQ(std::stoul(u[1]), 100u) << "one request of 100 in flight";
  EXPECT_EQ(std::stoul(m[1]) + std::stoul(u[1]), 2000u) << "every record accounted for";
  EXPECT_THAT(err,
              HasSubstr("records were sent to http://127.0.0.1:" + std::to_string(silent.port()) +
                        " but the stop came before its answer"));
  EXPECT_THAT(err, HasSubstr("records did not reach the collector"));
}

// A collector that takes each request whole, answers the first at once and the next 5 s later:
// at the stop, the request in flight is unconfirmed, not dropped, and what the collector
// received is exactly what tracer counts as sent or unconfirmed (the issue: 1,536 received,
// 1,024 "sent").
TEST(OtlpPeers, TheRequestInFlightAtTheStopIsAccountedExactly) {
  testing::TempDir dir;
  g_slow_received = 0;
  g_slow_requests = 0;
  Collector slow(slow_answer);
  dir.write("r.toml", recipe(slow.port(), "encoding = \"json\"\ntimeout = \"10s\"\n"));
  const Ran r = run_then_stop(dir);
  const std::string out = slurp(dir.path() / "out");
  ASSERT_EQ(r.code, 0) << slurp(dir.path() / "err");
  EXPECT_LT(r.late, 1.0);
  std::smatch sent, unconfirmed, dropped;
  ASSERT_TRUE(std::regex_search(out, sent, std::regex(R"("otlp.sent_records":(\d+))"))) << out;
  ASSERT_TRUE(
      std::regex_search(out, unconfirmed, std::regex(R"("otlp.unconfirmed_records":(\d+))")))
      << out;
  ASSERT_TRUE(std::regex_search(out, dropped, std::regex(R"("otlp.dropped_records":(\d+))")))
      << out;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the collector's last count
  EXPECT_EQ(g_slow_received.load(), std::stoul(sent[1]) + std::stoul(unconfirmed[1])) << out;
  EXPECT_EQ(std::stoul(sent[1]), 100u) << out;
  EXPECT_EQ(std::stoul(unconfirmed[1]), 100u) << out;
  EXPECT_EQ(std::stoul(sent[1]) + std::stoul(unconfirmed[1]) + std::stoul(dropped[1]), 2000u)
      << out;
}

// A collector answering 200 with a body without end: the answer is read up to its cap (64 KiB)
// and thrown away, the records count as sent, and tracer's peak memory stays within 32 MiB of
// the same run against a collector that answers 200 with no body (a body read whole grew it by
// about 100 MiB a second).
TEST(OtlpPeers, AnEndlessAnswerIsReadUpToItsCapAndTheMemoryStaysBounded) {
  testing::TempDir dir;
  long baseline_kib = 0;
  {
    Collector good(well_behaved);
    dir.write("r.toml", recipe(good.port(), "timeout = \"2s\"\n"));
    const Ran r = run_then_stop(dir);
    ASSERT_EQ(r.code, 0) << slurp(dir.path() / "err");
    baseline_kib = r.peak_kib;
  }
  Collector endless(endless_body);
  dir.write("r.toml", recipe(endless.port(), "timeout = \"2s\"\n"));
  const Ran r = run_then_stop(dir);
  const std::string out = slurp(dir.path() / "out");
  ASSERT_EQ(r.code, 0) << slurp(dir.path() / "err");
  EXPECT_LT(r.late, 1.0);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex(R"("otlp.sent_records":(\d+))"))) << out;
  EXPECT_EQ(std::stoul(m[1]), 2000u) << out;
  EXPECT_GT(baseline_kib, 0);
  EXPECT_LT(r.peak_kib, baseline_kib + 32L * 1024)
      << "peak RSS " << r.peak_kib << " KiB, " << baseline_kib << " KiB against a plain collector";
}

// The answer's status as the sender reads it (the fuzzer's entry): a body over the cap still
// has its header's status; an answer that does not parse has none.
TEST(OtlpPeers, TheAnswersStatusSurvivesABodyOverTheCap) {
  namespace http = boost::beast::http;
  const auto status = [](const std::string& bytes) {
    http::response_parser<http::string_body> p;
    p.header_limit(stages::OtlpSender::kMaxAnswerHeader);
    p.body_limit(stages::OtlpSender::kMaxAnswerBody);
    p.eager(true);
    boost::beast::error_code ec;
    p.put(boost::asio::buffer(bytes), ec);
    return stages::otlp_response_status(p, ec);
  };
  EXPECT_EQ(status("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"), 200);
  EXPECT_EQ(status("HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n"), 503);
  EXPECT_EQ(status("HTTP/1.1 200 OK\r\nContent-Length: 99999999\r\n\r\n"), 200);
  EXPECT_EQ(status("garbage\r\n\r\n"), -1);
}

TEST(OtlpPeers, ATimeoutOverTheMaximumIsARecipeError) {
  testing::TempDir dir;
  dir.write("r.toml", recipe(4318, "timeout = \"1000h\"\n"));
  const auto r = testing::run_tracer("check " + (dir.path() / "r.toml").string());
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("r.toml:12:11: option 'timeout' is at most 60s")) << r.err;
}

}  // namespace
}  // namespace tracer
