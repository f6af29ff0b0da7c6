// perfdata::Reader against the real perf: files recorded in the test by `perf record` on this
// machine, decoded by the reader and compared with what `perf script` prints for the same file.
#include "tracer/perfdata/reader.hpp"

#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "support/perf_tool.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace tracer::perfdata {
namespace {

namespace fs = std::filesystem;
using testing::shell;
using testing::TempDir;

using tracer::testing::kSyscaller;

// One sample as both sides see it: event, tid, cpu, time in µs (perf script truncates to µs),
// and the tracepoint's "name: 0x..." fields.
struct Row {
  std::string event;
  std::uint32_t tid = 0;
  std::uint32_t cpu = 0;
  std::uint64_t time_us = 0;
  std::map<std::string, std::uint64_t> fields;
  auto key() const { return std::tie(time_us, tid, cpu, event, fields); }
  bool operator<(const Row& o) const { return key() < o.key(); }
  bool operator==(const Row& o) const { return key() == o.key(); }
};

std::ostream& operator<<(std::ostream& os, const Row& r) {
  os << r.event << " tid=" << r.tid << " cpu=" << r.cpu << " t=" << r.time_us;
  for (const auto& [k, v] : r.fields)
    os << " " << k << "=" << v;
  return os;
}

// perf script -F tid,cpu,time,event,trace: "  26813 [001] 11633.018049: sys:ev: fd: 0x3039, ..."
/// The syscaller's lseek calls among `rows`: distinct offsets of lseek(12345, i, SEEK_CUR).
std::size_t program_calls(const std::vector<Row>& rows) {
  std::set<std::uint64_t> offsets;
  for (const auto& r : rows) {
    if (r.fields.at("fd") == 12345 && r.fields.at("whence") == 1)
      offsets.insert(r.fields.at("offset"));
  }
  return offsets.size();
}

std::vector<Row> perf_script_rows(const fs::path& file) {
  const auto r = shell("perf script -i " + file.string() + " -F tid,cpu,time,event,trace");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<Row> rows;
  static const std::regex line(R"(^\s*(\d+)\s+\[(\d+)\]\s+(\d+)\.(\d+):\s+(\S+):\s*(.*)$)");
  static const std::regex field(R"((\w+): 0x([0-9a-f]+))");
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line))
      continue;
    Row row;
    row.tid = static_cast<std::uint32_t>(std::stoul(m[1]));
    row.cpu = static_cast<std::uint32_t>(std::stoul(m[2]));
    row.time_us = std::stoull(m[3]) * 1000000 + std::stoull(m[4]);
    row.event = m[5];
    const std::string rest = m[6];
    for (auto it = std::sregex_iterator(rest.begin(), rest.end(), field);
         it != std::sregex_iterator(); ++it) {
      row.fields[(*it)[1]] = std::stoull((*it)[2], nullptr, 16);
    }
    rows.push_back(std::move(row));
  }
  std::sort(rows.begin(), rows.end());
  return rows;
}

struct ReadAll {
  std::vector<Row> rows;
  std::uint64_t records = 0;
  std::optional<ReadError> error;
  std::vector<std::uint64_t> offsets;  // of every record
  std::uint64_t lost = 0;              // what LOST / LOST_SAMPLES records say perf lost
};

ReadAll read_all(Reader& reader) {
  ReadAll out;
  Item item;
  while (reader.next(item)) {
    ++out.records;
    out.offsets.push_back(item.offset);
    if (const auto* l = std::get_if<perf::Lost>(&item.record.body))
      out.lost += l->lost;
    if (const auto* l = std::get_if<perf::LostSamples>(&item.record.body))
      out.lost += l->lost;
    const auto* s = std::get_if<perf::Sample>(&item.record.body);
    if (s == nullptr || item.attr < 0)
      continue;
    const auto& ev = reader.events()[static_cast<std::size_t>(item.attr)];
    Row row;
    row.event = ev.name;
    row.tid = s->tid;
    row.cpu = s->cpu;
    row.time_us = s->time / 1000;
    if (ev.format) {
      for (const auto& f : ev.format->fields) {
        if (f.is_common || f.name == "__syscall_nr")
          continue;
        if (const auto v = tracefs::read_int(f, s->raw))
          row.fields[f.name] = static_cast<std::uint64_t>(*v);
      }
    }
    out.rows.push_back(std::move(row));
  }
  out.error = reader.error();
  std::sort(out.rows.begin(), out.rows.end());
  return out;
}

Reader open_ok(const fs::path& p) {
  auto r = Reader::open(p.string());
  if (!r)
    throw std::runtime_error(r.error().message);  // gtest reports it as the test's failure
  return std::move(*r);
}

void expect_same_rows(const std::vector<Row>& ours, const std::vector<Row>& perfs) {
  ASSERT_EQ(ours.size(), perfs.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    ASSERT_EQ(ours[i], perfs[i]) << "sample " << i;
  }
}

