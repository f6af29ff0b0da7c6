// Engine::Impl's tracepoint delivery through BPF (core::TracepointDelivery) and the tracepoint
// hit counters (core::TracepointHits) that `missed` is computed from.
#include <fmt/format.h>

#include <fcntl.h>

#include <algorithm>
#include <bit>

#include "engine_impl.hpp"
#include "tp_deliver.h"
#include "tp_hits.h"

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
    if (hit_counter.attach(static_cast<std::uint32_t>(p), events[p].front().events.front().fd(),
                           self_tgid()))
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
  // System-wide, and for a pid or command target (the program tests the target: its processes
  // and their children, from the command's exec, as the per-task events would sample them).
  if (!opts.deliver_tracepoints_via_bpf || opts.target.kind == Target::Kind::kCgroup)
    return;
  for (std::size_t p = 0; p < resolved.size(); ++p) {
    auto& rp = resolved[p];
    const auto& o = opts.probes[p];
    const auto* a = rp.attr.raw();
    // What the delivery rebuilds: a tracepoint's default samples, every hit.
    // A tracefs filter gates the perf event's samples, not a BPF program's view: such probes
    // sample through their events (a filter compiled to BPF would lift this).
    if (o.kind != ProbeKind::kTracepoint || rp.counting || !o.bpf_program.empty() ||
        !o.read_events.empty() || !o.filter.empty() || !rp.info.format ||
        a->sample_type != core::kDeliveredSampleType || a->freq != 0 || a->sample_period != 1 ||
        p >= TP_DELIVER_MAX_SLOTS)
      continue;
    delivered[p] = true;
    if (p < probes.size()) {
      probes[p].delivered = true;  // its samples reach the stages in the delivered form
      probes[p].delivered_comm = opts.deliver_comm;
    }
    // The probe's own events sample nothing and are never enabled: they are the attach point
    // of the program, which runs for every hit of the tracepoint once it is attached to one of
    // its events. An enabled one would cost each hit on its CPU perf's own pass over it
    // (perf_tp_event, 8% of a getppid loop's time) for a count no one reads. Their ring
    // carries the side-band records (COMM, FORK, EXIT) asked for, from a dummy event per CPU
    // (open_probe).
    constexpr std::uint32_t kSideBandPages = 16;
    rp.attr.sample_period(0);
    rp.ring.data_pages = std::min(rp.ring.data_pages, kSideBandPages);
    if (a->watermark != 0)
      rp.attr.wakeup_watermark(kSideBandPages * 4096 / 4);
  }
}

constexpr std::uint32_t kMaxDeliveryPages = 4096;  // 16 MiB per CPU

namespace {

/// The delivered probe when it is the only one.
std::optional<std::uint32_t> only_slot(const std::vector<bool>& delivered) {
  if (std::count(delivered.begin(), delivered.end(), true) != 1)
    return std::nullopt;
  return static_cast<std::uint32_t>(
      std::distance(delivered.begin(), std::find(delivered.begin(), delivered.end(), true)));
}

}  // namespace

DeliveryChannel Engine::Impl::delivery_channel() const noexcept {
  const DeliveryChannel want = opts.channel.value_or(DeliveryChannel::kRingbuf);
  return want == DeliveryChannel::kRingbuf && !core::kernel_has_ringbuf() ? DeliveryChannel::kPerf
                                                                          : want;
}

