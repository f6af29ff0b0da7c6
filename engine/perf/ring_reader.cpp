#include "tracer/perf/ring_reader.hpp"

#include "sample_decode.hpp"

namespace tracer::perf {

RingReader::RingReader(perf::Ring ring,
                       std::uint32_t probe,
                       int cpu,
                       const perf::SampleLayout* layout,
                       std::uint32_t max_batch,
                       bool decode_samples)
    : ring_(std::move(ring)),
      probe_(probe),
      cpu_(cpu),
      layout_(layout),
      max_batch_(max_batch == 0 ? 1 : max_batch),
      decode_samples_(decode_samples),
      batch_(max_batch_),
      ready_(max_batch_, nullptr) {
  for (auto& r : batch_) {
    r.probe = probe_;
    r.cpu = cpu_;
  }
}

void RingReader::flush(const BatchHandler& handler) noexcept {
  if (used_ == 0)
    return;
  if (handler && !failure_) {
    try {
      handler(Batch{std::span<const RecordRef>(batch_.data(), used_)});
    } catch (...) {
      // The hot path must not unwind through the reactor: keep the error for the engine.
      failure_ = std::current_exception();
    }
  }
  // Only PERF_RECORD_AUX slots hold a chunk: clear them here, not with a check per record.
  if (aux_in_batch_) {
    for (std::size_t i = 0; i < used_; ++i)
      batch_[i].aux.reset();
    aux_in_batch_ = false;
  }
  used_ = 0;
  // The stages are done with the AUX chunks of this batch: give their space back.
  if (aux_pending_) {
    ring_.aux_consume(aux_release_);
    aux_pending_ = false;
  }
}

std::uint64_t RingReader::discard_rest() noexcept {
  more_ = false;
  if (corrupt_)
    return 0;
  const std::uint64_t head = ring_.load_head();
  const std::span<const std::byte> area = ring_.data_area();
  std::uint64_t pos = ring_.read_position(), n = 0;
  while (pos != head) {
    const auto h = perf::load<perf_event_header>(area.data() + (pos & (area.size() - 1)));
    if (h.size == 0 || h.size % 8 != 0 || std::uint64_t{h.size} > head - pos)
      break;
    n += h.type == perf::abi::kSample ? 1 : 0;
    pos += h.size;
  }
  ring_.seek(head);
  ring_.commit();
  stats_.unprocessed += n;
  return n;
}

std::uint64_t RingReader::drain(const BatchHandler& handler,
                                const InPlaceHandler* in_place) noexcept {
  more_ = false;
  if (corrupt_)
    return 0;
  if (in_place != nullptr && *in_place && layout_->fixed && layout_->raw_time_offset < 0 &&
      decode_samples_)
    return drain_in_place(handler, *in_place);
  // The layouts the engine opens most, decoded with their field tests folded away
  // (tracer_bench_decode, when introduced: RAW-only 7.0 -> 6.0 ns, RAW|TIME|CPU 11.3 -> 6.7 ns
  // per record against the runtime tests).
  constexpr std::uint64_t kCommon = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                    PERF_SAMPLE_CPU;  // every probe (probe_resolver)
  constexpr std::uint64_t kClock = PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  if (!decode_samples_)
    return drain_as<0, false>(handler);
  switch (layout_->fixed ? layout_->sample_type : 0) {
    case PERF_SAMPLE_RAW:  // BPF output channel with [bpf] time
      return drain_as<PERF_SAMPLE_RAW>(handler);
    case PERF_SAMPLE_RAW | kClock:  // BPF output channel
      return drain_as<PERF_SAMPLE_RAW | kClock>(handler);
    case kCommon | PERF_SAMPLE_RAW:  // tracepoints
      return drain_as<kCommon | PERF_SAMPLE_RAW>(handler);
    case kCommon | PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD:  // software events, probes sampled
      return drain_as<kCommon | PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD>(handler);
    default:
      return drain_as<0>(handler);
  }
}

void RingReader::account(RecordRef& ref) noexcept {
  switch (ref.record.type) {
    case perf::abi::kLost:
      stats_.lost += std::get_if<perf::Lost>(&ref.record.body)->lost;
      break;
    case perf::abi::kLostSamples:
      stats_.lost_samples += std::get_if<perf::LostSamples>(&ref.record.body)->lost;
      break;
    case perf::abi::kItraceStart: {
      const auto& it = *std::get_if<perf::ItraceStart>(&ref.record.body);
      itrace_pid_ = it.pid;
      itrace_tid_ = it.tid;
      itrace_seen_ = true;
      break;
    }
    case perf::abi::kAux: {
      const auto& a = *std::get_if<perf::Aux>(&ref.record.body);
      ref.aux = ring_.aux_chunk(a);
      aux_in_batch_ = true;
      if (!ref.aux) {
        ++stats_.aux_lost;
        break;
      }
      ++stats_.aux_chunks;
      stats_.aux_bytes += a.aux_size;
      if (a.truncated())
        ++stats_.aux_truncated;
      if (a.collision() || a.partial())
        ++stats_.aux_lost;
      aux_release_ = a.aux_offset + a.aux_size;
      aux_pending_ = true;
      break;
    }
    default:
      break;
  }
}

void RingReader::add_decoded(std::span<const std::byte> rec, const BatchHandler& handler) noexcept {
  RecordRef& ref = batch_[used_];
  ready_[used_] = nullptr;  // the slot's Sample is not the fixed layout's last any more
  if (perf::decode(rec, *layout_, ref.record) != perf::DecodeError::kOk) {
    ++stats_.decode_errors;
    return;
  }
  ++stats_.records;
  if (ref.record.type == perf::abi::kSample)
    ++stats_.samples;
  else
    account(ref);
  if (itrace_seen_) {
    ref.itrace_pid = itrace_pid_;
    ref.itrace_tid = itrace_tid_;
  }
  if (++used_ == max_batch_)
    flush(handler);
}

void RingReader::flush_in_place(const BatchHandler& handler,
                                const InPlaceHandler& in_place) noexcept {
  const std::size_t n = in_place_used_;
  if (n == 0)
    return;
  in_place_used_ = 0;
  bool taken = false;
  if (!failure_) {
    try {
      taken = in_place(std::span<const InPlaceSample>(in_place_.data(), n));
    } catch (...) {
      failure_ = std::current_exception();
      return;
    }
  }
  if (taken || failure_)
    return;
  // Refused: the same samples decoded, as drain() without `in_place` would have (counted there).
  stats_.records -= n;
  stats_.samples -= n;
  for (std::size_t i = 0; i < n; ++i) {
    const std::byte* rec = in_place_[i].bytes().data();
    add_decoded({rec, load<perf_event_header>(rec).size}, handler);
  }
}

bool RingReader::yield_due(bool records_left) noexcept {
  if (yield_at_ == std::chrono::steady_clock::time_point::max() ||
      std::chrono::steady_clock::now() < yield_at_)
    return false;
  more_ = records_left;
  return true;
}

std::optional<RingReader::DrainStart> RingReader::begin_drain() noexcept {
  const std::uint64_t head = ring_.load_head();
  const std::uint64_t pos = ring_.read_position();
  // Records are 8-byte aligned and the data area a multiple of 8: from an aligned position a
  // header never wraps and is always inside the area (a short tail of a damaged ring is caught
  // by the size test).
  if (pos % 8 != 0) [[unlikely]] {
    ++stats_.decode_errors;
    corrupt_ = true;
    return std::nullopt;
  }
  const auto area = ring_.data_area();
  stats_.ring_size = area.size();
  if (head > pos && head - pos > stats_.peak_fill)
    stats_.peak_fill = head - pos;
  return DrainStart{.head = head, .area = area, .pos = pos};
}

std::uint64_t RingReader::drain_in_place(const BatchHandler& handler,
                                         const InPlaceHandler& in_place) noexcept {
  if (in_place_.size() != max_batch_)
    in_place_.resize(max_batch_);  // once per reader: the first in-place drain
  const perf::SampleLayout::FixedOffsets at = layout_->fixed_offsets();
  const bool raw = layout_->has(PERF_SAMPLE_RAW);
  const std::uint32_t fields_end = 8 + layout_->fixed_bytes;  // header and the u64 fields
  const auto start = begin_drain();
  if (!start) [[unlikely]]
    return 0;
  const std::uint64_t head = start->head;
  const std::span<const std::byte> area = start->area;
  const std::byte* const data = area.data();
  const std::uint64_t data_size = area.size();
  std::uint64_t pos = start->pos;
  // The loop's state in locals (stores into the batch could alias members); the counts reach
  // stats_ before each handler call and at the end.
  const std::uint64_t records_before = stats_.records;
  InPlaceSample* const batch = in_place_.data();
  std::size_t used = in_place_used_;
  const std::uint32_t probe = probe_;
  const std::size_t max_batch = max_batch_;
  std::uint64_t published_to = pos;
  const auto publish = [&] {
    stats_.records += used - in_place_used_;
    stats_.samples += used - in_place_used_;
    stats_.bytes += pos - published_to;
    published_to = pos;
    in_place_used_ = used;
  };
  while (pos != head) {
    const std::uint64_t off = pos & (data_size - 1);
    const auto h = perf::load<perf_event_header>(data + off);
    if (h.size % 8 != 0 || std::uint64_t{h.size} - 1 >= head - pos) [[unlikely]] {
      ++stats_.decode_errors;
      corrupt_ = true;
      break;
    }
    pos += h.size;
    if (h.type != perf::abi::kSample || off + h.size > data_size) [[unlikely]] {
      // Another record, or a sample split by the ring's end: decoded (wrapped() copies it).
      publish();
      add_decoded(
          off + h.size <= data_size ? area.subspan(off, h.size) : ring_.wrapped(off, h.size),
          handler);
      continue;
    }
    // decode_fixed_sample()'s checks: exactly the fields, RAW padded to 8 bytes.
    const std::byte* rec = data + off;
    std::uint32_t raw_size = 0;
    if (raw) {
      if (h.size < at.raw) [[unlikely]] {
        ++stats_.decode_errors;
        continue;
      }
      raw_size = perf::load<std::uint32_t>(rec + fields_end);
      const std::uint32_t left = h.size - at.raw;
      if (raw_size > left || left - raw_size >= 8) [[unlikely]] {
        ++stats_.decode_errors;
        continue;
      }
    } else if (h.size != fields_end) [[unlikely]] {
      ++stats_.decode_errors;
      continue;
    }
    batch[used] = InPlaceSample(rec, probe, at.raw, raw_size);
    if (++used == max_batch) {
      publish();
      flush_in_place(handler, in_place);
      used = 0;
      if (yield_due(pos != head)) [[unlikely]]
        break;
    }
  }
  publish();
  ring_.seek(pos);
  flush_in_place(handler, in_place);
  flush(handler);
  ring_.commit();
  return stats_.records - records_before;
}

namespace {

/// Decodes a sample into a batch slot. `ready`: the slot's Sample when it holds the last
/// complete one of this fixed layout (kSampleType != 0), whose fields alone are then rewritten
/// (no look at the slot's variant, whose index lives cache lines away); updated for the next
/// record in the slot. @return false if the record is too short for its fields.
template <std::uint64_t kSampleType>
bool decode_into_slot(std::span<const std::byte> rec,
                      const perf_event_header& h,
                      const perf::SampleLayout& layout,
                      perf::Record& out,
                      perf::Sample*& ready) noexcept {
  if constexpr (kSampleType != 0) {
    if (ready != nullptr) [[likely]] {
      if (perf::detail::write_fixed_sample<kSampleType>(rec, h, layout, out, *ready, true))
        return true;
      ready = nullptr;
      return false;
    }
  }
  if (perf::detail::decode_sample_record<kSampleType>(rec, h, layout, out) !=
      perf::DecodeError::kOk) {
    ready = nullptr;
    return false;
  }
  if constexpr (kSampleType != 0)
    ready = std::get_if<perf::Sample>(&out.body);
  return true;
}

}  // namespace

// variant::emplace of nothrow-constructible alternatives cannot throw.
template <std::uint64_t kSampleType, bool kDecode>
std::uint64_t RingReader::drain_as(  // NOLINT(bugprone-exception-escape)
    const BatchHandler& handler) noexcept {
  // Everything the loop touches per record lives in locals (the ring's cursor too, see
  // perf::Ring::data_area), not members: the stores into the batch could alias members, which
  // would then be reloaded and stored back per record. The counts reach stats_ before every
  // handler call (a handler may read the engine's stats) and at the end.
  const perf::SampleLayout layout = *layout_;
  const auto start = begin_drain();
  if (!start) [[unlikely]]
    return 0;
  const std::uint64_t head = start->head;
  const std::span<const std::byte> area = start->area;
  const std::byte* const data = area.data();
  const std::uint64_t data_size = area.size();
  std::uint64_t pos = start->pos;
  RecordRef* const slots = batch_.data();
  perf::Sample** const ready = ready_.data();
  RecordRef* const slots_end = slots + max_batch_;
  RecordRef* ref = slots + used_;  // the next slot, and its entry in ready_
  perf::Sample** slot_ready = ready + used_;
  bool itrace = itrace_seen_;
  std::uint64_t step = 0;  // the last record's size
  // Delivered records are the slots filled; samples those minus the other records.
  std::uint64_t others = 0, total = 0, published_to = pos;
  const auto publish = [&] {
    const auto delivered = static_cast<std::uint64_t>(ref - slots);
    stats_.records += delivered;
    stats_.samples += delivered - others;
    stats_.bytes += pos - published_to;
    total += delivered;
    others = 0;
    published_to = pos;
    used_ = static_cast<std::size_t>(ref - slots);
  };
  while (pos != head) {
    const std::uint64_t off = pos & (data_size - 1);
    const auto h = perf::load<perf_event_header>(data + off);
    if (h.size % 8 != 0 || std::uint64_t{h.size} - 1 >= head - pos) [[unlikely]] {
      // Size 0, misaligned or past the published data: only a damaged (synthetic or replayed)
      // ring gets here. Stop reading it for good.
      ++stats_.decode_errors;
      corrupt_ = true;
      break;
    }
    const std::span<const std::byte> rec = off + h.size <= data_size
                                               ? std::span<const std::byte>(data + off, h.size)
                                               : ring_.wrapped(off, h.size);
    // The next position as a branch on the record's size, not as a sum with it: a ring of
    // records of one size (a BPF program's fixed struct, a tracepoint's fields) then has
    // positions that do not wait for the header loads, and those loads run ahead of the
    // decoding instead of one after another.
    if (h.size == step) [[likely]] {
      // Keeps the compiler from seeing that step equals the size just loaded (it would then
      // add the loaded size: a dependency on the load again). Emits nothing.
      asm("" : "+r"(step));
    } else {
      step = h.size;
    }
    pos += step;
    if (h.type == perf::abi::kSample) [[likely]] {
      if constexpr (kDecode) {
        if (!decode_into_slot<kSampleType>(rec, h, layout, ref->record, *slot_ready)) [[unlikely]] {
          ++stats_.decode_errors;
          continue;
        }
      } else {
        // Header only: the consumer decodes the samples it looks at (no slot is ever `ready`
        // in this mode).
        auto& r = ref->record;
        perf::detail::write_header(rec, h, r);
        if (r.sample_id.present)
          r.sample_id = {};
        if (r.body.index() != 0)
          r.body.emplace<perf::Unknown>();
      }
    } else {
      *slot_ready = nullptr;
      if (perf::decode(rec, layout, ref->record) != perf::DecodeError::kOk) {
        ++stats_.decode_errors;
        continue;
      }
      account(*ref);
      itrace = itrace_seen_;
      ++others;
    }
    // Until a ring sees ITRACE_START (an AUX event's), every slot holds the zeros it started with.
    if (itrace) [[unlikely]] {
      ref->itrace_pid = itrace_pid_;
      ref->itrace_tid = itrace_tid_;
    }
    ++slot_ready;
    if (++ref == slots_end) {
      publish();
      flush(handler);
      ref = slots;
      slot_ready = ready;
      if (yield_due(pos != head)) [[unlikely]]
        break;
    }
  }
  publish();
  ring_.seek(pos);
  flush(handler);
  ring_.commit();
  return total;
}

}  // namespace tracer::perf