std::string record(const TempDir& dir, const std::string& name, const std::string& args) {
  const auto out = (dir.path() / name).string();
  const auto r = shell("perf record -q -o " + out + " " + args + " 2>&1 >/dev/null");
  if (r.exit_code != 0)
    return {};
  return out;
}

TEST(PerfDataReader, TracepointFieldsMatchPerfScript) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "lseek.data", "-e syscalls:sys_enter_lseek -- " + kSyscaller + " lseek 3000");
  ASSERT_FALSE(file.empty());
  auto reader = open_ok(file);
  EXPECT_FALSE(reader.pipe_mode());
  EXPECT_FALSE(reader.swapped());
  ASSERT_EQ(reader.events().size(), 1U);
  const auto& ev = reader.events()[0];
  EXPECT_EQ(ev.name, "syscalls:sys_enter_lseek");
  ASSERT_TRUE(ev.format.has_value());
  EXPECT_NE(ev.format->field("offset"), nullptr);
  EXPECT_FALSE(ev.ids.empty());
  const auto ours = read_all(reader);
  EXPECT_FALSE(ours.error) << ours.error->describe();
  const auto perfs = perf_script_rows(file);
  // Every one of the program's calls, with the values it passed (offset = i, fd 12345,
  // SEEK_CUR). Counted as distinct offsets: the row count itself is perf's (expect_same_rows).
  EXPECT_EQ(program_calls(ours.rows), 3000U);
  expect_same_rows(ours.rows, perfs);
}

TEST(PerfDataReader, FeaturesDescribeThisMachine) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "f.data", "-e syscalls:sys_enter_lseek -- " + kSyscaller + " lseek 10");
  ASSERT_FALSE(file.empty());
  auto reader = open_ok(file);
  const auto& f = reader.features();
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  utsname u{};
  ::uname(&u);
  EXPECT_EQ(f.hostname, host);
  EXPECT_EQ(f.osrelease, u.release);
  EXPECT_EQ(f.arch, u.machine);
  ASSERT_TRUE(f.nrcpus.has_value());
  EXPECT_EQ(f.nrcpus->online, static_cast<std::uint32_t>(::sysconf(_SC_NPROCESSORS_ONLN)));
  ASSERT_TRUE(f.total_mem_kb.has_value());
  EXPECT_GT(*f.total_mem_kb, 0U);
  EXPECT_FALSE(f.version.empty());
  EXPECT_FALSE(f.cpuid.empty());
  ASSERT_FALSE(f.cmdline.empty());
  EXPECT_NE(std::find(f.cmdline.begin(), f.cmdline.end(), "record"), f.cmdline.end());
  EXPECT_TRUE(f.has(Feature::kEventDesc));
  EXPECT_TRUE(f.has(Feature::kTracingData));
  ASSERT_TRUE(reader.tracing_data().has_value());
  EXPECT_NE(reader.tracing_data()->find(reader.events()[0].attr.raw()->config), nullptr);
  ASSERT_TRUE(f.cpu_topology.has_value());
  EXPECT_EQ(f.cpu_topology->cpus.size(), f.nrcpus->available);
  EXPECT_FALSE(f.pmu_mappings.empty());
  ASSERT_TRUE(f.sample_time.has_value());
  EXPECT_LE(f.sample_time->first_ns, f.sample_time->last_ns);
  // Every set bit has a section, and every section of a known feature parsed.
  for (const auto& s : f.sections) {
    if (s.bit != static_cast<std::uint32_t>(Feature::kMemTopology) &&
        s.bit != static_cast<std::uint32_t>(Feature::kBpfProgInfo) &&
        s.bit != static_cast<std::uint32_t>(Feature::kBpfBtf)) {
      EXPECT_TRUE(s.parsed) << feature_name(s.bit);
    }
  }
  // perf's own header dump agrees on the hostname and the event.
  const auto hdr = shell("perf report --header-only -i " + file);
  EXPECT_NE(hdr.out.find("hostname : " + f.hostname), std::string::npos);
  EXPECT_NE(hdr.out.find("name = syscalls:sys_enter_lseek"), std::string::npos);
  EXPECT_FALSE(reader.error());
}

TEST(PerfDataReader, PipeModeFromAFileAndFromAPipe) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file = (dir.path() / "pipe.data").string();
  const std::string rec =
      "perf record -q -e syscalls:sys_enter_lseek -o - -- " + kSyscaller + " lseek 500";
  ASSERT_EQ(shell(rec + " > " + file).exit_code, 0);
  auto reader = open_ok(file);
  EXPECT_TRUE(reader.pipe_mode());
  ASSERT_EQ(reader.events().size(), 1U);
  EXPECT_EQ(reader.events()[0].name, "syscalls:sys_enter_lseek");
  ASSERT_TRUE(reader.events()[0].format.has_value());  // from the TRACING_DATA record
  EXPECT_FALSE(reader.features().hostname.empty());    // from HEADER_FEATURE records
  const auto ours = read_all(reader);
  EXPECT_FALSE(ours.error) << ours.error->describe();
  const auto perfs = perf_script_rows(file);
  expect_same_rows(ours.rows, perfs);

  // The same stream through a real pipe (not seekable, read in chunks).
  FILE* p = ::popen(("cat " + file).c_str(), "r");
  ASSERT_NE(p, nullptr);
  auto piped = Reader::open_fd(::fileno(p), {.pipe_buffer_bytes = 4096});
  ASSERT_TRUE(piped) << piped.error().message;
  EXPECT_TRUE(piped->pipe_mode());
  const auto again = read_all(*piped);
  ::pclose(p);
  EXPECT_FALSE(again.error) << again.error->describe();
  expect_same_rows(again.rows, perfs);
}

