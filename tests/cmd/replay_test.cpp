// tracer replay end to end: files recorded here by perf, replayed by the CLI as a user runs it.
#include <fmt/core.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "support/perf_tool.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace {

namespace fs = std::filesystem;
using tracer::testing::shell;

using tracer::testing::kSyscaller;
using tracer::testing::kTracer;
const std::string kBusyLoop = TRACER_BUSY_LOOP;

std::string record_lseek(const tracer::testing::TempDir& dir, int calls, bool pipe = false) {
  const auto file = (dir.path() / (pipe ? "pipe.data" : "lseek.data")).string();
  const std::string cmd = "perf record -q -e syscalls:sys_enter_lseek -o " +
                          (pipe ? std::string("- ") : file + " ") + "-- " + kSyscaller + " lseek " +
                          std::to_string(calls) + (pipe ? " > " + file : "");
  EXPECT_EQ(shell(cmd).exit_code, 0);
  return file;
}

fs::path write_recipe(const tracer::testing::TempDir& dir, const std::string& text) {
  const auto p = dir.path() / "recipe.toml";
  std::ofstream(p) << text;
  return p;
}

const char* kCountRecipe = R"([recipe]
name = "lseek"
[[probe]]
name = "seeks"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["comm"]
)";

using Key = std::tuple<std::uint32_t, std::uint32_t, std::string>;  // tid, cpu, time

std::multiset<Key> keys(const std::string& text) {
  static const std::regex line(R"(^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+(\d+\.\d+):\s+(.+)$)");
  std::multiset<Key> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (std::regex_match(l, m, line)) {
      out.emplace(static_cast<std::uint32_t>(std::stoul(m[2])),
                  static_cast<std::uint32_t>(std::stoul(m[3])), m[4]);
    }
  }
  return out;
}

TEST(CliReplay, PrintsLikePerfScript) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 700);
  const auto ours = shell(kTracer + " replay " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const auto perfs = shell("perf script -i " + file + " -F comm,tid,cpu,time,event");
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto a = keys(ours.out), b = keys(perfs.out);
  EXPECT_EQ(a.size(), 700U);
  EXPECT_EQ(a, b);
  // Fields by name, decoded with the file's own format.
  EXPECT_NE(ours.out.find("syscalls:sys_enter_lseek: __syscall_nr=8 fd=12345 offset=699 whence=1"),
            std::string::npos);
  EXPECT_NE(ours.out.find("tracer_test_sys"), std::string::npos);
}

TEST(CliReplay, RecipeCountsTheRecordedEventsFromAFileAndFromStdin) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto recipe = write_recipe(dir, kCountRecipe);
  const auto file = record_lseek(dir, 1234);
  const std::regex count(R"re("keys":\{"comm":"tracer_test_sys"\},"count":1234\})re");
  const auto r = shell(kTracer + " replay " + file + " " + recipe.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, count)) << r.out;

  const auto pipe_file = record_lseek(dir, 1234, /*pipe=*/true);
  const auto p =
      shell("cat " + pipe_file + " | " + kTracer + " replay - " + recipe.string() + " --json");
  ASSERT_EQ(p.exit_code, 0) << p.err;
  EXPECT_TRUE(std::regex_search(p.out, count)) << p.out;
}

TEST(CliReplay, RecipeProbeAbsentFromTheFileIsAUsageError) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 10);
  const auto recipe = write_recipe(dir, R"([recipe]
name = "x"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
)");
  const auto r = shell(kTracer + " replay " + file + " " + recipe.string());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("'getppid' (tracepoint syscalls:sys_enter_getppid) not in"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the file has: syscalls:sys_enter_lseek"), std::string::npos) << r.err;
}

