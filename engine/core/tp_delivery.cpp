#include "tp_delivery.hpp"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "tp_deliver.h"
#include "tp_hits.h"

namespace tracer::core {
namespace {

// Rebuilt samples handed on at once at most, in bytes (and in records: DeliveryOptions::
// max_batch).
constexpr std::size_t kBytes = std::size_t{1} << 18;
// Samples handed on in place at once: their records (about 60 bytes each for a syscall's) stay
// in L1 between the pass that finds them and the stages' pass.
constexpr std::size_t kCompact = 256;

}  // namespace

Result<BpfLink> attach_perf_event(const bpf::Object& obj,
                                  std::string_view prog,
                                  int event_fd,
                                  std::uint64_t cookie) {
  ::bpf_program* p = ::bpf_object__find_program_by_name(obj.raw(), std::string(prog).c_str());
  if (p == nullptr)
    return fail(ENOENT,
                "bpf: object '" + obj.name() + "' has no program '" + std::string(prog) + "'");
  const int dup = ::fcntl(event_fd, F_DUPFD_CLOEXEC, 0);
  if (dup < 0)
    return fail(errno, "bpf: cannot duplicate a perf event's fd");
  LIBBPF_OPTS(bpf_perf_event_opts, opts, .bpf_cookie = cookie);
  ::bpf_link* link = ::bpf_program__attach_perf_event_opts(p, dup, &opts);
  if (link == nullptr) {
    const int err = errno;
    ::close(dup);
    return fail(err, "bpf: attaching '" + std::string(prog) + "' to a perf event failed");
  }
  return BpfLink(link);
}

bool TracepointHits::attach(std::uint32_t slot, int event_fd, std::uint32_t self_tgid) {
  if (unavailable_ || slot >= TP_HITS_MAX_TRACEPOINTS)
    return false;
  if (!object_) {
    auto obj = bpf::Object::open_shipped("tp_hits");
    const bool set = obj && (self_tgid == 0 || obj->set_global("self_tgid", self_tgid));
    if (!set || !obj->load()) {
      unavailable_ = true;  // counting is an extra: a run without it is still a run
      return false;
    }
    object_ = std::make_unique<bpf::Object>(std::move(*obj));
  }
  auto link = attach_perf_event(*object_, "tp_hits", event_fd, slot);
  if (!link)
    return false;  // EEXIST: another probe of ours on the same tracepoint counts it already
  links_.emplace_back(slot, std::move(*link));
  return true;
}

std::vector<std::uint64_t> TracepointHits::read(std::uint32_t slot) const {
  if (!object_)
    return {};
  auto v = object_->percpu_array<std::uint64_t>("hits", slot);
  return v ? std::move(*v) : std::vector<std::uint64_t>{};
}

std::uint64_t TracepointHits::skips() const {
  return object_ ? object_->program_skips("tp_hits") : 0;
}

bool kernel_has_ringbuf() noexcept {
  static const bool has = ::libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, nullptr) == 1;
  return has;
}

