// decode(): every SAMPLE field alone and together, every read_format, every record type, and
// malformed input, against records laid out as the kernel writes them.
#include "tracer/perf/record.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cstring>

#include "support/synthetic_ring.hpp"
#include "tracer/perf/event_attr.hpp"

namespace tracer::perf {
namespace {

using testing::RecordBuilder;
using testing::SampleSpec;

std::vector<std::byte> bytes_of(std::string_view s) {
  std::vector<std::byte> v(s.size());
  std::memcpy(v.data(), s.data(), s.size());
  return v;
}

constexpr std::uint64_t kRegsMask = 0b1011;  // 3 registers

SampleSpec full_spec(std::uint64_t read_format) {
  SampleSpec s;
  s.identifier = 0x1111;
  s.ip = 0xffffffff81000010ULL;
  s.pid = 4242;
  s.tid = 4243;
  s.time = 123456789;
  s.addr = 0xdead0000;
  s.id = 0x1111;
  s.stream_id = 0x2222;
  s.cpu = 1;
  s.res = 0;
  s.period = 1000;
  s.read_enabled = 500;
  s.read_running = 250;
  s.read_values = {{10, 0x1111, 1}};
  if ((read_format & PERF_FORMAT_GROUP) != 0U)
    s.read_values.push_back({20, 0x3333, 2});
  s.callchain = {abi::kContextKernel, 0xffffffff81000010ULL, abi::kContextUser, 0x401000, 0x401100};
  s.raw = bytes_of("\x01\x00\x02\x00hello tracepoint");  // odd length: padding exercised
  s.branch_hw_idx = 7;
  s.branches = {{0x10, 0x20, 0x3}, {0x30, 0x40, 0x5}};
  s.regs_user_abi = PERF_SAMPLE_REGS_ABI_64;
  s.regs_user = {1, 2, 3};
  s.stack_user = bytes_of("stackbytes012345");  // 16 bytes
  s.stack_user_dyn_size = 12;
  s.weight = 0x0003000200000001ULL;
  s.data_src = 0x55;
  s.transaction = 0x66;
  s.regs_intr_abi = PERF_SAMPLE_REGS_ABI_64;
  s.regs_intr = {7, 8, 9};
  s.phys_addr = 0x1000;
  s.cgroup = 0x77;
  s.data_page_size = 4096;
  s.code_page_size = 2 << 20;
  s.aux = bytes_of("auxsample.......");
  return s;
}

void expect_read(const ReadView& r, std::uint64_t f, const SampleSpec& s) {
  ASSERT_EQ(r.count(), s.read_values.size());
  if ((f & PERF_FORMAT_TOTAL_TIME_ENABLED) != 0U) {
    EXPECT_EQ(r.time_enabled(), s.read_enabled);
  }
  if ((f & PERF_FORMAT_TOTAL_TIME_RUNNING) != 0U) {
    EXPECT_EQ(r.time_running(), s.read_running);
  }
  for (std::size_t i = 0; i < s.read_values.size(); ++i) {
    EXPECT_EQ(r.value(i), s.read_values[i].value) << i;
    if ((f & PERF_FORMAT_ID) != 0U) {
      EXPECT_EQ(r.id(i), s.read_values[i].id) << i;
    }
    if ((f & abi::kFormatLost) != 0U) {
      EXPECT_EQ(r.lost(i), s.read_values[i].lost) << i;
    }
  }
}

void expect_sample(const SampleLayout& l, const SampleSpec& s, const Sample& d) {
  const auto st = l.sample_type;
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U) {
    EXPECT_EQ(d.identifier, s.identifier);
  }
  if ((st & PERF_SAMPLE_IP) != 0U) {
    EXPECT_EQ(d.ip, s.ip);
  }
  if ((st & PERF_SAMPLE_TID) != 0U) {
    EXPECT_EQ(d.pid, s.pid);
    EXPECT_EQ(d.tid, s.tid);
  }
  if ((st & PERF_SAMPLE_TIME) != 0U) {
    EXPECT_EQ(d.time, s.time);
  }
  if ((st & PERF_SAMPLE_ADDR) != 0U) {
    EXPECT_EQ(d.addr, s.addr);
  }
  if ((st & PERF_SAMPLE_ID) != 0U) {
    EXPECT_EQ(d.id, s.id);
  }
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U) {
    EXPECT_EQ(d.stream_id, s.stream_id);
  }
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    EXPECT_EQ(d.cpu, s.cpu);
  }
  if ((st & PERF_SAMPLE_PERIOD) != 0U) {
    EXPECT_EQ(d.period, s.period);
  }
  if ((st & PERF_SAMPLE_READ) != 0U)
    expect_read(d.read, l.read_format, s);
  if ((st & PERF_SAMPLE_CALLCHAIN) != 0U) {
    ASSERT_EQ(d.callchain.size, s.callchain.size());
    for (std::size_t i = 0; i < s.callchain.size(); ++i)
      EXPECT_EQ(d.callchain[i], s.callchain[i]);
  }
  if ((st & PERF_SAMPLE_RAW) != 0U) {
    ASSERT_GE(d.raw.size(), s.raw.size());
    EXPECT_EQ(0, std::memcmp(d.raw.data(), s.raw.data(), s.raw.size()));
    EXPECT_EQ((d.raw.size() + 4) % 8, 0U) << "kernel pads u32 size + raw to 8";
  }
  if ((st & PERF_SAMPLE_BRANCH_STACK) != 0U) {
    ASSERT_EQ(d.branch_stack.nr, s.branches.size());
    const bool hw = (l.branch_sample_type & abi::kBranchHwIndex) != 0U;
    EXPECT_EQ(d.branch_stack.has_hw_idx, hw);
    if (hw) {
      EXPECT_EQ(d.branch_stack.hw_idx, s.branch_hw_idx);
    }
    for (std::size_t i = 0; i < s.branches.size(); ++i) {
      EXPECT_EQ(d.branch_stack.entry(i).from, s.branches[i].from);
      EXPECT_EQ(d.branch_stack.entry(i).to, s.branches[i].to);
      EXPECT_EQ(d.branch_stack.entry(i).flags, s.branches[i].flags);
    }
    if ((l.branch_sample_type & abi::kBranchCounters) != 0U) {
      ASSERT_EQ(d.branch_stack.counters.size, s.branch_counters.size());
      for (std::size_t i = 0; i < s.branch_counters.size(); ++i) {
        EXPECT_EQ(d.branch_stack.counters[i], s.branch_counters[i]);
      }
    }
  }
  if ((st & PERF_SAMPLE_REGS_USER) != 0U) {
    EXPECT_EQ(d.regs_user.abi, s.regs_user_abi);
    ASSERT_EQ(d.regs_user.regs.size, s.regs_user.size());
    for (std::size_t i = 0; i < s.regs_user.size(); ++i)
      EXPECT_EQ(d.regs_user.regs[i], s.regs_user[i]);
  }
  if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
    ASSERT_EQ(d.stack_user.size(), s.stack_user.size());
    EXPECT_EQ(0, std::memcmp(d.stack_user.data(), s.stack_user.data(), s.stack_user.size()));
    EXPECT_EQ(d.stack_user_dyn_size, s.stack_user_dyn_size);
  }
  if ((st & (PERF_SAMPLE_WEIGHT | abi::kSampleWeightStruct)) != 0U) {
    EXPECT_EQ(d.weight, s.weight);
    EXPECT_EQ(d.weight_var1_dw, 1U);
    EXPECT_EQ(d.weight_var2_w, 2U);
    EXPECT_EQ(d.weight_var3_w, 3U);
  }
  if ((st & PERF_SAMPLE_DATA_SRC) != 0U) {
    EXPECT_EQ(d.data_src, s.data_src);
  }
  if ((st & PERF_SAMPLE_TRANSACTION) != 0U) {
    EXPECT_EQ(d.transaction, s.transaction);
  }
  if ((st & PERF_SAMPLE_REGS_INTR) != 0U) {
    EXPECT_EQ(d.regs_intr.abi, s.regs_intr_abi);
    ASSERT_EQ(d.regs_intr.regs.size, s.regs_intr.size());
    for (std::size_t i = 0; i < s.regs_intr.size(); ++i)
      EXPECT_EQ(d.regs_intr.regs[i], s.regs_intr[i]);
  }
  if ((st & abi::kSamplePhysAddr) != 0U) {
    EXPECT_EQ(d.phys_addr, s.phys_addr);
  }
  if ((st & abi::kSampleCgroup) != 0U) {
    EXPECT_EQ(d.cgroup, s.cgroup);
  }
  if ((st & abi::kSampleDataPageSize) != 0U) {
    EXPECT_EQ(d.data_page_size, s.data_page_size);
  }
  if ((st & abi::kSampleCodePageSize) != 0U) {
    EXPECT_EQ(d.code_page_size, s.code_page_size);
  }
  if ((st & abi::kSampleAux) != 0U) {
    ASSERT_EQ(d.aux.size(), s.aux.size());
    EXPECT_EQ(0, std::memcmp(d.aux.data(), s.aux.data(), s.aux.size()));
  }
}

