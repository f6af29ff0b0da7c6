// Fuzzes the perfmon buffer reader (`tracer replay FILE.perfmon` reads files of any origin):
// arbitrary bytes must parse into buffers or give an error, never crash or read past the input;
// what parses is written again with the writer and must read back the same, and prints.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "tracer/perfdata/perfmon.hpp"
#include "tracer/replay.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tracer::perfmon;  // NOLINT(google-build-using-namespace)
  const std::span<const std::byte> in(reinterpret_cast<const std::byte*>(data), size);
  (void)looks_like_perfmon(in);
  auto buffers = parse(in);
  if (!buffers)
    return 0;
  for (const auto& b : *buffers) {
    BufferWriter w(std::size_t{1} << 24, b.header.arch, b.header.ticks_per_second);
    for (const auto& r : b.records) {
      if (!w.write(r))
        std::abort();  // every record read fits a buffer as large as its input
    }
    auto again = parse(w.bytes());
    if (!again || again->size() != 1 || (*again)[0].records != b.records)
      std::abort();
  }
  static std::FILE* null = std::fopen("/dev/null", "w");
  tracer::print_perfmon(*buffers, null);
  return 0;
}
