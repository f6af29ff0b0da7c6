// Counters of one ring: what a RingReader counts as it drains, and what the engine adds (the
// kernel's hit counts, what a stop gave up).
#pragma once

#include <cstdint>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// Counters of one ring (one probe on one CPU, or one probe's share of a shared CPU ring).
struct RingStats {
  std::uint64_t records = 0;       // every record handed on
  std::uint64_t samples = 0;       // PERF_RECORD_SAMPLE
  std::uint64_t bytes = 0;         // record bytes read
  std::uint64_t lost = 0;          // PERF_RECORD_LOST totals: samples the ring had no room for
  std::uint64_t lost_samples = 0;  // PERF_RECORD_LOST_SAMPLES totals (PMU-side drops)
  std::uint64_t aux_chunks = 0;
  std::uint64_t aux_bytes = 0;
  std::uint64_t aux_truncated = 0;  // AUX records flagged TRUNCATED
  std::uint64_t aux_lost = 0;       // AUX records flagged COLLISION/PARTIAL, or invalid
  std::uint64_t decode_errors = 0;  // malformed records (never from a sane kernel)
  std::uint64_t unrouted = 0;       // records whose id matched no probe
  std::uint64_t wakeups = 0;        // drains triggered by the kernel
  /// Tracepoint probes of a system-wide engine (EngineOptions::count_tracepoint_hits): how often
  /// the kernel ran the tracepoint on this CPU while the engine ran (a BPF counter beside the
  /// perf event). 0 when not counted.
  std::uint64_t kernel_hits = 0;
  /// Hits that reached neither the ring as a sample nor a LOST count: kernel_hits - samples -
  /// lost when positive (perf's per-CPU tracepoint events miss events in some contexts on some
  /// machines; see DESIGN notes). Never silent: reported per probe and CPU.
  std::uint64_t missed = 0;
  /// Samples still in the ring when a stop's drain ran out of time (EngineOptions::
  /// stop_drain_ms): given up unprocessed, and counted as lost.
  std::uint64_t unprocessed = 0;
  /// The most bytes a drain found waiting in the ring (published but not read) when it began,
  /// and the ring's data area: how close it came to losing records (tracer serve's ring fill).
  /// Summed stats keep the largest of each.
  std::uint64_t peak_fill = 0;
  std::uint64_t ring_size = 0;
  RingStats& operator+=(const RingStats& o) noexcept;
};

}  // namespace tracer

#pragma GCC visibility pop
