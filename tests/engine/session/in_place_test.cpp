// The in-place path (Engine::on_in_place, Pipeline::on_in_place): system-wide tracepoint samples
// delivered through the BPF ring buffer reach the aggregations where they lie in the ring, no
// record rebuilt. On a live workload with known answers, a session reading them in place and one
// reading the rebuilt records, side by side, give the same rows, and those rows are the calls
// made; a pipeline that needs records (per-event output, comm, time order) gets records.
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <sys/mman.h>
#include <sys/syscall.h>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <initializer_list>
#include <map>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "support/child.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

constexpr int kCalls = 4000;  // lseek calls per child (offsets 0 .. kCalls - 1)

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  ::sched_setaffinity(0, sizeof(set), &set);
}

/// A child pinned to `cpu` that makes kCalls lseek(-1, i, SEEK_SET) calls at its first step.
testing::Child lseeker(int cpu) {
  return testing::Child([cpu](int) {
    pin_to(cpu);
    for (long i = 0; i < kCalls; ++i)
      ::syscall(SYS_lseek, -1, i, SEEK_SET);
  });
}

Recipe load(const std::string& stages) {
  return Recipe::load_string(R"([recipe]
name = "in-place"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
)" + stages,
                             "in_place.toml", {.stages = stage_catalog()});
}

struct Traced {
  std::string text;
  Sink out = Sink::to_string(&text);
  std::unique_ptr<Session> session;
  /// `via_bpf` false: tracepoint samples come from the probes' own perf rings.
  Traced(boost::asio::io_context& io,
         const Recipe& recipe,
         bool in_place,
         bool via_bpf = true,
         std::optional<std::uint32_t> drain_slice_ms = {}) {
    PipelineOptions po;
    po.in_place = in_place;
    session = std::make_unique<Session>(io.get_executor(), recipe, out,
                                        SessionOptions{.json = true,
                                                       .deliver_tracepoints_via_bpf = via_bpf,
                                                       .pipeline = po,
                                                       .placement = Placement::kUser,
                                                       .channel = DeliveryChannel::kRingbuf,
                                                       .drain_slice_ms = drain_slice_ms});
  }
};

/// Runs `io` after the children's calls until the sessions have taken in what the rings hold:
/// 300 ms at least, then until no session's delivered count grew for 250 ms (two passes of the
/// flush timer), `most` at most (a system-wide probe may see other processes' events for good).
/// A fixed window lost the last records beside the ASan suite.
void settle(boost::asio::io_context& io,
            std::initializer_list<const Session*> sessions,
            std::chrono::seconds most = std::chrono::seconds(10)) {
  const auto delivered = [&] {
    std::uint64_t n = 0;
    for (const Session* s : sessions)
      n += s->stats().delivered;
    return n;
  };
  io.run_for(std::chrono::milliseconds(300));
  const auto until = std::chrono::steady_clock::now() + most;
  for (std::uint64_t before = delivered(); std::chrono::steady_clock::now() < until;) {
    io.run_for(std::chrono::milliseconds(250));
    const std::uint64_t now = delivered();
    if (now == before)
      return;
    before = now;
  }
}

/// Two sessions of one recipe side by side, one reading in place and one not (`via_bpf` as
/// Traced's), while a child made by `child(cpu)` works on each CPU (settle()).
struct SideBySide {
  boost::asio::io_context io{1};
  Traced in_place, other;
  std::vector<pid_t> pids;
  SideBySide(const Recipe& recipe, bool via_bpf)
      : in_place(io, recipe, true, via_bpf), other(io, recipe, false, via_bpf) {}
  /// `most`: settle()'s.
  void run(testing::Child (*child)(int), std::chrono::seconds most = std::chrono::seconds(10)) {
    in_place.session->start();
    other.session->start();
    EXPECT_TRUE(in_place.session->stats().in_place);
    EXPECT_FALSE(other.session->stats().in_place);
    auto a = child(0), b = child(1);
    ASSERT_TRUE(a.go());
    ASSERT_TRUE(b.go());
    settle(io, {in_place.session.get(), other.session.get()}, most);
    in_place.session->stop();
    other.session->stop();
    pids = {a.pid(), b.pid()};
  }
};

