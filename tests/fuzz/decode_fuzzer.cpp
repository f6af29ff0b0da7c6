// Fuzzes the record decoder and the ring reader. Input: 16 bytes of layout (sample_type,
// read_format, flags, register masks), then record bytes as they would sit in a ring.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tracer/perf/record.hpp"
#include "tracer/perf/ring.hpp"

using tracer::perf::DecodeError;
using tracer::perf::Record;
using tracer::perf::SampleLayout;

namespace {

volatile std::uint64_t g_sink;

void touch(const Record& r) {
  std::uint64_t acc = r.type;
  if (const auto* s = std::get_if<tracer::perf::Sample>(&r.body)) {
    for (std::uint64_t i = 0; i < s->callchain.size; ++i)
      acc += s->callchain[i];
    for (auto b : s->raw)
      acc += static_cast<std::uint8_t>(b);
    for (std::uint64_t i = 0; i < s->branch_stack.nr; ++i)
      acc += s->branch_stack.entry(i).to;
    for (std::uint64_t i = 0; i < s->branch_stack.counters.size; ++i)
      acc += s->branch_stack.counters[i];
    for (std::uint64_t i = 0; i < s->read.count(); ++i)
      acc += s->read.value(i) + s->read.id(i) + s->read.lost(i);
    for (std::uint64_t i = 0; i < s->regs_user.regs.size; ++i)
      acc += s->regs_user.regs[i];
    for (std::uint64_t i = 0; i < s->regs_intr.regs.size; ++i)
      acc += s->regs_intr.regs[i];
    for (auto b : s->stack_user)
      acc += static_cast<std::uint8_t>(b);
    for (auto b : s->aux)
      acc += static_cast<std::uint8_t>(b);
  } else if (const auto* n = std::get_if<tracer::perf::Namespaces>(&r.body)) {
    for (std::uint64_t i = 0; i < n->nr; ++i)
      acc += n->dev(i) + n->ino(i);
  } else if (const auto* m = std::get_if<tracer::perf::Mmap2>(&r.body)) {
    acc += m->filename.size();
    for (auto b : m->build_id)
      acc += static_cast<std::uint8_t>(b);
  } else if (const auto* t = std::get_if<tracer::perf::TextPoke>(&r.body)) {
    for (auto b : t->new_bytes)
      acc += static_cast<std::uint8_t>(b);
  } else if (const auto* rr = std::get_if<tracer::perf::ReadRecord>(&r.body)) {
    for (std::uint64_t i = 0; i < rr->values.count(); ++i)
      acc += rr->values.value(i);
  }
  g_sink = acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 16)
    return 0;
  std::uint32_t st = 0, bits = 0;
  std::uint32_t masks = 0, rf = 0;
  std::memcpy(&st, data, 4);
  std::memcpy(&rf, data + 4, 4);
  std::memcpy(&bits, data + 8, 4);
  std::memcpy(&masks, data + 12, 4);
  const SampleLayout layout =
      SampleLayout::from(st & 0x1ffffffU, rf & 0x1fU, (bits & 1U) != 0,
                         (bits & 2U) != 0 ? (1U << 17) | ((bits & 4U) != 0 ? 1U << 19 : 0) : 0,
                         masks & 0xffffU, masks >> 16);
  // An exact-size copy so ASan sees any overread.
  if (size == 16)
    return 0;
  std::vector<std::byte> bytes(size - 16);
  std::memcpy(bytes.data(), data + 16, bytes.size());

  // 1) Decode back to back, as from a perf.data data section.
  tracer::perf::for_each_record(bytes, [&](std::span<const std::byte> rec) {
    Record r;
    if (decode(rec, layout, r) == DecodeError::kOk)
      touch(r);
  });
  // 2) Decode at every 8-byte offset (misparsed starting points must be safe too).
  for (std::size_t off = 0; off + 8 <= bytes.size(); off += 8) {
    Record r;
    if (decode(std::span(bytes).subspan(off), layout, r) == DecodeError::kOk)
      touch(r);
    (void)tracer::perf::peek_identifier(std::span(bytes).subspan(off), layout.sample_id_all);
  }
  // 3) Read through a ring whose data page holds the bytes, with head/tail from the input, so
  //    wrapped records (copied to scratch) and corrupt headers are exercised.
  constexpr std::size_t kPage = 4096;
  static auto* mem = static_cast<std::byte*>(std::aligned_alloc(kPage, 2 * kPage));
  std::memset(mem, 0, 2 * kPage);
  std::memcpy(mem + kPage, bytes.data(), std::min(bytes.size(), kPage));
  auto* meta = reinterpret_cast<perf_event_mmap_page*>(mem);
  const std::uint64_t tail = (static_cast<std::uint64_t>(masks) * 8) & ~std::uint64_t{7};
  meta->data_tail = tail;
  meta->data_head = tail + std::min<std::uint64_t>(bytes.size(), kPage);
  if (auto ring = tracer::perf::Ring::adopt({mem, 2 * kPage}, {}, false)) {
    ring->load_head();
    for (int i = 0; i < 1024; ++i) {
      auto p = ring->peek();
      if (p.record.empty())
        break;
      Record r;
      if (decode(p.record, layout, r) == DecodeError::kOk)
        touch(r);
      ring->consume(p.record.size());
    }
    ring->commit();
  }
  return 0;
}
