// Decode throughput over a ring of tracepoint samples (RAW|TID|TIME|CPU, the engine's default
// layout), reported as records/s and bytes/s next to two references measured in the same run:
// a header-only walk of the same ring (the floor: touching each record once) and a memcpy of
// the same bytes (memory bandwidth).
#include <benchmark/benchmark.h>

#include <cstring>

#include "core/ring_reader.hpp"
#include "support/synthetic_ring.hpp"
#include "tracer/perf/ring.hpp"

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
    tracer::core::RingReader reader(*Ring::adopt(f.synth.meta_and_data(), {}, false), 0, 1,
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
    tracer::core::RingReader reader(*Ring::adopt(f.synth.meta_and_data(), {}, false), 0, 1,
                                    &kPayloadTimeLayout, 64, state.range(0) != 0);
    reader.drain(handler);
  }
  benchmark::DoNotOptimize(sum);
  f.report(state);
}
BENCHMARK(BM_RingReaderDrainPayloadTime)->Arg(1)->Arg(0);

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