/// The JSON rows whose first key is `pid`, by stage, without their times: what that process did.
std::map<std::string, std::string> rows_of(const std::string& text, pid_t pid) {
  std::map<std::string, std::string> out;
  const std::string key = R"("keys":{"pid":)" + std::to_string(pid);
  const std::regex stage(R"re(^\{"stage":"([a-z]+)")re");
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    const auto at = line.find(key);
    if (at != std::string::npos && (line[at + key.size()] == '}' || line[at + key.size()] == ',') &&
        std::regex_search(line, m, stage))
      out[m[1]] = std::regex_replace(line, std::regex(R"("time":[0-9]+,)"), "");
  }
  return out;
}

long long number(const std::string& text, const std::string& key) {
  std::smatch m;
  if (std::regex_search(text, m, std::regex("\"" + key + "\":(-?[0-9]+)")))
    return std::stoll(m[1]);
  return -1;
}

// count by pid and fd (a tracepoint field read from the record in place), sum and hist by pid,
// system-wide, of two children pinned one to each CPU: read in place
// and from rebuilt records side by side, the children's rows are equal, and they are the calls:
// kCalls each, offsets summing to kCalls * (kCalls - 1) / 2.
TEST(InPlace, AggregationsReadDeliveredSamplesInPlaceAndGiveTheRebuiltRecordsRows) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  const Recipe recipe = load(R"([[stage]]
use = "count"
by = ["pid", "fd"]
[[stage]]
use = "sum"
field = "offset"
by = ["pid"]
[[stage]]
use = "hist"
field = "offset"
by = ["pid"]
)");
  SideBySide run(recipe, true);
  run.run(lseeker);
  const Traced& in_place = run.in_place;
  const Traced& rebuilt = run.other;
  for (const pid_t pid : run.pids) {
    const auto mine = rows_of(in_place.text, pid);
    const auto theirs = rows_of(rebuilt.text, pid);
    ASSERT_EQ(mine.size(), 3U) << "pid " << pid << ":\n" << in_place.text;
    EXPECT_EQ(mine, theirs) << "pid " << pid;
    EXPECT_EQ(number(mine.at("count"), "count"), kCalls) << mine.at("count");
    EXPECT_NE(mine.at("count").find(R"("fd":4294967295})"), std::string::npos)
        << "lseek(-1, ...): the unsigned int fd " << mine.at("count");
    EXPECT_EQ(number(mine.at("sum"), "sum"), 1LL * kCalls * (kCalls - 1) / 2) << mine.at("sum");
  }
  const auto st = in_place.session->stats();
  EXPECT_EQ(st.engine.probes[0].total().lost, 0U);
  // Every sample the probe delivered went to the stages in place (the records besides them: the
  // probe's own side-band ones).
  EXPECT_GE(st.engine.probes[0].total().samples, 2U * kCalls);
  std::uint64_t in_place_samples = 0;
  for (const auto& p : in_place.session->pipelines())
    in_place_samples += p->stats().in_place;
  EXPECT_EQ(in_place_samples, st.engine.probes[0].total().samples);
  for (const auto& p : rebuilt.session->pipelines())
    EXPECT_EQ(p->stats().in_place, 0U);
}

