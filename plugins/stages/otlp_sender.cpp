// The OTLP/HTTP transport (see otlp_sender.hpp).
#include "otlp_sender.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace tracer::stages {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Result<OtlpEndpoint> parse_otlp_endpoint(std::string_view url) {
  constexpr std::string_view kScheme = "http://";
  const auto bad = [&](std::string why) {
    return fail(EINVAL, fmt::format("otlp: endpoint '{}': {}", url, why),
                R"(endpoint = "http://127.0.0.1:4318" (a collector's OTLP/HTTP receiver))");
  };
  if (!url.starts_with(kScheme))
    return bad(url.starts_with("https://") ? "https is not spoken: point it at a local collector "
                                             "or agent that forwards over TLS"
                                           : "not an http:// address");
  std::string_view rest = url.substr(kScheme.size());
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  std::string_view base = slash == std::string_view::npos ? "" : rest.substr(slash);
  while (base.ends_with('/'))
    base.remove_suffix(1);
  OtlpEndpoint e;
  std::string_view host = authority;
  if (authority.starts_with('[')) {  // [v6]:port
    const auto close = authority.find(']');
    if (close == std::string_view::npos)
      return bad("unclosed [");
    host = authority.substr(1, close - 1);
    if (close + 1 < authority.size()) {
      if (authority[close + 1] != ':')
        return bad("junk after ]");
      e.port = std::string(authority.substr(close + 2));
    }
  } else if (const auto colon = authority.rfind(':'); colon != std::string_view::npos) {
    host = authority.substr(0, colon);
    e.port = std::string(authority.substr(colon + 1));
  }
  if (host.empty())
    return bad("no host");
  if (e.port.empty() || e.port.size() > 5 ||
      !std::all_of(e.port.begin(), e.port.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
      std::stoul(e.port) > 65535)
    return bad(fmt::format("'{}' is not a port", e.port));
  e.host = std::string(host);
  e.base = std::string(base);
  return e;
}

OtlpSender::OtlpSender(Options options) : o_(std::move(options)) {
  thread_ = std::thread([this] { run(); });
}

OtlpSender::~OtlpSender() {
  close(std::chrono::milliseconds(0));
}

bool OtlpSender::send(std::string path, std::string body, std::uint64_t records) {
  {
    std::lock_guard lock(mu_);
    if (closing_ || queue_.size() >= o_.queue) {
      stats_.dropped_records += records;
      return false;
    }
    queue_.push_back({.path = std::move(path), .body = std::move(body), .records = records});
  }
  cv_.notify_one();
  return true;
}

void OtlpSender::close(std::chrono::milliseconds budget) {
  {
    std::lock_guard lock(mu_);
    if (!closing_) {
      closing_ = true;
      deadline_ = std::chrono::steady_clock::now() + budget;
    }
  }
  cv_.notify_all();
  if (thread_.joinable())
    thread_.join();
}

OtlpSender::Stats OtlpSender::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void OtlpSender::run() {
  for (;;) {
    Request r;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return closing_ || !queue_.empty(); });
      if (queue_.empty() || (closing_ && std::chrono::steady_clock::now() >= deadline_)) {
        for (const auto& left : queue_)
          stats_.dropped_records += left.records;
        queue_.clear();
        return;
      }
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    bool sent = false, unconfirmed = false;
    auto backoff = std::chrono::milliseconds(100);
    for (int attempt = 0; attempt < o_.attempts && !sent; ++attempt) {
      std::string error;
      auto timeout = o_.timeout;
      {
        std::lock_guard lock(mu_);
        if (closing_) {  // a stop's deadline bounds the attempt too
          timeout = std::min(timeout, std::chrono::duration_cast<std::chrono::milliseconds>(
                                          deadline_ - std::chrono::steady_clock::now()));
        }
      }
      if (timeout.count() <= 0)
        break;
      bool written = false;
      const int status = post(r, error, timeout, written);
      sent = status >= 200 && status < 300;
      if (sent)
        break;
      // Written whole, then the stop came before the answer: the collector may have it.
      unconfirmed = written && status < 0 && stop_deadline() <= std::chrono::steady_clock::now();
      const bool retry =
          status < 0 || status == 429 || status == 502 || status == 503 || status == 504;
      std::unique_lock lock(mu_);
      ++stats_.failed_attempts;
      stats_.last_error = status < 0 ? error : fmt::format("HTTP {}", status);
      if (!retry)
        break;
      // Waits out the backoff, or less when a stop's deadline comes first.
      const auto until = std::chrono::steady_clock::now() + backoff;
      const auto limit = closing_ ? std::min(until, deadline_) : until;
      cv_.wait_until(lock, limit,
                     [&] { return closing_ && std::chrono::steady_clock::now() >= deadline_; });
      if (closing_ && std::chrono::steady_clock::now() >= deadline_)
        break;
      backoff = std::min(backoff * 2, std::chrono::milliseconds(5000));
    }
    std::lock_guard lock(mu_);
    if (sent) {
      stats_.sent_records += r.records;
      ++stats_.sent_requests;
    } else if (unconfirmed) {
      stats_.unconfirmed_records += r.records;
    } else {
      stats_.dropped_records += r.records;
    }
  }
}

