// Fuzzes the perf.data reader: the input is a whole file (file or pipe mode, either byte order),
// read through every record; everything the reader hands out is touched so ASan sees overreads.
#include <fcntl.h>
#include <unistd.h>

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

void read_all(tracer::perfdata::Reader& reader) {
  for (const auto& e : reader.events()) {
    if (e.format) {
      for (const auto& f : e.format->fields)
        g_sink = f.offset + f.size;
    }
  }
  tracer::perfdata::Item item;
  for (int i = 0; i < 100000 && reader.next(item); ++i)
    touch(item);
  if (const auto& err = reader.error())
    g_sink = err->offset + err->message.size();
}

}  // namespace

// Each input is read twice: from memory (a mapped file) and as a stream through a pipe (stdin,
// `perf record -o - |`), whose buffers grow as bytes arrive: sizes the input claims must not be
// allocated up front in either (CI runs this under -malloc_limit_mb).
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // An exact-size copy so ASan sees any overread.
  std::vector<std::byte> bytes(size);
  if (size != 0)
    std::memcpy(bytes.data(), data, size);
  if (auto reader = tracer::perfdata::Reader::from_bytes(bytes))
    read_all(*reader);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0)
    return 0;
  // The whole input fits the pipe (inputs are small), so one thread writes it all, then reads.
  const auto cap = ::fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
  if (cap > 0 && size <= static_cast<std::size_t>(cap) &&
      (size == 0 || ::write(fds[1], data, size) == static_cast<ssize_t>(size))) {
    ::close(fds[1]);
    if (auto reader = tracer::perfdata::Reader::open_fd(fds[0], {.pipe_buffer_bytes = 4096}))
      read_all(*reader);
  } else {
    ::close(fds[1]);
  }
  ::close(fds[0]);
  return 0;
}
