// The HTTP endpoint of `tracer serve` (see http_server.hpp).
#include "tracer/exporter/http_server.hpp"

#include <fmt/format.h>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/v6_only.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <charconv>
#include <list>

#include "tracer/error.hpp"
#include "tracer/exporter/prometheus.hpp"

namespace tracer::exporter {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

ListenAddress parse_listen(std::string_view text) {
  const auto bad = [&](std::string why) {
    return Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                 fmt::format("--listen {}: {}", text, why),
                 "ADDRESS:PORT, e.g. 127.0.0.1:9435, [::1]:9435 or :9435 (every address)");
  };
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos)
    throw bad("no port");
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.starts_with('[') && host.ends_with(']'))
    host = host.substr(1, host.size() - 2);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || port.empty() || value > 65535)
    throw bad(fmt::format("'{}' is not a port (0 to 65535)", port));
  return {.host = std::string(host), .port = static_cast<std::uint16_t>(value)};
}

enum class Route : std::uint8_t { kMetrics, kIndex, kNotAllowed, kNotFound };

/// Where a request goes: GET (or HEAD) of /metrics or /, 405 for another method, 404 else.
Route route(http::verb method, std::string_view target) {
  if (method != http::verb::get && method != http::verb::head)
    return Route::kNotAllowed;
  const std::string_view path = target.substr(0, target.find('?'));
  if (path == "/metrics")
    return Route::kMetrics;
  if (path == "/" || path.empty())
    return Route::kIndex;
  return Route::kNotFound;
}

/// A request parser as a connection sets it up.
void limit(http::request_parser<http::string_body>& parser) {
  parser.header_limit(MetricsServer::kMaxRequestBytes);
  parser.body_limit(MetricsServer::kMaxRequestBytes);
}

}  // namespace

int MetricsServer::status_for(std::string_view request) {
  http::request_parser<http::string_body> parser;
  limit(parser);
  parser.eager(true);
  beast::error_code ec;
  std::size_t used = 0;
  while (used < request.size() && !parser.is_done()) {
    const std::size_t n =
        parser.put(asio::buffer(request.data() + used, request.size() - used), ec);
    if (ec == http::error::need_more)
      return 0;
    if (ec)
      return 400;
    if (n == 0)
      return 0;
    used += n;
  }
  if (!parser.is_done())
    return 0;
  switch (route(parser.get().method(),
                std::string_view(parser.get().target().data(), parser.get().target().size()))) {
    case Route::kMetrics:
    case Route::kIndex:
      return 200;
    case Route::kNotAllowed:
      return 405;
    case Route::kNotFound:
      return 404;
  }
  return 0;
}

struct MetricsServer::State : std::enable_shared_from_this<MetricsServer::State> {
  explicit State(asio::any_io_executor ex) : executor(ex), acceptor(ex) {}
  asio::any_io_executor executor;
  tcp::acceptor acceptor;
  Body metrics;
  bool closed = false;
  /// A connection as the server keeps it: to close it at close(), to count its peer's, and to
  /// pick the one to close when the server is full (the oldest not answering).
  struct Slot {
    std::weak_ptr<beast::tcp_stream> stream;
    asio::ip::address peer;
    std::chrono::steady_clock::time_point since;  // its request (or its wait for one) began
    bool answering = false;                       // writing an answer: never evicted
  };
  std::list<std::shared_ptr<Slot>> open;
  Counters counters{};

  void accept();
  /// Takes `socket` if its peer has room and the server has (or makes) room.
  void admit(tcp::socket socket);
  void forget_closed() {
    open.remove_if([](const auto& slot) { return slot->stream.expired(); });
  }
};