Record decode_ok(std::span<const std::byte> bytes, const SampleLayout& l) {
  Record r;
  const auto err = decode(bytes, l, r);
  EXPECT_EQ(err, DecodeError::kOk) << to_string(err);
  return r;
}

SampleLayout layout_for(std::uint64_t st,
                        std::uint64_t rf = 0,
                        bool id_all = false,
                        std::uint64_t branch = 0) {
  return SampleLayout::from(st, rf, id_all, branch, kRegsMask, kRegsMask);
}

TEST(Decode, EachSampleTypeBitAlone) {
  for (int bit = 0; bit < 25; ++bit) {
    const std::uint64_t st = std::uint64_t{1} << bit;
    SCOPED_TRACE(sample_type_names(st));
    const auto l = layout_for(st, PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED);
    const auto spec = full_spec(l.read_format);
    const auto bytes = testing::encode_sample(l, spec);
    const Record r = decode_ok(bytes, l);
    ASSERT_EQ(r.type, abi::kSample);
    const auto* s = std::get_if<Sample>(&r.body);
    ASSERT_NE(s, nullptr);
    expect_sample(l, spec, *s);
  }
}

TEST(Decode, AllSampleTypeBitsTogether) {
  // WEIGHT and WEIGHT_STRUCT are exclusive in the kernel; take WEIGHT_STRUCT.
  const std::uint64_t st = (abi::kSampleMax - 1) & ~std::uint64_t{PERF_SAMPLE_WEIGHT};
  for (std::uint64_t branch :
       {std::uint64_t{0}, abi::kBranchHwIndex, abi::kBranchHwIndex | abi::kBranchCounters}) {
    const auto l =
        layout_for(st, PERF_FORMAT_GROUP | PERF_FORMAT_ID | abi::kFormatLost, false, branch);
    auto spec = full_spec(l.read_format);
    spec.branch_counters = {11, 12};
    const auto bytes = testing::encode_sample(l, spec);
    const Record r = decode_ok(bytes, l);
    expect_sample(l, spec, std::get<Sample>(r.body));
    EXPECT_EQ(r.sample_id.id, spec.identifier) << "IDENTIFIER wins for sample_id";
    EXPECT_EQ(r.sample_id.pid, spec.pid);
  }
}

