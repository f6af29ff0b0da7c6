// Tracepoint hits delivered through a BPF output channel (bpf/progs/tp_deliver.bpf.c) instead of
// the tracepoint's own perf events: every hit, with its record, reaches the engine, also where
// the kernel's per-CPU perf tracepoint events miss hits (measured on the project machine:
// idle-context sched_switch/sched_wakeup on CPU 1, while BPF programs see them). The channel's
// records are turned back into the samples the probe's own events would have written (same
// layout, bytes and all), so everything after the rings (time order, stages, perf.data) is
// unchanged.
//
// Two channels: a BPF ring buffer shared by every CPU (tp_deliver_rb, the default where the
// kernel has it: 5.8+), or a perf event array with a ring per CPU (tp_deliver).
//
// Usage (the engine's):
//   auto d = TracepointDelivery::open(probe_count, {.kind = kRingbuf, .ringbuf_bytes = ...});
//   d->attach(slot, format, event_fd);           // a link with the slot as BPF cookie
//   perf channel: each CPU ring's reader hands its batch to
//     d->convert(batch, probes, handler, in_place);
//   ring buffer: on readability of d->ring_buffer()->fd(), d->drain(probes, handler, in_place);
//   (in_place, optional, takes the samples in their compact form: Engine::on_delivered)
//   stats: d->delivered(slot, cpu), d->hits(slot), d->drops(slot)
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/bpf/ring_buffer.hpp"
#include "tracer/common/release.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/perf/ring_stats.hpp"
#include "tracer/probe.hpp"
#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {

struct BpfLinkDestroy {
  void operator()(::bpf_link* l) const noexcept { ::bpf_link__destroy(l); }
};
using BpfLink = std::unique_ptr<::bpf_link, BpfLinkDestroy>;

/// Attaches program `prog` of the loaded `obj` to the perf event `event_fd` through a BPF link
/// with `cookie` (bpf_get_attach_cookie). The link owns a duplicate of the fd (libbpf closes the
/// fd of a perf_event link when it is destroyed), so the caller's event keeps its own.
/// @return the link, or the errno of the attach (EEXIST: this program is on that tracepoint).
[[nodiscard]] Result<BpfLink> attach_perf_event(const bpf::Object& obj,
                                                std::string_view prog,
                                                int event_fd,
                                                std::uint64_t cookie);

/// How often the kernel ran each tracepoint a probe samples, per CPU (bpf/progs/tp_hits.bpf.c,
/// a program that returns 1): beside a probe's perf events, it tells the hits those events did
/// not record (RingStats::missed).
class TracepointHits {
 public:
  /// Counts the hits of `event_fd`'s tracepoint in `slot`, but those of process `self_tgid`
  /// (0: none left out; the first attach decides). False when it cannot (no BPF here, or the
  /// tracepoint counted already).
  bool attach(std::uint32_t slot, int event_fd, std::uint32_t self_tgid = 0);
  /// Per CPU (index = CPU); empty when the slot is not counted.
  [[nodiscard]] std::vector<std::uint64_t> read(std::uint32_t slot) const;
  /// Hits of every counted tracepoint the kernel ran no program for (bpf::Object::program_skips):
  /// one program counts them all, so the kernel does not say whose.
  [[nodiscard]] std::uint64_t skips() const;
  /// Detaches every link (before the events they hold close).
  void detach() noexcept { links_.clear(); }
  /// Hands every link to `into`, which detaches them beside the other closes of a stop.
  void detach(common::ConcurrentRelease& into) { into.add_each(links_); }
  /// Detaches slot `slot`'s link (its probe is removed; its counts stay readable).
  void detach(std::uint32_t slot) noexcept {
    std::erase_if(links_, [slot](const auto& l) { return l.first == slot; });
  }

 private:
  std::unique_ptr<bpf::Object> object_;
  std::vector<std::pair<std::uint32_t, BpfLink>> links_;  // (slot, link)
  bool unavailable_ = false;
};

/// The sample_type a delivered probe's samples are rebuilt with (what the engine's tracepoint
/// probes sample by default).
inline constexpr std::uint64_t kDeliveredSampleType =
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW;

