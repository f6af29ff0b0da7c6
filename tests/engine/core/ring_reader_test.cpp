// RingReader against synthetic rings: batching, one release per drain, loss counting, AUX chunks
// with their ITRACE_START context, and a corrupt ring.
#include "core/ring_reader.hpp"

#include <gtest/gtest.h>

#include <cstring>

#include "support/synthetic_ring.hpp"

namespace tracer::core {
namespace {

using testing::RecordBuilder;
using testing::SampleSpec;
using testing::SyntheticRing;

const perf::SampleLayout kLayout = perf::SampleLayout::from(
    PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW,
    0,
    true);

std::vector<std::byte> sample(std::uint32_t seq) {
  SampleSpec s;
  s.tid = seq;
  s.raw.resize(20);
  return testing::encode_sample(kLayout, s);
}

TEST(RingReader, DeliversInBatchesAndReleasesOncePerDrain) {
  SyntheticRing synth(4);
  auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
  ASSERT_TRUE(ring.has_value());
  RingReader reader(std::move(*ring), 3, 1, &kLayout, 16);
  for (std::uint32_t i = 0; i < 100; ++i)
    ASSERT_TRUE(synth.write(sample(i)));
  synth.publish();
  std::vector<std::size_t> sizes;
  std::uint32_t next = 0;
  std::uint64_t tail_during = 0;
  const auto n = reader.drain([&](const Batch& b) {
    sizes.push_back(b.records.size());
    tail_during = synth.meta()->data_tail;
    for (const auto& r : b.records) {
      EXPECT_EQ(r.probe, 3U);
      EXPECT_EQ(r.cpu, 1);
      EXPECT_EQ(std::get<perf::Sample>(r.record.body).tid, next++);
    }
  });
  EXPECT_EQ(n, 100U);
  EXPECT_EQ(next, 100U);
  EXPECT_EQ(sizes, (std::vector<std::size_t>{16, 16, 16, 16, 16, 16, 4}));
  EXPECT_EQ(tail_during, 0U) << "the ring is released after the last batch, not per record";
  EXPECT_EQ(synth.meta()->data_tail, synth.head());
  EXPECT_EQ(reader.stats().samples, 100U);
  EXPECT_EQ(reader.stats().records, 100U);
  EXPECT_EQ(reader.drain([](const Batch&) { ADD_FAILURE(); }), 0U) << "nothing new";
}

TEST(RingReader, CountsLostAndLostSamples) {
  SyntheticRing synth(1);
  perf::SampleId id;
  id.id = 1;
  synth.set_lost_record(kLayout, id);
  auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
  RingReader reader(std::move(*ring), 0, 0, &kLayout, 64);
  std::uint64_t generated = 0;
  for (int round = 0; round < 5; ++round) {
    for (int i = 0; i < 200; ++i, ++generated)
      synth.write(sample(static_cast<std::uint32_t>(generated)));
    synth.publish();
    reader.drain({});
  }
  synth.write(sample(0));  // flushes the pending LOST record
  ++generated;
  RecordBuilder ls;
  ls.u64(7);
  testing::append_sample_id(ls, kLayout, id);
  synth.write(ls.finish(perf::abi::kLostSamples));
  synth.publish();
  reader.drain({});
  EXPECT_GT(reader.stats().lost, 0U);
  EXPECT_EQ(reader.stats().samples + reader.stats().lost, generated);
  EXPECT_EQ(reader.stats().lost_samples, 7U);
}

TEST(RingReader, AuxChunksCarryItraceContextAndAreReleasedAfterTheBatch) {
  const std::uint64_t aux = std::uint64_t{4} * 4096;
  SyntheticRing synth(2, aux);
  const auto layout = perf::SampleLayout::from(PERF_SAMPLE_TID | PERF_SAMPLE_IDENTIFIER, 0, true);
  perf::SampleId id;
  id.pid = 40;
  id.tid = 41;
  synth.set_lost_record(layout, id);
  auto ring = perf::Ring::adopt(synth.meta_and_data(), synth.aux(), false);
  RingReader reader(std::move(*ring), 0, 0, &layout, 8);

  RecordBuilder it;
  it.u32(40).u32(41);
  testing::append_sample_id(it, layout, id);
  synth.write(it.finish(perf::abi::kItraceStart));
  std::vector<std::byte> data(6000);
  for (std::size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<std::byte>(i & 0xff);
  synth.aux_write(data);
  synth.aux_write(std::vector<std::byte>(12000, std::byte{0x5a}));  // truncated: 16 KiB area
  std::uint64_t chunks = 0, seen_bytes = 0;
  std::uint64_t aux_tail_in_batch = ~0ULL;
  reader.drain([&](const Batch& b) {
    aux_tail_in_batch = synth.meta()->aux_tail;
    for (const auto& r : b.records) {
      if (r.record.type != perf::abi::kAux)
        continue;
      ASSERT_TRUE(r.aux.has_value());
      EXPECT_EQ(r.itrace_pid, 40U);
      EXPECT_EQ(r.itrace_tid, 41U);
      if (chunks == 0) {
        std::vector<std::byte> got;
        r.aux->copy_to(got);
        EXPECT_EQ(got, data);
      }
      seen_bytes += r.aux->size;
      ++chunks;
    }
  });
  EXPECT_EQ(chunks, 2U);
  EXPECT_EQ(aux_tail_in_batch, 0U) << "AUX space is released only after the stages saw it";
  EXPECT_EQ(synth.meta()->aux_tail, seen_bytes);
  EXPECT_EQ(reader.stats().aux_chunks, 2U);
  EXPECT_EQ(reader.stats().aux_truncated, 1U);
  EXPECT_EQ(reader.stats().aux_bytes, aux);
}

TEST(RingReader, CorruptRingStopsForGood) {
  SyntheticRing synth(1);
  auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
  RingReader reader(std::move(*ring), 0, 0, &kLayout, 8);
  synth.write(sample(1));
  synth.publish();
  std::memset(synth.meta_and_data().data() + 4096, 0, 8);
  EXPECT_EQ(reader.drain({}), 0U);
  EXPECT_EQ(reader.stats().decode_errors, 1U);
  synth.write(sample(2));
  synth.publish();
  EXPECT_EQ(reader.drain({}), 0U);
}

}  // namespace
}  // namespace tracer::core