// Layouts of fixed-size fields (+ RAW last) take decode()'s one-size-check path; every subset of
// those bits decodes exactly as the field-by-field path does, and every truncation fails on both.
TEST(Decode, FixedLayoutPathAgreesWithTheGeneralPath) {
  const std::uint64_t bits[] = {PERF_SAMPLE_IDENTIFIER, PERF_SAMPLE_IP,   PERF_SAMPLE_TID,
                                PERF_SAMPLE_TIME,       PERF_SAMPLE_ADDR, PERF_SAMPLE_ID,
                                PERF_SAMPLE_STREAM_ID,  PERF_SAMPLE_CPU,  PERF_SAMPLE_PERIOD,
                                PERF_SAMPLE_RAW};
  EXPECT_FALSE(layout_for(PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN).fixed);
  EXPECT_FALSE(layout_for(PERF_SAMPLE_RAW | PERF_SAMPLE_READ).fixed);
  for (std::uint32_t mask = 1; mask < (1U << std::size(bits)); ++mask) {
    std::uint64_t st = 0;
    for (std::size_t i = 0; i < std::size(bits); ++i)
      st |= (mask >> i & 1U) != 0 ? bits[i] : 0;
    SCOPED_TRACE(sample_type_names(st));
    const auto fast = layout_for(st);
    ASSERT_TRUE(fast.fixed);
    auto general = fast;
    general.fixed = false;
    const auto spec = full_spec(0);
    const auto bytes = testing::encode_sample(fast, spec);
    const Record a = decode_ok(bytes, fast);
    const Record b = decode_ok(bytes, general);
    expect_sample(fast, spec, std::get<Sample>(a.body));
    expect_sample(fast, spec, std::get<Sample>(b.body));
    EXPECT_EQ(a.sample_id.id, b.sample_id.id);
    EXPECT_EQ(a.sample_id.time, b.sample_id.time);
    // A header that claims fewer bytes than the fields need (8-byte steps keep it aligned).
    for (std::size_t size = 8; size < bytes.size(); size += 8) {
      auto cut = bytes;
      const auto sz = static_cast<std::uint16_t>(size);
      std::memcpy(cut.data() + 6, &sz, 2);
      cut.resize(size);
      Record ra, rb;
      const auto ea = decode(cut, fast, ra);
      const auto eb = decode(cut, general, rb);
      EXPECT_EQ(ea, eb) << size;
      if ((st & PERF_SAMPLE_RAW) != 0 || size < 8 + fast.fixed_bytes) {
        EXPECT_NE(ea, DecodeError::kOk) << size;
      }
    }
  }
}

