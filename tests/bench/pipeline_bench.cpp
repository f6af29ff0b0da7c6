// Pipeline throughput: decode -> filter -> count-by-key over pre-built ring bytes (tracepoint
// samples with the fake format of tests/support/stage_batches.hpp), in batches of 512 as the
// engine hands them on. Reports records/s and allocations per record (operator new calls counted
// by tests/support/alloc_counter.cpp during the timed loop, after one warm-up pass).
#include <benchmark/benchmark.h>

#include <cstdio>

#include "plugins/stages/aggregate.hpp"
#include "support/alloc_counter.hpp"
#include "support/stage_batches.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/perf/ring_reader.hpp"
#include "tracer/pipeline.hpp"

namespace {

using namespace tracer;
using tracer::perf::Ring;

constexpr std::size_t kBatch = 512;

struct Fixture {
  ProbeInfo probe = testing::fake_probe(0, "fake");
  testing::SyntheticRing synth{64};
  std::uint64_t records = 0;
  std::uint64_t start = 0;
  Fixture() {
    start = synth.data_size() - 40;  // one record wraps per pass, as on a live ring
    synth.set_position(start);
    static constexpr const char* kNames[] = {"bash",     "sshd",   "idle-a", "nginx",
                                             "postgres", "idle-b", "java",   "python3"};
    std::uint64_t bytes = 0;
    while (bytes < synth.data_size() * 7 / 8) {
      testing::FakeEvent e;
      e.nr = static_cast<std::int32_t>(records % 5);
      e.path = "/var/lib/data";
      e.bytes = static_cast<std::int64_t>(records * 7 % 4096);
      e.name = kNames[records % 8];
      testing::SampleSpec s;
      s.pid = static_cast<std::uint32_t>(1000 + records % 16);
      s.tid = s.pid;
      s.time = records;
      s.cpu = 1;
      s.raw = testing::fake_raw(e);
      const auto rec = testing::encode_sample(probe.layout, s);
      if (!synth.write(rec))
        break;
      ++records;
      bytes += rec.size();
    }
    synth.publish();
  }
  void rewind() { synth.meta()->data_tail = start; }

  // One pass over the ring: decode into RecordRefs, hand on batches of kBatch.
  template <typename Handler>
  void drain(std::vector<RecordRef>& refs, Handler&& handler) {
    rewind();
    auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
    ring->load_head();
    std::size_t n = 0;
    for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
      RecordRef& r = refs[n];
      r.probe = 0;
      r.cpu = 1;
      if (perf::decode(p.record, probe.layout, r.record) == perf::DecodeError::kOk)
        ++n;
      ring->consume(p.record.size());
      if (n == kBatch) {
        handler(Batch{std::span(refs.data(), n)});
        n = 0;
      }
    }
    if (n != 0)
      handler(Batch{std::span(refs.data(), n)});
    ring->commit();
  }
};