Result<TracepointDelivery> TracepointDelivery::open(std::size_t slots,
                                                    const DeliveryOptions& opts) {
  TracepointDelivery d;
  d.kind_ = opts.kind;
  const bool rb = opts.kind == DeliveryChannel::kRingbuf;
  TRACER_ASSIGN_OR_RETURN(auto obj, bpf::Object::open_shipped(rb ? "tp_deliver_rb" : "tp_deliver"));
  if (rb) {
    TRACER_TRY(obj.set_map_max_entries("rb", opts.ringbuf_bytes));
    d.wakeup_bytes_ = opts.wakeup_bytes;
  }
  // tracer_target.h: every process but `self_tgid`, or those of `tgids`.
  const std::uint8_t all = opts.target_tasks ? 0 : 1;
  TRACER_TRY(obj.set_global("tracer_target_all", all));
  TRACER_TRY(obj.set_global("tracer_self_tgid", opts.self_tgid));
  TRACER_TRY(
      obj.set_map_max_entries("tgids", opts.target_tasks ? std::max(1U, opts.max_targets) : 1U));
  if (opts.with_comm)
    TRACER_TRY(obj.set_global("tp_deliver_with_comm", std::uint32_t{1}));
  if (opts.only_slot) {
    TRACER_TRY(obj.set_global("only_slot", *opts.only_slot));
    d.only_slot_ = opts.only_slot;
  }
  TRACER_TRY(obj.load());
  d.object_ = std::make_unique<bpf::Object>(std::move(obj));
  if (rb) {
    TRACER_ASSIGN_OR_RETURN(auto ring, bpf::RingBuffer::open(*d.object_, "rb"));
    d.ring_ = std::make_unique<bpf::RingBuffer>(std::move(ring));
  } else {
    TRACER_ASSIGN_OR_RETURN(auto ch, bpf::OutputChannel::open(*d.object_, "events", opts.perf));
    d.channel_ = std::make_unique<bpf::OutputChannel>(std::move(ch));
  }
  d.cpus_ = static_cast<std::size_t>(std::max(1, libbpf_num_possible_cpus()));
  d.programs_.assign(slots, {});
  d.direct_loads_ = opts.direct_loads;
  d.delivered_.assign(slots * d.cpus_, 0);
  d.unprocessed_.assign(slots * d.cpus_, 0);
  d.buf_ = std::make_unique<std::byte[]>(kBytes);
  d.max_batch_ = std::max<std::size_t>(1, opts.max_batch);
  d.refs_.reserve(d.max_batch_);
  d.compact_.resize(kCompact);
  return d;
}

TracepointDelivery::TracepointDelivery(TracepointDelivery&&) noexcept = default;
TracepointDelivery& TracepointDelivery::operator=(TracepointDelivery&&) noexcept = default;
TracepointDelivery::~TracepointDelivery() {
  detach();
}

Status TracepointDelivery::attach(std::uint32_t slot, const tracefs::Format& format, int event_fd) {
  if (slot >= programs_.size() || slot >= TP_DELIVER_MAX_SLOTS ||
      (only_slot_ && slot != *only_slot_))
    return fail(EINVAL, "tp_deliver: slot out of range");
  tp_deliver_cfg cfg{};
  cfg.id = format.id;
  cfg.wakeup_bytes = wakeup_bytes_;
  if (format.system == "sched" && format.name == "sched_process_exec")
    cfg.flags |= TP_DELIVER_CFG_EXEC;  // a command waiting for its exec joins here
  for (const auto& f : format.fields) {
    cfg.fixed_size = std::max(cfg.fixed_size, f.offset + f.size);
    if ((f.is_data_loc || f.is_rel_loc) && cfg.nloc < TP_DELIVER_MAX_LOC)
      cfg.loc[cfg.nloc++] = f.offset | (f.is_rel_loc ? TP_DELIVER_REL_LOC : 0U);
  }
  TRACER_TRY(object_->update_elem("cfg", slot, cfg));
  // A fixed-size record small enough: the program that reads it with direct loads (its size in
  // 4-byte words: the kernel's record struct, 4-byte aligned at least, holds that many).
  // Should the kernel refuse it (a record shorter than its fields say), the generic one.
  std::string prog = "tp_deliver";
  Result<BpfLink> link = fail(ENOENT, "");
  const std::uint32_t quads = std::max<std::uint32_t>((cfg.fixed_size + 3) / 4, 2);
  if (direct_loads_ && cfg.nloc == 0 && quads <= TP_DELIVER_DIRECT_QUADS) {
    prog = fmt::format("tp_deliver_q{}", quads);
    link = attach_perf_event(*object_, prog, event_fd, slot);
  }
  if (!link) {
    prog = "tp_deliver";
    link = attach_perf_event(*object_, prog, event_fd, slot);
  }
  if (!link)
    return fail(link.error());
  links_.emplace_back(slot, std::move(*link));
  programs_[slot] = std::move(prog);
  return {};
}