TEST(PerfDataReader, SeveralEventsWithSampleIdentifierTimeAndCpu) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file = record(dir, "multi.data",
                           "-e syscalls:sys_enter_lseek,syscalls:sys_enter_getppid "
                           "--sample-identifier -T --sample-cpu -- sh -c '" +
                               kSyscaller + " lseek 300; " + kSyscaller + " getppid 200'");
  ASSERT_FALSE(file.empty());
  auto reader = open_ok(file);
  ASSERT_EQ(reader.events().size(), 2U);
  for (const auto& e : reader.events()) {
    EXPECT_TRUE(e.layout.has(PERF_SAMPLE_IDENTIFIER)) << e.name;
    EXPECT_TRUE(e.layout.has(PERF_SAMPLE_TIME)) << e.name;
    EXPECT_TRUE(e.layout.has(PERF_SAMPLE_CPU)) << e.name;
    for (auto id : e.ids)
      EXPECT_EQ(reader.event_of_id(id), static_cast<std::int32_t>(e.index));
  }
  const auto ours = read_all(reader);
  EXPECT_FALSE(ours.error);
  const auto perfs = perf_script_rows(file);
  std::map<std::string, std::size_t> per_event;
  for (const auto& r : ours.rows)
    ++per_event[r.event];
  EXPECT_EQ(per_event["syscalls:sys_enter_lseek"], 300U);
  EXPECT_GE(per_event["syscalls:sys_enter_getppid"], 200U);  // sh may call it too
  expect_same_rows(ours.rows, perfs);
}

// -F tid,time,ip: a header line per sample, then one address per frame.
std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> perf_script_chains(
    const std::string& file) {
  const auto r = shell("perf script -i " + file + " -F tid,time,ip");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> out;
  static const std::regex head(R"(^\s*\d+\s+(\d+)\.(\d+):\s*$)");
  static const std::regex frame(R"(^\s+([0-9a-f]+)\s*$)");
  std::istringstream in(r.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, head)) {
      out.push_back({std::stoull(m[1]) * 1000000 + std::stoull(m[2]), {}});
    } else if (std::regex_match(l, m, frame) && !out.empty()) {
      out.back().second.push_back(std::stoull(m[1], nullptr, 16));
    }
  }
  return out;
}

TEST(PerfDataReader, CallchainsMatchPerfScript) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "g.data", "-g -e cpu-clock -F 4000 -- " + kSyscaller + " lseek 200000");
  ASSERT_FALSE(file.empty());
  auto reader = open_ok(file);
  ASSERT_EQ(reader.events().size(), 1U);
  EXPECT_TRUE(reader.events()[0].layout.has(PERF_SAMPLE_CALLCHAIN));
  std::vector<std::pair<std::uint64_t, std::vector<std::uint64_t>>> ours;
  Item item;
  while (reader.next(item)) {
    const auto* s = std::get_if<perf::Sample>(&item.record.body);
    if (s == nullptr)
      continue;
    std::vector<std::uint64_t> frames;
    for (std::uint64_t i = 0; i < s->callchain.size; ++i) {
      if (s->callchain[i] < static_cast<std::uint64_t>(PERF_CONTEXT_MAX))  // not a marker
        frames.push_back(s->callchain[i]);
    }
    ours.emplace_back(s->time, std::move(frames));  // ns: perf script's order
  }
  EXPECT_FALSE(reader.error());
  auto perfs = perf_script_chains(file);
  ASSERT_GT(ours.size(), 10U);
  ASSERT_EQ(ours.size(), perfs.size());
  std::sort(ours.begin(), ours.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  // perf script prints kernel addresses as they are and user ones relative to their DSO: kernel
  // frames must agree exactly, and every chain must have as many frames.
  constexpr std::uint64_t kKernelStart = 0xffff800000000000ULL;
  std::size_t kernel_frames = 0;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_EQ(ours[i].first / 1000, perfs[i].first);
    ASSERT_EQ(ours[i].second.size(), perfs[i].second.size()) << "sample " << i;
    for (std::size_t j = 0; j < ours[i].second.size(); ++j) {
      if (ours[i].second[j] >= kKernelStart) {
        EXPECT_EQ(ours[i].second[j], perfs[i].second[j]) << "sample " << i << " frame " << j;
        ++kernel_frames;
      }
    }
  }
  EXPECT_GT(kernel_frames, ours.size());  // lseek spends its time in the kernel
}