TEST(CliReplay, DamagedFilePrintsWhatWasReadThenTheOffset) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 300);
  auto bytes = tracer::testing::read_file(file);
  ASSERT_GE(bytes.size(), 56U);
  std::uint64_t data_off = 0, data_size = 0;
  std::memcpy(&data_off, bytes.data() + 40, 8);
  std::memcpy(&data_size, bytes.data() + 48, 8);
  ASSERT_LE(data_off + data_size, bytes.size());
  const std::uint64_t cut_at = data_off + data_size / 2 + 3;
  // What the file holds before the cut, from its own record headers (perf_event_header: u32
  // type, u16 misc, u16 size): the samples that end before it, and the record it cuts. A loaded
  // machine changes how perf interleaves records, not this count.
  std::size_t samples_before = 0, samples_total = 0;
  std::uint64_t cut_record = 0;
  for (std::uint64_t off = data_off; off + 8 <= data_off + data_size;) {
    std::uint32_t type = 0;
    std::uint16_t size = 0;
    std::memcpy(&type, bytes.data() + off, 4);
    std::memcpy(&size, bytes.data() + off + 6, 2);
    ASSERT_GE(size, 8U) << "record at " << off;
    if (type == 9 /* PERF_RECORD_SAMPLE */) {
      ++samples_total;
      if (off + size <= cut_at)
        ++samples_before;
    }
    if (off < cut_at && off + size > cut_at)
      cut_record = off;
    off += size;
  }
  ASSERT_GT(samples_total, 0U);
  EXPECT_LE(samples_total, 300U);
  ASSERT_GT(cut_record, 0U);
  bytes.resize(cut_at);  // cut inside a record
  const auto cut = dir.path() / "cut.data";
  tracer::testing::write_file(cut, bytes);
  const auto r = shell(kTracer + " replay " + cut.string());
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(keys(r.out).size(), samples_before) << r.out;  // every sample before the cut
  EXPECT_GT(samples_before, 0U);
  EXPECT_LT(samples_before, samples_total);
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(fmt::format(R"(cut\.data: offset {} \(0x{:x}\): )", cut_record, cut_record))))
      << r.err << " (the cut record starts at " << cut_record << ")";
  const auto missing = shell(kTracer + " replay " + (dir.path() / "nope.data").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("No such file"), std::string::npos) << missing.err;
}

// ---------------------------------------------------------------------------------------------
// perf script agreement (tracer replay --perf): every line compared with what perf script
// itself prints from the same file, so losses of perf record on a busy machine do not matter.

std::vector<std::string> script_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    while (!l.empty() && l.back() == ' ')
      l.pop_back();  // perf pads some tracepoint lines with a trailing blank
    out.push_back(l);
  }
  return out;
}

/// The first line where `ours` and `perfs` differ ("" when none), with the count of equal ones.
std::string first_difference(const std::vector<std::string>& ours,
                             const std::vector<std::string>& perfs) {
  std::size_t same = 0;
  for (std::size_t i = 0; i < std::min(ours.size(), perfs.size()); ++i) {
    if (ours[i] != perfs[i]) {
      return "line " + std::to_string(i + 1) + " (after " + std::to_string(same) +
             " equal):\n  tracer: '" + ours[i] + "'\n  perf:   '" + perfs[i] + "'";
    }
    ++same;
  }
  if (ours.size() != perfs.size()) {
    return std::to_string(ours.size()) + " lines from tracer, " + std::to_string(perfs.size()) +
           " from perf script (the first " + std::to_string(same) + " equal)";
  }
  return {};
}

/// "  1234.567890:" of a perf script line, as nanoseconds/1000 (microseconds).
std::uint64_t time_us(const std::string& line) {
  static const std::regex t(R"((\d+)\.(\d{6}):)");
  std::smatch m;
  if (!std::regex_search(line, m, t))
    return 0;
  return std::stoull(m[1]) * 1000000 + std::stoull(m[2]);
}

void expect_time_order(const std::vector<std::string>& lines) {
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto t = time_us(lines[i]);
    ASSERT_GE(t, last) << "line " << i + 1 << " goes back in time: " << lines[i];
    last = t;
  }
}

struct RecordAt {
  std::uint64_t offset = 0;
  std::uint32_t type = 0;
  std::uint16_t size = 0;
};

/// The records of a file-mode perf.data's data section (or of a pipe-mode stream after its
/// 16-byte header), by walking their headers.
std::vector<RecordAt> records_of(const std::vector<std::byte>& b, bool pipe = false) {
  std::uint64_t off = 16, end = b.size();
  if (!pipe) {
    std::memcpy(&off, b.data() + 40, 8);
    std::uint64_t size = 0;
    std::memcpy(&size, b.data() + 48, 8);
    end = off + size;
  }
  std::vector<RecordAt> out;
  while (off + 8 <= end) {
    RecordAt r;
    r.offset = off;
    std::memcpy(&r.type, b.data() + off, 4);
    std::memcpy(&r.size, b.data() + off + 6, 2);
    if (r.size < 8)
      break;
    out.push_back(r);
    std::uint64_t extra = 0;
    if (r.type == 66)  // HEADER_TRACING_DATA: its payload follows the record
      std::memcpy(&extra, b.data() + off + 8, 4);
    off += r.size + extra;
  }
  return out;
}

