#include "core/tp_delivery.hpp"

#include <fcntl.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "progs/tp_deliver.h"
#include "progs/tp_hits.h"

namespace tracer::core {
namespace {

constexpr std::size_t kBytes = std::size_t{1} << 20;  // rebuilt samples handed on at once

template <typename T>
void put(std::vector<std::byte>& out, const T& v) {
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}

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

bool TracepointHits::attach(std::uint32_t slot, int event_fd) {
  if (unavailable_ || slot >= TP_HITS_MAX_TRACEPOINTS)
    return false;
  if (!object_) {
    auto obj = bpf::Object::open_shipped("tp_hits");
    if (!obj || !obj->load()) {
      unavailable_ = true;  // counting is an extra: a run without it is still a run
      return false;
    }
    object_ = std::make_unique<bpf::Object>(std::move(*obj));
  }
  auto link = attach_perf_event(*object_, "tp_hits", event_fd, slot);
  if (!link)
    return false;  // EEXIST: another probe of ours on the same tracepoint counts it already
  links_.push_back(std::move(*link));
  return true;
}

std::vector<std::uint64_t> TracepointHits::read(std::uint32_t slot) const {
  if (!object_)
    return {};
  auto v = object_->percpu_array<std::uint64_t>("hits", slot);
  return v ? std::move(*v) : std::vector<std::uint64_t>{};
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
  d.attached_.assign(slots, false);
  d.delivered_.assign(slots * d.cpus_, 0);
  d.bytes_.reserve(kBytes + std::size_t{2} * TP_DELIVER_MAX_RECORD);
  return d;
}

TracepointDelivery::TracepointDelivery(TracepointDelivery&&) noexcept = default;
TracepointDelivery& TracepointDelivery::operator=(TracepointDelivery&&) noexcept = default;
TracepointDelivery::~TracepointDelivery() {
  detach();
}

Status TracepointDelivery::attach(std::uint32_t slot, const tracefs::Format& format, int event_fd) {
  if (slot >= attached_.size() || slot >= TP_DELIVER_MAX_SLOTS)
    return fail(EINVAL, "tp_deliver: slot out of range");
  tp_deliver_cfg cfg{};
  cfg.id = format.id;
  cfg.wakeup_bytes = wakeup_bytes_;
  for (const auto& f : format.fields) {
    cfg.fixed_size = std::max(cfg.fixed_size, f.offset + f.size);
    if ((f.is_data_loc || f.is_rel_loc) && cfg.nloc < TP_DELIVER_MAX_LOC)
      cfg.loc[cfg.nloc++] = f.offset | (f.is_rel_loc ? TP_DELIVER_REL_LOC : 0U);
  }
  TRACER_TRY(object_->update_elem("cfg", slot, cfg));
  TRACER_ASSIGN_OR_RETURN(auto link, attach_perf_event(*object_, "tp_deliver", event_fd, slot));
  links_.push_back(std::move(link));
  attached_[slot] = true;
  return {};
}

bool TracepointDelivery::attached(std::uint32_t slot) const noexcept {
  return slot < attached_.size() && attached_[slot];
}

void TracepointDelivery::flush(std::span<const ProbeInfo> probes, const BatchHandler& out) {
  for (std::size_t i = 0; i < refs_.size(); ++i) {
    const std::size_t end = i + 1 < starts_.size() ? starts_[i + 1] : bytes_.size();
    const std::span<const std::byte> rec(bytes_.data() + starts_[i], end - starts_[i]);
    if (perf::decode(rec, probes[refs_[i].probe].layout, refs_[i].record) !=
        perf::DecodeError::kOk) {
      refs_[i].record = perf::Record{};  // cannot happen: built for this layout
    }
  }
  if (!refs_.empty() && out)
    out(Batch{refs_});
  bytes_.clear();
  refs_.clear();
  starts_.clear();
}

void TracepointDelivery::add(std::span<const std::byte> rec,
                             int cpu,
                             std::span<const ProbeInfo> probes) {
  if (rec.size() < sizeof(tp_deliver_hdr))
    return;
  tp_deliver_hdr h{};
  std::memcpy(&h, rec.data(), sizeof(h));
  const auto data = rec.subspan(sizeof(h));
  const std::size_t size = std::min<std::size_t>(h.size, data.size());
  if (h.slot >= probes.size() || h.slot >= attached_.size())
    return;
  if (cpu < 0)
    cpu = static_cast<int>(h.cpu);
  // PERF_RECORD_SAMPLE with IDENTIFIER | TID | TIME | CPU | RAW, as perf_prepare_sample()
  // lays it out: RAW is a u32 size and the record, zero-padded so the sample ends 8-aligned.
  const std::size_t raw_size = (size + sizeof(std::uint32_t) + 7) / 8 * 8 - sizeof(std::uint32_t);
  const std::size_t total = 8 + 8 + 8 + 8 + 8 + 4 + raw_size;
  starts_.push_back(bytes_.size());
  put<std::uint32_t>(bytes_, PERF_RECORD_SAMPLE);
  put<std::uint16_t>(bytes_, PERF_RECORD_MISC_KERNEL);
  put<std::uint16_t>(bytes_, static_cast<std::uint16_t>(total));
  put<std::uint64_t>(bytes_, 0);  // identifier: the record is routed by its slot
  put<std::uint32_t>(bytes_, h.pid);
  put<std::uint32_t>(bytes_, h.tid);
  put<std::uint64_t>(bytes_, h.time);
  put<std::uint32_t>(bytes_, static_cast<std::uint32_t>(std::max(cpu, 0)));
  put<std::uint32_t>(bytes_, 0);
  put<std::uint32_t>(bytes_, static_cast<std::uint32_t>(raw_size));
  bytes_.insert(bytes_.end(), data.begin(), data.begin() + static_cast<std::ptrdiff_t>(size));
  bytes_.resize(bytes_.size() + (raw_size - size));
  RecordRef ref;
  ref.probe = h.slot;
  ref.cpu = cpu;
  refs_.push_back(ref);
  if (cpu >= 0 && static_cast<std::size_t>(cpu) < cpus_)
    ++delivered_[h.slot * cpus_ + static_cast<std::size_t>(cpu)];
}

void TracepointDelivery::convert(const Batch& in,
                                 std::span<const ProbeInfo> probes,
                                 const BatchHandler& out) {
  bytes_.clear();
  refs_.clear();
  starts_.clear();
  for (const RecordRef& r : in.records) {
    const auto* s = std::get_if<perf::Sample>(&r.record.body);
    if (s == nullptr)
      continue;  // LOST: the program counted the failed output per slot
    if (bytes_.size() > kBytes)
      flush(probes, out);
    add(s->raw, r.cpu, probes);
  }
  flush(probes, out);
}

std::size_t TracepointDelivery::drain(std::span<const ProbeInfo> probes,
                                      const BatchHandler& out,
                                      std::size_t max_records) {
  if (!ring_)
    return 0;
  bytes_.clear();
  refs_.clear();
  starts_.clear();
  // The records are rebuilt (copied) before the ring's space is given back, once, at the end.
  const std::size_t n = ring_->consume(
      [&](std::span<const std::byte> rec) {
        if (bytes_.size() > kBytes)
          flush(probes, out);
        add(rec, -1, probes);
      },
      max_records);
  flush(probes, out);
  return n;
}

std::uint64_t TracepointDelivery::delivered(std::uint32_t slot, int cpu) const noexcept {
  if (cpu < 0 || static_cast<std::size_t>(cpu) >= cpus_ || slot >= attached_.size())
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

void TracepointDelivery::detach() noexcept {
  links_.clear();
}

}  // namespace tracer::core