TEST(PerfDataReader, DwarfCallGraphCarriesRegistersAndStack) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "dwarf.data",
             "--call-graph dwarf -e cpu-clock -F 2000 -- " + kSyscaller + " lseek 200000");
  ASSERT_FALSE(file.empty());
  auto reader = open_ok(file);
  const auto& l = reader.events()[0].layout;
  EXPECT_TRUE(l.has(PERF_SAMPLE_REGS_USER));
  EXPECT_TRUE(l.has(PERF_SAMPLE_STACK_USER));
  std::size_t samples = 0, with_stack = 0;
  Item item;
  while (reader.next(item)) {
    const auto* s = std::get_if<perf::Sample>(&item.record.body);
    if (s == nullptr)
      continue;
    ++samples;
    if (!s->stack_user.empty() && s->regs_user.abi != 0) {
      ++with_stack;
      EXPECT_EQ(s->regs_user.regs.size, l.regs_user_count);
      EXPECT_LE(s->stack_user_dyn_size, s->stack_user.size());
    }
  }
  EXPECT_FALSE(reader.error());
  const auto perfs = perf_script_chains(file);
  EXPECT_EQ(samples, perfs.size());
  EXPECT_GT(with_stack, samples / 2);  // user-mode samples (the rest hit the kernel)
}

TEST(PerfDataReader, CompressedFileMatchesPerfScript) {
  REQUIRE_PERF();
  TempDir dir;
  // 4 MiB rings per CPU hold the 20000 samples (~2 MiB) even when perf, compressing, is slow to
  // come round on a loaded machine; what it still loses, it says in LOST records.
  const auto file = record(
      dir, "z.data", "-z -m 1024 -e syscalls:sys_enter_lseek -- " + kSyscaller + " lseek 20000");
  if (file.empty())
    GTEST_SKIP() << "perf record -z failed (perf built without zstd?)";
  auto reader = open_ok(file);
  ASSERT_TRUE(reader.features().compressed.has_value());
  EXPECT_EQ(reader.features().compressed->type, 1U);  // zstd
  const auto ours = read_all(reader);
  EXPECT_FALSE(ours.error) << ours.error->describe();
  EXPECT_GT(reader.stats().compressed_records, 0U);
  EXPECT_GT(reader.stats().decompressed_bytes, 0U);
  // Every call is a sample in the file or counted lost by perf; we read exactly what perf
  // script reads.
  const std::size_t calls = program_calls(ours.rows);
  EXPECT_LE(calls, 20000U);
  EXPECT_GE(calls + ours.lost, 20000U) << calls << " samples, " << ours.lost << " lost";
  EXPECT_GT(calls, 0U);
  expect_same_rows(ours.rows, perf_script_rows(file));
}

TEST(PerfDataReader, StatRecordCountersMatchPerfScript) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file = (dir.path() / "stat.data").string();
  const auto r = shell("perf stat record -e task-clock,context-switches -o " + file + " -- " +
                       kSyscaller + " lseek 1000 2>/dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto reader = open_ok(file);
  ASSERT_EQ(reader.events().size(), 2U);
  EXPECT_EQ(reader.events()[0].name, "task-clock");
  EXPECT_EQ(reader.events()[1].name, "context-switches");
  std::map<std::string, std::uint64_t> ours;
  std::size_t rounds = 0, configs = 0, thread_maps = 0;
  Item item;
  while (reader.next(item)) {
    if (const auto* s = std::get_if<Stat>(&item.user)) {
      const auto idx = reader.event_of_id(s->id);
      ASSERT_GE(idx, 0);
      ours[reader.events()[static_cast<std::size_t>(idx)].name] = s->val;
    }
    rounds += std::holds_alternative<StatRound>(item.user) ? 1 : 0;
    configs += std::holds_alternative<StatConfig>(item.user) ? 1 : 0;
    thread_maps += std::holds_alternative<ThreadMap>(item.user) ? 1 : 0;
  }
  EXPECT_FALSE(reader.error());
  EXPECT_EQ(rounds, 1U);
  EXPECT_EQ(configs, 1U);
  EXPECT_EQ(thread_maps, 1U);
  // perf script: "CPU THREAD VAL ENA RUN TIME EVENT" lines.
  const auto ps = shell("perf script -i " + file);
  std::map<std::string, std::uint64_t> perfs;
  static const std::regex line(R"(^\s*-?\d+\s+\d+\s+(\d+)\s+\d+\s+\d+\s+\d+\s+(\S+)\s*$)");
  std::istringstream in(ps.out);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line))
      perfs[m[2]] = std::stoull(m[1]);
  }
  EXPECT_EQ(ours, perfs);
  EXPECT_GT(ours["task-clock"], 0U);
}

// ---------------------------------------------------------------------------------------------
// A byte-swapped file, made here independently of the reader's own swapping code: the header,
// the attrs and ids, HOSTNAME/EVENT_DESC/TRACING_DATA features, and the data section with its
// SAMPLE/COMM/EXIT/FORK/FINISHED_ROUND records (other records are left out).