// SampleLayout::raw_time_offset (a BPF output payload with its own timestamp): the time comes
// from the payload's u64 at that offset, on the fixed and the general path alike, into the
// Sample and its sample_id; a payload too short for it gives 0, never bytes past its end.
TEST(Decode, TimeFromTheRawPayload) {
  auto fast = layout_for(PERF_SAMPLE_RAW);
  fast.raw_time_offset = 8;
  auto general = fast;
  general.fixed = false;
  for (const auto& layout : {fast, general}) {
    testing::SampleSpec spec;
    spec.raw.resize(24);
    const std::uint64_t ts = 0x1122334455667788ULL;
    std::memcpy(spec.raw.data() + 8, &ts, 8);
    Record r = decode_ok(testing::encode_sample(layout, spec), layout);
    EXPECT_EQ(std::get<Sample>(r.body).time, ts);
    EXPECT_EQ(r.sample_id.time, ts);
    spec.raw.resize(12);  // 4 bytes of the u64 only
    r = decode_ok(testing::encode_sample(layout, spec), layout);
    EXPECT_EQ(std::get<Sample>(r.body).time, 0U);
  }
}

TEST(Decode, EveryReadFormatCombination) {
  for (std::uint64_t f = 0; f < 32; ++f) {
    SCOPED_TRACE(read_format_names(f));
    const auto l = layout_for(PERF_SAMPLE_READ | PERF_SAMPLE_TID, f);
    auto spec = full_spec(f);
    if ((f & PERF_FORMAT_GROUP) != 0U)
      spec.read_values.push_back({30, 0x4444, 3});
    const auto bytes = testing::encode_sample(l, spec);
    EXPECT_EQ(bytes.size(), 8 + 8 + ReadView::size_for(f, spec.read_values.size()));
    const Record r = decode_ok(bytes, l);
    expect_read(std::get<Sample>(r.body).read, f, spec);
  }
}

TEST(ReadView, ScalesByEnabledOverRunning) {
  const std::uint64_t f = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING;
  SampleSpec s;
  s.read_values = {{1000, 0, 0}};
  s.read_enabled = 400;
  s.read_running = 100;
  RecordBuilder b;
  testing::append_read(b, f, s);
  const auto rec = b.finish(abi::kRead);
  ReadView v{f, rec.data() + 8, static_cast<std::uint32_t>(rec.size() - 8)};
  EXPECT_DOUBLE_EQ(v.scaled(0), 4000.0);
  s.read_running = 0;  // never scheduled
  RecordBuilder b2;
  testing::append_read(b2, f, s);
  const auto rec2 = b2.finish(abi::kRead);
  ReadView v2{f, rec2.data() + 8, static_cast<std::uint32_t>(rec2.size() - 8)};
  EXPECT_DOUBLE_EQ(v2.scaled(0), 0.0);
}

// ---------------------------------------------------------------------------------------------
// Non-sample records, with and without the sample_id trailer.

class RecordTypes : public ::testing::TestWithParam<bool> {
 protected:
  SampleLayout layout() const {
    return layout_for(PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID |
                          PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER,
                      PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED, GetParam());
  }
  SampleId id() const {
    SampleId i;
    i.pid = 10, i.tid = 11, i.time = 12, i.id = 13, i.stream_id = 14, i.cpu = 1;
    return i;
  }
  Record roundtrip(RecordBuilder& b, std::uint32_t type, std::uint16_t misc = 0) {
    testing::append_sample_id(b, layout(), id());
    bytes_ = b.finish(type, misc);
    Record r = decode_ok(bytes_, layout());
    EXPECT_EQ(r.type, type);
    EXPECT_EQ(r.sample_id.present, GetParam());
    if (GetParam()) {
      EXPECT_EQ(r.sample_id.pid, 10U);
      EXPECT_EQ(r.sample_id.tid, 11U);
      EXPECT_EQ(r.sample_id.time, 12U);
      EXPECT_EQ(r.sample_id.id, 13U);
      EXPECT_EQ(r.sample_id.stream_id, 14U);
      EXPECT_EQ(r.sample_id.cpu, 1U);
    }
    return r;
  }
  std::vector<std::byte> bytes_;
};