namespace {

/// One connection: requests read and answered in turn (keep-alive) until the client closes,
/// a request is malformed, its wait for a request passes kIdle or a request once begun does not
/// arrive whole within kRequestDeadline.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<beast::tcp_stream> stream,
             std::shared_ptr<MetricsServer::State::Slot> slot,
             std::weak_ptr<MetricsServer::State> server)
      : stream_(std::move(stream)), slot_(std::move(slot)), server_(std::move(server)) {}

  void read() {
    slot_->answering = false;
    slot_->since = std::chrono::steady_clock::now();
    if (buffer_.size() != 0) {  // the next request is here already (pipelined)
      read_request();
      return;
    }
    // Waiting for a request: kIdle. Its first bytes start the request's own deadline.
    stream_->expires_after(MetricsServer::kIdle);
    stream_->async_read_some(buffer_.prepare(MetricsServer::kMaxRequestBytes),
                             [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                               if (ec) {
                                 self->on_read(ec);
                                 return;
                               }
                               self->buffer_.commit(n);
                               self->read_request();
                             });
  }

 private:
  void read_request() {
    parser_.emplace();
    limit(*parser_);
    slot_->since = std::chrono::steady_clock::now();
    stream_->expires_after(MetricsServer::kRequestDeadline);
    http::async_read(
        *stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    auto server = server_.lock();
    if (!server || server->closed)
      return;
    if (ec) {
      if (ec == beast::error::timeout)
        ++server->counters.timed_out;
      if (ec != http::error::end_of_stream && ec != beast::error::timeout &&
          ec != asio::error::operation_aborted && ec != asio::error::connection_reset &&
          ec != asio::error::eof) {
        ++server->counters.refused;
        respond(http::status::bad_request, "text/plain", "bad request\n", false);
        return;
      }
      beast::error_code ignored;
      [[maybe_unused]] auto r = stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    if (!parser_)
      return;
    const auto& req = parser_->get();
    ++server->counters.requests;
    const bool keep = req.keep_alive();
    const bool head = req.method() == http::verb::head;
    const Route to =
        route(req.method(), std::string_view(req.target().data(), req.target().size()));
    switch (to) {
      case Route::kMetrics: {
        const auto t0 = std::chrono::steady_clock::now();
        std::string body = server->metrics ? server->metrics() : std::string();
        server->counters.last_scrape_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++server->counters.scrapes;
        respond(http::status::ok, kContentType, std::move(body), keep, head);
        return;
      }
      case Route::kIndex:
        respond(http::status::ok, "text/html; charset=utf-8",
                "<html><head><title>tracer</title></head><body><h1>tracer serve</h1>"
                "<p><a href=\"/metrics\">Metrics</a></p></body></html>\n",
                keep, head);
        return;
      case Route::kNotAllowed:
        respond(http::status::method_not_allowed, "text/plain", "only GET\n", keep, head);
        return;
      case Route::kNotFound:
        respond(http::status::not_found, "text/plain", "not found: try /metrics\n", keep, head);
        return;
    }
  }

  void respond(http::status status,
               std::string_view type,
               std::string body,
               bool keep,
               bool head = false) {
    auto res = std::make_shared<http::response<http::string_body>>(status, 11);
    res->set(http::field::server, "tracer");
    res->set(http::field::content_type, beast::string_view(type.data(), type.size()));
    res->keep_alive(keep);
    res->body() = head ? std::string() : std::move(body);
    res->prepare_payload();
    slot_->answering = true;
    stream_->expires_after(MetricsServer::kRequestDeadline);  // a client that does not read
    http::async_write(*stream_, *res,
                      [self = shared_from_this(), res, keep](beast::error_code ec, std::size_t) {
                        if (ec || !keep) {
                          beast::error_code ignored;
                          [[maybe_unused]] auto r =
                              self->stream_->socket().shutdown(tcp::socket::shutdown_both, ignored);
                          return;
                        }
                        self->read();
                      });
  }

  std::shared_ptr<beast::tcp_stream> stream_;
  std::shared_ptr<MetricsServer::State::Slot> slot_;
  std::weak_ptr<MetricsServer::State> server_;
  beast::flat_buffer buffer_{MetricsServer::kMaxRequestBytes};
  std::optional<http::request_parser<http::string_body>> parser_;
};

}  // namespace

void MetricsServer::State::accept() {
  acceptor.async_accept([self = shared_from_this()](beast::error_code ec, tcp::socket socket) {
    if (self->closed)
      return;
    if (!ec)
      self->admit(std::move(socket));
    self->accept();
  });
}