bool TracepointDelivery::attached(std::uint32_t slot) const noexcept {
  return slot < programs_.size() && !programs_[slot].empty();
}

std::string_view TracepointDelivery::program(std::uint32_t slot) const noexcept {
  return slot < programs_.size() ? std::string_view(programs_[slot]) : std::string_view();
}

void TracepointDelivery::flush(const BatchHandler& out) {
  if (nrefs_ != 0 && out)
    out(Batch{std::span<const RecordRef>(refs_.data(), nrefs_)});
  nrefs_ = 0;
  used_ = 0;
}

static_assert(sizeof(DeliveredHeader) == sizeof(tp_deliver_hdr));
static_assert(offsetof(DeliveredHeader, time) == offsetof(tp_deliver_hdr, time));
static_assert(offsetof(DeliveredHeader, probe) == offsetof(tp_deliver_hdr, slot));
static_assert(offsetof(DeliveredHeader, size) == offsetof(tp_deliver_hdr, size));
static_assert(offsetof(DeliveredHeader, pid) == offsetof(tp_deliver_hdr, pid));
static_assert(offsetof(DeliveredHeader, tid) == offsetof(tp_deliver_hdr, tid));
static_assert(offsetof(DeliveredHeader, cpu) == offsetof(tp_deliver_hdr, cpu));
static_assert(offsetof(DeliveredHeader, flags) == offsetof(tp_deliver_hdr, flags));
static_assert(offsetof(DeliveredHeader, comm) == offsetof(tp_deliver_hdr, comm));
static_assert(DeliveredHeader::kCommFlag == TP_DELIVER_F_COMM);

/// What take() uses for every record of a drain, held in locals (registers) for the pass.
struct TracepointDelivery::Pass {
  std::size_t probes = 0;  // slots known to both the caller and this delivery
  std::size_t cpus = 0;
  std::uint64_t* delivered = nullptr;
  InPlaceSample* batch = nullptr;
  std::size_t n = 0;  // samples in `batch`
  // The delivered_ counter of the last record, and the records counted for it since: runs of
  // one probe and CPU are added to it at once (no read-modify-write of memory per record).
  std::size_t counter = SIZE_MAX;
  std::uint64_t run = 0;

  void count(std::size_t index) noexcept {
    if (index != counter) {
      end();
      counter = index;
    }
    ++run;
  }
  void end() noexcept {
    if (counter != SIZE_MAX)
      delivered[counter] += run;
    counter = SIZE_MAX;
    run = 0;
  }
};

TracepointDelivery::Pass TracepointDelivery::begin_pass(std::size_t probes) noexcept {
  return Pass{.probes = std::min(probes, programs_.size()),
              .cpus = cpus_,
              .delivered = delivered_.data(),
              .batch = compact_.data(),
              .n = 0};
}

void TracepointDelivery::take(Pass& pass,
                              std::span<const std::byte> rec,
                              const BatchHandler& out,
                              const InPlaceHandler& in_place) {
  // Little per record here: the ring's lines are being read in, and the fewer instructions
  // wait on them, the more records' reads overlap. The stages read the fields in their pass,
  // from the cache. The header's words are loaded one by one, where they are.
  if (rec.size() < sizeof(DeliveredHeader)) [[unlikely]]
    return;
  const auto word = [&rec](std::size_t offset) {
    std::uint32_t v = 0;
    std::memcpy(&v, rec.data() + offset, sizeof(v));
    return v;
  };
  const std::uint32_t probe = word(offsetof(DeliveredHeader, probe));
  const std::uint32_t cpu = word(offsetof(DeliveredHeader, cpu));
  const std::uint32_t size = word(offsetof(DeliveredHeader, size));
  if (probe >= pass.probes) [[unlikely]]
    return;
  if (cpu < pass.cpus) [[likely]]
    pass.count(std::size_t{probe} * pass.cpus + cpu);
  const std::size_t room = rec.size() - sizeof(DeliveredHeader);
  if (!in_place || size > room) [[unlikely]] {  // a record cut short: rebuilt as is
    DeliveredHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    add(h, rec.subspan(sizeof(h), std::min<std::size_t>(size, room)), out);
    return;
  }
  pass.batch[pass.n++] = InPlaceSample::delivered(rec.data());
  if (pass.n == kCompact) [[unlikely]] {
    ncompact_ = pass.n;
    flush_in_place(out, in_place);
    pass.n = 0;
  }
}