TEST_P(RecordTypes, Mmap) {
  RecordBuilder b;
  b.u32(1).u32(2).u64(0x400000).u64(0x1000).u64(0).padded_string("/usr/bin/true");
  const auto r = roundtrip(b, abi::kMmap, abi::kMiscMmapData);
  const auto& m = std::get<Mmap>(r.body);
  EXPECT_EQ(m.addr, 0x400000U);
  EXPECT_EQ(m.len, 0x1000U);
  EXPECT_EQ(m.filename, "/usr/bin/true");
}

TEST_P(RecordTypes, Mmap2WithInode) {
  RecordBuilder b;
  b.u32(1).u32(2).u64(0x7f0000).u64(0x2000).u64(0x1000).u32(8).u32(1).u64(999).u64(3);
  b.u32(5U).u32(2).padded_string("/lib/x86_64-linux-gnu/libc.so.6");
  const auto r = roundtrip(b, abi::kMmap2);
  const auto& m = std::get<Mmap2>(r.body);
  EXPECT_FALSE(m.has_build_id);
  EXPECT_EQ(m.maj, 8U);
  EXPECT_EQ(m.min, 1U);
  EXPECT_EQ(m.ino, 999U);
  EXPECT_EQ(m.ino_generation, 3U);
  EXPECT_EQ(m.prot, 5U);
  EXPECT_EQ(m.filename, "/lib/x86_64-linux-gnu/libc.so.6");
}

TEST_P(RecordTypes, Mmap2WithBuildId) {
  RecordBuilder b;
  b.u32(1).u32(2).u64(0x7f0000).u64(0x2000).u64(0).u8(20).u8(0).u8(0).u8(0);
  for (int i = 0; i < 20; ++i)
    b.u8(static_cast<std::uint8_t>(0xa0 + i));
  b.u32(5).u32(2).padded_string("/x");
  const auto r = roundtrip(b, abi::kMmap2, abi::kMiscMmapBuildId);
  const auto& m = std::get<Mmap2>(r.body);
  ASSERT_TRUE(m.has_build_id);
  EXPECT_EQ(m.build_id_size, 20);
  EXPECT_EQ(m.build_id[19], std::byte{0xa0 + 19});
  EXPECT_EQ(m.filename, "/x");
}

TEST_P(RecordTypes, LostCommTaskThrottle) {
  {
    RecordBuilder b;
    b.u64(13).u64(77);
    const auto r = roundtrip(b, abi::kLost);
    EXPECT_EQ(std::get<Lost>(r.body).lost, 77U);
    EXPECT_EQ(std::get<Lost>(r.body).id, 13U);
  }
  {
    RecordBuilder b;
    b.u32(5).u32(6).padded_string("bash");
    const auto r = roundtrip(b, abi::kComm, abi::kMiscCommExec);
    EXPECT_EQ(std::get<Comm>(r.body).comm, "bash");
    EXPECT_TRUE(std::get<Comm>(r.body).exec);
  }
  for (std::uint32_t type : {abi::kExit, abi::kFork}) {
    RecordBuilder b;
    b.u32(100).u32(1).u32(101).u32(2).u64(555);
    const auto r = roundtrip(b, type);
    const auto& t = std::get<TaskEvent>(r.body);
    EXPECT_EQ(t.pid, 100U);
    EXPECT_EQ(t.ppid, 1U);
    EXPECT_EQ(t.tid, 101U);
    EXPECT_EQ(t.ptid, 2U);
    EXPECT_EQ(t.time, 555U);
  }
  for (std::uint32_t type : {abi::kThrottle, abi::kUnthrottle}) {
    RecordBuilder b;
    b.u64(1).u64(2).u64(3);
    const auto r = roundtrip(b, type);
    EXPECT_EQ(std::get<Throttle>(r.body).stream_id, 3U);
  }
}