std::chrono::steady_clock::time_point OtlpSender::stop_deadline() const {
  std::lock_guard lock(mu_);
  return closing_ ? deadline_ : std::chrono::steady_clock::time_point::max();
}

int otlp_response_status(const http::response_parser<http::string_body>& parser,
                         beast::error_code ec) {
  // A body over the cap is not read (nor kept): the status is the answer.
  if (ec == http::error::body_limit && parser.is_header_done())
    return static_cast<int>(parser.get().result_int());
  if (ec)
    return -1;
  return static_cast<int>(parser.get().result_int());
}

int OtlpSender::post(const Request& r,
                     std::string& error,
                     std::chrono::milliseconds timeout,
                     bool& written) const {
  asio::io_context io;
  beast::tcp_stream stream(io);
  beast::error_code ec;
  // One deadline for the whole exchange (connect, write, read), cut short by a stop's.
  const auto until = std::chrono::steady_clock::now() + timeout;
  bool stopped = false, done = false;
  const auto step = [&](const char* what) {
    io.restart();  // the previous step ran the context out of work: it is stopped until this
    while (!done) {
      const auto now = std::chrono::steady_clock::now();
      const auto stop = stop_deadline();
      if (now >= until || now >= stop) {
        stopped = now >= stop && stop < until;
        stream.close();  // the pending operation ends with operation_aborted
        io.run();
        error = fmt::format("{} {}:{}: {}", what, o_.endpoint.host, o_.endpoint.port,
                            stopped ? "the stop's budget ran out" : "timed out");
        return false;
      }
      // Short slices: a stop that comes while the collector is silent is seen within one.
      io.run_one_for(std::min(
          std::chrono::duration_cast<std::chrono::milliseconds>(std::min(until, stop) - now) +
              std::chrono::milliseconds(1),
          std::chrono::milliseconds(20)));
    }
    done = false;
    if (ec)
      error = fmt::format("{} {}:{}: {}", what, o_.endpoint.host, o_.endpoint.port, ec.message());
    return !ec;
  };
  // The system resolver (an address, or /etc/hosts for a local collector's name: at once).
  tcp::resolver resolver(io);
  const auto results = resolver.resolve(o_.endpoint.host, o_.endpoint.port, ec);
  if (ec) {
    error = fmt::format("resolving {}: {}", o_.endpoint.host, ec.message());
    return -1;
  }
  stream.async_connect(results, [&](beast::error_code e, const tcp::endpoint&) {
    ec = e;
    done = true;
  });
  if (!step("connecting to"))
    return -1;
  http::request<http::string_body> req{http::verb::post, o_.endpoint.base + r.path, 11};
  req.set(http::field::host, o_.endpoint.host);
  req.set(http::field::user_agent, "tracer");
  req.set(http::field::content_type, o_.content_type);
  req.body() = r.body;
  req.prepare_payload();
  http::async_write(stream, req, [&](beast::error_code e, std::size_t) {
    ec = e;
    done = true;
  });
  if (!step("sending to"))
    return -1;
  written = true;
  // The answer is read up to a small cap and thrown away: only its status matters (a collector
  // that answers without end costs at most kMaxAnswerBytes).
  beast::flat_buffer buf(kMaxAnswerHeader + kMaxAnswerBody);
  http::response_parser<http::string_body> parser;
  parser.header_limit(kMaxAnswerHeader);
  parser.body_limit(kMaxAnswerBody);
  http::async_read(stream, buf, parser, [&](beast::error_code e, std::size_t) {
    ec = e;
    done = true;
  });
  const bool read = step("reading the answer of");
  const int status = otlp_response_status(parser, read ? beast::error_code() : ec);
  if (status < 0 && read)
    error = fmt::format("reading the answer of {}:{}: {}", o_.endpoint.host, o_.endpoint.port,
                        ec.message());
  if (status >= 0)
    error.clear();
  beast::error_code ignored;
  [[maybe_unused]] auto s = stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return stopped ? -1 : status;
}

}  // namespace tracer::stages
