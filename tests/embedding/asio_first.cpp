// Boost.Asio (all of it) before tracer's header: an embedder's include order must not matter
// (main.cpp has tracer's first). With Debian 12's Boost 1.74.
#include <boost/asio.hpp>
#include <tracer/tracer.hpp>

// Used by nothing: this unit only has to compile and link beside main.cpp.
bool tracer_embedding_asio_first() {
  boost::asio::io_context io;
  return tracer::to_string(tracer::ProbeKind::kUsdt) == "usdt" && io.stopped() == false;
}
