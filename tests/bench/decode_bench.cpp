// Decode throughput over a ring of tracepoint samples (RAW|TID|TIME|CPU, the engine's default
// layout), reported as records/s and bytes/s next to two references measured in the same run:
// a header-only walk of the same ring (the floor: touching each record once) and a memcpy of
// the same bytes (memory bandwidth).
#include <benchmark/benchmark.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <string>

#include "libbpf_reference.hpp"
#include "support/synthetic_ring.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/perf/ring_reader.hpp"

namespace {

using tracer::perf::DecodeError;
using tracer::perf::Record;
using tracer::perf::Ring;
using tracer::perf::Sample;
using tracer::perf::SampleLayout;

const SampleLayout kLayout =
    SampleLayout::from(PERF_SAMPLE_RAW | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU,
                       0,
                       false);

// A ring of `pages` pages (default 64: 256 KiB) filled to ~7/8 with samples of `layout` whose raw
// payload is `raw_bytes` long (default: sys_enter-like tracepoint samples, 64-byte payload).
struct Fixture {
  tracer::testing::SyntheticRing synth;
  std::uint64_t records = 0, bytes = 0;
  std::uint64_t start = 0;
  explicit Fixture(const SampleLayout& layout = kLayout,
                   std::size_t raw_bytes = 60,
                   std::uint32_t pages = 64)
      : synth(pages) {
    tracer::testing::SampleSpec s;
    s.pid = 1234;
    s.tid = 1235;
    s.cpu = 1;
    s.raw.resize(raw_bytes);
    // Start near the end so every pass has one wrapping record, as a live ring does.
    start = synth.data_size() - 40;
    synth.set_position(start);
    while (bytes < synth.data_size() * 7 / 8) {
      s.time = records;
      const auto rec = tracer::testing::encode_sample(layout, s);
      if (!synth.write(rec))
        break;
      ++records;
      bytes += rec.size();
    }
    synth.publish();
  }
  // Rewind the consumer so the same records can be read again.
  void rewind() { synth.meta()->data_tail = start; }
  void report(benchmark::State& state) const {
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  }
};

/// Walks `f`'s ring touching only headers (no field decoding): the floor of any reader.
void header_walk(benchmark::State& state, Fixture& f) {
  std::uint64_t sum = 0;
  for (auto _ : state) {
    f.rewind();
    auto ring = Ring::adopt(f.synth.meta_and_data(), {}, false);
    ring->load_head();
    for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
      sum += p.record.size();
      ring->consume(p.record.size());
    }
    ring->commit();
  }
  benchmark::DoNotOptimize(sum);
  f.report(state);
}

void BM_DecodeRing(benchmark::State& state) {
  Fixture f;
  std::uint64_t sum = 0;
  for (auto _ : state) {
    f.rewind();
    auto ring = Ring::adopt(f.synth.meta_and_data(), {}, false);
    ring->load_head();
    Record r;
    for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
      if (decode(p.record, kLayout, r) == DecodeError::kOk) {
        const auto& s = std::get<Sample>(r.body);
        sum += s.time + s.raw.size();
      }
      ring->consume(p.record.size());
    }
    ring->commit();
  }
  benchmark::DoNotOptimize(sum);
  f.report(state);
}
BENCHMARK(BM_DecodeRing);

// Reference 1: walk the same ring touching only headers (no field decoding).
void BM_HeaderWalkReference(benchmark::State& state) {
  Fixture f;
  header_walk(state, f);
}
BENCHMARK(BM_HeaderWalkReference);

// Reference 2: copy the same bytes (what a reader that copies every record out pays at least).
void BM_MemcpyReference(benchmark::State& state) {
  Fixture f;
  std::vector<std::byte> out(f.bytes);
  for (auto _ : state) {
    std::memcpy(out.data(), f.synth.meta_and_data().data() + 4096, f.bytes);
    benchmark::ClobberMemory();
  }
  f.report(state);
}
BENCHMARK(BM_MemcpyReference);