struct DeliveryOptions {
  DeliveryChannel kind = DeliveryChannel::kRingbuf;
  /// kPerf: the perf event array's rings.
  bpf::OutputChannelOptions perf{};
  /// kRingbuf: bytes of the ring (a power-of-two multiple of the page size), and the bytes
  /// waiting in it at which an output forces a wakeup (below it, none: the engine's flush timer
  /// drains what trickles in).
  std::uint32_t ringbuf_bytes = 4U << 20;
  std::uint32_t wakeup_bytes = 1U << 20;
  /// The one slot attach() will be given, when there is one only: the program then takes its
  /// slot as a constant instead of the link's cookie.
  std::optional<std::uint32_t> only_slot{};
  /// Each record carries the task's name at the hit (DeliveredHeader::comm).
  bool with_comm = false;
  /// A process whose hits are neither delivered nor counted (tracer's own); 0: none.
  std::uint32_t self_tgid = 0;
  /// A pid or command target: only the processes in the program's `tgids` (tracer_target.h)
  /// are delivered and counted; the caller fills it and attaches its followers (object()).
  /// It holds `max_targets` processes at once.
  bool target_tasks = false;
  std::uint32_t max_targets = 65536;
  /// Records of a small fixed size are read with direct loads (tp_deliver_q<N>); false: every
  /// record with bpf_probe_read_kernel (tp_deliver), as a reference.
  bool direct_loads = true;
  /// Rebuilt records handed on at once at most (EngineOptions::max_batch: the batch's
  /// RecordRefs stay in the caches while the stages read them).
  std::uint32_t max_batch = 64;
};

/// True when this kernel has BPF_MAP_TYPE_RINGBUF (5.8+).
[[nodiscard]] bool kernel_has_ringbuf() noexcept;

class TracepointDelivery {
 public:
  /// Loads tp_deliver (kPerf) or tp_deliver_rb (kRingbuf) and opens its channel (enabled:
  /// attach() starts delivery).
  /// @return the delivery, or the libbpf / perf_event_open / mmap failure.
  [[nodiscard]] static Result<TracepointDelivery> open(std::size_t slots,
                                                       const DeliveryOptions& opts);
  TracepointDelivery(TracepointDelivery&&) noexcept;
  TracepointDelivery& operator=(TracepointDelivery&&) noexcept;
  ~TracepointDelivery();

  /// Delivers the hits of `format`'s tracepoint as slot `slot`, attached to the perf event
  /// `event_fd` of that tracepoint (a BPF link with the slot as cookie).
  [[nodiscard]] Status attach(std::uint32_t slot, const tracefs::Format& format, int event_fd);
  [[nodiscard]] bool attached(std::uint32_t slot) const noexcept;
  /// The program delivering `slot` (tp_deliver, or tp_deliver_q<N> for a fixed-size record of
  /// N 4-byte words read with direct loads); empty when not attached.
  [[nodiscard]] std::string_view program(std::uint32_t slot) const noexcept;

  [[nodiscard]] DeliveryChannel kind() const noexcept { return kind_; }
  /// The loaded program's object (its target map and followers, tracer_target.h).
  [[nodiscard]] bpf::Object& object() noexcept { return *object_; }
  [[nodiscard]] const bpf::Object& object() const noexcept { return *object_; }
  /// kPerf: the channel (nullptr for kRingbuf).
  [[nodiscard]] bpf::OutputChannel* channel() noexcept { return channel_.get(); }
  /// kRingbuf: the ring (nullptr for kPerf).
  [[nodiscard]] bpf::RingBuffer* ring_buffer() noexcept { return ring_.get(); }

  /// Hands the channel records of `in` (one CPU's ring) on as samples of the probes they came
  /// from: to `in_place` in their compact form when it is set and takes them, else rebuilt
  /// (decoded with each probe's layout) to `out`. LOST records of the channel are not handed
  /// on: every failed output is counted per slot by the program.
  void convert(const Batch& in,
               std::span<const ProbeInfo> probes,
               const BatchHandler& out,
               const InPlaceHandler& in_place = {});
  /// kRingbuf: hands on what waits in the ring (at most `max_records`), as convert() does, in
  /// batches, and gives the space back once. @return records taken from the ring.
  std::size_t drain(std::span<const ProbeInfo> probes,
                    const BatchHandler& out,
                    const InPlaceHandler& in_place = {},
                    std::size_t max_records = SIZE_MAX);