TEST_P(RecordTypes, ReadAuxItraceLostSamples) {
  {
    SampleSpec s;
    s.read_values = {{99, 13, 0}};
    s.read_enabled = 7;
    RecordBuilder b;
    b.u32(1).u32(2);
    testing::append_read(b, PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED, s);
    const auto r = roundtrip(b, abi::kRead);
    EXPECT_EQ(std::get<ReadRecord>(r.body).values.value(0), 99U);
    EXPECT_EQ(std::get<ReadRecord>(r.body).values.time_enabled(), 7U);
  }
  {
    RecordBuilder b;
    b.u64(4096).u64(512).u64(abi::kAuxFlagTruncated | abi::kAuxFlagPartial);
    const auto r = roundtrip(b, abi::kAux);
    const auto& a = std::get<Aux>(r.body);
    EXPECT_EQ(a.aux_offset, 4096U);
    EXPECT_EQ(a.aux_size, 512U);
    EXPECT_TRUE(a.truncated());
    EXPECT_TRUE(a.partial());
    EXPECT_FALSE(a.overwrite());
    EXPECT_FALSE(a.collision());
  }
  {
    RecordBuilder b;
    b.u32(7).u32(8);
    const auto r = roundtrip(b, abi::kItraceStart);
    EXPECT_EQ(std::get<ItraceStart>(r.body).tid, 8U);
  }
  {
    RecordBuilder b;
    b.u64(31);
    const auto r = roundtrip(b, abi::kLostSamples);
    EXPECT_EQ(std::get<LostSamples>(r.body).lost, 31U);
  }
}

TEST_P(RecordTypes, SwitchNamespacesKsymbolBpfCgroupTextPokeHwId) {
  {
    RecordBuilder b;
    const auto r = roundtrip(b, abi::kSwitch, abi::kMiscSwitchOut | abi::kMiscSwitchOutPreempt);
    const auto& s = std::get<Switch>(r.body);
    EXPECT_TRUE(s.out);
    EXPECT_TRUE(s.preempt);
    EXPECT_FALSE(s.cpu_wide);
  }
  {
    RecordBuilder b;
    b.u32(300).u32(301);
    const auto r = roundtrip(b, abi::kSwitchCpuWide);
    const auto& s = std::get<Switch>(r.body);
    EXPECT_FALSE(s.out);
    EXPECT_TRUE(s.cpu_wide);
    EXPECT_EQ(s.next_prev_pid, 300U);
    EXPECT_EQ(s.next_prev_tid, 301U);
  }
  {
    RecordBuilder b;
    b.u32(1).u32(2).u64(2).u64(0x10).u64(0x20).u64(0x30).u64(0x40);
    const auto r = roundtrip(b, abi::kNamespaces);
    const auto& n = std::get<Namespaces>(r.body);
    ASSERT_EQ(n.nr, 2U);
    EXPECT_EQ(n.dev(1), 0x30U);
    EXPECT_EQ(n.ino(1), 0x40U);
  }
  {
    RecordBuilder b;
    b.u64(0xffffffffc0000000ULL).u32(128).u16(1).u16(0).padded_string("bpf_prog_abc_handler");
    const auto r = roundtrip(b, abi::kKsymbol);
    const auto& k = std::get<Ksymbol>(r.body);
    EXPECT_EQ(k.len, 128U);
    EXPECT_EQ(k.ksym_type, 1);
    EXPECT_EQ(k.name, "bpf_prog_abc_handler");
  }
  {
    RecordBuilder b;
    b.u16(1).u16(0).u32(42);
    for (int i = 0; i < 8; ++i)
      b.u8(static_cast<std::uint8_t>(i));
    const auto r = roundtrip(b, abi::kBpfEvent);
    EXPECT_EQ(std::get<BpfEvent>(r.body).id, 42U);
    EXPECT_EQ(std::get<BpfEvent>(r.body).tag[7], std::byte{7});
  }
  {
    RecordBuilder b;
    b.u64(9).padded_string("/sys/fs/cgroup/user.slice");
    const auto r = roundtrip(b, abi::kCgroup);
    EXPECT_EQ(std::get<Cgroup>(r.body).path, "/sys/fs/cgroup/user.slice");
  }
  {
    RecordBuilder b;
    b.u64(0xffffffff81000000ULL).u16(2).u16(3).u8(0xaa).u8(0xbb).u8(1).u8(2).u8(3).pad_to_8();
    const auto r = roundtrip(b, abi::kTextPoke);
    const auto& t = std::get<TextPoke>(r.body);
    ASSERT_EQ(t.old_bytes.size(), 2U);
    ASSERT_EQ(t.new_bytes.size(), 3U);
    EXPECT_EQ(t.old_bytes[1], std::byte{0xbb});
    EXPECT_EQ(t.new_bytes[2], std::byte{3});
  }
  {
    RecordBuilder b;
    b.u64(5);
    const auto r = roundtrip(b, abi::kAuxOutputHwId);
    EXPECT_EQ(std::get<AuxOutputHwId>(r.body).hw_id, 5U);
  }
}

