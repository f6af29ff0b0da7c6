// Fuzzes the perf.data reader: the input is a whole file (file or pipe mode, either byte order),
// read through every record; everything the reader hands out is touched so ASan sees overreads.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tracer/perfdata/reader.hpp"

namespace {

volatile std::uint64_t g_sink;

void touch(const tracer::perfdata::Item& item) {
  std::uint64_t acc = item.record.type + item.offset;
  for (auto b : item.record.bytes)
    acc += static_cast<std::uint8_t>(b);
  if (const auto* s = std::get_if<tracer::perf::Sample>(&item.record.body)) {
    for (std::uint64_t i = 0; i < s->callchain.size; ++i)
      acc += s->callchain[i];
    for (auto b : s->raw)
      acc += static_cast<std::uint8_t>(b);
  }
  if (const auto* a = std::get_if<tracer::perfdata::Auxtrace>(&item.user)) {
    for (auto b : a->data)
      acc += static_cast<std::uint8_t>(b);
  } else if (const auto* t = std::get_if<tracer::perfdata::ThreadMap>(&item.user)) {
    for (std::uint64_t i = 0; i < t->nr; ++i)
      acc += t->pid(i) + t->comm(i).size();
  } else if (const auto* x = std::get_if<tracer::perfdata::IdIndex>(&item.user)) {
    for (std::uint64_t i = 0; i < x->nr; ++i)
      acc += x->entry(i).id;
  } else if (const auto* c = std::get_if<tracer::perfdata::CpuMapData>(&item.user)) {
    std::vector<std::int32_t> cpus;
    if (c->cpus(cpus))
      acc += cpus.size();
  } else if (const auto* h = std::get_if<tracer::perfdata::HeaderAttr>(&item.user)) {
    for (std::uint64_t i = 0; i < h->ids.size; ++i)
      acc += h->ids[i];
  } else if (const auto* sc = std::get_if<tracer::perfdata::StatConfig>(&item.user)) {
    for (std::uint64_t i = 0; i < sc->nr; ++i)
      acc += sc->tag(i) + sc->val(i);
  }
  g_sink = acc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exact-size copy so ASan sees any overread.
  std::vector<std::byte> bytes(size);
  if (size != 0)
    std::memcpy(bytes.data(), data, size);
  auto reader = tracer::perfdata::Reader::from_bytes(bytes);
  if (!reader)
    return 0;
  for (const auto& e : reader->events()) {
    if (e.format) {
      for (const auto& f : e.format->fields)
        g_sink = f.offset + f.size;
    }
  }
  tracer::perfdata::Item item;
  for (int i = 0; i < 100000 && reader->next(item); ++i)
    touch(item);
  if (const auto& err = reader->error())
    g_sink = err->offset + err->message.size();
  return 0;
}
