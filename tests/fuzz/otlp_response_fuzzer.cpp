// Fuzzes the otlp stage's reading of a collector's answer (plugins/stages/otlp_sender.cpp):
// arbitrary bytes as a collector sends them, in two pieces (the first byte says where the input
// is cut, as TCP may cut it), through the response parser with the sender's limits (16 KiB
// header, 64 KiB body read and thrown away). The status is -1 or an HTTP status, never a crash or
// memory beyond the limits.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "plugins/stages/otlp_sender.hpp"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0)
    return 0;
  const std::size_t cut = 1 + (data[0] % size);
  http::response_parser<http::string_body> parser;
  parser.header_limit(tracer::stages::OtlpSender::kMaxAnswerHeader);
  parser.body_limit(tracer::stages::OtlpSender::kMaxAnswerBody);
  boost::beast::error_code ec;
  const auto* bytes = reinterpret_cast<const char*>(data) + 1;
  const std::size_t n = size - 1;
  // The parser takes what it can of each piece; the rest waits for more, as in a read loop.
  boost::beast::flat_buffer buf(tracer::stages::OtlpSender::kMaxAnswerHeader +
                                tracer::stages::OtlpSender::kMaxAnswerBody);
  for (const auto& [from, len] :
       {std::pair<std::size_t, std::size_t>{0, std::min(cut - 1, n)},
        std::pair<std::size_t, std::size_t>{std::min(cut - 1, n), n - std::min(cut - 1, n)}}) {
    if (ec && ec != http::error::need_more)
      break;
    if (len > buf.max_size() - buf.size())
      break;  // the reader's buffer is full: its read ends with an error
    auto into = buf.prepare(len);
    boost::asio::buffer_copy(into, boost::asio::buffer(bytes + from, len));
    buf.commit(len);
    for (;;) {
      ec = {};
      const std::size_t used = parser.put(buf.data(), ec);
      buf.consume(used);
      if (ec || used == 0 || parser.is_done() || buf.size() == 0)
        break;
    }
  }
  if (!parser.is_done() && !ec)
    ec = http::error::partial_message;
  const int status = tracer::stages::otlp_response_status(parser, ec);
  if (status != -1 && (status < 0 || status > 999))
    std::abort();
  return 0;
}
