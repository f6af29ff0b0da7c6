#include "tracer/perf/ring_stats.hpp"

namespace tracer {

RingStats& RingStats::operator+=(const RingStats& o) noexcept {
  records += o.records;
  samples += o.samples;
  bytes += o.bytes;
  lost += o.lost;
  lost_samples += o.lost_samples;
  aux_chunks += o.aux_chunks;
  aux_bytes += o.aux_bytes;
  aux_truncated += o.aux_truncated;
  aux_lost += o.aux_lost;
  decode_errors += o.decode_errors;
  unrouted += o.unrouted;
  wakeups += o.wakeups;
  kernel_hits += o.kernel_hits;
  missed += o.missed;
  unprocessed += o.unprocessed;
  peak_fill = peak_fill > o.peak_fill ? peak_fill : o.peak_fill;
  ring_size = ring_size > o.ring_size ? ring_size : o.ring_size;
  return *this;
}

}  // namespace tracer
