// Engine stats: per probe and CPU, from the rings' readers, the events' own counts
// (PERF_FORMAT_LOST, counting probes), the delivery channel and the tracepoint hit counters.
#include <algorithm>
#include <tuple>

#include "engine_impl.hpp"

namespace tracer {

Stats Engine::Impl::collect_stats() const {
  Stats s;
  for (std::size_t p = 0; p < probes.size(); ++p) {
    if (p < removed_stats.size()) {
      if (const auto& removed = removed_stats[p]) {
        s.probes.push_back(*removed);
        continue;
      }
    }
    s.probes.push_back(probe_stats(p));
  }
  s.passes = passes;
  s.timer_passes = timer_passes;
  s.held_passes = held_passes;
  s.partial_passes = partial_passes;
  s.pass_us_log2 = pass_us_log2;
  s.pass_ns = pass_ns;
  return s;
}

ProbeStats Engine::Impl::probe_stats(std::size_t p) const {
  ProbeStats ps;
  ps.name = probes[p].name;
  if (p < events.size()) {
    for (const auto& ce : events[p]) {
      RingStats rs = ce.reader != nullptr ? ce.reader->reader.stats() : RingStats{};
      // PERF_FORMAT_LOST (6.0+) is the kernel's own count per event, including drops whose
      // LOST record has not been written yet: the authoritative number when it is there.
      std::uint64_t read_lost = 0;
      for (const auto& ev : ce.events) {
        if (auto c = ev.read(); c && !c->values.empty()) {
          read_lost += c->values[0].lost;
          if (counting[p])
            rs.samples += static_cast<std::uint64_t>(c->values[0].scaled);
        }
      }
      rs.lost = std::max(rs.lost, read_lost);
      if (p < delivered.size() && delivered[p] && delivery) {
        // Its samples came through the delivery channel; what did not fit there was counted
        // per slot and CPU by the program.
        rs.samples = delivery->delivered(static_cast<std::uint32_t>(p), ce.cpu);
        const auto d =
            p < drop_final.size() && !drop_final[p].empty() ? drop_final[p] : read_drops(p);
        const auto c = static_cast<std::size_t>(std::max(ce.cpu, 0));
        const std::uint64_t base =
            p < drop_base.size() && c < drop_base[p].size() ? drop_base[p][c] : 0;
        rs.lost = c < d.size() ? d[c] - std::min(d[c], base) : 0;
        rs.unprocessed = delivery->unprocessed(static_cast<std::uint32_t>(p), ce.cpu);
      }
      const auto now = p < hit_final.size() && !hit_final[p].empty() ? hit_final[p] : read_hits(p);
      if (!now.empty() && p < hit_base.size() && ce.cpu >= 0 &&
          static_cast<std::size_t>(ce.cpu) < now.size()) {
        const auto c = static_cast<std::size_t>(ce.cpu);
        const std::uint64_t base = c < hit_base[p].size() ? hit_base[p][c] : 0;
        rs.kernel_hits = now[c] - std::min(now[c], base);
        const std::uint64_t got = rs.samples + rs.lost + rs.lost_samples + rs.unprocessed;
        rs.missed = rs.kernel_hits > got ? rs.kernel_hits - got : 0;
      }
      ps.per_cpu.emplace_back(ce.cpu, rs);
    }
  }
  if (p < opts.probes.size())
    std::tie(ps.bpf_skipped, ps.bpf_skipped_shared) = read_skips(p);
  // The delivery's target map: children it had no room for, whose hits no delivered probe saw.
  if (delivery && p < delivered.size() && delivered[p]) {
    if (auto d = delivery->object().percpu_array_sum<std::uint64_t>("tracer_targets_dropped"))
      ps.targets_dropped = *d;
  }
  if (probes[p].kind == ProbeKind::kBpfOutput) {
    for (const auto* r : output_readers)
      ps.per_cpu.emplace_back(r->reader.cpu(), r->reader.stats());
    if (bpf_object) {
      const auto maps = bpf_object->map_names();
      if (std::find(maps.begin(), maps.end(), "tracer_targets_dropped") != maps.end()) {
        if (auto d = bpf_object->percpu_array_sum<std::uint64_t>("tracer_targets_dropped"))
          ps.targets_dropped = *d;
      }
      if (std::find(maps.begin(), maps.end(), "output_drops") != maps.end()) {
        if (auto drops = bpf_object->percpu_array_sum<std::uint64_t>("output_drops")) {
          ps.bpf_output_drops = *drops;
        }
      }
    }
  }
  return ps;
}

}  // namespace tracer