INSTANTIATE_TEST_SUITE_P(SampleIdAll, RecordTypes, ::testing::Bool(), [](const auto& p) {
  return p.param ? "WithTrailer" : "NoTrailer";
});

TEST(Decode, UnknownTypeIsSkippedBySize) {
  RecordBuilder b;
  b.u64(1).u64(2).u64(3);
  const auto bytes = b.finish(200);
  Record r;
  ASSERT_EQ(decode(bytes, layout_for(PERF_SAMPLE_TID, 0, true), r), DecodeError::kOk);
  EXPECT_TRUE(std::holds_alternative<Unknown>(r.body));
  EXPECT_EQ(r.size, bytes.size());
  EXPECT_EQ(record_type_name(200), "UNKNOWN");
}

TEST(Decode, PeekIdentifier) {
  const auto l = layout_for(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID, 0, true);
  SampleSpec s;
  s.identifier = 0xabc;
  EXPECT_EQ(peek_identifier(testing::encode_sample(l, s), true), 0xabcU);
  RecordBuilder b;
  b.u64(1).u64(2);
  SampleId id;
  id.id = 0xdef;
  testing::append_sample_id(b, l, id);
  EXPECT_EQ(peek_identifier(b.finish(abi::kLost), true), 0xdefU);
}

// ---------------------------------------------------------------------------------------------
// Malformed input: an error, never a read out of bounds (ASan runs these in CI).

DecodeError decode_err(std::vector<std::byte> bytes, const SampleLayout& l) {
  // Copy into an exact-size heap buffer so ASan catches any overread.
  auto* exact = new std::byte[bytes.size()];
  std::memcpy(exact, bytes.data(), bytes.size());
  Record r;
  const auto e = decode({exact, bytes.size()}, l, r);
  delete[] exact;
  return e;
}

void set_size(std::vector<std::byte>& rec, std::uint16_t size) {
  std::memcpy(rec.data() + 6, &size, 2);
}

TEST(DecodeMalformed, HeaderProblems) {
  const auto l = layout_for(PERF_SAMPLE_TID);
  SampleSpec s;
  auto rec = testing::encode_sample(l, s);
  EXPECT_EQ(decode_err({rec.begin(), rec.begin() + 7}, l), DecodeError::kTruncatedHeader);
  auto zero = rec;
  set_size(zero, 0);
  EXPECT_EQ(decode_err(zero, l), DecodeError::kZeroSize);
  auto past = rec;
  set_size(past, static_cast<std::uint16_t>(rec.size() + 8));
  EXPECT_EQ(decode_err(past, l), DecodeError::kSizePastData);
  auto odd = rec;
  odd.push_back(std::byte{0});
  set_size(odd, static_cast<std::uint16_t>(rec.size() + 1));
  EXPECT_EQ(decode_err(odd, l), DecodeError::kMisaligned);
  auto tiny = rec;
  set_size(tiny, 4);
  EXPECT_EQ(decode_err(tiny, l), DecodeError::kTruncatedHeader);
}

TEST(DecodeMalformed, CountsThatOverrunTheRecord) {
  struct Case {
    const char* name;
    std::uint64_t st;
    std::uint64_t rf;
    std::size_t at;  // byte offset of the count inside the record
    std::uint64_t value;
    int width;
  };
  const Case cases[] = {
      {"callchain nr", PERF_SAMPLE_CALLCHAIN, 0, 8, 1000, 8},
      {"callchain nr overflow", PERF_SAMPLE_CALLCHAIN, 0, 8, std::uint64_t{1} << 61, 8},
      {"raw size", PERF_SAMPLE_RAW, 0, 8, 4000, 4},
      {"branch nr", PERF_SAMPLE_BRANCH_STACK, 0, 8, 1000, 8},
      {"branch nr overflow", PERF_SAMPLE_BRANCH_STACK, 0, 8, ~std::uint64_t{0} / 3, 8},
      {"read group nr", PERF_SAMPLE_READ, PERF_FORMAT_GROUP | PERF_FORMAT_ID, 8, 1000, 8},
      {"read group nr overflow", PERF_SAMPLE_READ, PERF_FORMAT_GROUP, 8, ~std::uint64_t{0}, 8},
      {"stack_user size", PERF_SAMPLE_STACK_USER, 0, 8, 1 << 20, 8},
      {"aux size", abi::kSampleAux, 0, 8, 1 << 20, 8},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto l = layout_for(c.st, c.rf);
    auto spec = full_spec(c.rf);
    auto rec = testing::encode_sample(l, spec);
    std::memcpy(rec.data() + c.at, &c.value, c.width);
    EXPECT_EQ(decode_err(rec, l), DecodeError::kFieldOverrun);
  }
}