/// The PERF_RECORD_SAMPLEs among records_of(b, pipe), in file order.
std::vector<RecordAt> samples_of(const std::vector<std::byte>& b, bool pipe = false) {
  std::vector<RecordAt> out;
  for (const auto& r : records_of(b, pipe)) {
    if (r.type == 9 /* PERF_RECORD_SAMPLE */)
      out.push_back(r);
  }
  return out;
}

// Samples a damaged attr or record cannot describe are errors at their offset, never invented
// lines with exit 0: a zeroed HEADER_ATTR in a pipe stream (size 0 reads as VER0, type 0 config 0
// as "cycles", sample_type 0: every getppid sample printed as a `cycles` line of swapper), and a
// sample naming a CPU the recording's machine did not have (HEADER_NRCPUS; 13,369,345 was
// printed for a 2-CPU recording).
TEST(CliReplay, SamplesTheirAttrCannotDescribeAreErrorsAtTheirOffset) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  {
    const auto pipe = record_lseek(dir, 30, /*pipe=*/true);
    auto bytes = tracer::testing::read_file(pipe);
    const auto recs = records_of(bytes, /*pipe=*/true);
    ASSERT_FALSE(recs.empty());
    ASSERT_EQ(recs.front().type, 64U);  // HEADER_ATTR
    std::memset(bytes.data() + recs.front().offset + 8, 0, recs.front().size - 8);
    const auto samples = samples_of(bytes, /*pipe=*/true);
    ASSERT_FALSE(samples.empty());
    const std::uint64_t first_sample = samples.front().offset;
    const auto damaged = dir.path() / "zero-attr.data";
    tracer::testing::write_file(damaged, bytes);
    const auto r = shell(kTracer + " replay --perf " + damaged.string());
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_NE(r.err.find(fmt::format("offset {}", first_sample)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("longer than the fields its sample_type describes"), std::string::npos)
        << r.err;
    EXPECT_EQ(r.out.find("cycles"), std::string::npos) << r.out;
  }
  {
    const auto file = record_lseek(dir, 30);
    auto bytes = tracer::testing::read_file(file);
    std::uint64_t attrs_off = 0;
    std::memcpy(&attrs_off, bytes.data() + 24, 8);
    std::uint64_t sample_type = 0;  // perf_event_attr: type, size, config, sample_period, here
    std::memcpy(&sample_type, bytes.data() + attrs_off + 24, 8);
    ASSERT_NE(sample_type & PERF_SAMPLE_CPU, 0U) << "perf record samples a tracepoint's CPU";
    // The CPU word follows IDENTIFIER, IP, TID, TIME, ADDR, ID and STREAM_ID (perf_output_sample).
    const std::size_t before_cpu =
        std::popcount(sample_type & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                                     PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_ID |
                                     PERF_SAMPLE_STREAM_ID));
    const auto samples = samples_of(bytes);
    ASSERT_GE(samples.size(), 30U);
    const auto& victim = samples[10];
    const std::uint32_t cpu = 13369345;
    std::memcpy(bytes.data() + victim.offset + 8 + (8 * before_cpu), &cpu, 4);
    const auto damaged = dir.path() / "cpu.data";
    tracer::testing::write_file(damaged, bytes);
    const auto r = shell(kTracer + " replay --perf " + damaged.string());
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find(fmt::format("offset {}", victim.offset)), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("names CPU 13369345"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("13369345"), std::string::npos);
    EXPECT_EQ(script_lines(r.out).size(), 10U) << "the samples before it are printed";
  }
}