// The engine's ring drain (RingReader: decode into a batch of RecordRefs, stats, handler per
// batch) over BPF output channel records (RAW|TIME|CPU, a 112-byte payload: 136-byte records),
// next to the header walk of the same ring: what the reactor pays per record in user space.
const SampleLayout kOutputLayout =
    SampleLayout::from(PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU, 0, false);

void BM_RingReaderDrainOutput(benchmark::State& state) {
  Fixture f(kOutputLayout, 108);
  std::uint64_t sum = 0;
  const tracer::BatchHandler handler = [&](const tracer::Batch& b) {
    for (const auto& r : b.records)
      sum += r.record.type;
  };
  for (auto _ : state) {
    f.rewind();
    tracer::perf::RingReader reader(*Ring::adopt(f.synth.meta_and_data(), {}, false), 0, 1,
                                    &kOutputLayout, static_cast<std::uint32_t>(state.range(0)));
    reader.drain(handler);
  }
  benchmark::DoNotOptimize(sum);
  f.report(state);
}
BENCHMARK(BM_RingReaderDrainOutput)->Arg(16)->Arg(32)->Arg(64)->Arg(128);

// The same for the channel as the shipped recipes open it: RAW only, each record's time read
// from the payload (`[bpf] time`), 104-byte records, in a ring of the channel's default size
// (1 MiB: the set-up per pass is noise next to ~8800 records). Arg: 1 decoded, 0 header only
// (EngineOptions::decode_samples = false).
SampleLayout payload_time_layout() {
  SampleLayout l = SampleLayout::from(PERF_SAMPLE_RAW, 0, false);
  l.raw_time_offset = 0;
  return l;
}
const SampleLayout kPayloadTimeLayout = payload_time_layout();

void BM_RingReaderDrainPayloadTime(benchmark::State& state) {
  Fixture f(kPayloadTimeLayout, 92, tracer::kDefaultOutputPages);
  std::uint64_t sum = 0;
  const tracer::BatchHandler handler = [&](const tracer::Batch& b) {
    for (const auto& r : b.records)
      sum += r.record.type;
  };
  for (auto _ : state) {
    f.rewind();
    tracer::perf::RingReader reader(*Ring::adopt(f.synth.meta_and_data(), {}, false), 0, 1,
                                    &kPayloadTimeLayout, 64, state.range(0) != 0);
    reader.drain(handler);
  }
  benchmark::DoNotOptimize(sum);
  f.report(state);
}
BENCHMARK(BM_RingReaderDrainPayloadTime)->Arg(1)->Arg(0);

// The BPF output channel against libbpf's own consumer, over one ring the kernel filled: the
// shipped syscall_output program on sys_enter_getppid writes ~7/8 of a default-size channel ring
// on CPU 0 (104-byte records, as the end-to-end benchmark's), then its events are disabled so
// nothing else arrives. Every pass rewinds the ring's tail and reads the same records:
//   - libbpf: perf_buffer__consume_buffer with a callback per record that counts samples (the
//     end-to-end benchmark's reference);
//   - the engine: RingReader::drain over the same mapping, payload time decoded, with a batch
//     handler that counts samples.
// Needs root and BPF (skips otherwise).
class KernelFilledRing {
 public:
  KernelFilledRing() {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    cpu_set_t saved;
    if (::sched_getaffinity(0, sizeof(saved), &saved) != 0 ||
        ::sched_setaffinity(0, sizeof(one), &one) != 0) {
      fail("cannot pin to CPU 0");
      return;
    }
    fill();
    ::sched_setaffinity(0, sizeof(saved), &saved);
  }
  KernelFilledRing(const KernelFilledRing&) = delete;
  KernelFilledRing& operator=(const KernelFilledRing&) = delete;
  ~KernelFilledRing() {
    if (pb_ != nullptr)
      perf_buffer__free(pb_);
  }

