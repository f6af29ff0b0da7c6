// Engine with BPF: a tgid filter program attached with SET_BPF, the BPF output channel with
// payloads decoded through BTF, drop accounting, runtime compilation and verifier rejections.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "support/child.hpp"
#include "support/scratch_path.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/pipeline.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

// Syscalls only these tests use: a gate program on their tracepoints affects every consumer.
void fadvises(int n) {
  for (int i = 0; i < n; ++i)
    ::syscall(SYS_fadvise64, 12345, i, 0, 0);
}
void readaheads(int n) {
  for (int i = 0; i < n; ++i)
    ::syscall(SYS_readahead, 12345, i, 0);
}

// In-kernel aggregation: tests/data/syscalls_by_pid.bpf.c counts syscalls by (pid, nr, comm) in a
// per-CPU hash map; Engine::maps() reads it with its BTF layout after stop(), the per-CPU counts
// summed: exactly the child's calls. A read with `clear` empties what it saw; the bpf-map stage
// turns the map into a table. A check() before start() makes the layouts known early.
TEST(EngineBpf, InKernelCountsReadThroughMaps) {
  constexpr int kCalls = 700;
  testing::Child child([](int) {
    for (int i = 0; i < kCalls; ++i)
      ::syscall(SYS_getppid);
  });
  boost::asio::io_context io;
  Engine engine(
      io.get_executor(),
      {.probes = {{.name = "sys_enter",
                   .kind = ProbeKind::kTracepoint,
                   .spec = "raw_syscalls:sys_enter",
                   .counting = true,
                   .bpf_program = "count_syscalls"}},
       .bpf = BpfOptions{.source = TRACER_TEST_DATA_DIR "/syscalls_by_pid.bpf.c",
                         .output_optional = true,
                         .globals = {{"only_tgid", static_cast<std::uint64_t>(child.pid())}}}});
  // check() keeps the object it loaded, attached to nothing: the maps' layouts are known before
  // start(), which loads a fresh object and runs as without the check.
  engine.check();
  auto checked = engine.maps().schema("counts");
  ASSERT_TRUE(checked.has_value()) << checked.error().message;
  EXPECT_NE(checked->value.field("calls"), nullptr);
  engine.start();
  ASSERT_EQ(engine.probes().size(), 1U) << "no output channel without an events map";
  ASSERT_TRUE(child.go());
  io.run_for(50ms);
  engine.stop();
  const MapSource& maps = engine.maps();
  const auto names = maps.map_names();
  EXPECT_NE(std::ranges::find(names, "counts"), names.end());
  auto snap = maps.read("counts", false);
  ASSERT_TRUE(snap.has_value()) << snap.error().message;
  ASSERT_TRUE(snap->schema.per_cpu);
  const auto* pid = snap->schema.key.field("pid");
  const auto* nr = snap->schema.key.field("nr");
  const auto* calls = snap->schema.value.field("calls");
  ASSERT_TRUE(pid != nullptr && nr != nullptr && calls != nullptr);
  std::uint64_t getppids = 0, other_pids = 0;
  for (const auto& [key, value] : snap->entries) {
    std::uint32_t p = 0, n = 0;
    std::uint64_t c = 0;
    std::memcpy(&p, key.data() + pid->offset, 4);
    std::memcpy(&n, key.data() + nr->offset, 4);
    std::memcpy(&c, value.data() + calls->offset, 8);
    if (static_cast<pid_t>(p) != child.pid())
      ++other_pids;
    else if (n == SYS_getppid)
      getppids += c;
  }
  EXPECT_EQ(getppids, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(other_pids, 0U) << "only_tgid filters in the kernel";

  // The bpf-map stage: the child's getppid row with its count.
  std::string out;
  Sink sink = Sink::to_string(&out);
  Pipeline pipeline(sink);
  Diagnostics diags;
  ConfigTable t;
  t.emplace_back("map", ConfigValue{.value = std::string("counts"), .where = {}});
  t.emplace_back("sort", ConfigValue{.value = std::string("calls"), .where = {}});
  pipeline.add(stage_registry(), "bpf-map", ConfigValue{.value = std::move(t), .where = {}}, diags);
  pipeline.bind(engine.probes(), diags, {}, &maps);
  ASSERT_EQ(diags.format(), "");
  pipeline.start(0ns);
  pipeline.stop(1s);
  // A row: pid, nr, comm, calls.
  bool row = false;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string p, n, comm, c;
    words >> p >> n >> comm >> c;
    row = row || (p == std::to_string(child.pid()) && n == std::to_string(SYS_getppid) &&
                  c == std::to_string(kCalls));
  }
  EXPECT_TRUE(row) << out;

  // clear: what was read is deleted.
  ASSERT_TRUE(maps.read("counts", true).has_value());
  auto after = maps.read("counts", false);
  ASSERT_TRUE(after.has_value());
  EXPECT_TRUE(after->entries.empty());
  EXPECT_FALSE(maps.read("countz", false).has_value());
}

