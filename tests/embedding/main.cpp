// An embedding server: its own io_context runs its own work (a timer) and tracer's engine side
// by side, with a callback sink. Exits 0 when the engine delivered samples and stopped cleanly.
#include <tracer/error.hpp>
#include <tracer/tracer.hpp>

#include <unistd.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cstdio>
#include <functional>

int main() {
  boost::asio::io_context io;
  tracer::Engine engine(io.get_executor(),
                        {.target = {.kind = tracer::Target::Kind::kPid, .pid = ::getpid()},
                         .probes = {{.name = "clock",
                                     .kind = tracer::ProbeKind::kSoftware,
                                     .spec = "task-clock",
                                     .freq = 1000}}});
  std::uint64_t samples = 0;
  engine.on_batch([&](const tracer::Batch& b) { samples += b.records.size(); });
  try {
    engine.start();
  } catch (const tracer::Error& e) {
    std::fprintf(stderr, "embedding: %s\n  hint: %s\n", e.what(), e.hint().c_str());
    return 1;
  }
  // The host's own work on the same io_context: burn CPU in timer callbacks for ~200 ms.
  boost::asio::steady_timer timer(io);
  int ticks = 0;
  std::function<void(const boost::system::error_code&)> tick = [&](const auto&) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(10);
    volatile unsigned x = 0;
    while (std::chrono::steady_clock::now() < end)
      x = x + 1;
    if (++ticks == 20) {
      engine.stop();
      return;
    }
    timer.expires_after(std::chrono::milliseconds(1));
    timer.async_wait(tick);
  };
  timer.expires_after(std::chrono::milliseconds(1));
  timer.async_wait(tick);
  io.run();
  const auto stats = engine.stats();
  std::printf("embedding: %llu records, %llu samples\n", static_cast<unsigned long long>(samples),
              static_cast<unsigned long long>(stats.probes.at(0).total().samples));
  return samples > 50 && stats.probes.at(0).total().samples == samples ? 0 : 1;
}
