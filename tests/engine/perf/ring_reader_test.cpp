// RingReader against synthetic rings: batching, one release per drain, loss counting, AUX chunks
// with their ITRACE_START context, and a corrupt ring.
#include "tracer/perf/ring_reader.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

#include "support/synthetic_ring.hpp"

namespace tracer::perf {
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

// The drain decodes the engine's usual layouts with specialised code and every other layout
// with the general one; in both, each batch slot is reused record after record and kind after
// kind. Whatever the path, a delivered record must equal what decode() makes of its bytes and
// carry the values that were written.
TEST(RingReader, EveryLayoutDecodesAsDecodeDoesAcrossReusedSlots) {
  constexpr std::uint64_t kId =
      PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  struct Case {
    std::uint64_t sample_type;
    std::int32_t raw_time_offset;
  };
  const Case cases[] = {
      {PERF_SAMPLE_RAW, 8},                                        // output channel, [bpf] time
      {PERF_SAMPLE_RAW | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU, -1},  // output channel
      {kId | PERF_SAMPLE_RAW, -1},                                 // tracepoint
      {kId | PERF_SAMPLE_IP | PERF_SAMPLE_PERIOD, -1},             // software event
      {kId | PERF_SAMPLE_ADDR | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_RAW, -1},  // fixed, generic
      {kId | PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_RAW, -1},  // variable-size fields
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.sample_type);
    auto layout = perf::SampleLayout::from(c.sample_type, 0, true);
    layout.raw_time_offset = c.raw_time_offset;
    SyntheticRing synth(4);
    perf::SampleId lost_id;
    lost_id.id = 99;
    auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
    RingReader reader(std::move(*ring), 0, 2, &layout, 3);
    std::vector<SampleSpec> written;
    auto write_sample = [&](std::uint32_t seq) {
      SampleSpec s;
      s.identifier = s.id = 1000 + seq;
      s.ip = 0x400000 + seq;
      s.pid = 10 + seq;
      s.tid = 20 + seq;
      s.time = 5000 + seq;
      s.addr = 0xa000 + seq;
      s.stream_id = 77;
      s.cpu = seq % 2;
      s.period = 3 * seq + 1;
      s.callchain.assign(seq % 4, 0xffffffff81000000ULL + seq);
      s.raw.resize(12 + (seq % 3) * 8);
      const std::uint64_t payload_time = 9'000'000 + seq;
      std::memcpy(s.raw.data() + 8, &payload_time, 4);  // 12-byte payloads hold half of it
      if (s.raw.size() >= 16)
        std::memcpy(s.raw.data() + 8, &payload_time, 8);
      s.raw[0] = static_cast<std::byte>(seq);
      ASSERT_TRUE(synth.write(testing::encode_sample(layout, s)));
      written.push_back(std::move(s));
    };
    for (std::uint32_t seq = 0; seq < 20; ++seq) {
      write_sample(seq);
      if (seq % 7 == 3) {  // another kind in the same slots now and then
        RecordBuilder comm;
        comm.u32(1).u32(1).padded_string("comm");
        testing::append_sample_id(comm, layout, lost_id);
        ASSERT_TRUE(synth.write(comm.finish(perf::abi::kComm)));
      }
    }
    synth.publish();
    std::size_t next = 0;
    std::uint64_t comms = 0;
    reader.drain([&](const Batch& b) {
      for (const auto& r : b.records) {
        perf::Record want;
        ASSERT_EQ(perf::decode(r.record.bytes, layout, want), perf::DecodeError::kOk);
        EXPECT_EQ(r.record.type, want.type);
        EXPECT_EQ(r.record.sample_id.present, want.sample_id.present);
        EXPECT_EQ(r.record.sample_id.time, want.sample_id.time);
        EXPECT_EQ(r.record.sample_id.id, want.sample_id.id);
        EXPECT_EQ(r.record.sample_id.tid, want.sample_id.tid);
        EXPECT_FALSE(r.aux.has_value());
        if (r.record.type == perf::abi::kComm) {
          ++comms;
          EXPECT_EQ(std::get<perf::Comm>(r.record.body).comm, "comm");
          continue;
        }
        ASSERT_LT(next, written.size());
        const auto& spec = written[next++];
        const auto& got = std::get<perf::Sample>(r.record.body);
        const auto& ref = std::get<perf::Sample>(want.body);
        EXPECT_EQ(got.sample_type, c.sample_type);
        EXPECT_EQ(got.identifier, ref.identifier);
        EXPECT_EQ(got.ip, ref.ip);
        EXPECT_EQ(got.pid, ref.pid);
        EXPECT_EQ(got.tid, ref.tid);
        EXPECT_EQ(got.time, ref.time);
        EXPECT_EQ(got.addr, ref.addr);
        EXPECT_EQ(got.id, ref.id);
        EXPECT_EQ(got.stream_id, ref.stream_id);
        EXPECT_EQ(got.cpu, ref.cpu);
        EXPECT_EQ(got.period, ref.period);
        EXPECT_EQ(got.callchain.size, ref.callchain.size);
        // And the values themselves, not only agreement with decode().
        if ((c.sample_type & PERF_SAMPLE_RAW) != 0U) {
          ASSERT_EQ(got.raw.size(), spec.raw.size());
          EXPECT_EQ(got.raw[0], spec.raw[0]);
        } else {
          EXPECT_TRUE(got.raw.empty());
        }
        if (c.raw_time_offset >= 0) {
          EXPECT_EQ(got.time, spec.raw.size() >= 16 ? 9'000'000 + next - 1 : 0U);
        } else if ((c.sample_type & PERF_SAMPLE_TIME) != 0U) {
          EXPECT_EQ(got.time, spec.time);
        }
        if ((c.sample_type & PERF_SAMPLE_TID) != 0U) {
          EXPECT_EQ(got.tid, spec.tid);
        }
        if ((c.sample_type & PERF_SAMPLE_IP) != 0U) {
          EXPECT_EQ(got.ip, spec.ip);
        }
        if ((c.sample_type & PERF_SAMPLE_CALLCHAIN) != 0U) {
          EXPECT_EQ(got.callchain.size, spec.callchain.size());
        }
        EXPECT_EQ(r.record.sample_id.time, got.time);
      }
    });
    EXPECT_EQ(next, written.size());
    EXPECT_EQ(comms, 3U);
    EXPECT_EQ(reader.stats().decode_errors, 0U);
  }
}

