// Test support for pipeline stages: a fake tracepoint format, probes that use it, and hand-built
// batches of real records (encoded as the kernel lays them out, then decoded into RecordRefs).
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/synthetic_ring.hpp"
#include "tracer/config_value.hpp"
#include "tracer/engine.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::testing {

// Fields of every kind the schema binds: int, __data_loc string, signed long, char array, array.
inline constexpr std::string_view kFakeFormat =
    "name: fake_event\n"
    "ID: 900\n"
    "format:\n"
    "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
    "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
    "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n"
    "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n"
    "\n"
    "\tfield:int nr;\toffset:8;\tsize:4;\tsigned:1;\n"
    "\tfield:__data_loc char[] path;\toffset:12;\tsize:4;\tsigned:0;\n"
    "\tfield:long bytes;\toffset:16;\tsize:8;\tsigned:1;\n"
    "\tfield:char name[16];\toffset:24;\tsize:16;\tsigned:0;\n"
    "\tfield:unsigned long args[2];\toffset:40;\tsize:16;\tsigned:0;\n"
    "\n"
    "print fmt: \"nr=%d\", REC->nr\n";

struct FakeEvent {
  std::int32_t nr = 0;
  std::string path;
  std::int64_t bytes = 0;
  std::string name;
  std::uint64_t args[2] = {0, 0};
};

inline std::vector<std::byte> fake_raw(const FakeEvent& e) {
  std::vector<std::byte> raw(56 + e.path.size() + 1);
  const auto put = [&](std::size_t off, const void* p, std::size_t n) {
    std::memcpy(raw.data() + off, p, n);
  };
  const std::uint16_t type = 900;
  put(0, &type, 2);
  put(8, &e.nr, 4);
  // include/trace/stages/stage6_event_callback.h: __data_loc = len << 16 | offset.
  const auto loc = static_cast<std::uint32_t>(((e.path.size() + 1) << 16) | 56);
  put(12, &loc, 4);
  put(16, &e.bytes, 8);
  put(24, e.name.data(), std::min<std::size_t>(e.name.size(), 16));
  put(40, e.args, 16);
  put(56, e.path.data(), e.path.size());
  return raw;
}

inline constexpr std::uint64_t kBaseSampleType =
    PERF_SAMPLE_RAW | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;

/// A tracepoint probe with the fake format; `extra` adds sample_type bits, `regs` a user regs mask.
inline ProbeInfo fake_probe(std::uint32_t index,
                            std::string name,
                            std::uint64_t extra = 0,
                            std::uint64_t regs = 0,
                            ProbeKind kind = ProbeKind::kTracepoint) {
  ProbeInfo p;
  p.index = index;
  p.name = std::move(name);
  p.kind = kind;
  p.spec = "fake:fake_event";
  p.layout = perf::SampleLayout::from(kBaseSampleType | extra, 0, false, 0, regs);
  p.format = *tracefs::parse_format(kFakeFormat, "fake", "fake_event");
  p.sample_regs_user = regs;
  return p;
}

/// Owns record bytes and the RecordRefs decoded from them.
class Records {
 public:
  void sample(const ProbeInfo& p, SampleSpec s, std::int32_t cpu = 0) {
    s.cpu = static_cast<std::uint32_t>(cpu);
    add(p, encode_sample(p.layout, s), cpu);
  }
  void event(const ProbeInfo& p,
             const FakeEvent& e,
             std::uint32_t pid,
             std::uint32_t tid,
             std::uint64_t time,
             std::int32_t cpu = 0) {
    SampleSpec s;
    s.pid = pid;
    s.tid = tid;
    s.time = time;
    s.raw = fake_raw(e);
    sample(p, std::move(s), cpu);
  }
  void comm(const ProbeInfo& p, std::uint32_t pid, std::uint32_t tid, const std::string& name) {
    RecordBuilder b;
    b.u32(pid).u32(tid).padded_string(name);
    add(p, b.finish(perf::abi::kComm), 0);
  }
  void lost(const ProbeInfo& p, std::uint64_t n) {
    RecordBuilder b;
    b.u64(1).u64(n);
    add(p, b.finish(perf::abi::kLost), 0);
  }
  [[nodiscard]] Batch batch() const { return Batch{refs_}; }
  /// The same records as an engine with decode_samples = false hands them on: samples carry
  /// their header and bytes only.
  [[nodiscard]] std::vector<RecordRef> undecoded() const {
    std::vector<RecordRef> out = refs_;
    for (auto& r : out) {
      if (r.record.type == perf::abi::kSample) {
        r.record.body.emplace<perf::Unknown>();
        r.record.sample_id = {};
      }
    }
    return out;
  }
  [[nodiscard]] std::size_t size() const { return refs_.size(); }
  /// Record i as a perf ring sample read in place (InPlaceSample), its RAW data cut to
  /// `raw_size` bytes when given (a short record).
  [[nodiscard]] InPlaceSample in_place(std::size_t i,
                                       std::optional<std::uint32_t> raw_size = {}) const {
    const auto& smp = std::get<perf::Sample>(refs_[i].record.body);
    const std::byte* rec = bytes_[i].data();
    const auto at = static_cast<std::uint32_t>(smp.raw.data() - rec);
    return {rec, refs_[i].probe, at,
            std::min(raw_size.value_or(UINT32_MAX), static_cast<std::uint32_t>(smp.raw.size()))};
  }
  [[nodiscard]] const std::vector<RecordRef>& refs() const { return refs_; }
  void clear() {
    refs_.clear();
    bytes_.clear();
  }

 private:
  void add(const ProbeInfo& p, std::vector<std::byte> rec, std::int32_t cpu) {
    bytes_.push_back(std::move(rec));
    RecordRef r;
    r.probe = p.index;
    r.cpu = cpu;
    if (perf::decode(bytes_.back(), p.layout, r.record) != perf::DecodeError::kOk)
      throw std::runtime_error("test record does not decode");
    refs_.push_back(r);
  }
  std::deque<std::vector<std::byte>> bytes_;
  std::vector<RecordRef> refs_;
};

// ConfigValue builders for stage option tables.
inline ConfigValue cv(std::string s, std::uint32_t line = 1, std::uint32_t column = 1) {
  return {.value = std::move(s), .where = {.path = "r.toml", .line = line, .column = column}};
}
inline ConfigValue cv(const char* s, std::uint32_t line = 1, std::uint32_t column = 1) {
  return cv(std::string(s), line, column);
}
inline ConfigValue cv(std::int64_t v, std::uint32_t line = 1, std::uint32_t column = 1) {
  return {.value = v, .where = {.path = "r.toml", .line = line, .column = column}};
}
inline ConfigValue cv(int v, std::uint32_t line = 1, std::uint32_t column = 1) {
  return cv(std::int64_t{v}, line, column);
}
inline ConfigValue cv_list(std::vector<std::string> items, std::uint32_t line = 1) {
  ConfigArray a;
  std::uint32_t col = 1;
  for (auto& s : items) {
    a.push_back(cv(std::move(s), line, col));
    col += 10;
  }
  return {.value = std::move(a), .where = {.path = "r.toml", .line = line, .column = 1}};
}
inline ConfigValue cv_table(ConfigTable t, std::uint32_t line = 1) {
  return {.value = std::move(t), .where = {.path = "r.toml", .line = line, .column = 1}};
}

}  // namespace tracer::testing