void TracepointDelivery::flush_in_place(const BatchHandler& out, const InPlaceHandler& in_place) {
  const std::span<const InPlaceSample> batch(compact_.data(), ncompact_);
  ncompact_ = 0;
  if (batch.empty() || in_place(batch))
    return;
  for (const InPlaceSample& s : batch) {
    DeliveredHeader h;
    std::memcpy(&h, s.bytes().data(), sizeof(h));
    add(h, s.raw(), out);
  }
}

void TracepointDelivery::add(const DeliveredHeader& s,
                             std::span<const std::byte> raw,
                             const BatchHandler& out) {
  // PERF_RECORD_SAMPLE with IDENTIFIER | TID | TIME | CPU | RAW (kDeliveredSampleType), as
  // perf_prepare_sample() lays it out: RAW is a u32 size and the record, zero-padded so the
  // sample ends 8-aligned. Written in place, and its decoded form filled in directly (the
  // fields are known: no decode of what was just written).
  const std::size_t size = raw.size();
  const std::size_t raw_size = (size + sizeof(std::uint32_t) + 7) / 8 * 8 - sizeof(std::uint32_t);
  const std::size_t total = 8 + 8 + 8 + 8 + 8 + 4 + raw_size;
  if (used_ + total > kBytes || nrefs_ == max_batch_)
    flush(out);
  std::byte* p = buf_.get() + used_;
  used_ += total;
  const perf_event_header eh{.type = PERF_RECORD_SAMPLE,
                             .misc = PERF_RECORD_MISC_KERNEL,
                             .size = static_cast<std::uint16_t>(total)};
  const std::uint64_t identifier = 0;  // the record is routed by its slot
  const std::uint32_t zero = 0, raw32 = static_cast<std::uint32_t>(raw_size);
  std::memcpy(p, &eh, sizeof(eh));
  std::memcpy(p + 8, &identifier, 8);
  std::memcpy(p + 16, &s.pid, 4);
  std::memcpy(p + 20, &s.tid, 4);
  std::memcpy(p + 24, &s.time, 8);
  std::memcpy(p + 32, &s.cpu, 4);
  std::memcpy(p + 36, &zero, 4);
  std::memcpy(p + 40, &raw32, 4);
  if (size != 0)
    std::memcpy(p + 44, raw.data(), size);
  std::memset(p + 44 + size, 0, raw_size - size);
  if (nrefs_ == refs_.size())
    refs_.emplace_back();
  RecordRef& ref = refs_[nrefs_++];
  ref.probe = s.probe;
  ref.cpu = static_cast<std::int32_t>(s.cpu);
  perf::Record& r = ref.record;
  r.type = PERF_RECORD_SAMPLE;
  r.misc = PERF_RECORD_MISC_KERNEL;
  r.size = static_cast<std::uint16_t>(total);
  r.bytes = std::span<const std::byte>(p, total);
  // A slot's Sample is reused: every field of this sample_type is written below, the others
  // stay zero from its construction.
  auto* smp = std::get_if<perf::Sample>(&r.body);
  if (smp == nullptr || smp->sample_type != kDeliveredSampleType) {
    smp = &r.body.emplace<perf::Sample>();
    smp->sample_type = kDeliveredSampleType;
  }
  smp->pid = s.pid;
  smp->tid = s.tid;
  smp->time = s.time;
  smp->raw = std::span<const std::byte>(p + 44, raw_size);
  smp->cpu = s.cpu;
  smp->identifier = identifier;
  r.sample_id = perf::SampleId{.pid = s.pid,
                               .tid = s.tid,
                               .time = s.time,
                               .id = identifier,
                               .stream_id = 0,
                               .cpu = s.cpu,
                               .res = 0,
                               .present = true};
}