void Engine::Impl::open_delivery() {
  if (std::find(delivered.begin(), delivered.end(), true) == delivered.end())
    return;
  // One ring per CPU carries every delivered probe: what each probe's own ring would have had
  // (its `ring`, else the default share), added up (at most 16 MiB). The ring buffer, shared by
  // the CPUs, gets what the per-CPU rings would have together. Its memory is charged to the
  // memory cgroup, not to the locked-memory budget perf rings count against.
  const std::uint32_t share = ring_pages_default != 0 ? ring_pages_default : kDefaultOutputPages;
  std::uint64_t wanted = 0;
  for (std::size_t p = 0; p < delivered.size() && p < opts.probes.size(); ++p) {
    if (delivered[p])
      wanted += opts.probes[p].ring_pages != 0 ? opts.probes[p].ring_pages : share;
  }
  const auto pages = static_cast<std::uint32_t>(
      std::bit_floor(std::clamp<std::uint64_t>(wanted, 1, kMaxDeliveryPages)));
  const auto cpus = static_cast<std::uint32_t>(std::max(1, libbpf_num_possible_cpus()));
  const std::uint32_t rb_bytes =
      opts.ringbuf_bytes != 0
          ? opts.ringbuf_bytes
          : std::bit_floor(std::min<std::uint64_t>(std::uint64_t{pages} * 4096 * cpus, 1U << 30));
  const core::DeliveryOptions dopts{.kind = delivery_channel(),
                                    .perf = {.data_pages = pages,
                                             .wakeup_events = 0,
                                             .wakeup_watermark_bytes = pages * 4096 / 4,
                                             .extra_sample_type = 0,
                                             .payload_time_offset = 0,
                                             .start_disabled = false},
                                    .ringbuf_bytes = rb_bytes,
                                    // A wakeup at a quarter, as the perf rings: the rest holds what
                                    // comes while the engine is being scheduled.
                                    .wakeup_bytes = rb_bytes / 4,
                                    .only_slot = only_slot(delivered),
                                    .with_comm = opts.deliver_comm,
                                    .self_tgid = self_tgid(),
                                    .target_tasks = opts.target.kind == Target::Kind::kPid ||
                                                    opts.target.kind == Target::Kind::kCommand,
                                    .max_targets = opts.max_targets,
                                    .max_batch = opts.max_batch};
  auto d = core::TracepointDelivery::open(delivered.size(), dopts);
  if (!d) {
    // No BPF delivery here (a kernel without BTF for the program's CO-RE relocations, say):
    // an error that names the way out, the probes' own perf events.
    Failure f = d.error();
    if (f.hint.empty())
      f.hint = "run with --delivery perf: the tracepoints then sample through their own events";
    throw_failure(ErrorCategory::kRuntime, f, "tracepoint delivery (BPF)");
  }
  delivery.emplace(std::move(*d));
  follow_target(delivery->object(), {});
  used_channel = dopts.kind;
  ring_note +=
      dopts.kind == DeliveryChannel::kRingbuf
          ? fmt::format(
                "; tracepoints through a BPF ring buffer of {} KiB "
                "(every CPU), woken at {} KiB",
                rb_bytes / 1024, dopts.wakeup_bytes / 1024)
          : fmt::format(
                "; tracepoints through a BPF perf channel of {} "
                "KiB per CPU{}",
                pages * 4,
                opts.channel == DeliveryChannel::kRingbuf ? " (this kernel has no BPF ring buffer)"
                                                          : "");
  if (auto* ch = delivery->channel()) {
    for (auto& slot : ch->cpus()) {
      if (!slot)
        continue;
      auto r =
          std::make_unique<Reader>(perf::RingReader(std::move(slot->ring), UINT32_MAX, slot->cpu,
                                                    &ch->layout(), opts.max_batch, true),
                                   serial, slot->event.fd(), ch->attr());
      r->via = [this](const Batch& b) {
        delivery->convert(b, probes, batch_handler, in_place_handler);
      };
      readers.push_back(std::move(r));
    }
  }
  if (auto* rb = delivery->ring_buffer()) {
    const int fd = ::fcntl(rb->fd(), F_DUPFD_CLOEXEC, 0);
    if (fd < 0)
      throw_failure(ErrorCategory::kRuntime,
                    Failure{.code = std::error_code(errno, std::system_category()),
                            .message = "ringbuf: cannot duplicate the map's fd",
                            .hint = {}});
    ringbuf_wait.emplace(serial, fd);
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
                    fmt::format("probe '{}': tracepoint delivery (BPF)", probes[p].name), about(p));
    }
  }
}