TEST(DecodeMalformed, StackDynSizeLargerThanStack) {
  const auto l = layout_for(PERF_SAMPLE_STACK_USER);
  auto spec = full_spec(0);
  spec.stack_user_dyn_size = spec.stack_user.size() + 1;
  EXPECT_EQ(decode_err(testing::encode_sample(l, spec), l), DecodeError::kFieldOverrun);
}

TEST(DecodeMalformed, TrailerAndBodyOverruns) {
  const auto l = layout_for(PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID, 0, true);
  RecordBuilder b;
  b.u64(1);  // LOST needs 16 bytes of body + 24 of trailer; give 8
  EXPECT_EQ(decode_err(b.finish(abi::kLost), l), DecodeError::kTrailerOverrun);
  RecordBuilder c;
  c.u64(1).u64(2).u64(3);  // 24 bytes: trailer fits, body (16 bytes) does not
  EXPECT_EQ(decode_err(c.finish(abi::kLost), l), DecodeError::kFieldOverrun);
  RecordBuilder n;  // NAMESPACES nr beyond the record
  n.u32(1).u32(2).u64(50).u64(0).u64(0);
  testing::append_sample_id(n, l, SampleId{});
  EXPECT_EQ(decode_err(n.finish(abi::kNamespaces), l), DecodeError::kFieldOverrun);
  RecordBuilder t;  // TEXT_POKE lengths beyond the record
  t.u64(0).u16(300).u16(300).u32(0);
  testing::append_sample_id(t, l, SampleId{});
  EXPECT_EQ(decode_err(t.finish(abi::kTextPoke), l), DecodeError::kFieldOverrun);
}

TEST(DecodeMalformed, UnterminatedStringStopsAtRecordEnd) {
  const auto l = layout_for(PERF_SAMPLE_TID);
  RecordBuilder b;
  b.u32(1).u32(2);
  for (int i = 0; i < 16; ++i)
    b.u8('A');  // no NUL
  Record r;
  const auto bytes = b.finish(abi::kComm);
  ASSERT_EQ(decode(bytes, l, r), DecodeError::kOk);
  EXPECT_EQ(std::get<Comm>(r.body).comm.size(), 16U);
}

}  // namespace
}  // namespace tracer::perf

namespace tracer::perf {
namespace {

TEST(Decode, ReusedRecordKeepsAbsentFieldsZero) {
  // The decoder reuses a Sample of the same sample_type; conditional fields must not leak.
  const auto l = layout_for(PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_TID);
  auto full = full_spec(0);
  auto empty = full_spec(0);
  empty.regs_user_abi = 0;  // no registers (a kernel thread)
  empty.stack_user.clear();
  Record r;
  const auto a = testing::encode_sample(l, full);
  ASSERT_EQ(decode(a, l, r), DecodeError::kOk);
  EXPECT_EQ(std::get<Sample>(r.body).regs_user.regs.size, 3U);
  const auto b = testing::encode_sample(l, empty);
  ASSERT_EQ(decode(b, l, r), DecodeError::kOk);
  const auto& s = std::get<Sample>(r.body);
  EXPECT_EQ(s.regs_user.abi, 0U);
  EXPECT_TRUE(s.regs_user.regs.empty());
  EXPECT_TRUE(s.stack_user.empty());
  EXPECT_EQ(s.stack_user_dyn_size, 0U);
  // A different sample_type starts from a zeroed Sample.
  const auto l2 = layout_for(PERF_SAMPLE_IP);
  const auto c = testing::encode_sample(l2, full);
  ASSERT_EQ(decode(c, l2, r), DecodeError::kOk);
  EXPECT_EQ(std::get<Sample>(r.body).pid, 0U);
  EXPECT_EQ(std::get<Sample>(r.body).ip, full.ip);
}

}  // namespace
}  // namespace tracer::perf

namespace tracer::perf {
namespace {

TEST(RegSlot, FollowsTheMasksBitOrder) {
  constexpr std::uint64_t mask = (1ULL << 2) | (1ULL << 5) | (1ULL << 16);
  static_assert(reg_slot(mask, 2) == 0);
  static_assert(reg_slot(mask, 5) == 1);
  static_assert(reg_slot(mask, 16) == 2);
  static_assert(reg_slot(mask, 3) == -1);
  static_assert(reg_slot(mask, 64) == -1);
  EXPECT_EQ(reg_slot(0, 0), -1);
}

}  // namespace
}  // namespace tracer::perf