// A sample whose RAW size runs past its record is counted as a decode error and not delivered,
// on the specialised path as on the general one; the records around it are.
TEST(RingReader, ASampleTooShortForItsLayoutIsCountedNotDelivered) {
  for (const std::uint64_t st :
       {std::uint64_t{PERF_SAMPLE_RAW}, std::uint64_t{PERF_SAMPLE_RAW | PERF_SAMPLE_CALLCHAIN}}) {
    SCOPED_TRACE(st);
    const auto layout = perf::SampleLayout::from(st, 0, false);
    SyntheticRing synth(1);
    auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
    RingReader reader(std::move(*ring), 0, 0, &layout, 4);
    SampleSpec s;
    s.raw.resize(20);
    const auto good = testing::encode_sample(layout, s);
    auto bad = good;
    const std::uint32_t huge = 4096;  // RAW size past the record's end
    std::memcpy(bad.data() + bad.size() - 24, &huge, 4);
    ASSERT_TRUE(synth.write(good));
    ASSERT_TRUE(synth.write(bad));
    ASSERT_TRUE(synth.write(good));
    synth.publish();
    EXPECT_EQ(reader.drain({}), 2U);
    EXPECT_EQ(reader.stats().decode_errors, 1U);
    EXPECT_EQ(reader.stats().samples, 2U);
  }
}