void Engine::Impl::arm_ringbuf() {
  if (!ringbuf_wait || ringbuf_armed || !running)
    return;
  ringbuf_armed = true;
  ringbuf_wait->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                           [self = shared_from_this()](const boost::system::error_code& ec) {
                             if (ec || !self->running)
                               return;
                             self->ringbuf_armed = false;
                             ++self->ringbuf_wakeups;
                             if (self->held()) {  // re-armed by the first pass that reads
                               self->ringbuf_parked = true;
                               self->post_held_pass();
                               return;
                             }
                             self->drain_ringbuf();
                             if (self->after_wakeup())
                               self->arm_ringbuf();
                           });
}

void Engine::Impl::drain_ringbuf(bool complete) noexcept {
  if (!delivery || delivery->ring_buffer() == nullptr || failure)
    return;
  try {
    if (complete && !stopping) {  // to the producer's position now: at most the ring's size
      delivery->drain(probes, batch_handler, in_place_handler);
      return;
    }
    // A bounded pass, in chunks, for drain_slice_ms at most (until stop_deadline in a stop): a
    // ring that keeps filling, or a slow pipeline, does not keep the reactor from its signals,
    // timers and other rings. The ring's wait is level-triggered: what is left wakes it again.
    const auto until = stopping ? stop_deadline
                                : std::chrono::steady_clock::now() +
                                      std::chrono::milliseconds(opts.drain_slice_ms);
    constexpr std::size_t kChunk = 512;
    std::size_t taken = 0;
    do {  // (a chunk at least, whatever the slice)
      const std::size_t n = delivery->drain(probes, batch_handler, in_place_handler, kChunk);
      taken += n;
      if (n < kChunk)
        return;
    } while (taken < (std::size_t{1} << 16) && std::chrono::steady_clock::now() < until);
    if (stopping)
      delivery->discard();  // past the stop's time: given up, and counted
  } catch (...) {
    failure = std::current_exception();
  }
}

std::pair<std::uint64_t, bool> Engine::Impl::read_skips(std::size_t p) const {
  const auto is_delivered = [&](std::size_t i) { return i < delivered.size() && delivered[i]; };
  if (is_delivered(p) && delivery)
    return {delivery->skips(), std::count(delivered.begin(), delivered.end(), true) > 1};
  if (!opts.probes[p].bpf_program.empty() && bpf_object) {
    const auto& name = opts.probes[p].bpf_program;
    const auto sharing = std::count_if(opts.probes.begin(), opts.probes.end(),
                                       [&](const auto& o) { return o.bpf_program == name; });
    return {bpf_object->program_skips(name), sharing > 1};
  }
  if (p < hit_ids.size() && hit_ids[p] != 0) {
    std::size_t sharing = 0;  // the probes the hit counter counts (not the delivered ones)
    for (std::size_t i = 0; i < hit_ids.size(); ++i)
      sharing += hit_ids[i] != 0 && !is_delivered(i) ? 1 : 0;
    return {hit_counter.skips(), sharing > 1};
  }
  return {0, false};
}

std::vector<std::uint64_t> Engine::Impl::read_hits(std::size_t p) const {
  if (p < delivered.size() && delivered[p] && delivery)
    return delivery->hits(static_cast<std::uint32_t>(p));
  if (p >= hit_ids.size() || hit_ids[p] == 0)
    return {};
  return hit_counter.read(static_cast<std::uint32_t>(p));
}

void Engine::Impl::read_kernel_counts(std::vector<std::vector<std::uint64_t>>& hits,
                                      std::vector<std::vector<std::uint64_t>>& drops,
                                      bool at_start) const {
  hits.assign(hit_ids.size(), {});
  drops.assign(hit_ids.size(), {});
  for (std::size_t p = 0; p < hit_ids.size(); ++p) {
    // A delivered probe's counts start at zero with its ring: the delivery's maps are this
    // engine's own, and its program counts and delivers from its attach on, before the base
    // is read (a base read then would take away hits whose samples were delivered).
    if (at_start && p < delivered.size() && delivered[p])
      continue;
    hits[p] = read_hits(p);
    drops[p] = read_drops(p);
  }
}

}  // namespace tracer