// Pipelines that need records get records: a per-event output and a filter (it drops events)
// each keep the rebuilt path, and their results are still exact.
TEST(InPlace, PipelinesThatNeedRecordsGetThem) {
  struct Case {
    const char* name;
    const char* stages;
  };
  for (const Case& c : {Case{"per-event output", R"([[stage]]
use = "jsonl"
)"},
                        Case{"filter", R"([[stage]]
use = "filter"
expr = "offset >= 0"
[[stage]]
use = "count"
by = ["pid"]
)"}}) {
    SCOPED_TRACE(c.name);
    boost::asio::io_context io(1);
    Traced run(io, load(c.stages), true);
    run.session->start();
    EXPECT_FALSE(run.session->stats().in_place);
    auto child = lseeker(0);
    ASSERT_TRUE(child.go());
    settle(io, {run.session.get()});
    run.session->stop();
    const auto st = run.session->stats();
    EXPECT_GE(st.delivered, std::uint64_t{kCalls});
    EXPECT_EQ(run.session->pipelines().front()->stats().in_place, 0U);
    if (std::string(c.name) == "filter") {
      EXPECT_EQ(number(rows_of(run.text, child.pid())["count"], "count"), kCalls) << run.text;
    }
  }
}

/// A child pinned to `cpu` that makes kCalls lseek calls as "before-rename", renames itself
/// "after-rename" (prctl), and makes kCalls more.
testing::Child renamer(int cpu) {
  return testing::Child([cpu](int) {
    pin_to(cpu);
    ::prctl(PR_SET_NAME, "before-rename");
    for (long i = 0; i < kCalls; ++i)
      ::syscall(SYS_lseek, -1, i, SEEK_SET);
    ::prctl(PR_SET_NAME, "after-rename");
    for (long i = 0; i < kCalls; ++i)
      ::syscall(SYS_lseek, -1, i, SEEK_SET);
  });
}

/// The count of the JSON row keyed {"comm":comm,"pid":pid}, or -1.
long long count_of(const std::string& text, const std::string& comm, pid_t pid) {
  const std::string key = R"("keys":{"comm":")" + comm + R"(","pid":)" + std::to_string(pid) + "}";
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(key) != std::string::npos)
      return number(line, "count");
  }
  return -1;
}

// count by (comm, pid), the default recipe's key, of system-wide tracepoint samples: the
// delivery program puts the task's name at the hit in each record, so the pipeline reads it in
// place with no time order. Two children (one per CPU) rename themselves halfway: each name
// counts exactly its calls, as the ordered path with the comm cache counts them side by side.
TEST(InPlace, CommIsReadFromEachDeliveredRecordWithoutTimeOrder) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  const Recipe recipe = load(R"([[stage]]
use = "count"
by = ["comm", "pid"]
)");
  SideBySide run(recipe, true);
  run.run(renamer);
  for (const Traced* t : {&run.in_place, &run.other}) {
    for (const pid_t pid : run.pids) {
      EXPECT_EQ(count_of(t->text, "before-rename", pid), kCalls) << t->text;
      EXPECT_EQ(count_of(t->text, "after-rename", pid), kCalls) << t->text;
    }
  }
  const auto& p = *run.in_place.session->pipelines().front();
  EXPECT_GE(p.stats().in_place, 4U * kCalls) << "every sample read in place";
  EXPECT_FALSE(p.ordered()) << "no time order";
  EXPECT_TRUE(run.other.session->pipelines().front()->ordered())
      << "the reference path merges in time order";
}

// The same recipe beside a pipeline that needs records (a per-event output): that one would get
// rebuilt records, which carry no comm, so the comm pipeline keeps its time order, and both are
// exact.
TEST(InPlace, CommKeepsTheTimeOrderBesideAPipelineThatNeedsRecords) {
  const Recipe recipe = load(R"([[pipeline]]
name = "counts"
[[pipeline.stage]]
use = "count"
by = ["comm", "pid"]
[[pipeline]]
name = "events"
[[pipeline.stage]]
use = "jsonl"
)");
  boost::asio::io_context io(1);
  Traced t(io, recipe, true);
  t.session->start();
  EXPECT_FALSE(t.session->stats().in_place);
  auto child = renamer(0);
  ASSERT_TRUE(child.go());
  settle(io, {t.session.get()});
  t.session->stop();
  EXPECT_EQ(count_of(t.text, "before-rename", child.pid()), kCalls);
  EXPECT_EQ(count_of(t.text, "after-rename", child.pid()), kCalls);
  EXPECT_TRUE(t.session->pipelines().front()->ordered());
}

/// The counter `name` of a session's stats, or -1.
long long counter(const Session& s, const std::string& name) {
  for (const auto& [n, v] : s.stats().counters) {
    if (n == name)
      return static_cast<long long>(v);
  }
  return -1;
}