TEST(CliReplay, SystemWideSchedSwitchMatchesPerfScriptLineByLineInTimeOrder) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "switch.data").string();
  ASSERT_EQ(shell("perf record -q -a -e sched:sched_switch -o " + file + " -- sleep 1").exit_code,
            0);
  const auto perfs = shell("perf script -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay --perf " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  EXPECT_EQ(ours.err, "");
  const auto a = script_lines(ours.out), b = script_lines(perfs.out);
  EXPECT_GT(b.size(), 10U);
  EXPECT_EQ(first_difference(a, b), "");
  expect_time_order(a);
  // Both CPUs and the print fmt's flags (prev_state) evaluated.
  EXPECT_NE(ours.out.find("[000]"), std::string::npos);
  EXPECT_NE(ours.out.find("[001]"), std::string::npos);
  // The idle task (tid 0) is "swapper" as in perf, when the machine was idle at all.
  if (perfs.out.find(" swapper     0 ") != std::string::npos) {
    EXPECT_NE(ours.out.find(" swapper     0 "), std::string::npos);
  }
  // No unresolved thread ("comm:-1") of ours: perf prints one only for a thread that exited
  // while recording (another process's, on a busy machine), and then so do we (the lines match).
  if (perfs.out.find(":-1") == std::string::npos) {
    EXPECT_EQ(ours.out.find(":-1"), std::string::npos);
  }
  EXPECT_TRUE(std::regex_search(ours.out, std::regex(R"(prev_state=[RSDI])")));
  // The default print is in time order too, with comms at the sample's time.
  const auto plain = shell(kTracer + " replay " + file);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  expect_time_order(script_lines(plain.out));
  EXPECT_EQ(keys(plain.out), keys(perfs.out));
}

/// `ours` and `perfs` with every frame perf prints as "(inlined)" (or a PLT stub perf names
/// after _init) cut to its address on both sides: perf names the outer function of an address with
/// inline information after its DWARF subprogram (and calls it inlined when that name is not the
/// symbol table's, e.g. libc's
/// __libc_start_main_impl for __libc_start_main@@GLIBC_2.34); tracer after the symbol table.
void cut_inlined(std::vector<std::string>& ours, std::vector<std::string>& perfs) {
  const auto address = [](const std::string& l) {
    const auto at = l.find_first_not_of(" \t");
    return l.substr(0, l.find(' ', at == std::string::npos ? 0 : at));
  };
  for (std::size_t i = 0; i < std::min(ours.size(), perfs.size()); ++i) {
    // perf 6.1 names a PLT stub of these test binaries after the symbol before it ("_init+0x30"
    // for clock_gettime@plt: it synthesizes no PLT symbols for them); tracer names the stub.
    const bool plt = ours[i].find("@plt+0x") != std::string::npos &&
                     perfs[i].find(" _init+0x") != std::string::npos;
    if (perfs[i].ends_with(" (inlined)") || plt) {
      perfs[i] = address(perfs[i]);
      ours[i] = address(ours[i]);
    }
  }
}

/// Both outputs without the samples perf puts a frame of in the dynamic loader (the startup and
/// lazy binding, not the program's own code) or the vDSO: tracer's DWARF unwind of those differs
/// from perf's (`_start+0x7` where perf says `_dl_start+0x55b`; a `[vdso]` leaf that tracer names
/// as libc's `clock_gettime`), rare samples that made the tests flaky under load, and a known
/// difference noted on the issue. The tests compare the program's samples. The samples are in
/// the same order in both (the same file): a sample is dropped from both or from neither.
void drop_loader_and_vdso_samples(std::vector<std::string>& ours, std::vector<std::string>& perfs) {
  const auto blocks = [](const std::vector<std::string>& lines) {
    std::vector<std::vector<std::string>> out;
    for (const auto& l : lines) {
      if ((!l.empty() && l[0] != '\t') || out.empty())
        out.emplace_back();
      out.back().push_back(l);
    }
    return out;
  };
  auto a = blocks(ours), b = blocks(perfs);
  if (a.size() != b.size())
    return;  // compared as they are: the difference shows
  ours.clear();
  perfs.clear();
  for (std::size_t i = 0; i < a.size(); ++i) {
    const bool skip = std::any_of(b[i].begin() + 1, b[i].end(), [](const std::string& l) {
      return l.find("/ld-linux") != std::string::npos || l.find("([vdso])") != std::string::npos;
    });
    if (skip)
      continue;
    ours.insert(ours.end(), a[i].begin(), a[i].end());
    perfs.insert(perfs.end(), b[i].begin(), b[i].end());
  }
}

