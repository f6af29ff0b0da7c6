// Test support: ring bytes recorded from a real kernel, stored as tests/data/rings/<k>-<arch>/
// <case>.{hex,attr,expected}, and the golden text they must decode to.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tracer/perf/record.hpp"
#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::testing {

struct RecordedRing {
  perf::SampleLayout layout;
  std::string attr_text;    // EventAttr::describe() of the capture
  std::string format_file;  // tracepoint format, relative to tests/data/tracefs/<k>-<arch>/;
                            // empty: the samples' RAW data is not a tracepoint record
  std::vector<std::byte> bytes;
  std::uint64_t sample_regs_user = 0;  // the layout's user registers (REGS_USER)
};

/// The golden text: one line per record (perf::to_text), samples followed by their tracepoint
/// fields decoded through `format` ("  fd=12345 offset=0 whence=1"), or by their RAW bytes in
/// hex when there is no format (a BPF output payload).
[[nodiscard]] std::string golden_text(const perf::SampleLayout& layout,
                                      std::span<const std::byte> bytes,
                                      const tracefs::Format* format);

/// Writes <stem>.hex (xxd format with the golden text as '#' comments), <stem>.attr,
/// <stem>.expected.
[[nodiscard]] Status write_recorded_ring(const RecordedRing& r,
                                         const tracefs::Format* format,
                                         const std::string& stem);
/// Reads what write_recorded_ring wrote (bytes and layout; attr_text and format_file too).
[[nodiscard]] Result<RecordedRing> read_recorded_ring(const std::string& stem);

}  // namespace tracer::testing