TEST(EngineBpf, TgidFilterAllCpusDeliversExactlyTheChildsCalls) {
  constexpr int kCalls = 500;
  testing::Child child([](int) { fadvises(kCalls); });
  boost::asio::io_context io;
  Engine engine(
      io.get_executor(),
      {.probes = {{.name = "fadvise",
                   .kind = ProbeKind::kTracepoint,
                   .spec = "syscalls:sys_enter_fadvise64",
                   .bpf_program = "tgid_gate"}},
       .bpf = BpfOptions{.builtin = "tgid_gate", .output_map = "", .tgids = {child.pid()}}});
  std::uint64_t mine = 0, foreign = 0;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (const auto* s = std::get_if<perf::Sample>(&r.record.body)) {
        (static_cast<pid_t>(s->pid) == child.pid() ? mine : foreign) += 1;
      }
    }
  });
  engine.start();
  ASSERT_TRUE(child.go());
  fadvises(200);  // the same syscall from another process, on any CPU
  io.run_for(200ms);
  engine.stop();
  EXPECT_EQ(mine, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(foreign, 0U);
  EXPECT_EQ(engine.stats().probes[0].total().lost, 0U);
}

// A counting probe on sys_enter_readahead that runs syscall_output, which emits the calls of
// `pid` through the output channel `bpf` describes.
EngineOptions readahead_output(pid_t pid, BpfOptions bpf) {
  bpf.builtin = "syscall_output";
  return {.target = {.kind = Target::Kind::kPid, .pid = pid},
          .probes = {{.name = "readahead",
                      .kind = ProbeKind::kTracepoint,
                      .spec = "syscalls:sys_enter_readahead",
                      .counting = true,
                      .bpf_program = "syscall_output"}},
          .bpf = std::move(bpf)};
}

TEST(EngineBpf, OutputChannelPayloadsDecodedThroughBtf) {
  constexpr int kCalls = 300;
  testing::Child child([](int) { readaheads(kCalls); });
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                readahead_output(child.pid(), {.output_name = "calls",
                                               .payload_struct = "syscall_output_event"}));
  engine.start();
  ASSERT_EQ(engine.probes().size(), 2U);
  const ProbeInfo& out = engine.probes()[1];
  EXPECT_EQ(out.name, "calls");
  EXPECT_EQ(out.kind, ProbeKind::kBpfOutput);
  ASSERT_TRUE(out.payload.has_value());
  const auto* pid_f = out.payload->field("pid");
  const auto* nr_f = out.payload->field("nr");
  const auto* args_f = out.payload->field("args");
  const auto* comm_f = out.payload->field("comm");
  ASSERT_TRUE(pid_f && nr_f && args_f && comm_f);
  EXPECT_EQ(args_f->count, 6U);
  std::vector<std::uint64_t> offsets;
  std::uint64_t foreign = 0, bad_nr = 0;
  std::string comm;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      const auto* s = std::get_if<perf::Sample>(&r.record.body);
      if (s == nullptr || r.probe != 1)
        continue;
      ASSERT_GE(s->raw.size(), out.payload->size);
      std::uint32_t pid = 0;
      std::int64_t nr = 0;
      std::uint64_t arg1 = 0;
      std::memcpy(&pid, s->raw.data() + pid_f->offset, 4);
      std::memcpy(&nr, s->raw.data() + nr_f->offset, 8);
      std::memcpy(&arg1, s->raw.data() + args_f->offset + 8, 8);
      if (static_cast<pid_t>(pid) != child.pid())
        ++foreign;
      if (nr != SYS_readahead)
        ++bad_nr;
      offsets.push_back(arg1);
      comm.assign(reinterpret_cast<const char*>(s->raw.data() + comm_f->offset));
    }
  });
  ASSERT_TRUE(child.go());
  readaheads(100);  // the parent: not in `tgids`, never emitted
  io.run_for(200ms);
  engine.stop();
  ASSERT_EQ(offsets.size(), static_cast<std::size_t>(kCalls));
  std::sort(offsets.begin(), offsets.end());  // per-CPU rings: order is per CPU only
  for (int i = 0; i < kCalls; ++i)
    EXPECT_EQ(offsets[i], static_cast<std::uint64_t>(i));
  EXPECT_EQ(foreign, 0U);
  EXPECT_EQ(bad_nr, 0U);
  EXPECT_FALSE(comm.empty());
  const auto stats = engine.stats();
  EXPECT_EQ(stats.probes[1].total().samples, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(stats.probes[1].total().lost, 0U);
  EXPECT_EQ(stats.probes[1].bpf_output_drops, 0U);
  EXPECT_EQ(stats.probes[0].total().samples, static_cast<std::uint64_t>(kCalls))
      << "the counting tracepoint probe counts the child's calls";
}