/// Samples (header lines) of a perf script text, and those whose frames include `frame`.
std::pair<std::size_t, std::size_t> samples_with(const std::vector<std::string>& lines,
                                                 const std::string& frame) {
  std::size_t samples = 0, with = 0;
  bool seen = false;
  for (const auto& l : lines) {
    if (!l.empty() && l[0] != '\t') {
      ++samples;
      seen = false;
    } else if (!seen && l.find(" " + frame + "+0x") != std::string::npos) {
      ++with;
      seen = true;
    }
  }
  return {samples, with};
}

// tracer replay FILE (without --perf) prints each sample's callchain as perf script does, the
// same frame lines as --perf (and perf script) under its own header line: a perf record -g
// profile (frame pointers) and a tracepoint recorded with -g (perf prints its fields, then its
// frames). It printed the headers alone (no frame, where perf script named tracer_busy_outer
// in most samples).
TEST(CliReplay, TheDefaultPrintHasPerfScriptsCallchains) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  // churn: short processes for over two seconds, recorded system-wide (a CPU's event samples a
  // task on its way out after its EXIT record), each with its own maps and addresses (their
  // frame lines are made per process, and a process is forgotten a second after its exit).
  for (const std::string what : {"profile", "tracepoint", "churn"}) {
    SCOPED_TRACE(what);
    const auto file = (dir.path() / (what + ".data")).string();
    const std::string record =
        what == "profile"
            ? fmt::format("perf record -q -g -F 499 -o {} -- {} 300", file, TRACER_BUSY_LOOP)
        : what == "churn"
            ? fmt::format(
                  "perf record -q -a -g -F 4999 -o {} -- sh -c 'for i in $(seq 60); do "
                  "/bin/true; /bin/true; /bin/true; sleep 0.04; done'",
                  file)
            : fmt::format(
                  "perf record -q -g -e sched:sched_process_exec -o {} -- sh -c "
                  "'/bin/true; /bin/true; /bin/true'",
                  file);
    ASSERT_EQ(shell(record).exit_code, 0) << record;
    const auto perfs = shell("perf script -i " + file);
    ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
    const auto plain = shell(kTracer + " replay " + file);
    ASSERT_EQ(plain.exit_code, 0) << plain.err;
    const auto perf_mode = shell(kTracer + " replay --perf " + file);
    ASSERT_EQ(perf_mode.exit_code, 0) << perf_mode.err;
    // A system-wide recording holds whatever else the machine ran: only the samples of the
    // workload's commands are compared (another program's C++ frames are named with their
    // parameters by tracer and without by perf script, which demangles without them).
    const auto ours = [&](const std::vector<std::string>& text) {
      if (what != "churn")
        return text;
      std::vector<std::string> out;
      bool keep = false;
      for (const auto& l : text) {
        if (!l.empty() && l[0] != '\t') {
          std::istringstream in(l);
          std::string comm;
          in >> comm;
          keep = comm == "sh" || comm == "true" || comm == "sleep" || comm == "perf";
        }
        if (keep)
          out.push_back(l);
      }
      return out;
    };
    // --perf is perf script's text, line for line.
    EXPECT_EQ(first_difference(ours(script_lines(perf_mode.out)), ours(script_lines(perfs.out))),
              "");
    // The default print: the same frame lines, sample by sample (headers differ in their own
    // fields only).
    const auto frames = [&](const std::string& text) {
      std::vector<std::string> out;
      for (const auto& l : ours(script_lines(text))) {
        if (l.empty() || l[0] == '\t')
          out.push_back(l);
        else
          out.emplace_back("sample");
      }
      return out;
    };
    EXPECT_EQ(first_difference(frames(plain.out), frames(perfs.out)), "");
    const auto lines = script_lines(plain.out);
    if (what == "profile") {
      const auto [samples, outer] = samples_with(lines, "tracer_busy_outer");
      ASSERT_GE(samples, 30U) << plain.out;
      EXPECT_GE(outer * 10, samples * 8) << plain.out;
      EXPECT_EQ(samples_with(script_lines(perfs.out), "tracer_busy_outer").second, outer);
    } else if (what == "churn") {
      std::set<std::string> pids;  // the processes sampled with a frame in libc
      std::string pid;
      for (const auto& l : script_lines(perfs.out)) {
        if (!l.empty() && l[0] != '\t') {
          std::istringstream in(l);
          std::string comm;
          in >> comm >> pid;
        } else if (l.find("libc.so") != std::string::npos) {
          pids.insert(pid);
        }
      }
      EXPECT_GE(pids.size(), 20U) << perfs.out;
    } else {
      const auto [samples, execs] = samples_with(lines, "bprm_execve");
      EXPECT_EQ(samples, 4U) << plain.out;  // sh and three /bin/true
      EXPECT_EQ(execs, 4U) << plain.out;
    }
  }
}

