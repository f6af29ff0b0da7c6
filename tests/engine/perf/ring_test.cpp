// Ring against a synthetic mapping that follows the kernel's protocols: data_head/data_tail with
// wrap-around at every offset, loss, overwrite snapshots, the AUX area, and the time page.
#include "tracer/perf/ring.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <numeric>

#include "support/synthetic_ring.hpp"

namespace tracer::perf {
namespace {

using testing::RecordBuilder;
using testing::SampleSpec;
using testing::SyntheticRing;

const SampleLayout kRingLayout = SampleLayout::from(
    PERF_SAMPLE_RAW | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER,
    0,
    true);

std::vector<std::byte> sample(std::uint64_t seq, std::size_t raw_len) {
  SampleSpec s;
  s.identifier = 7;
  s.pid = 100;
  s.tid = static_cast<std::uint32_t>(seq);
  s.time = seq;
  s.raw.resize(raw_len);
  for (std::size_t i = 0; i < raw_len; ++i)
    s.raw[i] = static_cast<std::byte>((seq + i) & 0xff);
  return testing::encode_sample(kRingLayout, s);
}

// Reads every record, checks sequence and payload, returns how many samples and lost were seen.
struct Drained {
  std::uint64_t samples = 0, lost = 0, wrapped = 0, next_seq = 0;
  bool ok = true;
};

Drained drain(Ring& ring, std::span<const std::byte> ring_mem, std::uint64_t first_seq) {
  Drained d;
  d.next_seq = first_seq;
  ring.load_head();
  for (;;) {
    auto p = ring.peek();
    if (p.error != DecodeError::kOk) {
      ADD_FAILURE() << to_string(p.error);
      d.ok = false;
      break;
    }
    if (p.record.empty())
      break;
    if (p.record.data() < ring_mem.data() || p.record.data() >= ring_mem.data() + ring_mem.size()) {
      ++d.wrapped;  // served from scratch
    }
    Record r;
    EXPECT_EQ(decode(p.record, kRingLayout, r), DecodeError::kOk);
    if (auto* s = std::get_if<Sample>(&r.body)) {
      EXPECT_EQ(s->tid, d.next_seq);
      for (std::size_t i = 0; i < s->raw.size() && i < 4; ++i) {
        EXPECT_EQ(s->raw[i], static_cast<std::byte>((d.next_seq + i) & 0xff));
      }
      ++d.next_seq;
      ++d.samples;
    } else if (auto* l = std::get_if<Lost>(&r.body)) {
      d.lost += l->lost;
      d.next_seq += l->lost;
    }
    ring.consume(p.record.size());
  }
  ring.commit();
  return d;
}

TEST(Ring, AdoptRejectsBadGeometry) {
  std::vector<std::byte> mem(3 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
  auto r = Ring::adopt(mem, {}, false);  // 1 + 2 pages: fine
  EXPECT_TRUE(r.has_value());
  std::vector<std::byte> bad(4 * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
  auto r2 = Ring::adopt(bad, {}, false);  // 1 + 3 pages
  ASSERT_FALSE(r2.has_value());
  EXPECT_EQ(r2.error().code, std::errc::invalid_argument);
}

TEST(Ring, RecordsWrapAtEveryOffset) {
  SyntheticRing synth(1);  // one data page: every batch below crosses the end at some point
  const std::uint64_t size = synth.data_size();
  std::uint64_t straddles_expected = 0, straddles_seen = 0;
  for (std::uint64_t start = 0; start < size; start += 8) {
    SCOPED_TRACE(start);
    synth.set_position(start + size * 5);  // positions are free-running u64s
    auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
    ASSERT_TRUE(ring.has_value());
    std::uint64_t seq = 0;
    for (int round = 0; round < 3; ++round) {
      const std::uint64_t first = seq;
      std::uint64_t pos = synth.head(), bytes = 0;
      // About 3/4 of the ring per round, records of 32..344 bytes.
      while (bytes < size * 3 / 4) {
        auto rec = sample(seq, 8 + (seq * 13 + start) % 300);
        if ((pos & (size - 1)) + rec.size() > size)
          ++straddles_expected;
        ASSERT_TRUE(synth.write(rec));
        pos += rec.size();
        bytes += rec.size();
        ++seq;
      }
      synth.publish();
      const std::uint64_t tail_before = synth.meta()->data_tail;
      const Drained d = drain(*ring, synth.meta_and_data().subspan(size == 0 ? 0 : 4096), first);
      ASSERT_TRUE(d.ok);
      EXPECT_EQ(d.samples, seq - first);
      EXPECT_EQ(d.lost, 0U);
      EXPECT_EQ(synth.meta()->data_tail, tail_before + bytes) << "commit hands back the batch";
      straddles_seen += d.wrapped;
    }
  }
  EXPECT_EQ(straddles_seen, straddles_expected);
  EXPECT_GT(straddles_expected, size / 8 / 2) << "the test must actually exercise wrapping";
}

TEST(Ring, TailMovesOnlyOnCommit) {
  SyntheticRing synth(2);
  auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
  ASSERT_TRUE(ring.has_value());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(synth.write(sample(i, 16)));
  synth.publish();
  ring->load_head();
  std::uint64_t consumed = 0;
  for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
    ring->consume(p.record.size());
    consumed += p.record.size();
    EXPECT_EQ(synth.meta()->data_tail, 0U);
  }
  EXPECT_EQ(ring->pending(), 0U);
  ring->commit();
  EXPECT_EQ(synth.meta()->data_tail, consumed);
}

TEST(Ring, FullRingLosesAndReportsLost) {
  SyntheticRing synth(1);
  SampleId lost_id;
  lost_id.id = 7;
  synth.set_lost_record(kRingLayout, lost_id);
  auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
  ASSERT_TRUE(ring.has_value());
  const std::uint64_t generated = 1000;
  Drained total;
  std::uint64_t next = 0;
  for (std::uint64_t i = 0; i < generated; ++i) {
    synth.write(sample(i, 64));
    if (i % 200 == 199) {  // a slow reader: drains now and then
      synth.publish();
      const auto d = drain(*ring, synth.meta_and_data().subspan(4096), next);
      next = d.next_seq;
      total.samples += d.samples;
      total.lost += d.lost;
    }
  }
  EXPECT_GT(synth.dropped_total(), 0U);
  // The kernel reports a drop with the next record that fits: a final write flushes it.
  synth.write(sample(generated, 64));
  synth.publish();
  const auto d = drain(*ring, synth.meta_and_data().subspan(4096), next);
  total.samples += d.samples;
  total.lost += d.lost;
  EXPECT_EQ(total.lost, synth.dropped_total());
  EXPECT_EQ(total.samples + total.lost, generated + 1);
}

TEST(Ring, CorruptHeaderStopsReading) {
  SyntheticRing synth(1);
  auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
  ASSERT_TRUE(ring.has_value());
  ASSERT_TRUE(synth.write(sample(0, 16)));
  synth.publish();
  // Zero the header: a kernel never does this, a damaged replay might.
  std::memset(synth.meta_and_data().data() + 4096, 0, 8);
  ring->load_head();
  EXPECT_EQ(ring->peek().error, DecodeError::kZeroSize);
  std::uint16_t huge = 0xfff8;
  std::memcpy(synth.meta_and_data().data() + 4096 + 6, &huge, 2);
  EXPECT_EQ(ring->peek().error, DecodeError::kSizePastData);
}

TEST(Ring, OverwriteSnapshotReturnsNewestCompleteRecords) {
  SyntheticRing synth(1);
  const std::uint64_t size = synth.data_size();
  auto ring = Ring::adopt(synth.meta_and_data(), {}, true);
  ASSERT_TRUE(ring.has_value());
  // Nothing written yet.
  std::vector<std::byte> out;
  auto n0 = ring->snapshot(out);
  ASSERT_TRUE(n0.has_value());
  EXPECT_EQ(*n0, 0U);
  // Write far more than fits: older records are overwritten, never waited for.
  const std::uint64_t total = 500;
  std::uint64_t bytes_per = 0;
  for (std::uint64_t i = 0; i < total; ++i) {
    auto rec = sample(i, 40 + (i % 3) * 8);
    bytes_per = std::max<std::uint64_t>(bytes_per, rec.size());
    synth.write_backward(rec);
  }
  auto n = ring->snapshot(out);
  ASSERT_TRUE(n.has_value());
  ASSERT_GT(*n, size / bytes_per - 1);
  // Newest first, consecutive, all intact.
  std::uint64_t expect = total - 1, seen = 0;
  const auto err = for_each_record(out, [&](std::span<const std::byte> rec) {
    Record r;
    ASSERT_EQ(decode(rec, kRingLayout, r), DecodeError::kOk);
    EXPECT_EQ(std::get<Sample>(r.body).tid, expect);
    --expect;
    ++seen;
  });
  EXPECT_EQ(err, DecodeError::kOk);
  EXPECT_EQ(seen, *n);
  EXPECT_LE(out.size(), size);
  // A forward ring cannot be snapshotted.
  SyntheticRing fwd(1);
  auto fring = Ring::adopt(fwd.meta_and_data(), {}, false);
  EXPECT_FALSE(fring->snapshot(out).has_value());
}

TEST(RingAux, ChunksFollowAuxHeadTailWithWrapAndTruncation) {
  const std::uint64_t aux_size = std::uint64_t{4} * 4096;
  SyntheticRing synth(2, aux_size);
  SampleId id;
  id.pid = 5, id.tid = 6;
  synth.set_lost_record(SampleLayout::from(PERF_SAMPLE_TID, 0, true), id);
  const auto layout = SampleLayout::from(PERF_SAMPLE_TID, 0, true);
  auto ring = Ring::adopt(synth.meta_and_data(), synth.aux(), false);
  ASSERT_TRUE(ring.has_value());
  ASSERT_TRUE(ring->has_aux());
  EXPECT_EQ(ring->aux_size(), aux_size);

  // The "trace": a byte stream whose value encodes its stream position.
  auto trace = [](std::uint64_t from, std::uint64_t n) {
    std::vector<std::byte> v(n);
    for (std::uint64_t i = 0; i < n; ++i)
      v[i] = static_cast<std::byte>(((from + i) * 7) & 0xff);
    return v;
  };
  std::uint64_t stream = 0;  // bytes the hardware produced
  std::uint64_t stored = 0;  // bytes that made it into the AUX area
  std::uint64_t truncations = 0;
  std::vector<std::byte> got;
  // Chunks of 5000 bytes (not a divisor of the area): wrap at varying points. The reader
  // releases AUX space only every fourth round, so some chunks get truncated.
  for (int round = 0; round < 40; ++round) {
    const std::uint64_t want = 5000;
    const auto data = trace(stored, want);
    const std::uint64_t n = synth.aux_write(data);
    stream += want;
    if (n < want)
      ++truncations;
    stored += n;
    ring->load_head();
    for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
      Record r;
      ASSERT_EQ(decode(p.record, layout, r), DecodeError::kOk);
      if (const auto* a = std::get_if<Aux>(&r.body)) {
        auto chunk = ring->aux_chunk(*a);
        ASSERT_TRUE(chunk.has_value());
        EXPECT_EQ(chunk->truncated(), a->aux_size < want);
        EXPECT_EQ(r.sample_id.tid, 6U) << "AUX records carry the sample_id context";
        chunk->copy_to(got);
        ASSERT_EQ(got.size(), a->aux_size);
        const auto expect = trace(a->aux_offset, a->aux_size);
        EXPECT_EQ(got, expect) << "chunk at stream offset " << a->aux_offset;
        if (round % 4 == 3)
          ring->aux_consume(a->aux_offset + a->aux_size);
      }
      ring->consume(p.record.size());
    }
    ring->commit();
  }
  EXPECT_GT(truncations, 0U);
  EXPECT_EQ(ring->aux_stats().truncated, truncations);
  EXPECT_EQ(ring->aux_stats().bytes, stored);
  EXPECT_EQ(ring->aux_stats().chunks, 40U);
  EXPECT_LT(stored, stream);

  // A record that claims more than the area holds is refused and counted.
  Aux bogus{0, aux_size + 1, 0};
  EXPECT_FALSE(ring->aux_chunk(bogus).has_value());
  EXPECT_EQ(ring->aux_stats().invalid, 1U);
}

TEST(Ring, TimeConversionFollowsTheUserPageFormula) {
  SyntheticRing synth(1);
  auto* m = synth.meta();
  m->time_shift = 10;
  m->time_mult = 3000;
  m->time_zero = 1000000;
  m->cap_user_time_zero = 1;
  auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
  const TimeConv t = ring->time_conv();
  EXPECT_TRUE(t.cap_user_time_zero);
  EXPECT_EQ(t.time_mult, 3000U);
  const std::uint64_t cyc = (5ULL << 10) + 100;
  // time_zero + quot*mult + ((rem*mult) >> shift)
  EXPECT_EQ(t.to_perf_time(cyc), 1000000ULL + 5ULL * 3000 + ((100ULL * 3000) >> 10));
}

}  // namespace
}  // namespace tracer::perf