  [[nodiscard]] const std::string& error() const { return error_; }
  [[nodiscard]] perf_buffer* pb() const { return pb_; }
  [[nodiscard]] perf_event_mmap_page* meta() const { return meta_; }
  [[nodiscard]] std::span<std::byte> meta_and_data() const {
    return {reinterpret_cast<std::byte*>(meta_), 4096 + data_size_};
  }
  void rewind() const { meta_->data_tail = 0; }
  void report(benchmark::State& state) const {
    state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * records_));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * meta_->data_head));
  }
  std::uint64_t samples = 0;  // what libbpf's callback counts

 private:
  void fail(std::string why) { error_ = std::move(why); }
  void fill() {
    auto prog = tracer::bench::attach_syscall_output(::getpid());
    if (!prog)
      return fail(prog.error());
    prog_.emplace(std::move(*prog));
    perf_event_attr attr = tracer::bench::reference_output_attr();  // libbpf takes it non-const
    const auto on_event = [](void* ctx, int /*cpu*/, perf_event_header* h) {
      if (h->type == PERF_RECORD_SAMPLE)
        ++static_cast<KernelFilledRing*>(ctx)->samples;
      return LIBBPF_PERF_EVENT_CONT;
    };
    pb_ = perf_buffer__new_raw(*prog_->object.map_fd("events"), tracer::kDefaultOutputPages, &attr,
                               on_event, this, nullptr);
    void* base = nullptr;
    if (pb_ == nullptr || perf_buffer__buffer(pb_, 0, &base, &data_size_) != 0)
      return fail("libbpf perf_buffer__new_raw failed");
    meta_ = static_cast<perf_event_mmap_page*>(base);
    while (meta_->data_head + 256 < data_size_ * 7 / 8) {
      ::syscall(SYS_getppid);
      ++records_;
    }
    // Nothing more: the program off the tracepoint, the ring's event disabled.
    prog_->tracepoint.disable().value();
    ::ioctl(perf_buffer__buffer_fd(pb_, 0), PERF_EVENT_IOC_DISABLE, 0);
    if (meta_->data_head != records_ * 104)
      return fail("the kernel wrote other than one 104-byte record per call");
  }

  std::optional<tracer::bench::SyscallOutputOnGetppid> prog_;
  perf_buffer* pb_ = nullptr;
  perf_event_mmap_page* meta_ = nullptr;
  std::size_t data_size_ = 0;
  std::uint64_t records_ = 0;
  std::string error_;
};

void BM_KernelRingLibbpfConsume(benchmark::State& state) {
  KernelFilledRing k;
  if (!k.error().empty()) {
    state.SkipWithError(k.error().c_str());
    return;
  }
  for (auto _ : state) {
    k.rewind();
    perf_buffer__consume_buffer(k.pb(), 0);
  }
  benchmark::DoNotOptimize(k.samples);
  k.report(state);
}
BENCHMARK(BM_KernelRingLibbpfConsume);

void BM_KernelRingEngineDrain(benchmark::State& state) {
  KernelFilledRing k;
  if (!k.error().empty()) {
    state.SkipWithError(k.error().c_str());
    return;
  }
  std::uint64_t samples = 0;
  const tracer::BatchHandler handler = [&](const tracer::Batch& b) {
    for (const auto& r : b.records)
      samples += r.record.type == PERF_RECORD_SAMPLE ? 1 : 0;
  };
  // One reader for every pass (as the engine keeps one per ring): its position goes back with
  // the ring's tail.
  tracer::perf::RingReader reader(*Ring::adopt(k.meta_and_data(), {}, false), 0, 0,
                                  &kPayloadTimeLayout, static_cast<std::uint32_t>(state.range(1)),
                                  state.range(0) != 0);
  for (auto _ : state) {
    k.rewind();
    reader.ring().seek(0);
    reader.drain(handler);
  }
  benchmark::DoNotOptimize(samples);
  k.report(state);
}
BENCHMARK(BM_KernelRingEngineDrain)->ArgsProduct({{1, 0}, {16, 32, 64}});

void BM_HeaderWalkPayloadTimeReference(benchmark::State& state) {
  Fixture f(kPayloadTimeLayout, 92, tracer::kDefaultOutputPages);
  header_walk(state, f);
}
BENCHMARK(BM_HeaderWalkPayloadTimeReference);

void BM_HeaderWalkOutputReference(benchmark::State& state) {
  Fixture f(kOutputLayout, 108);
  header_walk(state, f);
}
BENCHMARK(BM_HeaderWalkOutputReference);

}  // namespace
