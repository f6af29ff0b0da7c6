// Fuzzes the /metrics endpoint's request handling (tracer/exporter/http_server.hpp): arbitrary
// bytes, as a client sends them, through the parser with the connection's limits (8 KiB header
// and body) and the routing. It must end in an answer (200, 404, 405), a refusal (400) or "not
// whole yet" (0), never a crash, a read past the input or memory beyond the limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tracer/exporter/http_server.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const int status = tracer::exporter::MetricsServer::status_for(bytes);
  if (status != 0 && status != 200 && status != 400 && status != 404 && status != 405)
    std::abort();
  return 0;
}