template <typename T>
T get(const std::vector<std::byte>& b, std::size_t off) {
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}
template <typename T>
void put_swapped(std::vector<std::byte>& out, T v) {
  v = std::byteswap(v);
  const auto* p = reinterpret_cast<const std::byte*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void put_bytes(std::vector<std::byte>& out, const std::byte* p, std::size_t n) {
  out.insert(out.end(), p, p + n);
}

// perf_event_attr, field by field (include/uapi/linux/perf_event.h), flags bit-reversed per byte.
void put_attr_swapped(std::vector<std::byte>& out, const std::byte* a, std::uint32_t size) {
  static constexpr std::pair<int, int> kFields[] = {
      {0, 4},   {4, 4},   {8, 8},   {16, 8},  {24, 8},  {32, 8},  {40, 0}, {48, 4},
      {52, 4},  {56, 8},  {64, 8},  {72, 8},  {80, 8},  {88, 4},  {92, 4}, {96, 8},
      {104, 4}, {108, 2}, {110, 2}, {112, 4}, {116, 4}, {120, 8}, {128, 8}};
  for (const auto& [off, width] : kFields) {
    if (static_cast<std::uint32_t>(off) >= size)
      break;
    const std::byte* p = a + off;
    if (width == 0) {  // the bit-field word
      for (int i = 0; i < 8; ++i) {
        auto b = static_cast<std::uint8_t>(p[i]);
        std::uint8_t r = 0;
        for (int k = 0; k < 8; ++k)
          r = static_cast<std::uint8_t>(r | (((b >> k) & 1U) << (7 - k)));
        out.push_back(static_cast<std::byte>(r));
      }
    } else if (width == 2) {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      put_swapped(out, v);
    } else if (width == 4) {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      put_swapped(out, v);
    } else {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      put_swapped(out, v);
    }
  }
}

struct Swapped {
  std::vector<std::byte> bytes;
  std::size_t samples = 0;
};

Swapped byte_swap_file(const std::vector<std::byte>& in, const tracefs::Format& format) {
  Swapped s;
  auto& out = s.bytes;
  const auto attr_size = get<std::uint64_t>(in, 16);
  const auto attrs_off = get<std::uint64_t>(in, 24), attrs_size = get<std::uint64_t>(in, 32);
  const auto data_off = get<std::uint64_t>(in, 40), data_size = get<std::uint64_t>(in, 48);
  const auto features = get<std::uint64_t>(in, 72);
  EXPECT_EQ(attrs_size, attr_size) << "one attr expected";
  const auto asz = get<std::uint32_t>(in, attrs_off + 4);
  const auto sample_type = get<std::uint64_t>(in, attrs_off + 24);
  EXPECT_EQ(sample_type & ~std::uint64_t{PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                                         PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_RAW},
            0U);
  const auto ids_off = get<std::uint64_t>(in, attrs_off + asz);
  const auto ids_size = get<std::uint64_t>(in, attrs_off + asz + 8);
  const bool id_all = (get<std::uint64_t>(in, attrs_off + 40) >> 18 & 1U) != 0;

  // Layout: header | attr entry | ids | data | feature table | features.
  const std::uint64_t new_attrs = 104, new_ids = new_attrs + attr_size;
  const std::uint64_t new_data = new_ids + ids_size;
  std::vector<std::byte> data;
  std::uint64_t pos = data_off;
  auto trailer = [&](std::vector<std::byte>& o, std::uint64_t p) {
    // sample_id: TID (u32 pid, tid), TIME, CPU (u32 cpu, res) for this sample_type.
    put_swapped(o, get<std::uint32_t>(in, p));
    put_swapped(o, get<std::uint32_t>(in, p + 4));
    put_swapped(o, get<std::uint64_t>(in, p + 8));
    put_swapped(o, get<std::uint32_t>(in, p + 16));
    put_swapped(o, get<std::uint32_t>(in, p + 20));
  };
  const std::uint64_t tsz = id_all ? 24 : 0;
  while (pos < data_off + data_size) {
    const auto type = get<std::uint32_t>(in, pos);
    const auto misc = get<std::uint16_t>(in, pos + 4);
    const auto size = get<std::uint16_t>(in, pos + 6);
    const auto hdr = [&] {
      put_swapped(data, type);
      put_swapped(data, misc);
      put_swapped(data, size);
    };
    const std::uint64_t b = pos + 8;
    if (type == PERF_RECORD_SAMPLE) {
      hdr();
      put_swapped(data, get<std::uint64_t>(in, b));      // ip
      put_swapped(data, get<std::uint32_t>(in, b + 8));  // pid
      put_swapped(data, get<std::uint32_t>(in, b + 12));
      put_swapped(data, get<std::uint64_t>(in, b + 16));  // time
      put_swapped(data, get<std::uint32_t>(in, b + 24));  // cpu
      put_swapped(data, get<std::uint32_t>(in, b + 28));
      put_swapped(data, get<std::uint64_t>(in, b + 32));  // period
      const auto raw_size = get<std::uint32_t>(in, b + 40);
      put_swapped(data, raw_size);
      std::vector<std::byte> raw(in.begin() + static_cast<std::ptrdiff_t>(b + 44),
                                 in.begin() + static_cast<std::ptrdiff_t>(pos + size));
      for (const auto& f : format.fields) {
        const std::uint32_t w = f.size;
        if (f.is_string || f.array_len || (w != 2 && w != 4 && w != 8))
          continue;
        std::reverse(raw.begin() + f.offset, raw.begin() + f.offset + w);
      }
      put_bytes(data, raw.data(), raw.size());
      ++s.samples;
    } else if (type == PERF_RECORD_COMM) {
      hdr();
      put_swapped(data, get<std::uint32_t>(in, b));
      put_swapped(data, get<std::uint32_t>(in, b + 4));
      put_bytes(data, in.data() + b + 8, size - 16 - tsz);
      if (tsz != 0)
        trailer(data, pos + size - tsz);
    } else if (type == PERF_RECORD_EXIT || type == PERF_RECORD_FORK) {
      hdr();
      for (int i = 0; i < 4; ++i)
        put_swapped(data, get<std::uint32_t>(in, b + std::uint64_t{4} * i));
      put_swapped(data, get<std::uint64_t>(in, b + 16));
      if (tsz != 0)
        trailer(data, pos + size - tsz);
    } else if (type == 68) {  // FINISHED_ROUND
      hdr();
    }
    pos += size;
  }

  // Features: keep HOSTNAME (3), EVENT_DESC (12) and TRACING_DATA (1).
  std::vector<std::pair<int, std::vector<std::byte>>> feats;
  std::uint64_t table = data_off + data_size;
  for (int bit = 0; bit < 64; ++bit) {
    if ((features >> bit & 1U) == 0)
      continue;
    const auto off = get<std::uint64_t>(in, table), sz = get<std::uint64_t>(in, table + 8);
    table += 16;
    std::vector<std::byte> f;
    if (bit == 3) {
      put_swapped(f, get<std::uint32_t>(in, off));
      put_bytes(f, in.data() + off + 4, sz - 4);
    } else if (bit == 12) {
      const auto nre = get<std::uint32_t>(in, off), esz = get<std::uint32_t>(in, off + 4);
      put_swapped(f, nre);
      put_swapped(f, esz);
      std::uint64_t p = off + 8;
      for (std::uint32_t i = 0; i < nre; ++i) {
        put_attr_swapped(f, in.data() + p, esz);
        p += esz;
        const auto nr_ids = get<std::uint32_t>(in, p);
        put_swapped(f, nr_ids);
        const auto len = get<std::uint32_t>(in, p + 4);
        put_swapped(f, len);
        put_bytes(f, in.data() + p + 8, len);
        p += 8 + len;
        for (std::uint32_t j = 0; j < nr_ids; ++j, p += 8)
          put_swapped(f, get<std::uint64_t>(in, p));
      }
    } else if (bit == 1) {
      std::uint64_t p = off;
      const auto copy = [&](std::size_t n) {
        put_bytes(f, in.data() + p, n);
        p += n;
      };
      const auto u32 = [&] {
        const auto v = get<std::uint32_t>(in, p);
        put_swapped(f, v);
        p += 4;
        return v;
      };
      const auto u64 = [&] {
        const auto v = get<std::uint64_t>(in, p);
        put_swapped(f, v);
        p += 8;
        return v;
      };
      copy(10);  // magic
      while (in[p] != std::byte{0})
        copy(1);
      copy(1);                    // version
      f.push_back(std::byte{1});  // big endian now
      ++p;
      copy(1);  // long size
      u32();    // page size
      copy(12);
      copy(u64());  // header_page
      copy(13);
      copy(u64());  // header_event
      for (auto n = u32(); n > 0; --n)
        copy(u64());
      for (auto sys = u32(); sys > 0; --sys) {
        while (in[p] != std::byte{0})
          copy(1);
        copy(1);
        for (auto n = u32(); n > 0; --n)
          copy(u64());
      }
      copy(u32());  // kallsyms
      copy(u32());  // printk
      copy(u64());  // saved cmdlines
      copy(off + sz - p);
    } else {
      continue;
    }
    feats.emplace_back(bit, std::move(f));
  }

  std::uint64_t new_features = 0;
  for (const auto& [bit, f] : feats)
    new_features |= std::uint64_t{1} << bit;
  const std::uint64_t table_off = new_data + data.size();
  put_swapped(out, get<std::uint64_t>(in, 0));  // magic: "PERFILE2" read backwards
  put_swapped(out, std::uint64_t{104});
  put_swapped(out, attr_size);
  put_swapped(out, new_attrs);
  put_swapped(out, attr_size);
  put_swapped(out, new_data);
  put_swapped(out, static_cast<std::uint64_t>(data.size()));
  put_swapped(out, std::uint64_t{0});
  put_swapped(out, std::uint64_t{0});
  put_swapped(out, new_features);
  for (int i = 0; i < 3; ++i)
    put_swapped(out, std::uint64_t{0});
  put_attr_swapped(out, in.data() + attrs_off, asz);
  put_swapped(out, new_ids);
  put_swapped(out, ids_size);
  for (std::uint64_t i = 0; i < ids_size; i += 8)
    put_swapped(out, get<std::uint64_t>(in, ids_off + i));
  put_bytes(out, data.data(), data.size());
  std::uint64_t foff = table_off + feats.size() * 16;
  for (const auto& [bit, f] : feats) {
    put_swapped(out, foff);
    put_swapped(out, static_cast<std::uint64_t>(f.size()));
    foff += f.size();
  }
  for (const auto& [bit, f] : feats)
    put_bytes(out, f.data(), f.size());
  return s;
}

TEST(PerfDataReader, ByteSwappedFileReadsLikeTheOriginal) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "native.data", "-e syscalls:sys_enter_lseek -- " + kSyscaller + " lseek 400");
  ASSERT_FALSE(file.empty());
  auto native = open_ok(file);
  ASSERT_TRUE(native.events()[0].format.has_value());
  const auto bytes = testing::read_file(file);
  const auto swapped = byte_swap_file(bytes, *native.events()[0].format);
  ASSERT_GT(swapped.samples, 0U);
  const auto swapped_path = dir.path() / "swapped.data";
  testing::write_file(swapped_path, swapped.bytes);

  auto other = open_ok(swapped_path);
  EXPECT_TRUE(other.swapped());
  EXPECT_EQ(other.features().hostname, native.features().hostname);
  ASSERT_EQ(other.events().size(), 1U);
  EXPECT_EQ(other.events()[0].name, "syscalls:sys_enter_lseek");
  EXPECT_EQ(other.events()[0].ids, native.events()[0].ids);
  EXPECT_EQ(other.events()[0].layout.sample_type, native.events()[0].layout.sample_type);
  EXPECT_TRUE(other.events()[0].attr.has(perf::Flag::kSampleIdAll));
  EXPECT_EQ(other.events()[0].attr.has(perf::Flag::kDisabled),
            native.events()[0].attr.has(perf::Flag::kDisabled));
  ASSERT_TRUE(other.tracing_data().has_value());
  EXPECT_TRUE(other.tracing_data()->big_endian);
  ASSERT_TRUE(other.events()[0].format.has_value());

  const auto a = read_all(native), b = read_all(other);
  EXPECT_FALSE(b.error) << b.error->describe();
  ASSERT_EQ(b.rows.size(), swapped.samples);
  expect_same_rows(b.rows, a.rows);
  std::size_t mine = 0;
  for (const auto& r : b.rows)
    mine += r.fields.at("fd") == 12345 && r.fields.at("whence") == 1 ? 1 : 0;
  EXPECT_EQ(mine, 400U);
}

