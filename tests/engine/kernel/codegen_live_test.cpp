// Generated programs on the live kernel: exact counts, sums and buckets against the user-space
// computation, full maps, generation flips under load, other tools on the tracepoint, latency,
// string keys, uprobe arguments.
#include "codegen_harness.hpp"
#include "support/cli.hpp"

namespace tracer::kernel::gen {
namespace {

using namespace harness;
using namespace std::chrono_literals;

constexpr long kCalls = 20000;

TEST(BpfCodegenLive, CountByPidIsExactForTheChild) {
  REQUIRE_ROOT();
  const auto fmt = format("syscalls", "sys_enter_getppid");
  Spawn child(syscaller("getppid", kCalls));
  Spawn noise(syscaller("getppid", kCalls + 777));
  const auto ch = static_cast<std::uint32_t>(child.pid());
  const auto no = static_cast<std::uint32_t>(noise.pid());

  // Three target modes on the same workload: one pid (a constant), a pid map, every process.
  KernelPlan one = count_plan(fmt, {Field::pid()}, {"pid"});
  one.tgids = {ch};
  KernelPlan two = one;
  two.tgids = {ch, no};
  KernelPlan all = one;
  all.tgids = {};
  Built b1 = build(one), b2 = build(two), b3 = build(all);
  ASSERT_TRUE(b1.obj && b2.obj && b3.obj);
  // The target is read-only data set at load: no pid in the text, the same text for any pid.
  EXPECT_NE(b1.prog.source.find("if (tr_tgid != tr_target)"), std::string::npos);
  EXPECT_EQ(b1.prog.source.find(std::to_string(ch)), std::string::npos);
  KernelPlan other = one;
  other.tgids = {no};
  EXPECT_EQ(generate(other)->hash, b1.prog.hash);
  EXPECT_FALSE(b1.prog.tgid_map);
  EXPECT_TRUE(b2.prog.tgid_map);
  EXPECT_TRUE(b1.prog.layout.percpu);
  // One constant target: the pid key is known, an array slot per probe, no hashing.
  EXPECT_TRUE(b1.prog.layout.by_probe);
  EXPECT_FALSE(b2.prog.layout.by_probe);
  EXPECT_FALSE(b3.prog.layout.by_probe);
  auto e1 = attach_tracepoint(*b1.obj, b1.prog.programs[0], fmt.id);
  auto e2 = attach_tracepoint(*b2.obj, b2.prog.programs[0], fmt.id);
  auto e3 = attach_tracepoint(*b3.obj, b3.prog.programs[0], fmt.id);

  child.go();
  noise.go();
  for (int i = 0; i < 1000; ++i)  // this process is noise too
    ::syscall(SYS_getppid);
  ASSERT_EQ(child.wait(), 0);
  ASSERT_EQ(noise.wait(), 0);

  Reader r1(*b1.obj, b1.prog), r2(*b2.obj, b2.prog), r3(*b3.obj, b3.prog);
  auto peeked = r1.peek();  // the generation being written, left in place
  ASSERT_TRUE(peeked.has_value());
  ASSERT_EQ(peeked->rows.size(), 1U);
  EXPECT_EQ(render("count", *peeked)[0].count, static_cast<std::uint64_t>(kCalls));
  auto s1 = r1.flip_and_read();
  auto s2 = r2.flip_and_read();
  auto s3 = r3.flip_and_read();
  ASSERT_TRUE(s1 && s2 && s3);
  const auto k1 = by_key("count", *s1), k2 = by_key("count", *s2), k3 = by_key("count", *s3);
  const std::string cs = std::to_string(ch), ns = std::to_string(no);
  ASSERT_EQ(k1.size(), 1U);
  EXPECT_EQ(k1.at(cs).count, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(std::get<std::int64_t>(k1.at(cs).keys[0]), child.pid()) << "pid is an int cell";
  EXPECT_EQ(std::get<std::uint64_t>(k1.at(cs).values[0]), static_cast<std::uint64_t>(kCalls));
  ASSERT_EQ(k2.size(), 2U);
  EXPECT_EQ(k2.at(cs).count, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(k2.at(ns).count, static_cast<std::uint64_t>(kCalls + 777));
  ASSERT_TRUE(k3.contains(cs) && k3.contains(ns));
  EXPECT_EQ(k3.at(cs).count, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(k3.at(ns).count, static_cast<std::uint64_t>(kCalls + 777));
  EXPECT_EQ(k3.at(std::to_string(::getpid())).count, 1000U);
  // Hits: the events of the target processes the probe saw, counted in the kernel.
  EXPECT_EQ(s1->probes[0].total.hits, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(s2->probes[0].total.hits, static_cast<std::uint64_t>(2 * kCalls + 777));
  EXPECT_EQ(s1->map_full, 0U);
  EXPECT_EQ(s1->probes[0].recursion_misses, 0U);
}

TEST(BpfCodegenLive, SumMinMaxAvgOfATracepointField) {
  REQUIRE_ROOT();
  const auto fmt = format("syscalls", "sys_enter_lseek");
  constexpr long n = 5000;  // lseek(12345, i, SEEK_CUR) for i in [0, n)
  constexpr long from = 7;  // the filter keeps offset >= 7
  Spawn child(syscaller("lseek", n));
  std::vector<Built> built;
  std::vector<std::string_view> kinds;
  std::vector<perf::Event> events;
  // Keyed by fd (per-CPU hash, plain adds), by comm (a string key: one shared map, atomic adds
  // and a cmpxchg loop for min/max), and by nothing (a per-CPU array: slots start zeroed).
  for (const int keys : {0, 1, 2}) {
    const bool by_comm = keys == 1;
    for (const std::string_view kind : {"sum", "min", "max", "avg"}) {
      KernelPlan plan = keys == 0 ? count_plan(fmt, {field_of(fmt, "fd")}, {"fd"})
                        : by_comm ? count_plan(fmt, {Field::comm()}, {"comm"})
                                  : count_plan(fmt, {}, {});
      plan.aggregation.agg = agg_of(kind);
      kinds.push_back(kind);
      plan.aggregation.value_name = "offset";
      plan.probes[0].value = field_of(fmt, "offset");
      plan.probes[0].filter = {{cmp(fld(field_of(fmt, "offset")), Cmp::kGe, num(from))}, 0};
      plan.tgids = {static_cast<std::uint32_t>(child.pid())};
      built.push_back(build(plan));
      ASSERT_TRUE(built.back().obj);
      EXPECT_EQ(built.back().prog.layout.percpu, !by_comm);
      events.push_back(attach_tracepoint(*built.back().obj, built.back().prog.programs[0], fmt.id));
    }
  }
  child.go();
  ASSERT_EQ(child.wait(), 0);
  std::vector<Rendered> rows;
  for (std::size_t i = 0; i < built.size(); ++i) {
    Built& b = built[i];
    Reader r(*b.obj, b.prog);
    auto s = r.flip_and_read();
    ASSERT_TRUE(s.has_value()) << s.error().describe();
    ASSERT_EQ(s->rows.size(), 1U);
    if (rows.size() < 4)
      EXPECT_EQ(std::get<std::uint64_t>(s->rows[0].keys[0]), 12345U) << "fd: unsigned field";
    else if (rows.size() < 8)
      EXPECT_EQ(std::get<std::string>(s->rows[0].keys[0]), "tracer_test_sys");
    else
      EXPECT_TRUE(s->rows[0].keys.empty());
    const Rendered row = render(kinds[i], *s)[0];
    EXPECT_EQ(row.count, static_cast<std::uint64_t>(n - from));
    EXPECT_EQ(s->probes[0].total.hits, static_cast<std::uint64_t>(n)) << "before the filter";
    rows.push_back(row);
  }
  const std::int64_t sum = n * (n - 1) / 2 - from * (from - 1) / 2;
  for (std::size_t k = 0; k < rows.size(); k += 4) {
    SCOPED_TRACE(k == 0 ? "by fd" : k == 4 ? "by comm" : "no key");
    EXPECT_EQ(std::get<std::int64_t>(rows[k].values[0]), sum);
    EXPECT_EQ(std::get<std::int64_t>(rows[k + 1].values[0]), from);
    EXPECT_EQ(std::get<std::int64_t>(rows[k + 2].values[0]), n - 1);
    EXPECT_DOUBLE_EQ(std::get<double>(rows[k + 3].values[0]),
                     static_cast<double>(sum) / static_cast<double>(n - from));
  }
}

// lseek(12345, v, SEEK_CUR) for each v, in a child of this test.
void lseeks(const std::vector<std::int64_t>& values) {
  for (const auto v : values)
    ::syscall(SYS_lseek, 12345, v, SEEK_CUR);
}

TEST(BpfCodegenLive, HistAndLhistBucketsEqualTheUserSpaceComputation) {
  REQUIRE_ROOT();
  const auto fmt = format("syscalls", "sys_enter_lseek");
  std::vector<std::int64_t> values = {0,  1,         2,         3,  4,   7,   8,   1023, 1024, -5,
                                      -1, INT64_MAX, INT64_MIN, 99, 100, 101, 250, 999,  1000};
  std::uint64_t x = 88172645463325252ULL;  // xorshift: a spread over every magnitude
  for (int i = 0; i < 3000; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    values.push_back(static_cast<std::int64_t>(x >> (x % 64)));
    values.push_back(static_cast<std::int64_t>(x % 1200) - 100);
  }
  testing::Child child([&](int) { lseeks(values); });
  const auto pid = static_cast<std::uint32_t>(child.pid());

  KernelPlan hist = count_plan(fmt, {}, {});
  hist.aggregation = {.agg = agg_of("hist"), .value_name = "offset"};
  hist.probes[0].value = field_of(fmt, "offset");
  hist.tgids = {pid};
  KernelPlan lhist = hist;
  const ConfigTable lhist_options = {{"min", cv(-50)}, {"max", cv(1000)}, {"step", cv(100)}};
  lhist.aggregation = {.agg = agg_of("lhist", lhist_options), .value_name = "offset"};
  Built bh = build(hist), bl = build(lhist);
  ASSERT_TRUE(bh.obj && bl.obj);
  auto eh = attach_tracepoint(*bh.obj, bh.prog.programs[0], fmt.id);
  auto el = attach_tracepoint(*bl.obj, bl.prog.programs[0], fmt.id);
  ASSERT_TRUE(child.go());
  Reader rh(*bh.obj, bh.prog), rl(*bl.obj, bl.prog);
  auto sh = rh.flip_and_read();
  auto sl = rl.flip_and_read();
  ASSERT_TRUE(sh && sl);
  ASSERT_EQ(sh->rows.size(), 1U);
  ASSERT_EQ(sl->rows.size(), 1U);

  // The user-space stages' buckets of the same values: `offset` is an unsigned 8-byte field,
  // read as the stages read it (to_int: uint64 above INT64_MAX wraps).
  std::vector<std::uint64_t> want_h(detail::kLog2Buckets), want_l(11 + 2);
  for (const auto v : values) {
    ++want_h[detail::log2_bucket_of(v)];
    // plugins/stages/lhist.cpp Lhist::bucket with min -50, max 1000, step 100: 11 inner buckets.
    const std::size_t b = v < -50     ? 0
                          : v >= 1000 ? 12
                                      : 1 + static_cast<std::size_t>((v + 50) / 100);
    ++want_l[b];
  }
  // The stages' tables of the kernel's values: the buckets from the first to the last
  // non-empty one (here, all of them), labelled as the stages label them.
  const Rendered h = render("hist", *sh)[0];
  const Rendered l = render("lhist", *sl, lhist_options)[0];
  const auto counts_of = [](const Rendered& r) {
    std::vector<std::uint64_t> out;
    for (const auto& b : r.buckets)
      out.push_back(b.count);
    return out;
  };
  // (From the first to the last non-empty bucket, as the tables show them.)
  const auto shown = [](std::vector<std::uint64_t> v) {
    while (!v.empty() && v.back() == 0)
      v.pop_back();
    const auto first = std::find_if(v.begin(), v.end(), [](std::uint64_t n) { return n != 0; });
    v.erase(v.begin(), first);
    return v;
  };
  EXPECT_EQ(counts_of(h), shown(want_h));
  EXPECT_EQ(counts_of(l), shown(want_l));
  EXPECT_EQ(h.count, values.size());
  EXPECT_EQ(std::get<std::uint64_t>(h.values[0]), values.size());
  ASSERT_FALSE(h.buckets.empty());
  EXPECT_EQ(h.buckets.front().label, "(..., 0)");
  EXPECT_EQ(h.buckets[1].label, "[0]");
  EXPECT_EQ(h.buckets[3].label, "[2, 4)");
  EXPECT_EQ(h.buckets.back().label,
            fmt::format("[{}, {})", detail::power_label(62), detail::power_label(63)));
  EXPECT_TRUE(h.buckets.back().hi_unbounded);
  EXPECT_EQ(l.buckets.front().label, "(..., -50)");
  EXPECT_EQ(l.buckets[1].label, "[-50, 50)");
  EXPECT_EQ(l.buckets[11].label, "[950, 1000)");
  EXPECT_EQ(l.buckets.back().label, "[1000, ...)");
}

TEST(BpfCodegenLive, AFullMapCountsTheEventsOfKeysThatDidNotFit) {
  REQUIRE_ROOT();
  const auto fmt = format("syscalls", "sys_enter_lseek");
  // No target: a filter keeps the calls on this test's own fd (three children of 100 distinct
  // offsets; another copy of the syscaller beside the test uses another fd).
  KernelPlan plan = count_plan(fmt, {field_of(fmt, "offset")}, {"offset"});
  plan.aggregation.max_keys = 16;
  plan.probes[0].filter = {
      {cmp(fld(field_of(fmt, "fd")), Cmp::kEq, num(tracer::testing::own_fd()))}, 0};
  Built b = build(plan);
  ASSERT_TRUE(b.obj);
  auto ev = attach_tracepoint(*b.obj, b.prog.programs[0], fmt.id);
  ::setenv("SYSCALLER_FD", std::to_string(tracer::testing::own_fd()).c_str(), 1);
  for (int run = 0; run < 3; ++run) {
    Spawn child(syscaller("lseek", 100));
    child.go();
    EXPECT_EQ(child.wait(), 0);
  }
  Reader r(*b.obj, b.prog);
  auto s = r.flip_and_read();
  ASSERT_TRUE(s.has_value()) << s.error().describe();
  ASSERT_EQ(s->rows.size(), 16U);
  std::vector<std::uint64_t> keys;
  for (const Rendered& row : render("count", *s)) {
    EXPECT_EQ(row.count, 3U) << key_text(row) << ": the keys that fit are exact";
    keys.push_back(std::get<std::uint64_t>(row.keys[0]));
  }
  std::sort(keys.begin(), keys.end());
  for (std::uint64_t i = 0; i < 16; ++i)
    EXPECT_EQ(keys[i], i) << "the first 16 offsets made it in";
  EXPECT_EQ(s->map_full, 84U * 3) << "every event of the 84 keys that did not fit";
  EXPECT_EQ(s->probes[0].total.map_full, 84U * 3);
  // The next generation has room again: the old keys were deleted.
  Spawn again(syscaller("lseek", 20));
  again.go();
  EXPECT_EQ(again.wait(), 0);
  ::unsetenv("SYSCALLER_FD");
  auto s2 = r.flip_and_read();
  ASSERT_TRUE(s2.has_value());
  EXPECT_EQ(s2->rows.size(), 16U);
  EXPECT_EQ(s2->map_full, 84U * 3 + 4) << "cumulative";
}

// A child makes `n` getppid calls (another process makes n / 2) while this thread flips every
// ~2 ms: the intervals' counts sum to exactly n (and n / 2 for the other when it is a target).
void flip_mid_workload(bool two_targets) {
  const auto fmt = format("syscalls", "sys_enter_getppid");
  constexpr long n = 3'000'000;
  Spawn child(syscaller("getppid", n));
  Spawn noise(syscaller("getppid", n / 2));
  KernelPlan plan = count_plan(fmt, {Field::pid()}, {"pid"});
  plan.tgids = {static_cast<std::uint32_t>(child.pid())};
  if (two_targets)  // a hash map keyed by pid (else an array slot: one constant pid)
    plan.tgids.push_back(static_cast<std::uint32_t>(noise.pid()));
  Built b = build(plan);
  ASSERT_TRUE(b.obj);
  EXPECT_EQ(b.prog.layout.by_probe, !two_targets);
  auto ev = attach_tracepoint(*b.obj, b.prog.programs[0], fmt.id);
  Reader r(*b.obj, b.prog);
  child.go();
  noise.go();
  std::map<std::string, std::uint64_t> total;
  int flips = 0, nonempty = 0;
  std::set<std::uint32_t> generations;
  bool done = false;
  while (!done) {
    done = child.exited() && (!two_targets || noise.exited());
    auto s = r.flip_and_read();
    ASSERT_TRUE(s.has_value()) << s.error().describe();
    ++flips;
    generations.insert(s->generation);
    for (const Rendered& row : render("count", *s))
      total[key_text(row)] += row.count;
    nonempty += s->rows.empty() ? 0 : 1;
    if (!done)
      std::this_thread::sleep_for(2ms);
  }
  auto last = r.flip_and_read();  // nothing can be left: the targets exited before the last flip
  ASSERT_TRUE(last.has_value());
  EXPECT_TRUE(last->rows.empty());
  if (!two_targets)
    noise.wait();
  EXPECT_EQ(total[std::to_string(child.pid())], static_cast<std::uint64_t>(n));
  if (two_targets) {
    EXPECT_EQ(total[std::to_string(noise.pid())], static_cast<std::uint64_t>(n / 2));
  }
  EXPECT_EQ(total.size(), two_targets ? 2U : 1U);
  EXPECT_GE(nonempty, 3) << "the workload spanned several generations (" << flips << " flips)";
  EXPECT_EQ(generations.size(), 2U);
  std::printf("[ measured ] %ld getppid calls over %d flips (%d intervals with events)\n", n, flips,
              nonempty);
}

TEST(BpfCodegenLive, AGenerationFlipMidWorkloadLosesAndDoubleCountsNothing) {
  REQUIRE_ROOT();
  flip_mid_workload(false);
}

TEST(BpfCodegenLive, AGenerationFlipMidWorkloadIsExactInAHashMapToo) {
  REQUIRE_ROOT();
  flip_mid_workload(true);
}

// A program that spins for milliseconds (bpf_loop) on fadvise64 calls of one process: the flip
// must not return while it runs, or an update of the old generation could land after the read.
constexpr std::string_view kSlowProgram = R"C(
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef __u32 __be32;
typedef unsigned short __be16;
typedef __u32 __wsum;
typedef __u64 __be64;
typedef unsigned char __u8;
typedef long long __s64;
typedef int __s32;
typedef unsigned short __u16;
#include <bpf/bpf_helpers.h>
char LICENSE[] SEC("license") = "GPL";
const volatile __u32 target = 0;
struct state { __u64 started, finished; };
struct {
	__uint(type, 2 /* ARRAY */);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct state);
} slow_state SEC(".maps");
static long spin(__u32 i, void *ctx) { return 0; }
SEC("tracepoint")
int slow(void *ctx)
{
	if ((bpf_get_current_pid_tgid() >> 32) != target)
		return 1;
	__u32 zero = 0;
	struct state *s = bpf_map_lookup_elem(&slow_state, &zero);
	if (!s)
		return 1;
	s->started = bpf_ktime_get_ns();
	bpf_loop(1 << 22, spin, 0, 0);
	s->finished = bpf_ktime_get_ns();
	return 1;
}
)C";

TEST(BpfCodegenLive, TheFlipWaitsForProgramsRunningWhenItBegins) {
  REQUIRE_ROOT();
  testing::TempDir dir;
  const auto src = dir.path() / "slow.bpf.c";
  { std::ofstream(src) << kSlowProgram; }
  auto slow = Object::compile_and_open(src, {.vmlinux_dir = dir.path(), .cache_dir = dir.path()});
  ASSERT_TRUE(slow.has_value()) << slow.error().describe();
  ASSERT_TRUE(slow->set_global("target", static_cast<std::uint32_t>(::getpid())).has_value());
  auto loaded = slow->load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  const auto fadvise = format("syscalls", "sys_enter_fadvise64");
  auto slow_event = attach_tracepoint(*slow, "slow", fadvise.id);

  const auto getppid = format("syscalls", "sys_enter_getppid");
  Built b = build(count_plan(getppid, {Field::pid()}, {"pid"}));
  ASSERT_TRUE(b.obj);
  auto ev = attach_tracepoint(*b.obj, b.prog.programs[0], getppid.id);
  Reader r(*b.obj, b.prog);

  struct State {
    std::uint64_t started, finished;
  };
  const auto state = [&] {
    const std::uint32_t zero = 0;
    auto v = slow->lookup_elem("slow_state", std::as_bytes(std::span(&zero, 1)));
    State s{};
    if (v && v->size() == sizeof s)
      std::memcpy(&s, v->data(), sizeof s);
    return s;
  };
  // Catch the slow program running (on a loaded machine this thread may not run until it is
  // done: try again), then flip.
  const std::uint32_t zero = 0;
  const State clear{};
  for (int attempt = 0; attempt < 50; ++attempt) {
    ASSERT_TRUE((slow->update_elem<std::uint32_t, State>("slow_state", zero, clear)).has_value());
    std::thread caller([] { ::syscall(SYS_fadvise64, 12345, 0, 0, POSIX_FADV_NORMAL); });
    while (state().started == 0)
      std::this_thread::yield();
    if (state().finished != 0) {
      caller.join();
      continue;
    }
    auto s = r.flip_and_read();  // began while the slow program was running
    timespec now{};
    ::clock_gettime(CLOCK_MONOTONIC, &now);
    const State after = state();
    caller.join();
    ASSERT_TRUE(s.has_value()) << s.error().describe();
    EXPECT_NE(after.finished, 0U) << "flip_and_read returned while a BPF program was running";
    EXPECT_LE(after.finished, static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL +
                                  static_cast<std::uint64_t>(now.tv_nsec));
    if (after.finished == 0)
      return;
    std::printf("[ measured ] the slow program ran %.1f ms (attempt %d)\n",
                static_cast<double>(after.finished - after.started) / 1e6, attempt + 1);
    return;
  }
  FAIL() << "never caught the slow program running";
}

TEST(BpfCodegenLive, AnotherToolOnTheTracepointKeepsItsEvents) {
  REQUIRE_ROOT();
  const auto fmt = format("syscalls", "sys_enter_getppid");
  Spawn child(syscaller("getppid", kCalls));
  // Two programs: one counts the child; one filters every event out (pid == 1 never calls
  // getppid here). Neither may return 0, which would drop the tracepoint's samples for every
  // perf consumer on the machine.
  KernelPlan counting = count_plan(fmt, {Field::pid()}, {"pid"});
  counting.tgids = {static_cast<std::uint32_t>(child.pid())};
  KernelPlan rejecting = count_plan(fmt, {}, {});
  rejecting.probes[0].filter = {{cmp(fld(Field::pid()), Cmp::kEq, num(1))}, 0};
  Built bc = build(counting), br = build(rejecting);
  ASSERT_TRUE(bc.obj && br.obj);
  auto ec = attach_tracepoint(*bc.obj, bc.prog.programs[0], fmt.id);
  auto er = attach_tracepoint(*br.obj, br.prog.programs[0], fmt.id);

  // The other tool: a sampling event on the child with its own ring.
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT)
      .config(fmt.id)
      .sample_period(1)
      .sample_type(PERF_SAMPLE_TID | PERF_SAMPLE_RAW)
      .flag(perf::Flag::kDisabled);
  const auto layout = perf::SampleLayout::from(a);
  auto other = perf::Event::open(a, {.pid = child.pid(), .cpu = -1});
  ASSERT_TRUE(other.has_value()) << other.error().describe();
  auto ring = perf::Ring::map(other->fd(), {.data_pages = 512});
  ASSERT_TRUE(ring.has_value()) << ring.error().describe();
  ASSERT_TRUE(other->enable().has_value());
  child.go();
  ASSERT_EQ(child.wait(), 0);
  std::uint64_t samples = 0, lost = 0;
  ring->load_head();
  for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
    perf::Record rec;
    ASSERT_EQ(perf::decode(p.record, layout, rec), perf::DecodeError::kOk);
    if (std::holds_alternative<perf::Sample>(rec.body))
      ++samples;
    if (const auto* l = std::get_if<perf::Lost>(&rec.body))
      lost += l->lost;
    ring->consume(p.record.size());
  }
  ring->commit();
  EXPECT_EQ(lost, 0U);
  EXPECT_EQ(samples, static_cast<std::uint64_t>(kCalls)) << "the other tool saw every call";
  Reader rc(*bc.obj, bc.prog), rr(*br.obj, br.prog);
  auto sc = rc.flip_and_read();
  auto sr = rr.flip_and_read();
  ASSERT_TRUE(sc && sr);
  ASSERT_EQ(sc->rows.size(), 1U);
  EXPECT_EQ(render("count", *sc)[0].count, static_cast<std::uint64_t>(kCalls));
  EXPECT_TRUE(sr->rows.empty());
  EXPECT_GE(sr->probes[0].total.hits, static_cast<std::uint64_t>(kCalls));
}

TEST(BpfCodegenLive, LatencyPairsEntryAndExitByThread) {
  REQUIRE_ROOT();
  const auto enter = format("syscalls", "sys_enter_getppid");
  const auto exit = format("syscalls", "sys_exit_getppid");
  Spawn child(syscaller("getppid", kCalls));
  KernelPlan plan;
  plan.probes.push_back(
      {.name = "enter", .kind = ProbeKind::kTracepoint, .record_size = record_size(enter)});
  plan.probes.push_back({.name = "exit",
                         .kind = ProbeKind::kTracepoint,
                         .keys = {Field::comm()},
                         .value = Field::duration(),
                         .record_size = record_size(exit)});
  plan.latency = Latency{.entry_probe = 0, .exit_probe = 1};
  plan.aggregation = {.agg = agg_of("hist"), .key_names = {"comm"}, .value_name = "duration"};
  plan.tgids = {static_cast<std::uint32_t>(child.pid())};
  Built b = build(plan);
  ASSERT_TRUE(b.obj);
  auto e0 = attach_tracepoint(*b.obj, b.prog.programs[0], enter.id);
  auto e1 = attach_tracepoint(*b.obj, b.prog.programs[1], exit.id);
  child.go();
  ASSERT_EQ(child.wait(), 0);
  Reader r(*b.obj, b.prog);
  auto s = r.flip_and_read();
  ASSERT_TRUE(s.has_value()) << s.error().describe();
  ASSERT_EQ(s->rows.size(), 1U);
  EXPECT_EQ(std::get<std::string>(s->rows[0].keys[0]), "tracer_test_sys");
  const Rendered row = render("hist", *s, {{"by", testing::cv_list({"comm"})}})[0];
  EXPECT_EQ(row.count, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(s->pipeline.paired, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(s->pipeline.unmatched_exits, 0U);
  EXPECT_EQ(s->pipeline.unmatched_entries, 0U);
  EXPECT_EQ(s->pipeline.out_of_order, 0U);
  EXPECT_EQ(s->pending, 0U);
  ASSERT_FALSE(row.buckets.empty());
  EXPECT_GE(row.buckets.front().lo, 1) << "durations are positive: no (..., 0) or [0] bucket";
  EXPECT_EQ(s->probes[0].total.hits, static_cast<std::uint64_t>(kCalls));
  EXPECT_EQ(s->probes[1].total.hits, static_cast<std::uint64_t>(kCalls));
}

TEST(BpfCodegenLive, StringKeysAndFiltersCommAndDataLoc) {
  REQUIRE_ROOT();
  const auto exec = format("sched", "sched_process_exec");
  const auto getppid = format("syscalls", "sys_enter_getppid");
  // exec: count by filename (a __data_loc string) where filename == the syscaller's path.
  KernelPlan by_file = count_plan(exec, {field_of(exec, "filename")}, {"filename"});
  by_file.probes[0].filter = {
      {cmp(fld(field_of(exec, "filename")), Cmp::kEq, str(TRACER_SYSCALLER_PATH))}, 0};
  // A short key: the path is cut (and counted), a prefix filter still matches.
  KernelPlan cut = by_file;
  cut.aggregation.string_key_bytes = 8;
  cut.probes[0].filter = {{cmp(fld(field_of(exec, "filename")), Cmp::kEq, str("/*", true))}, 0};
  // getppid: count by comm where comm == "tracer_test_sys" (the syscaller's 15-byte comm).
  KernelPlan by_comm = count_plan(getppid, {Field::comm()}, {"comm"});
  by_comm.probes[0].filter = {{cmp(fld(Field::comm()), Cmp::kEq, str("tracer_test_sys"))}, 0};
  // The test's own two children (forked now, exec'd on go()): another copy of the syscaller
  // beside the test has the same comm and path, and is not counted.
  Spawn first(syscaller("getppid", 1000)), second(syscaller("getppid", 1000));
  for (KernelPlan* plan : {&by_file, &cut, &by_comm})
    plan->tgids = {static_cast<std::uint32_t>(first.pid()),
                   static_cast<std::uint32_t>(second.pid())};
  Built bf = build(by_file), bc = build(cut), bm = build(by_comm);
  ASSERT_TRUE(bf.obj && bc.obj && bm.obj);
  EXPECT_FALSE(bf.prog.layout.percpu) << "string keys use one shared map";
  auto ef = attach_tracepoint(*bf.obj, bf.prog.programs[0], exec.id);
  auto ec = attach_tracepoint(*bc.obj, bc.prog.programs[0], exec.id);
  auto em = attach_tracepoint(*bm.obj, bm.prog.programs[0], getppid.id);
  // Both released before either is waited for: a child forked later holds the earlier one's
  // go pipe until it execs (go() is its EOF).
  first.go();
  second.go();
  ASSERT_EQ(first.wait(), 0);
  ASSERT_EQ(second.wait(), 0);
  Reader rf(*bf.obj, bf.prog), rc(*bc.obj, bc.prog), rm(*bm.obj, bm.prog);
  auto sf = rf.flip_and_read();
  auto sc = rc.flip_and_read();
  auto sm = rm.flip_and_read();
  ASSERT_TRUE(sf && sc && sm);
  ASSERT_EQ(sf->rows.size(), 1U);
  EXPECT_EQ(std::get<std::string>(sf->rows[0].keys[0]), TRACER_SYSCALLER_PATH);
  EXPECT_EQ(render("count", *sf)[0].count, 2U);
  EXPECT_EQ(sf->truncated, 0U);
  const auto cut_rows = by_key("count", *sc);
  ASSERT_TRUE(cut_rows.contains(std::string(TRACER_SYSCALLER_PATH).substr(0, 7)));
  EXPECT_GE(cut_rows.at(std::string(TRACER_SYSCALLER_PATH).substr(0, 7)).count, 2U);
  EXPECT_GE(sc->truncated, 2U);
  ASSERT_EQ(sm->rows.size(), 1U);
  EXPECT_EQ(std::get<std::string>(sm->rows[0].keys[0]), "tracer_test_sys");
  EXPECT_EQ(render("count", *sm)[0].count, 2000U);
}

TEST(BpfCodegenLive, UprobeArgumentsAndUretprobeReturnValues) {
  REQUIRE_ROOT();
  auto pmu = perf::find_pmu("uprobe");
  if (!pmu)
    GTEST_SKIP() << "no uprobe PMU: " << pmu.error().describe();
  auto off = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(off.has_value()) << off.error().describe();
  constexpr long k = 3000;  // tracer_test_fn(1..k) returns 3 * arg
  Spawn target({TRACER_UPROBE_TARGET, std::to_string(k)});
  KernelPlan plan;
  plan.probes.push_back(
      {.name = "fn", .kind = ProbeKind::kUprobe, .keys = {Field::probe()}, .value = Field::arg(0)});
  plan.probes.push_back({.name = "fn_ret",
                         .kind = ProbeKind::kUretprobe,
                         .keys = {Field::probe()},
                         .value = Field::retval()});
  plan.aggregation = {.agg = agg_of("sum"), .key_names = {"probe"}, .value_name = "v"};
  plan.tgids = {static_cast<std::uint32_t>(target.pid())};
  Built b = build(plan);
  ASSERT_TRUE(b.obj);
  const std::string path = TRACER_UPROBE_TARGET;
  std::vector<perf::Event> events;
  for (int ret = 0; ret < 2; ++ret) {
    perf::EventAttr a;
    a.type(pmu->type)
        .config(ret)  // format: retprobe = config:0
        .config1(reinterpret_cast<std::uintptr_t>(path.c_str()))
        .config2(*off)
        .sample_period(1)
        .flag(perf::Flag::kDisabled);
    auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
    ASSERT_TRUE(ev.has_value()) << ev.error().describe();
    ASSERT_TRUE(ev->set_bpf(*b.obj->program_fd(b.prog.programs[ret])).has_value());
    events.push_back(std::move(*ev));
  }
  target.go();
  ASSERT_EQ(target.wait(), 0);
  Reader r(*b.obj, b.prog);
  auto s = r.flip_and_read();
  ASSERT_TRUE(s.has_value()) << s.error().describe();
  const auto rows = by_key("sum", *s);
  ASSERT_EQ(rows.size(), 2U);
  EXPECT_EQ(rows.at("fn").count, static_cast<std::uint64_t>(k));
  EXPECT_EQ(std::get<std::int64_t>(rows.at("fn").values[0]), k * (k + 1) / 2);
  EXPECT_EQ(rows.at("fn_ret").count, static_cast<std::uint64_t>(k));
  EXPECT_EQ(std::get<std::int64_t>(rows.at("fn_ret").values[0]), 3 * k * (k + 1) / 2);
}

}  // namespace
}  // namespace tracer::kernel::gen