// Only PERF_RECORD_AUX records carry a chunk, however the batch slots are reused.
TEST(RingReader, OnlyAuxRecordsCarryAChunk) {
  SyntheticRing synth(2, std::uint64_t{4} * 4096);
  const auto layout = perf::SampleLayout::from(PERF_SAMPLE_TID | PERF_SAMPLE_IDENTIFIER, 0, true);
  perf::SampleId id;
  synth.set_lost_record(layout, id);
  auto ring = perf::Ring::adopt(synth.meta_and_data(), synth.aux(), false);
  RingReader reader(std::move(*ring), 0, 0, &layout, 2);
  std::uint64_t aux = 0, samples = 0;
  const auto check = [&](const Batch& b) {
    for (const auto& r : b.records) {
      EXPECT_EQ(r.aux.has_value(), r.record.type == perf::abi::kAux);
      aux += r.record.type == perf::abi::kAux ? 1 : 0;
      samples += r.record.type == perf::abi::kSample ? 1 : 0;
    }
  };
  for (int round = 0; round < 3; ++round) {
    synth.aux_write(std::vector<std::byte>(100, std::byte{1}));
    for (int i = 0; i < 4; ++i) {
      SampleSpec s;
      ASSERT_TRUE(synth.write(testing::encode_sample(layout, s)));
    }
    synth.publish();
    reader.drain(check);
  }
  EXPECT_EQ(aux, 3U);
  EXPECT_EQ(samples, 12U);
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

// The in-place mode (drain with an InPlaceHandler, a fixed layout): each sample reaches the
// handler as an InPlaceSample whose words sit where SampleLayout::fixed_offsets() says, nothing
// decoded; a LOST record and the sample split by the ring's end are decoded for the batch
// handler; a malformed sample is counted, not handed on; a refused batch is decoded instead.
// Either way every sample reaches exactly one of the two handlers, once, and is counted once.
TEST(RingReader, InPlaceDrainHandsOnEverySampleOnceInPlaceOrDecoded) {
  for (const bool refuse : {false, true}) {
    SCOPED_TRACE(refuse ? "refused" : "taken");
    SyntheticRing synth(1);
    perf::SampleId id;
    id.id = 1;
    synth.set_lost_record(kLayout, id);
    const auto at = kLayout.fixed_offsets();
    ASSERT_EQ(at.pid, 16);  // header, IDENTIFIER, then TID
    ASSERT_EQ(at.time, 24);
    ASSERT_EQ(at.cpu, 32);
    ASSERT_EQ(at.raw, 44);                       // then RAW's size word
    synth.set_position(synth.data_size() - 40);  // a sample wraps around the end
    auto ring = perf::Ring::adopt(synth.meta_and_data(), {}, false);
    RingReader reader(std::move(*ring), 5, 0, &kLayout, 8);
    std::map<std::uint32_t, int> seen;  // tid -> times handed on
    std::uint64_t in_place = 0, decoded = 0, others = 0;
    const InPlaceHandler handler = [&](std::span<const InPlaceSample> samples) {
      EXPECT_LE(samples.size(), 8U);
      if (refuse)
        return false;
      for (const InPlaceSample& s : samples) {
        EXPECT_EQ(s.probe(), 5U);
        EXPECT_EQ(s.raw().size(), 20U);
        EXPECT_EQ(s.word32(static_cast<std::size_t>(at.pid)), 1000U);
        ++seen[s.word32(static_cast<std::size_t>(at.tid))];
        ++in_place;
      }
      return true;
    };
    const BatchHandler batches = [&](const Batch& b) {
      for (const RecordRef& r : b.records) {
        if (const auto* smp = std::get_if<perf::Sample>(&r.record.body)) {
          EXPECT_EQ(smp->pid, 1000U);
          ++seen[smp->tid];
          ++decoded;
        } else {
          ++others;
        }
      }
    };
    std::uint32_t written = 0;
    for (int round = 0; round < 6; ++round) {
      if (round == 2) {  // a sample whose RAW size runs past its record: counted, not handed on
        SampleSpec s;
        s.raw.resize(20);
        auto bad = testing::encode_sample(kLayout, s);
        const std::uint32_t huge = 4096;
        std::memcpy(bad.data() + at.raw - 4, &huge, 4);
        ASSERT_TRUE(synth.write(bad));
      }
      for (int i = 0; i < 100; ++i) {  // 6,400 bytes into a 4,096-byte ring: some are lost
        SampleSpec s;
        s.pid = 1000;
        s.tid = written;
        s.raw.resize(20);
        if (synth.write(testing::encode_sample(kLayout, s)))
          ++written;
      }
      synth.publish();
      reader.drain(batches, &handler);
    }
    const auto& st = reader.stats();
    EXPECT_EQ(st.decode_errors, 1U);
    EXPECT_GT(st.lost, 0U) << "the ring overflowed: LOST records came";
    EXPECT_GE(others, 1U);
    EXPECT_EQ(st.samples, in_place + decoded);
    EXPECT_EQ(st.samples, written);
    EXPECT_EQ(seen.size(), written) << "each sample once";
    for (const auto& [tid, n] : seen)
      EXPECT_EQ(n, 1) << "tid " << tid;
    if (refuse) {
      EXPECT_EQ(in_place, 0U);
    } else {
      EXPECT_GE(decoded, 1U) << "the wrapped sample is decoded";
      EXPECT_LE(decoded, 20U);
      EXPECT_GT(in_place, 100U);
    }
    EXPECT_EQ(synth.meta()->data_tail, synth.head());
  }
}

}  // namespace
}  // namespace tracer::perf