// ---------------------------------------------------------------------------------------------
// Damaged files: an error that names the offset, every record before it delivered, no overread
// (the bytes are an exact-size copy, so ASan catches any).

struct Damage {
  std::vector<std::byte> bytes;
  std::uint64_t data_off = 0, data_end = 0;
  std::vector<std::uint64_t> record_offsets;  // of the intact file
};

Damage damage_base(const std::string& file) {
  Damage d;
  d.bytes = testing::read_file(file);
  d.data_off = get<std::uint64_t>(d.bytes, 40);
  d.data_end = d.data_off + get<std::uint64_t>(d.bytes, 48);
  auto r = Reader::from_bytes(d.bytes);
  EXPECT_TRUE(r);
  const auto all = read_all(*r);
  EXPECT_FALSE(all.error);
  d.record_offsets = all.offsets;
  return d;
}

ReadAll read_bytes(const std::vector<std::byte>& bytes, std::string* open_error = nullptr) {
  auto r = Reader::from_bytes(bytes);
  if (!r) {
    if (open_error != nullptr)
      *open_error = r.error().message;
    return {};
  }
  return read_all(*r);
}

TEST(PerfDataReader, DamagedFilesReportTheOffsetAndKeepWhatCameBefore) {
  REQUIRE_PERF();
  TempDir dir;
  const auto file =
      record(dir, "d.data", "-e syscalls:sys_enter_lseek -- " + kSyscaller + " lseek 200");
  ASSERT_FALSE(file.empty());
  const auto d = damage_base(file);
  ASSERT_GT(d.record_offsets.size(), 100U);

  {  // Cut inside the header.
    std::vector<std::byte> cut(d.bytes.begin(), d.bytes.begin() + 60);
    std::string err;
    EXPECT_EQ(read_bytes(cut, &err).records, 0U);
    EXPECT_NE(err.find("offset 60"), std::string::npos) << err;
  }
  {  // Cut in the feature area: every record is there, then the error.
    std::vector<std::byte> cut(d.bytes.begin(),
                               d.bytes.begin() + static_cast<std::ptrdiff_t>(d.data_end + 20));
    const auto r = read_bytes(cut);
    EXPECT_EQ(r.records, d.record_offsets.size());
    ASSERT_TRUE(r.error);
    // The first feature's section entry (at the end of the data) points past the new end.
    EXPECT_EQ(r.error->offset, d.data_end);
    EXPECT_NE(r.error->message.find("feature"), std::string::npos) << r.error->message;
  }
  {  // Cut inside the 50th record.
    const auto at = d.record_offsets[50] + 5;
    std::vector<std::byte> cut(d.bytes.begin(), d.bytes.begin() + static_cast<std::ptrdiff_t>(at));
    const auto r = read_bytes(cut);
    EXPECT_EQ(r.records, 50U);
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->offset, d.record_offsets[50]);
    EXPECT_NE(r.error->message.find("truncated"), std::string::npos) << r.error->message;
  }
  {  // A record whose size was zeroed.
    auto bad = d.bytes;
    const auto at = d.record_offsets[70];
    bad[at + 6] = std::byte{0};
    bad[at + 7] = std::byte{0};
    const auto r = read_bytes(bad);
    EXPECT_EQ(r.records, 70U);
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->offset, at);
    EXPECT_NE(r.error->message.find("size 0"), std::string::npos) << r.error->message;
  }
  {  // A sample whose RAW size runs past the record.
    auto bad = d.bytes;
    std::uint64_t at = 0;
    for (auto off : d.record_offsets) {
      if (get<std::uint32_t>(bad, off) == PERF_RECORD_SAMPLE && off > d.record_offsets[80]) {
        at = off;
        break;
      }
    }
    ASSERT_NE(at, 0U);
    const std::uint32_t huge = 0xffff;
    std::memcpy(bad.data() + at + 8 + 40, &huge, 4);  // ip tid time cpu period, then raw size
    const auto r = read_bytes(bad);
    ASSERT_TRUE(r.error);
    EXPECT_EQ(r.error->offset, at);
    EXPECT_NE(r.error->message.find("does not decode"), std::string::npos) << r.error->message;
    EXPECT_EQ(r.records, static_cast<std::uint64_t>(
                             std::find(d.record_offsets.begin(), d.record_offsets.end(), at) -
                             d.record_offsets.begin()));
  }
  {  // The data section claims more than the file has.
    auto bad = d.bytes;
    const std::uint64_t data_size = bad.size() * 2;
    std::memcpy(bad.data() + 48, &data_size, 8);
    const auto r = read_bytes(bad);
    ASSERT_TRUE(r.error);
    EXPECT_GE(r.records, d.record_offsets.size());
  }
  // Flipped bytes anywhere: never a crash or an overread, and an error always names an offset
  // inside the file.
  for (std::size_t i = 0; i < 3000; ++i) {
    auto bad = d.bytes;
    const std::size_t at = (i * 7919) % bad.size();
    bad[at] ^= static_cast<std::byte>(1U << (i % 8));
    const auto r = read_bytes(bad);
    if (r.error) {
      EXPECT_LE(r.error->offset, bad.size()) << "flip at " << at;
    }
  }
}