// perf record --call-graph dwarf of a program without frame pointers: its callchains hold the
// kernel's part only, the user part is the registers and a stack copy that perf script unwinds
// with the binaries' CFI. tracer replay --perf unwinds them too and prints what perf prints,
// frame by frame (it printed no frame at all: 600 lines where perf printed 2,400).
TEST(CliReplay, DwarfCallchainsAreUnwoundAsPerfScriptUnwindsThem) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "dwarf.data").string();
  ASSERT_EQ(shell(fmt::format("perf record -q --call-graph dwarf -F 499 -o {} -- {} 400", file,
                              TRACER_BUSY_LOOP_NOFP))
                .exit_code,
            0);
  const auto perfs = shell("perf script -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay --perf " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  auto a = script_lines(ours.out), b = script_lines(perfs.out);
  drop_loader_and_vdso_samples(a, b);
  cut_inlined(a, b);
  EXPECT_EQ(first_difference(a, b), "");
  // The callers come from the unwind (the binary has no frame pointers): most samples are in
  // the spin, called from tracer_busy_outer, called from main.
  const auto [samples, outer] = samples_with(a, "tracer_busy_outer");
  const auto [samples_main, in_main] = samples_with(a, "main");
  ASSERT_GE(samples, 30U) << ours.out;
  EXPECT_GE(outer * 10, samples * 8) << ours.out;
  EXPECT_GE(in_main * 10, samples * 8) << ours.out;
}

// A perf.data that tracer writes with unwind = "dwarf" carries what perf needs to unwind it: the
// data mappings (perf's unwinders read .eh_frame_hdr through them) and no maps of the command
// from before its exec (perf keeps them and took libc's base from tracer's own libc). perf
// script unwinds tracer's file through libc to _start, as tracer replay --perf does.
TEST(CliReplay, ADwarfRecordingOfTracerIsUnwoundByPerfScript) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "tracer.data").string();
  const auto recipe = write_recipe(dir, fmt::format(R"([recipe]
name = "dwarf"
[[probe]]
name = "cpu"
software = "cpu-clock"
freq = 499
unwind = "dwarf"
[[stage]]
use = "perf-data"
path = "{}"
)",
                                                    file));
  const auto run =
      shell(fmt::format("{} run {} -- {} 400", kTracer, recipe.string(), TRACER_BUSY_LOOP_NOFP));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const auto perfs = shell("perf script -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  auto b = script_lines(perfs.out);
  const auto [samples, outer] = samples_with(b, "tracer_busy_outer");
  const auto [samples_start, started] = samples_with(b, "_start");
  ASSERT_GE(samples, 30U) << perfs.out;
  EXPECT_GE(outer * 10, samples * 8) << perfs.out;
  EXPECT_GE(started * 10, samples * 8) << "perf unwinds through libc to _start:\n" << perfs.out;
  const auto ours = shell(kTracer + " replay --perf " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  auto a = script_lines(ours.out);
  drop_loader_and_vdso_samples(a, b);
  cut_inlined(a, b);
  EXPECT_EQ(first_difference(a, b), "");
}

TEST(CliReplay, CommChangesAtTheExecNotInFileOrder) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "exec.data").string();
  // The same thread makes 2000 lseek calls as python3, then 3000 as tracer_test_sys.
  const std::string py =
      "import os\n"
      "for i in range(2000):\n"
      "  try: os.lseek(12345, i, 1)\n"
      "  except OSError: pass\n"
      "os.execv('" +
      kSyscaller + "', ['x', 'lseek', '3000'])\n";
  std::ofstream(dir.path() / "exec.py") << py;
  const auto rec = shell("perf record -q -e syscalls:sys_enter_lseek -o " + file +
                         " -- /usr/bin/python3 " + (dir.path() / "exec.py").string());
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto perfs = shell("perf script -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay --perf " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const auto a = script_lines(ours.out), b = script_lines(perfs.out);
  EXPECT_EQ(first_difference(a, b), "");
  expect_time_order(a);
  const auto count = [](const std::vector<std::string>& ls, const std::string& comm) {
    return std::count_if(ls.begin(), ls.end(), [&](const std::string& l) {
      return l.find(" " + comm + " ") != std::string::npos &&
             l.find("whence: 0x") != std::string::npos;
    });
  };
  EXPECT_GE(count(a, "python3"), 2000);
  EXPECT_EQ(count(a, "python3"), count(b, "python3"));
  EXPECT_GE(count(a, "tracer_test_sys"), 3000);
  EXPECT_EQ(count(a, "tracer_test_sys"), count(b, "tracer_test_sys"));

  // A recipe that counts by comm agrees with perf script's comms too.
  const auto recipe = write_recipe(dir, kCountRecipe);
  const auto r = shell(kTracer + " replay " + file + " " + recipe.string() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string comm : {"python3", "tracer_test_sys"}) {
    const std::regex n(R"("keys":\{"comm":")" + comm + R"("\},"count":(\d+)\})");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, n)) << comm << ": " << r.out;
    EXPECT_EQ(std::stol(m[1]), count(b, comm)) << comm;
  }
}

