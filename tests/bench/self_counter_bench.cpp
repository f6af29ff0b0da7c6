// Self-monitoring reads (tracer/perf/self_counter.hpp) against a plain read() of the same
// counter's fd, in one run: SelfCounter::read (the user page and rdpmc where the PMU allows,
// else one read()), SelfCounter::read_syscall, and Event::read (tracer's general decoding read).
// On a machine without a hardware PMU every self read takes the read() fallback: the figure then
// shows what checking the page costs on top of the system call. With one (cycles, instructions),
// the hardware rows show the user-page path.
#include <benchmark/benchmark.h>
#include <linux/perf_event.h>
#include <unistd.h>

#include <cstdint>

#include "tracer/perf/event.hpp"
#include "tracer/perf/self_counter.hpp"

namespace {

using tracer::perf::EventAttr;
using tracer::perf::SelfCounter;

EventAttr attr_of(std::uint32_t type, std::uint64_t config) {
  EventAttr a;
  a.type(type).config(config);
  return a;
}

std::optional<SelfCounter> open_or_skip(benchmark::State& state,
                                        std::uint32_t type,
                                        std::uint64_t config) {
  auto c = SelfCounter::open(attr_of(type, config));
  if (!c) {
    state.SkipWithError(("cannot open the counter: " + c.error().message).c_str());
    return std::nullopt;
  }
  return std::move(*c);
}

void BM_PlainRead(benchmark::State& state) {
  auto c = open_or_skip(state, static_cast<std::uint32_t>(state.range(0)),
                        static_cast<std::uint64_t>(state.range(1)));
  if (!c)
    return;
  std::uint64_t buf[3];
  for (auto _ : state) {
    benchmark::DoNotOptimize(::read(c->fd(), buf, sizeof buf));
    benchmark::ClobberMemory();
  }
}

void BM_SelfRead(benchmark::State& state) {
  auto c = open_or_skip(state, static_cast<std::uint32_t>(state.range(0)),
                        static_cast<std::uint64_t>(state.range(1)));
  if (!c)
    return;
  for (auto _ : state)
    benchmark::DoNotOptimize(c->read());
  state.SetLabel(c->user_readable() ? "user page + rdpmc" : "read() fallback");
}

void BM_SelfReadSyscall(benchmark::State& state) {
  auto c = open_or_skip(state, static_cast<std::uint32_t>(state.range(0)),
                        static_cast<std::uint64_t>(state.range(1)));
  if (!c)
    return;
  for (auto _ : state)
    benchmark::DoNotOptimize(c->read_syscall());
}

void BM_EventRead(benchmark::State& state) {
  EventAttr a = attr_of(static_cast<std::uint32_t>(state.range(0)),
                        static_cast<std::uint64_t>(state.range(1)));
  a.read_format(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING);
  auto ev = tracer::perf::Event::open(a, {.pid = 0, .cpu = -1});
  if (!ev) {
    state.SkipWithError(("cannot open the counter: " + ev.error().message).c_str());
    return;
  }
  for (auto _ : state)
    benchmark::DoNotOptimize(ev->read());
}

// {type, config}: task-clock (software), instructions (hardware, where there is a PMU).
#define COUNTERS                                       \
  Args({PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK}) \
      ->Args({PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS})

BENCHMARK(BM_PlainRead)->COUNTERS;
BENCHMARK(BM_SelfRead)->COUNTERS;
BENCHMARK(BM_SelfReadSyscall)->COUNTERS;
BENCHMARK(BM_EventRead)->COUNTERS;

}  // namespace