void MetricsServer::State::admit(tcp::socket socket) {
  forget_closed();
  beast::error_code ec;
  const auto peer = socket.remote_endpoint(ec).address();
  if (ec)
    return;  // gone already
  const auto same = static_cast<std::size_t>(std::count_if(
      open.begin(), open.end(), [&](const auto& slot) { return slot->peer == peer; }));
  if (same >= kMaxPerAddress) {
    ++counters.refused;  // closed at once: the socket goes out of scope
    return;
  }
  if (open.size() >= kMaxConnections) {
    // Full: the connection that has waited longest without being answered makes room (a slow
    // or silent client never keeps a new one out).
    auto oldest = open.end();
    for (auto it = open.begin(); it != open.end(); ++it) {
      if (!(*it)->answering && (oldest == open.end() || (*it)->since < (*oldest)->since))
        oldest = it;
    }
    if (oldest == open.end()) {
      ++counters.refused;
      return;
    }
    if (auto s = (*oldest)->stream.lock())
      s->close();
    open.erase(oldest);
    ++counters.evicted;
  }
  auto stream = std::make_shared<beast::tcp_stream>(std::move(socket));
  auto slot = std::make_shared<Slot>(
      Slot{.stream = stream, .peer = peer, .since = std::chrono::steady_clock::now()});
  open.push_back(slot);
  std::make_shared<Connection>(stream, std::move(slot), weak_from_this())->read();
}

MetricsServer::MetricsServer(asio::any_io_executor executor, std::string_view listen, Body metrics)
    : state_(std::make_shared<State>(executor)) {
  const ListenAddress where = parse_listen(listen);
  state_->metrics = std::move(metrics);
  tcp::resolver resolver(executor);
  beast::error_code ec;
  const auto results = resolver.resolve(where.host.empty() ? std::string("::") : where.host,
                                        std::to_string(where.port), tcp::resolver::passive, ec);
  if (ec || results.empty()) {
    throw Error(ErrorCategory::kUsage, ec ? ec : std::make_error_code(std::errc::invalid_argument),
                fmt::format("--listen {}: cannot resolve '{}': {}", listen, where.host,
                            ec ? ec.message() : "no address"),
                "an IP address or a host name of this machine, e.g. 127.0.0.1:9435");
  }
  tcp::endpoint endpoint = results.begin()->endpoint();
  auto& acc = state_->acceptor;
  const auto fail = [&](const char* step) {
    return Error(ErrorCategory::kRuntime, std::error_code(ec.value(), std::generic_category()),
                 fmt::format("--listen {}: {} {}: {}", listen, step,
                             fmt::format("{}:{}", endpoint.address().to_string(), endpoint.port()),
                             ec.message()),
                 ec == asio::error::address_in_use
                     ? "another process listens there (another tracer serve?): pick another "
                       "port with --listen"
                     : (ec == asio::error::access_denied ? "ports below 1024 need "
                                                           "CAP_NET_BIND_SERVICE: pick a port "
                                                           "above 1023"
                                                         : ""));
  };
  [[maybe_unused]] auto r1 = acc.open(endpoint.protocol(), ec);
  if (ec)
    throw fail("opening a socket for");
  [[maybe_unused]] auto r2 = acc.set_option(tcp::acceptor::reuse_address(true), ec);
  if (endpoint.address().is_v6() && where.host.empty()) [[maybe_unused]]
    auto r3 = acc.set_option(asio::ip::v6_only(false), ec);
  [[maybe_unused]] auto r4 = acc.bind(endpoint, ec);
  if (ec)
    throw fail("binding");
  [[maybe_unused]] auto r5 = acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw fail("listening on");
  state_->accept();
}

MetricsServer::~MetricsServer() {
  close();
}

std::uint16_t MetricsServer::port() const {
  beast::error_code ec;
  const auto ep = state_->acceptor.local_endpoint(ec);
  return ec ? 0 : ep.port();
}

std::string MetricsServer::address() const {
  beast::error_code ec;
  const auto ep = state_->acceptor.local_endpoint(ec);
  if (ec)
    return {};
  const auto a = ep.address();
  return a.is_v6() ? fmt::format("[{}]:{}", a.to_string(), ep.port())
                   : fmt::format("{}:{}", a.to_string(), ep.port());
}

void MetricsServer::close() {
  if (!state_ || state_->closed)
    return;
  state_->closed = true;
  beast::error_code ec;
  [[maybe_unused]] auto r = state_->acceptor.close(ec);
  for (auto& slot : state_->open) {
    if (auto s = slot->stream.lock())
      s->close();
  }
  state_->open.clear();
}

MetricsServer::Counters MetricsServer::counters() const noexcept {
  return state_->counters;
}

}  // namespace tracer::exporter