// `payload_time`: the channel samples RAW only (no kernel clock read per event) and each record's
// time is the payload's bpf_ktime_get_ns(), in both decoding modes; the CPU comes from the ring.
// Times are CLOCK_MONOTONIC: inside the run's window, and in call order on each CPU.
TEST(EngineBpf, PayloadTimestampBecomesTheRecordTime) {
  constexpr int kCalls = 200;
  for (const bool decode : {true, false}) {
    SCOPED_TRACE(decode ? "decoded" : "header only");
    testing::Child child([](int) { readaheads(kCalls); });
    boost::asio::io_context io;
    EngineOptions o = readahead_output(
        child.pid(), {.payload_struct = "syscall_output_event", .payload_time = "ts"});
    o.decode_samples = decode;
    Engine engine(io.get_executor(), std::move(o));
    engine.start();
    const ProbeInfo& out = engine.probes()[1];
    EXPECT_EQ(out.attr.raw()->sample_type, std::uint64_t{PERF_SAMPLE_RAW});
    ASSERT_TRUE(out.payload.has_value());
    const auto* ts_f = out.payload->field("ts");
    const auto* args_f = out.payload->field("args");
    ASSERT_TRUE(ts_f && args_f);
    EXPECT_EQ(out.layout.raw_time_offset, static_cast<std::int32_t>(ts_f->offset));
    std::uint64_t mismatched = 0, bad_cpu = 0, samples = 0, out_of_order = 0;
    std::vector<std::uint64_t> times;
    std::map<std::int32_t, std::uint64_t> last_time;
    engine.on_batch([&](const Batch& b) {
      for (const auto& r : b.records) {
        if (r.probe != 1 || r.record.type != perf::abi::kSample)
          continue;
        perf::Record decoded;
        const perf::Record* rec = &r.record;
        if (!decode) {
          ASSERT_EQ(perf::decode(r.record.bytes, out.layout, decoded), perf::DecodeError::kOk);
          rec = &decoded;
        }
        const auto* s = std::get_if<perf::Sample>(&rec->body);
        ASSERT_NE(s, nullptr);
        std::uint64_t ts = 0;
        std::memcpy(&ts, s->raw.data() + ts_f->offset, 8);
        mismatched += s->time == ts && rec->sample_id.time == ts ? 0 : 1;
        bad_cpu += r.cpu >= 0 && r.cpu < ::sysconf(_SC_NPROCESSORS_CONF) ? 0 : 1;
        auto [it, fresh] = last_time.try_emplace(r.cpu, s->time);
        if (!fresh && s->time < it->second)
          ++out_of_order;
        it->second = s->time;
        times.push_back(s->time);
        ++samples;
      }
    });
    timespec t0{}, t1{};
    ::clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_TRUE(child.go());
    io.run_for(200ms);
    engine.stop();
    ::clock_gettime(CLOCK_MONOTONIC, &t1);
    const auto ns = [](const timespec& t) {
      return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL +
             static_cast<std::uint64_t>(t.tv_nsec);
    };
    EXPECT_EQ(samples, static_cast<std::uint64_t>(kCalls));
    EXPECT_EQ(mismatched, 0U);
    EXPECT_EQ(bad_cpu, 0U);
    EXPECT_EQ(out_of_order, 0U);
    ASSERT_FALSE(times.empty());
    EXPECT_GE(*std::min_element(times.begin(), times.end()), ns(t0));
    EXPECT_LE(*std::max_element(times.begin(), times.end()), ns(t1));
    EXPECT_EQ(engine.stats().probes[1].total().lost, 0U);
  }
}