// The time order's rounds end only passes that read every ring to its head. Passes cut short
// (a 0 ms slice: a chunk of each ring a pass, as a reactor descheduled on a loaded machine
// gets) leave the BPF ring behind the perf ring that carries the COMM records: had such a pass
// ended a round, the rename would be applied before the samples before it (CI: 2,240 calls of
// "before-rename" counted of 4,000, the other 1,760 as "after-rename"). Each name counts its
// calls exactly, as the in-place path reading the name at each hit counts them beside it, on
// both CPUs, with no record late.
TEST(InPlace, ACommChangeWaitsForTheSamplesBeforeItWhenPassesAreCutShort) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  const Recipe recipe = load(R"([[stage]]
use = "count"
by = ["comm", "pid"]
)");
  boost::asio::io_context io(1);
  Traced in_place(io, recipe, true, true, 0), ordered(io, recipe, false, true, 0);
  in_place.session->start();
  ordered.session->start();
  auto a = renamer(0), b = renamer(1);
  ASSERT_TRUE(a.go());
  ASSERT_TRUE(b.go());
  settle(io, {in_place.session.get(), ordered.session.get()});
  in_place.session->stop();
  ordered.session->stop();
  for (const Traced* t : {&in_place, &ordered}) {
    for (const pid_t pid : {a.pid(), b.pid()}) {
      EXPECT_EQ(count_of(t->text, "before-rename", pid), kCalls) << t->text;
      EXPECT_EQ(count_of(t->text, "after-rename", pid), kCalls) << t->text;
    }
  }
  ASSERT_TRUE(ordered.session->pipelines().front()->ordered());
  EXPECT_EQ(counter(*ordered.session, "order.late"), 0) << "no record overtaken";
  EXPECT_GT(ordered.session->stats().engine.partial_passes, 0U)
      << "passes were cut short, as the test means";
}

/// The JSON rows holding `needle`, their times cut, sorted.
std::vector<std::string> rows_with(const std::string& text, const std::string& needle) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) != std::string::npos)
      out.push_back(std::regex_replace(line, std::regex(R"("time":[0-9]+,)"), ""));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A tracepoint's char[16] field as a key in place (sched_switch's prev_comm, read from the
// record as two words of a fixed key), beside its pid: the rows of the children's switches equal
// the rebuilt records' row for row, on both CPUs, and each child switched out at least once (its
// exit).
TEST(InPlace, ACharArrayFieldKeysInPlaceAsTheRebuiltRecordsDo) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  const Recipe recipe = Recipe::load_string(R"([recipe]
name = "switches"
[[probe]]
name = "sw"
tracepoint = "sched:sched_switch"
[[stage]]
use = "count"
by = ["prev_comm", "prev_pid"]
)",
                                            "switches.toml", {.stages = stage_catalog()});
  SideBySide run(recipe, true);
  run.run(renamer, std::chrono::seconds(1));  // (the switches of the machine go on)
  for (const pid_t pid : run.pids) {
    const std::string needle = R"("prev_pid":)" + std::to_string(pid) + "}";
    const auto mine = rows_with(run.in_place.text, needle);
    EXPECT_FALSE(mine.empty()) << run.in_place.text;
    EXPECT_EQ(mine, rows_with(run.other.text, needle));
  }
  EXPECT_GT(run.in_place.session->pipelines().front()->stats().in_place, 0U);
}

constexpr int kPages = 2000;  // pages the perf-ring test's children touch