TEST(PerfDataReader, NotAPerfDataFile) {
  std::vector<std::byte> junk(200, std::byte{0x41});
  auto r = Reader::from_bytes(junk);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("offset 0"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("magic"), std::string::npos) << r.error().message;
  auto missing = Reader::open("/nonexistent/perf.data");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
}

}  // namespace
}  // namespace tracer::perfdata

namespace {

// perf record's build-id cache: ~/.debug/.build-id/ab/cdef.../kallsyms for the build-id the file
// lists for [kernel.kallsyms] ($PERF_BUILDID_DIR first).
TEST(PerfDataReader, CachedKallsymsIsFoundByTheKernelBuildId) {
  tracer::testing::TempDir dir;
  tracer::perfdata::Features f;
  f.build_ids.push_back({.build_id = "ab12cd", .filename = "/usr/lib/libc.so.6"});
  f.build_ids.push_back({.build_id = "4a5a9b", .filename = "[kernel.kallsyms]"});
  ::setenv("PERF_BUILDID_DIR", dir.path().c_str(), 1);
  EXPECT_EQ(tracer::perfdata::cached_kallsyms(f), std::filesystem::path());  // not cached
  std::filesystem::create_directories(dir.path() / ".build-id" / "4a" / "5a9b");
  std::ofstream(dir.path() / ".build-id" / "4a" / "5a9b" / "kallsyms") << "0 T _text\n";
  EXPECT_EQ(tracer::perfdata::cached_kallsyms(f),
            dir.path() / ".build-id" / "4a" / "5a9b" / "kallsyms");
  f.build_ids.pop_back();
  EXPECT_EQ(tracer::perfdata::cached_kallsyms(f), std::filesystem::path());  // no kernel build-id
  ::unsetenv("PERF_BUILDID_DIR");
}

}  // namespace
