#include "tracer/stats.hpp"

#include <algorithm>

namespace tracer {

RingStats ProbeStats::total() const noexcept {
  RingStats t;
  for (const auto& [cpu, s] : per_cpu)
    t += s;
  return t;
}

ProbeStats::Losses ProbeStats::losses() const noexcept {
  const RingStats t = total();
  Losses l;
  l.ring = t.lost + t.lost_samples + t.unprocessed;
  // A BPF output call that failed because the ring was full is also in the ring's LOST count.
  l.output_drops = bpf_output_drops > l.ring ? bpf_output_drops - l.ring : 0;
  l.stacks_lost = std::min(kernel_stacks_lost, kernel_dropped);
  l.map_full = kernel_dropped - l.stacks_lost;
  return l;
}

std::uint64_t ProbeStats::lost() const noexcept {
  const Losses l = losses();
  return l.ring + l.output_drops + l.map_full + l.stacks_lost;
}

std::uint64_t Stats::lost() const noexcept {
  std::uint64_t n = 0;
  for (const auto& p : probes)
    n += p.lost();
  return n;
}

}  // namespace tracer