// allocs: operator new calls inside the handler (decode and pipeline); the replay loop itself
// re-adopts the ring once per pass (Ring::adopt allocates its wrap scratch buffer): a benchmark
// artifact, not steady state, so it is counted outside.
void report(benchmark::State& state, const Fixture& f, std::uint64_t allocs) {
  const auto total = static_cast<double>(state.iterations()) * static_cast<double>(f.records);
  state.SetItemsProcessed(static_cast<std::int64_t>(total));
  state.counters["records/s"] = benchmark::Counter(total, benchmark::Counter::kIsRate);
  state.counters["allocs/record"] = static_cast<double>(allocs) / total;
  state.counters["ns/record"] =
      benchmark::Counter(total, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

// Reference: decoding into RecordRefs alone.
void BM_DecodeOnly(benchmark::State& state) {
  Fixture f;
  std::vector<RecordRef> refs(kBatch);
  std::uint64_t sum = 0;
  std::uint64_t allocs = 0;
  const auto h = [&](const Batch& b) {
    testing::alloc_count_start();
    sum += b.records.size();
    allocs += testing::alloc_count_stop();
  };
  f.drain(refs, h);
  allocs = 0;
  for (auto _ : state)
    f.drain(refs, h);
  benchmark::DoNotOptimize(sum);
  report(state, f, allocs);
}
BENCHMARK(BM_DecodeOnly);

/// Runs the fixture's passes through a pipeline of `stages` ({use, options} each): decoded
/// batches, and with `ordered` a round after each pass (the engine's passes) through the
/// time-order merge. `force_order`: merge even when no stage asks for it.
void run_pipeline(benchmark::State& state,
                  const std::vector<std::pair<std::string, ConfigTable>>& stages,
                  bool ordered,
                  bool force_order) {
  Fixture f;
  std::FILE* devnull = std::fopen("/dev/null", "we");
  Sink sink = Sink::to_file(devnull);
  Pipeline pipeline(sink, {.max_events = kBatch,
                           .comm = {},
                           .implicit_print = false,
                           .reorder = {},
                           .force_order = force_order});
  Diagnostics diags;
  for (const auto& [use, options] : stages)
    pipeline.add(stage_registry(), use, testing::cv_table(options), diags);
  const std::vector<ProbeInfo> probes = {f.probe};
  pipeline.bind(probes, diags);
  if (!diags.empty()) {
    state.SkipWithError(diags.format().c_str());
    std::fclose(devnull);
    return;
  }
  pipeline.start(std::chrono::nanoseconds{0});
  std::vector<RecordRef> refs(kBatch);
  std::uint64_t allocs = 0;
  const auto h = [&](const Batch& b) {
    testing::alloc_count_start();
    pipeline.on_batch(b);
    allocs += testing::alloc_count_stop();
  };
  const auto pass = [&] {
    f.drain(refs, h);
    if (ordered) {
      testing::alloc_count_start();
      pipeline.round();
      allocs += testing::alloc_count_stop();
    }
  };
  pass();  // warm-up: keys, the merge's queues
  pass();
  allocs = 0;
  for (auto _ : state)
    pass();
  report(state, f, allocs);
  state.counters["kept"] =
      static_cast<double>(pipeline.stats().records - pipeline.stats().dropped) /
      static_cast<double>(pipeline.stats().records);
  pipeline.stop(std::chrono::nanoseconds{1});
  std::fclose(devnull);
}

// decode -> filter -> count by (name, pid); with range(0) = 1 the records are merged in time
// order first (tracer::Reorder, a round after each pass over the ring, as the engine's passes):
// the cost the ordered stages (latency, per-event outputs, comm) pay.
void BM_DecodeFilterCount(benchmark::State& state) {
  const bool ordered = state.range(0) != 0;
  run_pipeline(state,
               {{"filter", {{"expr", testing::cv("nr >= 1 && name != \"idle*\"")}}},
                {"count", {{"by", testing::cv_list({"name", "pid"})}}}},
               ordered, ordered);
}
BENCHMARK(BM_DecodeFilterCount)->Arg(0)->Arg(1)->ArgName("ordered");

// decode -> count by (comm, pid), the default recipe's key: binding `comm` merges the records in
// time order (tracer::Reorder, a round after each pass, as the engine's) so that each event gets
// its thread's name at its time.
void BM_OrderedCountByCommPid(benchmark::State& state) {
  run_pipeline(state, {{"count", {{"by", testing::cv_list({"comm", "pid"})}}}}, true, false);
}
BENCHMARK(BM_OrderedCountByCommPid);

// A plugin stage (examples/plugin/sum_by.cpp through the C ABI: the sum of `bytes` by pid)
// against the built-in `sum` of the same field by the same key, on the same batches of 512. The
// plugin's calls run on its own thread within a budget (plugins/stages/plugin_stage.hpp): one
// hand-over per batch, a lock and a copy per field read; its ns/record over the built-in's is
// the cost of that isolation.
#ifdef TRACER_PLUGIN_DIR
void BM_PluginSumBy(benchmark::State& state) {
  run_pipeline(
      state,
      {{"plugin",
        {{"plugin", testing::cv(std::string(TRACER_PLUGIN_DIR) + "/libtracer_plugin_sum_by.so")},
         {"key", testing::cv("pid")},
         {"value", testing::cv("bytes")}}}},
      false, false);
}
BENCHMARK(BM_PluginSumBy);
#endif

void BM_BuiltinSumBy(benchmark::State& state) {
  run_pipeline(state,
               {{"sum", {{"field", testing::cv("bytes")}, {"by", testing::cv_list({"pid"})}}}},
               false, false);
}
BENCHMARK(BM_BuiltinSumBy);

/// A pipeline of one `count` by `by` (range(0) of the count benchmarks: 0 none, 1 pid, 2 pid and
/// cpu, 3 name) bound to the fixture's probe and started, writing to /dev/null; `ok` false after
/// SkipWithError.
struct CountPipeline {
  std::FILE* devnull = std::fopen("/dev/null", "we");
  Sink sink = Sink::to_file(devnull);
  Pipeline pipeline{sink, {.max_events = kBatch, .comm = {}, .implicit_print = false}};
  CountPipeline(const CountPipeline&) = delete;
  CountPipeline& operator=(const CountPipeline&) = delete;
  CountPipeline(benchmark::State& state, const ProbeInfo& probe, bool& ok) {
    static const std::vector<std::vector<std::string>> kBy = {
        {}, {"pid"}, {"pid", "cpu"}, {"name"}, {"comm", "pid"}};
    const auto& by = kBy[static_cast<std::size_t>(state.range(0))];
    Diagnostics diags;
    ConfigTable options;
    if (!by.empty())
      options.emplace_back("by", testing::cv_list(by));
    pipeline.add(stage_registry(), "count", testing::cv_table(std::move(options)), diags);
    const std::vector<ProbeInfo> probes = {probe};
    pipeline.bind(probes, diags);
    ok = diags.empty();
    if (!ok)
      state.SkipWithError(diags.format().c_str());
    else
      pipeline.start(std::chrono::nanoseconds{0});
  }
  ~CountPipeline() {
    pipeline.stop(std::chrono::nanoseconds{1});
    std::fclose(devnull);
  }
};

// decode -> count, no filter: the per-event cost of an aggregation's keys. range(0) picks `by`:
// 0 none, 1 pid, 2 pid and cpu (fixed-width integers), 3 name (a char[16] tracefs field: a
// string key; `comm` would also merge the records in time order, a cost of its own). range(1)
// = 0 keys every state by its encoded bytes (stages::set_fixed_keys_enabled(false)): the
// fixed-width path's A/B in one run.
void BM_DecodeCount(benchmark::State& state) {
  stages::set_fixed_keys_enabled(state.range(1) != 0);
  Fixture f;
  bool ok = false;
  CountPipeline count(state, f.probe, ok);
  stages::set_fixed_keys_enabled(true);
  if (!ok)
    return;
  Pipeline& pipeline = count.pipeline;
  std::vector<RecordRef> refs(kBatch);
  std::uint64_t allocs = 0;
  const auto h = [&](const Batch& b) {
    testing::alloc_count_start();
    pipeline.on_batch(b);
    allocs += testing::alloc_count_stop();
  };
  f.drain(refs, h);  // warm-up: keys
  allocs = 0;
  for (auto _ : state)
    f.drain(refs, h);
  report(state, f, allocs);
}
BENCHMARK(BM_DecodeCount)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->ArgNames({"by", "fixed"});

// The in-place path (Pipeline::on_in_place): count by the same keys over the same events, as
// the BPF delivery channel hands them on (InPlaceSample batches of 256 viewing their records in
// the ring): no record decoded or rebuilt, no Event. range(0) picks `by` as BM_DecodeCount's;
// range(1) = 0: every event of one process (a count's runs), 1: 16 processes in turn.
void BM_DeliveredCount(benchmark::State& state) {
  Fixture f;
  bool ok = false;
  ProbeInfo delivered = f.probe;
  delivered.delivered = true;
  delivered.delivered_comm = true;  // by:4, comm and pid: the name at the hit, in the header
  CountPipeline count(state, delivered, ok);
  if (!ok)
    return;
  Pipeline& pipeline = count.pipeline;
  pipeline.use_comm_in_place();  // by comm: read from each record, as Session decides
  if (!pipeline.takes_in_place(0)) {
    state.SkipWithError("the pipeline does not take delivered samples");
    return;
  }
  // The records of the fixture's ring as the BPF ring buffer holds them: an 8-byte ring header,
  // the DeliveredHeader, the tracepoint's record, padded to 8 bytes.
  std::vector<RecordRef> refs(kBatch);
  std::vector<std::byte> arena;
  std::vector<std::size_t> offsets;
  f.drain(refs, [&](const Batch& b) {
    for (const RecordRef& r : b.records) {
      const auto& smp = std::get<perf::Sample>(r.record.body);
      DeliveredHeader h{.time = smp.time,
                        .probe = 0,
                        .size = static_cast<std::uint32_t>(smp.raw.size()),
                        .pid = state.range(1) != 0 ? smp.pid : 1000,
                        .tid = smp.tid,
                        .cpu = smp.cpu,
                        .flags = DeliveredHeader::kCommFlag,
                        .comm = {}};
      std::memcpy(h.comm, "task-", 5);
      h.comm[5] = static_cast<char>('a' + smp.pid % 16);
      arena.resize(arena.size() + 8);
      offsets.push_back(arena.size());
      const auto* hb = reinterpret_cast<const std::byte*>(&h);
      arena.insert(arena.end(), hb, hb + sizeof(h));
      arena.insert(arena.end(), smp.raw.begin(), smp.raw.end());
      arena.resize((arena.size() + 7) / 8 * 8);
    }
  });
  std::vector<InPlaceSample> samples;
  for (const std::size_t o : offsets)
    samples.push_back(InPlaceSample::delivered(arena.data() + o));
  constexpr std::size_t kCompact = 256;
  const auto pass = [&] {
    for (std::size_t i = 0; i < samples.size(); i += kCompact)
      pipeline.on_in_place(std::span(samples).subspan(i, std::min(kCompact, samples.size() - i)));
  };
  pass();  // warm-up: keys
  testing::alloc_count_start();
  for (auto _ : state)
    pass();
  const std::uint64_t allocs = testing::alloc_count_stop();
  report(state, f, allocs);
}
BENCHMARK(BM_DeliveredCount)->ArgsProduct({{0, 1, 2, 3, 4}, {0, 1}})->ArgNames({"by", "pids"});

// The whole per-event path from a perf ring, as the engine runs it: perf::RingReader drains the
// fixture's ring (16 processes in turn) into a count by range(0) (as BM_DecodeCount's). range(1)
// = 1: the samples go to the count in place (Pipeline::on_in_place: no decode, no Event);
// 0: decoded into RecordRefs and run as Events (Pipeline::on_batch), the A/B in one run.
void BM_RingCount(benchmark::State& state) {
  Fixture f;
  bool ok = false;
  CountPipeline count(state, f.probe, ok);
  if (!ok)
    return;
  Pipeline& pipeline = count.pipeline;
  const bool in_place = state.range(1) != 0;
  if (in_place && !pipeline.takes_in_place(0)) {
    state.SkipWithError("the pipeline does not take the ring's samples in place");
    return;
  }
  auto ring = Ring::adopt(f.synth.meta_and_data(), {}, false);
  if (!ring) {
    state.SkipWithError("Ring::adopt failed");
    return;
  }
  perf::RingReader reader(std::move(*ring), 0, 1, &f.probe.layout, kBatch);
  std::uint64_t allocs = 0;
  const BatchHandler batches = [&](const Batch& b) { pipeline.on_batch(b); };
  const InPlaceHandler samples = [&](std::span<const InPlaceSample> s) {
    pipeline.on_in_place(s);
    return true;
  };
  const auto pass = [&] {
    f.rewind();
    reader.ring().seek(f.start);
    testing::alloc_count_start();
    reader.drain(batches, in_place ? &samples : nullptr);
    allocs += testing::alloc_count_stop();
  };
  pass();  // warm-up: keys, the reader's in-place batch
  allocs = 0;
  for (auto _ : state)
    pass();
  report(state, f, allocs);
  if (reader.stats().decode_errors != 0)
    state.SkipWithError("decode errors");
}
BENCHMARK(BM_RingCount)->ArgsProduct({{0, 1, 2, 3}, {0, 1}})->ArgNames({"by", "in_place"});

}  // namespace