void TracepointDelivery::convert(const Batch& in,
                                 std::span<const ProbeInfo> probes,
                                 const BatchHandler& out,
                                 const InPlaceHandler& in_place) {
  Pass pass = begin_pass(probes.size());
  for (const RecordRef& r : in.records) {
    const auto* s = std::get_if<perf::Sample>(&r.record.body);
    if (s == nullptr)
      continue;  // LOST: the program counted the failed output per slot
    take(pass, s->raw, out, in_place);
  }
  pass.end();
  ncompact_ = pass.n;
  if (in_place)
    flush_in_place(out, in_place);
  flush(out);
}

std::size_t TracepointDelivery::drain(std::span<const ProbeInfo> probes,
                                      const BatchHandler& out,
                                      const InPlaceHandler& in_place,
                                      std::size_t max_records) {
  if (!ring_)
    return 0;
  // The records are handed on (or rebuilt: copied) before the ring's space is given back, once,
  // at the end.
  Pass pass = begin_pass(probes.size());
  const std::size_t n = ring_->consume(
      [&](std::span<const std::byte> rec) { take(pass, rec, out, in_place); }, max_records);
  pass.end();
  ncompact_ = pass.n;
  if (in_place)
    flush_in_place(out, in_place);
  flush(out);
  return n;
}

std::size_t TracepointDelivery::discard() {
  if (!ring_)
    return 0;
  return ring_->consume([&](std::span<const std::byte> rec) {
    if (rec.size() < sizeof(DeliveredHeader))
      return;
    DeliveredHeader h;
    std::memcpy(&h, rec.data(), sizeof(h));
    if (h.probe < programs_.size() && h.cpu < cpus_)
      ++unprocessed_[std::size_t{h.probe} * cpus_ + h.cpu];
  });
}

std::uint64_t TracepointDelivery::unprocessed(std::uint32_t slot, int cpu) const noexcept {
  if (cpu < 0 || static_cast<std::size_t>(cpu) >= cpus_ || slot >= programs_.size())
    return 0;
  return unprocessed_[slot * cpus_ + static_cast<std::size_t>(cpu)];
}

std::uint64_t TracepointDelivery::delivered(std::uint32_t slot, int cpu) const noexcept {
  if (cpu < 0 || static_cast<std::size_t>(cpu) >= cpus_ || slot >= programs_.size())
    return 0;
  return delivered_[slot * cpus_ + static_cast<std::size_t>(cpu)];
}

std::vector<std::uint64_t> TracepointDelivery::hits(std::uint32_t slot) const {
  auto v = object_->percpu_array<std::uint64_t>("hits", slot);
  return v ? std::move(*v) : std::vector<std::uint64_t>{};
}

std::vector<std::uint64_t> TracepointDelivery::drops(std::uint32_t slot) const {
  auto v = object_->percpu_array<std::uint64_t>("drops", slot);
  return v ? std::move(*v) : std::vector<std::uint64_t>{};
}

std::uint64_t TracepointDelivery::skips() const {
  std::uint64_t n = 0;
  for (const auto& prog : object_->program_names())
    n += object_->program_skips(prog);
  return n;
}

void TracepointDelivery::detach() noexcept {
  links_.clear();
}

void TracepointDelivery::detach(std::uint32_t slot) noexcept {
  std::erase_if(links_, [slot](const auto& l) { return l.first == slot; });
  if (slot < programs_.size())
    programs_[slot].clear();
}

}  // namespace tracer::core