TEST(CliReplay, GroupReadPrintsEveryMemberWithItsOwnPeriod) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "group.data").string();
  const auto rec = shell("perf record -q -e '{cpu-clock,task-clock}:S' -o " + file + " -- " +
                         kBusyLoop + " 300");
  if (rec.exit_code != 0)
    GTEST_SKIP() << "perf record refuses the group here: " << rec.err;
  const auto perfs = shell("perf script -F comm,tid,time,period,event,ip -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay --perf " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  const auto a = script_lines(ours.out), b = script_lines(perfs.out);
  EXPECT_GT(b.size(), 100U);
  EXPECT_EQ(first_difference(a, b), "");
  EXPECT_NE(ours.out.find(" task-clock: "), std::string::npos);
  EXPECT_NE(ours.out.find("  cpu-clock: "), std::string::npos);
}

TEST(CliReplay, FileWithoutFeaturesNamesEventsFromTheirAttrsAndSaysWhatIsMissing) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "clock.data").string();
  ASSERT_EQ(shell("perf record -q -e cpu-clock -o " + file + " -- " + kBusyLoop + " 100").exit_code,
            0);
  auto bytes = tracer::testing::read_file(file);
  std::fill(bytes.begin() + 72, bytes.begin() + 104, std::byte{0});  // adds_features bitmap
  const auto bare = dir.path() / "bare.data";
  tracer::testing::write_file(bare, bytes);
  // perf names the events of such a file from their attrs too.
  const auto perfs = shell("perf script -F comm,tid,time,period,event,ip -i " + bare.string());
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay --perf " + bare.string());
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  EXPECT_EQ(first_difference(script_lines(ours.out), script_lines(perfs.out)), "");
  EXPECT_NE(ours.out.find(" cpu-clock: "), std::string::npos);
  EXPECT_NE(ours.err.find("no header features"), std::string::npos) << ours.err;

  // A tracepoint file without its tracing data: named by id, and the missing fields said.
  const auto tp = record_lseek(dir, 20);
  auto tpb = tracer::testing::read_file(tp);
  std::fill(tpb.begin() + 72, tpb.begin() + 104, std::byte{0});
  const auto tp_bare = dir.path() / "tp_bare.data";
  tracer::testing::write_file(tp_bare, tpb);
  const auto t = shell(kTracer + " replay " + tp_bare.string());
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.err.find("no tracing data"), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("unknown tracepoint (id "), std::string::npos) << t.err;
  EXPECT_NE(t.out.find(" unknown tracepoint:"), std::string::npos) << t.out;
  EXPECT_EQ(keys(t.out).size(), 20U);
}

