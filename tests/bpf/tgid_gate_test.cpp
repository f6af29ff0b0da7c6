// tgid_gate.bpf.c live: attached to syscalls:sys_enter_fadvise64 (a syscall only this test
// makes, because the gate drops that tracepoint's samples for every perf consumer while it is
// attached), the tracepoint's own rings hold exactly the listed process's calls.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "support/child.hpp"
#include "tracer/bpf/object.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::bpf {
namespace {

constexpr int kGateBadFd = 12345;  // fadvise64 on it fails with EBADF
constexpr int kCalls = 500, kGateParentCalls = 100;

void fadvises(int first, int n) {
  for (int i = first; i < first + n; ++i)
    ::syscall(SYS_fadvise64, kGateBadFd, i, 0, POSIX_FADV_NORMAL);
}

TEST(BpfTgidGate, TheTracepointRingHoldsOnlyTheListedProcessSamples) {
  auto fs = tracefs::Tracefs::open();
  ASSERT_TRUE(fs.has_value()) << fs.error().describe();
  auto format = fs->format({"syscalls", "sys_enter_fadvise64"});
  ASSERT_TRUE(format.has_value()) << format.error().describe();
  const tracefs::Field* offset = format->field("offset");
  ASSERT_NE(offset, nullptr);

  auto obj = Object::open_shipped("tgid_gate");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->load().has_value());
  testing::Child child([](int) { fadvises(0, kCalls); });
  ASSERT_TRUE((obj->update_elem<std::uint32_t, std::uint8_t>(
                   "tgids", static_cast<std::uint32_t>(child.pid()), 1))
                  .has_value());

  // One sampling event and ring per CPU; the program is attached once, to CPU 0's event, and
  // gates the tracepoint on every CPU (TOOLCHAIN.md).
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT)
      .config(format->id)
      .sample_period(1)
      .sample_type(PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_RAW)
      .flag(perf::Flag::kDisabled)
      .clockid(CLOCK_MONOTONIC);
  const auto layout = perf::SampleLayout::from(a);
  auto cpus = perf::online_cpus();
  ASSERT_TRUE(cpus.has_value());
  std::vector<perf::Event> events;
  std::vector<perf::Ring> rings;
  for (const int cpu : *cpus) {
    auto ev = perf::Event::open(a, {.pid = -1, .cpu = cpu});
    ASSERT_TRUE(ev.has_value()) << ev.error().describe();
    auto ring = perf::Ring::map(ev->fd(), {.data_pages = 16});
    ASSERT_TRUE(ring.has_value()) << ring.error().describe();
    events.push_back(std::move(*ev));
    rings.push_back(std::move(*ring));
  }
  auto prog = obj->program_fd("tgid_gate");
  ASSERT_TRUE(prog.has_value());
  ASSERT_TRUE(events.front().set_bpf(*prog).has_value());
  for (auto& ev : events)
    ASSERT_TRUE(ev.enable().has_value());

  fadvises(0, kGateParentCalls);  // gated: this process is not in `tgids`
  ASSERT_TRUE(child.go());
  fadvises(0, kGateParentCalls);
  for (auto& ev : events)
    ASSERT_TRUE(ev.disable().has_value());

  int child_samples = 0, other_samples = 0;
  std::uint64_t lost = 0;
  std::vector<std::int64_t> offsets;
  for (auto& ring : rings) {
    std::int64_t last = -1;
    ring.load_head();
    for (auto p = ring.peek(); !p.record.empty(); p = ring.peek()) {
      perf::Record r;
      ASSERT_EQ(perf::decode(p.record, layout, r), perf::DecodeError::kOk);
      if (const auto* l = std::get_if<perf::Lost>(&r.body))
        lost += l->lost;
      if (const auto* s = std::get_if<perf::Sample>(&r.body)) {
        if (s->pid == static_cast<std::uint32_t>(child.pid())) {
          ++child_samples;
          const auto off = tracefs::read_int(*offset, s->raw);
          ASSERT_TRUE(off.has_value());
          EXPECT_GT(*off, last) << "in call order within one CPU's ring";
          last = *off;
          offsets.push_back(*off);
        } else {
          ++other_samples;
        }
      }
      ring.consume(p.record.size());
    }
    ring.commit();
  }
  EXPECT_EQ(child_samples, kCalls);
  EXPECT_EQ(other_samples, 0) << "the gate returned 0 for every other process";
  EXPECT_EQ(lost, 0U);
  std::sort(offsets.begin(), offsets.end());
  for (int i = 0; i < static_cast<int>(offsets.size()); ++i)
    ASSERT_EQ(offsets[i], i) << "every call once";
}

}  // namespace
}  // namespace tracer::bpf