/// A child pinned to `cpu` that makes kCalls lseek(-1, i, SEEK_SET) calls, then touches kPages
/// new pages, at its first step.
testing::Child lseeker_and_toucher(int cpu) {
  return testing::Child([cpu](int) {
    pin_to(cpu);
    for (long i = 0; i < kCalls; ++i)
      ::syscall(SYS_lseek, -1, i, SEEK_SET);
    const long page = ::sysconf(_SC_PAGESIZE);
    void* mem = ::mmap(nullptr, static_cast<std::size_t>(kPages * page), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
      ::_exit(3);
    auto* bytes = static_cast<volatile char*>(mem);
    for (long i = 0; i < kPages; ++i)
      bytes[i * page] = 1;
  });
}

// The perf ring path in place: samples read from the probes' own perf rings (a tracepoint
// without BPF delivery; page-faults, a software event) reach the aggregations where they lie,
// no decode, no Event. For each shape of stage the in-place path takes, a session in place and
// one decoding every record, side by side on the same two children (one per CPU), give the
// same rows, and those rows are the calls made.
TEST(InPlace, PerfRingSamplesInPlaceGiveTheDecodedRowsForEveryShape) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  struct Case {
    const char* stages;
    const char* value;  // the number each child's row must hold, and its name in the row
    long long expected;
  };
  constexpr long long kSum = 1LL * kCalls * (kCalls - 1) / 2;
  const std::vector<Case> cases = {
      {"use = \"count\"\nby = [\"pid\", \"fd\"]", "count", kCalls},
      {"use = \"count\"\nby = [\"pid\", \"cpu\"]", "count", kCalls},
      {"use = \"count\"\nby = [\"pid\", \"tid\"]", "count", kCalls},
      {"use = \"count\"\nby = [\"pid\", \"probe\"]", "count", kCalls},
      {"use = \"count\"\nby = [\"pid\", \"syscall\"]", "count", kCalls},
      {"use = \"sum\"\nfield = \"offset\"\nby = [\"pid\"]", "sum", kSum},
      {"use = \"min\"\nfield = \"offset\"\nby = [\"pid\"]", "min", 0},
      {"use = \"max\"\nfield = \"offset\"\nby = [\"pid\"]", "max", kCalls - 1},
      {"use = \"avg\"\nfield = \"offset\"\nby = [\"pid\"]", "avg", (kCalls - 1) / 2},
      {"use = \"hist\"\nfield = \"offset\"\nby = [\"pid\"]", "count", kCalls},
      {"use = \"lhist\"\nfield = \"offset\"\nmin = 0\nmax = 4000\nstep = 500\nby = [\"pid\"]",
       "count", kCalls},
      {"use = \"quantiles\"\nfield = \"offset\"\nby = [\"pid\"]", "count", kCalls},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.stages);
    const Recipe recipe = load(std::string("[[stage]]\n") + c.stages + "\n");
    SideBySide run(recipe, false);
    run.run(lseeker_and_toucher);
    const Traced& in_place = run.in_place;
    const Traced& decoded = run.other;
    for (const pid_t pid : run.pids) {
      const auto mine = rows_of(in_place.text, pid);
      ASSERT_EQ(mine.size(), 1U) << "pid " << pid << ":\n" << in_place.text;
      EXPECT_EQ(mine, rows_of(decoded.text, pid)) << "pid " << pid;
      EXPECT_EQ(number(mine.begin()->second, c.value), c.expected) << mine.begin()->second;
    }
    const auto st = in_place.session->stats();
    EXPECT_EQ(st.engine.probes[0].total().lost, 0U);
    const std::uint64_t samples = st.engine.probes[0].total().samples;
    const std::uint64_t taken = in_place.session->pipelines().front()->stats().in_place;
    // All but the few that wrap around a ring's end (those are decoded).
    EXPECT_LE(taken, samples);
    EXPECT_GE(taken * 10, samples * 9) << taken << " of " << samples << " in place";
    EXPECT_EQ(decoded.session->pipelines().front()->stats().in_place, 0U);
  }
}

// A software event's samples (page-faults: IP and PERIOD besides the common fields) in place:
// count by pid equals the decoded path's, and each child's count covers the pages it touched.
TEST(InPlace, SoftwareEventSamplesInPlaceGiveTheDecodedCounts) {
  if (::sysconf(_SC_NPROCESSORS_ONLN) < 2)
    GTEST_SKIP() << "needs two CPUs";
  const Recipe recipe = Recipe::load_string(R"([recipe]
name = "faults"
[[probe]]
name = "faults"
software = "page-faults"
[[stage]]
use = "count"
by = ["pid"]
)",
                                            "faults.toml", {.stages = stage_catalog()});
  SideBySide run(recipe, true);
  run.run(lseeker_and_toucher);
  const Traced& in_place = run.in_place;
  const Traced& decoded = run.other;
  for (const pid_t pid : run.pids) {
    const auto mine = rows_of(in_place.text, pid);
    ASSERT_EQ(mine.size(), 1U) << "pid " << pid << ":\n" << in_place.text;
    EXPECT_EQ(mine, rows_of(decoded.text, pid)) << "pid " << pid;
    EXPECT_GE(number(mine.at("count"), "count"), kPages) << mine.at("count");
  }
  EXPECT_EQ(in_place.session->stats().engine.probes[0].total().lost, 0U);
  EXPECT_GT(in_place.session->pipelines().front()->stats().in_place, 2U * kPages);
}

}  // namespace
}  // namespace tracer