TEST(CliReplay, CorruptedRecordTypeStopsAtItsOffsetAfterWhatCameBefore) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = record_lseek(dir, 300);
  auto bytes = tracer::testing::read_file(file);
  const auto recs = records_of(bytes);
  const auto samples = samples_of(bytes);
  ASSERT_GT(samples.size(), 100U);
  const auto& bad = samples[100];
  const std::uint32_t type = 0x1234;
  std::memcpy(bytes.data() + bad.offset, &type, 4);
  const auto damaged = dir.path() / "type.data";
  tracer::testing::write_file(damaged, bytes);
  EXPECT_NE(shell("perf script -i " + damaged.string()).exit_code, 0);  // perf stops too
  const auto r = shell(kTracer + " replay --perf " + damaged.string());
  EXPECT_EQ(r.exit_code, 1);
  std::ostringstream at;
  at << "offset " << bad.offset << " (0x" << std::hex << bad.offset << ")";
  EXPECT_NE(r.err.find(at.str()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("record type 4660"), std::string::npos) << r.err;
  std::size_t before = 0;
  while (recs[before].offset != bad.offset)
    ++before;
  EXPECT_NE(r.err.find("(" + std::to_string(before) + " records read before it)"),
            std::string::npos)
      << r.err;
  // The 100 samples before it, each as perf script prints it from the undamaged file.
  const auto whole = script_lines(shell("perf script -i " + file).out);
  const std::multiset<std::string> all(whole.begin(), whole.end());
  const auto ours = script_lines(r.out);
  EXPECT_EQ(ours.size(), 100U);
  for (const auto& l : ours)
    EXPECT_EQ(all.count(l), 1U) << l;
}

TEST(CliReplay, DecodeFailureCountsTheRecordsBeforeItInFileAndPipeMode) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  for (const bool pipe : {false, true}) {
    SCOPED_TRACE(pipe ? "pipe mode" : "file mode");
    const auto file = record_lseek(dir, 200, pipe);
    auto bytes = tracer::testing::read_file(file);
    const auto recs = records_of(bytes, pipe);
    std::size_t index = 0, seen = 0;
    for (; index < recs.size(); ++index) {
      if (recs[index].type == 9 && ++seen == 50)
        break;
    }
    ASSERT_LT(index, recs.size());
    // A sample 8 bytes long: a header and none of the fields its layout promises.
    const std::uint16_t size = 8;
    const auto at = recs[index].offset;
    std::memcpy(bytes.data() + at + 6, &size, 2);
    const auto damaged = dir.path() / (pipe ? "short_pipe.data" : "short.data");
    tracer::testing::write_file(damaged, bytes);
    const auto r = shell(pipe ? "cat " + damaged.string() + " | " + kTracer + " replay -"
                              : kTracer + " replay " + damaged.string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("offset " + std::to_string(at) + " "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("(" + std::to_string(index) + " records read before it)"),
              std::string::npos)
        << "record " << index << ": " << r.err;
    EXPECT_EQ(keys(r.out).size(), 49U);
  }
}

TEST(CliReplay, StatRecordPrintsEveryCounterPerfPrintsZerosIncluded) {
  REQUIRE_PERF();
  tracer::testing::TempDir dir;
  const auto file = (dir.path() / "stat.data").string();
  const auto rec =
      shell("perf stat record -o " + file +
            " -e cpu-clock,page-faults,major-faults,cpu-migrations -- " + kBusyLoop + " 50");
  ASSERT_EQ(rec.exit_code, 0) << rec.err;
  const auto perfs = shell("perf script -i " + file);
  ASSERT_EQ(perfs.exit_code, 0) << perfs.err;
  const auto ours = shell(kTracer + " replay " + file);
  ASSERT_EQ(ours.exit_code, 0) << ours.err;
  EXPECT_EQ(first_difference(script_lines(ours.out), script_lines(perfs.out)), "");
  EXPECT_NE(ours.out.find(" major-faults"), std::string::npos) << ours.out;

  // System-wide: every CPU of every event, by event then CPU, thread -1, as perf prints them.
  const auto wide = (dir.path() / "wide.data").string();
  ASSERT_EQ(shell("perf stat record -a -o " + wide +
                  " -e cpu-clock,major-faults,context-switches -- sleep 0.2")
                .exit_code,
            0);
  const auto wp = shell("perf script -i " + wide);
  ASSERT_EQ(wp.exit_code, 0) << wp.err;
  const auto wo = shell(kTracer + " replay " + wide);
  ASSERT_EQ(wo.exit_code, 0) << wo.err;
  EXPECT_EQ(first_difference(script_lines(wo.out), script_lines(wp.out)), "");
}

}  // namespace