// A `payload_time` that is not a u64 field of the struct: a usage error naming the field, with
// the near names (or the kind it has), before anything is opened.
TEST(EngineBpf, PayloadTimeMustBeAU64FieldOfTheStruct) {
  const auto error_of = [](std::string time, std::string payload) -> std::string {
    boost::asio::io_context io;
    Engine engine(io.get_executor(),
                  readahead_output(::getpid(), {.payload_struct = std::move(payload),
                                                .payload_time = std::move(time),
                                                .payload_time_where = SourceRegion{
                                                    .path = "r.toml", .line = 7, .column = 8}}));
    try {
      engine.check();
    } catch (const Error& e) {
      return std::string(e.what()) + "\n  hint: " + e.hint() + "|" + std::to_string(e.exit_code());
    }
    return "no error";
  };
  const std::string typo = error_of("tss", "syscall_output_event");
  EXPECT_NE(typo.find("r.toml:7:8: [bpf] time: struct 'syscall_output_event' has no field 'tss'"),
            std::string::npos)
      << typo;
  EXPECT_NE(typo.find("did you mean ts"), std::string::npos) << typo;
  EXPECT_TRUE(typo.ends_with("|2")) << typo;
  const std::string narrow = error_of("pid", "syscall_output_event");
  EXPECT_NE(
      narrow.find("field 'pid' of struct 'syscall_output_event' is __u32 (4 bytes), not a u64"),
      std::string::npos)
      << narrow;
  const std::string no_struct = error_of("ts", "syscall_output_evnt");
  EXPECT_NE(no_struct.find("has no struct 'syscall_output_evnt'"), std::string::npos) << no_struct;
  EXPECT_NE(no_struct.find("did you mean syscall_output_event"), std::string::npos) << no_struct;
}

TEST(EngineBpf, VerifierRejectionShowsTheLog) {
  const fs::path dir = tracer::testing::scratch_path("tracer_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "bad.bpf.c") << R"(#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1); __type(key, __u32); __type(value, __u64); } m SEC(".maps");
SEC("tracepoint") int bad(void *ctx) {
  __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&m, &k);
  if (!v) return 1;
  return v[9] != 0;  /* past the 8-byte value: the verifier refuses */
}
)";
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.probes = {{.name = "t",
                             .kind = ProbeKind::kTracepoint,
                             .spec = "syscalls:sys_enter_fadvise64",
                             .bpf_program = "bad"}},
                 .bpf = BpfOptions{.source = (dir / "bad.bpf.c").string(), .output_map = ""}});
  try {
    engine.start();
    FAIL() << "the verifier accepted an out-of-bounds read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("invalid access to map value"), std::string::npos) << e.hint();
  }
  fs::remove_all(dir);
}

TEST(EngineBpf, ProgramThatDoesNotExistListsTheOthers) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(), {.probes = {{.name = "t",
                                                .kind = ProbeKind::kTracepoint,
                                                .spec = "syscalls:sys_enter_fadvise64",
                                                .bpf_program = "tgid_gat"}},
                                    .bpf = BpfOptions{.builtin = "tgid_gate", .output_map = ""}});
  try {
    engine.start();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUsage);
    EXPECT_NE((std::string(e.what()) + e.hint()).find("tgid_gate"), std::string::npos)
        << e.what() << "\n"
        << e.hint();
  }
}

}  // namespace
}  // namespace tracer
