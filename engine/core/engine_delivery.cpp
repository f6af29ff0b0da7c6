// Engine::Impl's tracepoint delivery through BPF (core::TracepointDelivery) and the tracepoint
// hit counters (core::TracepointHits) that `missed` is computed from.
#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "core/engine_impl.hpp"
#include "progs/tp_deliver.h"
#include "progs/tp_hits.h"

namespace tracer {

using core::throw_failure;

void Engine::Impl::attach_hit_counters() {
  hit_ids.assign(events.size(), 0);
  for (std::size_t p = 0; p < events.size() && p < delivered.size(); ++p)
    hit_ids[p] = delivered[p] ? 1 : 0;  // the delivery program counts their hits
  if (!opts.count_tracepoint_hits || opts.target.kind != Target::Kind::kAllCpus)
    return;
  for (std::size_t p = 0; p < events.size() && p < TP_HITS_MAX_TRACEPOINTS; ++p) {
    const auto& o = opts.probes[p];
    if (hit_ids[p] != 0)
      continue;
    // A probe with its own program keeps the tracepoint's single attach of ours for it; a
    // filtered probe's events see fewer than the tracepoint's hits by design.
    if (o.kind != ProbeKind::kTracepoint || !o.bpf_program.empty() || !o.filter.empty() ||
        !probes[p].format || events[p].empty() || events[p].front().events.empty())
      continue;
    // One program counts every probe's tracepoint, each link's cookie its slot.
    if (hit_counter.attach(static_cast<std::uint32_t>(p), events[p].front().events.front().fd()))
      hit_ids[p] = 1;
  }
}

std::vector<std::uint64_t> Engine::Impl::read_drops(std::size_t p) const {
  if (!delivery || p >= delivered.size() || !delivered[p])
    return {};
  return delivery->drops(static_cast<std::uint32_t>(p));
}

void Engine::Impl::plan_delivery(std::vector<core::ResolvedProbe>& resolved) {
  delivered.assign(resolved.size(), false);
  if (!opts.deliver_tracepoints_via_bpf || opts.target.kind != Target::Kind::kAllCpus)
    return;
  for (std::size_t p = 0; p < resolved.size(); ++p) {
    auto& rp = resolved[p];
    const auto& o = opts.probes[p];
    const auto* a = rp.attr.raw();
    // What the delivery rebuilds: a tracepoint's default samples, every hit.
    // A tracefs filter gates the perf event's samples, not a BPF program's view: such probes
    // sample through their events (a filter compiled to BPF would lift this).
    if (o.kind != ProbeKind::kTracepoint || rp.counting || !o.bpf_program.empty() ||
        !o.filter.empty() || !rp.info.format || a->sample_type != core::kDeliveredSampleType ||
        a->freq != 0 || a->sample_period != 1 || p >= TP_DELIVER_MAX_SLOTS)
      continue;
    delivered[p] = true;
    // The probe's own events sample nothing (their ring carries side-band records only: COMM,
    // FORK, EXIT when they were asked for); they remain the attach point of the program.
    constexpr std::uint32_t kSideBandPages = 16;
    rp.attr.sample_period(0);
    rp.ring.data_pages = std::min(rp.ring.data_pages, kSideBandPages);
    if (a->watermark != 0)
      rp.attr.wakeup_watermark(kSideBandPages * 4096 / 4);
  }
}

constexpr std::uint32_t kMaxDeliveryPages = 4096;  // 16 MiB per CPU

void Engine::Impl::open_delivery() {
  if (std::find(delivered.begin(), delivered.end(), true) == delivered.end())
    return;
  // One ring per CPU carries every delivered probe: the share each probe's own ring would have
  // had, times their number (at most 16 MiB).
  const auto n = static_cast<std::uint32_t>(std::count(delivered.begin(), delivered.end(), true));
  const std::uint32_t share = ring_pages_default != 0 ? ring_pages_default : kDefaultOutputPages;
  const std::uint32_t pages =
      std::bit_floor(std::min<std::uint32_t>(share * std::max(1U, n), kMaxDeliveryPages));
  auto d =
      core::TracepointDelivery::open(delivered.size(), {.data_pages = pages,
                                                        .wakeup_events = 0,
                                                        .wakeup_watermark_bytes = pages * 4096 / 4,
                                                        .extra_sample_type = 0,
                                                        .payload_time_offset = 0,
                                                        .start_disabled = false});
  if (!d) {
    // Without BPF delivery the probes sample through their own events, as before.
    throw_failure(ErrorCategory::kRuntime, d.error(), "tracepoint delivery (BPF)");
  }
  delivery.emplace(std::move(*d));
  for (auto& slot : delivery->channel().cpus()) {
    if (!slot)
      continue;
    auto r = std::make_unique<Reader>(
        core::RingReader(std::move(slot->ring), UINT32_MAX, slot->cpu,
                         &delivery->channel().layout(), opts.max_batch, true),
        serial, slot->event.fd(), delivery->channel().attr());
    r->via = [this](const Batch& b) { delivery->convert(b, probes, batch_handler); };
    readers.push_back(std::move(r));
  }
  for (std::size_t p = 0; p < delivered.size(); ++p) {
    const auto& format = probes[p].format;
    if (!delivered[p] || events[p].empty() || events[p].front().events.empty() ||
        !format.has_value())
      continue;
    if (auto st = delivery->attach(static_cast<std::uint32_t>(p), *format,
                                   events[p].front().events.front().fd());
        !st) {
      throw_failure(ErrorCategory::kRuntime, st.error(),
                    fmt::format("probe '{}': tracepoint delivery (BPF)", probes[p].name));
    }
  }
}

std::vector<std::uint64_t> Engine::Impl::read_hits(std::size_t p) const {
  if (p < delivered.size() && delivered[p] && delivery)
    return delivery->hits(static_cast<std::uint32_t>(p));
  if (p >= hit_ids.size() || hit_ids[p] == 0)
    return {};
  return hit_counter.read(static_cast<std::uint32_t>(p));
}

void Engine::Impl::read_kernel_counts(std::vector<std::vector<std::uint64_t>>& hits,
                                      std::vector<std::vector<std::uint64_t>>& drops) const {
  hits.assign(hit_ids.size(), {});
  drops.assign(hit_ids.size(), {});
  for (std::size_t p = 0; p < hit_ids.size(); ++p) {
    hits[p] = read_hits(p);
    drops[p] = read_drops(p);
  }
}

}  // namespace tracer