  /// kRingbuf: gives up what waits in the ring without handing it on (a stop past its time),
  /// counted per slot and CPU (unprocessed()). @return the records given up.
  std::size_t discard();
  /// Records of `slot` from CPU `cpu` that discard() gave up.
  [[nodiscard]] std::uint64_t unprocessed(std::uint32_t slot, int cpu) const noexcept;
  /// Samples handed on for `slot` from CPU `cpu`.
  [[nodiscard]] std::uint64_t delivered(std::uint32_t slot, int cpu) const noexcept;
  /// Per CPU (index = CPU): the tracepoint's hits, and the outputs that failed (ring full).
  [[nodiscard]] std::vector<std::uint64_t> hits(std::uint32_t slot) const;
  [[nodiscard]] std::vector<std::uint64_t> drops(std::uint32_t slot) const;
  /// Hits of every delivered tracepoint the kernel ran the program for none of
  /// (bpf::Object::program_skips): one program delivers them all, so the kernel does not say
  /// whose.
  [[nodiscard]] std::uint64_t skips() const;
  /// Detaches every link (before the events they hold close).
  void detach() noexcept;
  /// Hands every link to `into`, which detaches them beside the other closes of a stop.
  void detach(common::ConcurrentRelease& into) { into.add_each(links_); }
  /// Detaches slot `slot`'s link: its probe is removed (its counts stay readable).
  void detach(std::uint32_t slot) noexcept;

 private:
  TracepointDelivery() = default;
  struct Pass;
  /// A drain's pass over `probes` slots (the caller's probes).
  [[nodiscard]] Pass begin_pass(std::size_t probes) noexcept;
  /// A channel record (a tp_deliver_hdr, then the tracepoint's record) as the sample it
  /// delivers, counted; noted in the pass's batch for `in_place`, or rebuilt for `out`.
  [[gnu::always_inline]] inline void take(Pass& pass,
                                          std::span<const std::byte> rec,
                                          const BatchHandler& out,
                                          const InPlaceHandler& in_place);
  /// Appends the sample of `h` with RAW `raw` rebuilt, decoded; hands what was rebuilt before
  /// to `out` first when the buffer is full.
  void add(const DeliveredHeader& h, std::span<const std::byte> raw, const BatchHandler& out);
  /// Hands the compact samples to `in_place`, or rebuilt to `out` when it does not take them.
  void flush_in_place(const BatchHandler& out, const InPlaceHandler& in_place);
  /// Hands the rebuilt samples to `out`.
  void flush(const BatchHandler& out);

  DeliveryChannel kind_ = DeliveryChannel::kPerf;
  std::uint32_t wakeup_bytes_ = 0;
  std::optional<std::uint32_t> only_slot_;
  bool direct_loads_ = true;
  std::vector<std::string> programs_;  // by slot: empty while not attached
  std::unique_ptr<bpf::Object> object_;
  std::unique_ptr<bpf::OutputChannel> channel_;
  std::unique_ptr<bpf::RingBuffer> ring_;
  std::vector<std::pair<std::uint32_t, BpfLink>> links_;  // (slot, link)
  std::size_t cpus_ = 1;
  std::vector<std::uint64_t> delivered_;    // [slot * cpus_ + cpu]
  std::vector<std::uint64_t> unprocessed_;  // [slot * cpus_ + cpu]: discard()
  std::unique_ptr<std::byte[]> buf_;        // rebuilt samples of one batch (kBytes)
  std::size_t used_ = 0;                    // bytes of buf_ in use
  std::vector<RecordRef> refs_;             // slots reused batch after batch (their Samples too)
  std::size_t nrefs_ = 0;                   // slots of this batch
  std::size_t max_batch_ = 64;              // slots of a batch at most (DeliveryOptions)
  std::vector<InPlaceSample> compact_;      // samples of a batch handed on in place (kCompact)
  std::size_t ncompact_ = 0;
};

}  // namespace tracer::core
