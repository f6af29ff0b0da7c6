// A small HTTP server that embeds tracer: Boost.Beast on loopback and a tracer Session on the
// same io_context, the server tracing itself. It serves
//   GET /work     its own work: a request that makes 3 getppid calls (the known answer)
//   GET /counts   its own system calls by name, from the Session's tables as values
//   GET /latency  a histogram of its own request handling (a uprobe and uretprobe on
//                 handle_work, paired by thread), as values
// Usage: tracer_example_server [PORT]   (0 or none: any free port, printed as "listening PORT")
#include <tracer/tracer.hpp>

#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <variant>

namespace asio = boost::asio;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

// The request handling a uprobe times: not inlined, and exported (-rdynamic) so that tracer
// finds it by name in this executable.
extern "C" __attribute__((noinline, visibility("default"))) int handle_work(int n) {
  int sum = 0;
  for (int i = 0; i < n; ++i)
    sum += ::getppid() > 0 ? 1 : 0;
  return sum;
}

namespace {

/// What the Session's tables said last: system calls by name, and the latency histogram.
struct Latest {
  std::map<std::string, std::uint64_t> syscalls;
  std::map<std::pair<std::int64_t, std::int64_t>, std::uint64_t> latency;  // [lo, hi) ns -> n
};

std::string cell_text(const tracer::Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c))
    return *s;
  if (const auto* i = std::get_if<std::int64_t>(&c))
    return std::to_string(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&c))
    return std::to_string(*u);
  return "";
}

std::string recipe_text(const std::string& exe) {
  return R"([recipe]
name = "self"
[[probe]]
name = "sys"
tracepoint = "raw_syscalls:sys_enter"
[[probe]]
name = "work"
uprobe = ")" +
         exe + R"(:handle_work"
[[probe]]
name = "work_done"
uretprobe = ")" +
         exe + R"(:handle_work"
[[pipeline]]
name = "syscalls"
[[pipeline.stage]]
use = "filter"
expr = "probe == \"sys\""
[[pipeline.stage]]
use = "count"
by = ["syscall"]
every = "100ms"
[[pipeline]]
name = "latency"
[[pipeline.stage]]
use = "filter"
expr = "probe != \"sys\""
[[pipeline.stage]]
use = "latency"
entry = "work"
exit = "work_done"
key = "tid"
[[pipeline.stage]]
use = "hist"
field = "duration"
every = "100ms"
)";
}

void serve(tcp::socket socket, Latest& latest) {
  // One request per connection, synchronously: the example's point is the tracer side.
  boost::beast::flat_buffer buffer;
  http::request<http::string_body> req;
  boost::system::error_code ec;
  http::read(socket, buffer, req, ec);
  if (ec)
    return;
  http::response<http::string_body> res{http::status::ok, req.version()};
  res.set(http::field::content_type, "application/json");
  const std::string target(req.target());
  if (target == "/work") {
    res.body() = "{\"done\":" + std::to_string(handle_work(3)) + "}";
  } else if (target == "/counts") {
    std::string body = "{";
    for (const auto& [name, n] : latest.syscalls)
      body += (body.size() > 1 ? "," : "") + ("\"" + name + "\":" + std::to_string(n));
    res.body() = body + "}";
  } else if (target == "/latency") {
    std::string body = "[";
    for (const auto& [range, n] : latest.latency)
      body += (body.size() > 1 ? "," : "") +
              ("{\"lo\":" + std::to_string(range.first) +
               ",\"hi\":" + std::to_string(range.second) + ",\"count\":" + std::to_string(n) + "}");
    res.body() = body + "]";
  } else {
    res.result(http::status::not_found);
  }
  res.prepare_payload();
  http::write(socket, res, ec);
}

void accept(tcp::acceptor& acceptor, Latest& latest) {
  acceptor.async_accept([&](const boost::system::error_code& ec, tcp::socket socket) {
    if (!ec)
      serve(std::move(socket), latest);
    accept(acceptor, latest);
  });
}

}  // namespace

int main(int argc, char** argv) {
  asio::io_context io(1);
  const std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  tracer::Recipe recipe = tracer::Recipe::load_string(recipe_text(exe), "server.toml",
                                                      {.stages = tracer::stage_catalog()});
  tracer::Sink out = tracer::Sink::discard();  // the values only
  tracer::Session session(io.get_executor(), recipe, out,
                          {.target = {.kind = tracer::Target::Kind::kPid, .pid = ::getpid()}});
  Latest latest;
  session.on_table([&](const tracer::TableUpdate& u) {
    if (u.pipeline == 0) {  // counts per interval: add them up
      for (const auto& row : u.table.rows)
        latest.syscalls[cell_text(row.keys.at(0))] += std::get<std::uint64_t>(row.values.at(0));
    } else {  // the histogram's buckets per interval: add them up too
      for (const auto& row : u.table.rows)
        for (const auto& b : row.buckets)
          latest.latency[{b.lo, b.hi}] += b.count;
    }
  });
  tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"),
                              static_cast<unsigned short>(argc > 1 ? std::atoi(argv[1]) : 0)});
  // Start without blocking the server: it accepts while tracer compiles and attaches.
  session.async_start([&](std::exception_ptr e) {
    if (e) {
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        std::fprintf(stderr, "tracer_example_server: %s\n", ex.what());
      }
      io.stop();
      return;
    }
    std::printf("listening %u\n", acceptor.local_endpoint().port());
    std::fflush(stdout);
  });
  accept(acceptor, latest);
  io.run();
  return 0;
}
