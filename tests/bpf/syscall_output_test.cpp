// syscall_output.bpf.c live: attached to syscalls:sys_enter_readahead (a syscall only this test
// makes), it emits one event per call of the processes in `tgids` through the output channel.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <map>
#include <string>

#include "support/child.hpp"
#include "support/temp_dir.hpp"
#include "syscall_output.h"
#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::bpf {
namespace {

constexpr int kBadFd = 12345;  // readahead on it fails with EBADF: harmless, with arguments
constexpr int kSteps = 5, kPerStep = 100, kParentCalls = 100;
constexpr std::uint32_t kReadaheadArgs = 3;  // fd, offset, count

void readaheads(int first, int n) {
  for (int i = first; i < first + n; ++i)
    ::syscall(SYS_readahead, kBadFd, i, 7);
}

template <typename T>
T field(const std::span<const std::byte> raw, const SchemaField& f, std::uint32_t index = 0) {
  T v{};
  EXPECT_EQ(f.element_size, sizeof(T)) << f.name;
  EXPECT_LE(f.offset + (index + 1) * sizeof(T), raw.size()) << f.name;
  std::memcpy(&v, raw.data() + f.offset + index * sizeof(T), sizeof(T));
  return v;
}

// The carrier tracepoint event: cpu 0, any task, counting only (no ring): it exists so the
// program can be attached, and it samples nothing anybody reads.
Result<perf::Event> tracepoint_event(const char* event) {
  TRACER_ASSIGN_OR_RETURN(auto fs, tracefs::Tracefs::open());
  TRACER_ASSIGN_OR_RETURN(auto id, fs.tracepoint_id({"syscalls", event}));
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(id).sample_period(1).sample_type(PERF_SAMPLE_RAW);
  a.flag(perf::Flag::kDisabled);
  return perf::Event::open(a, {.pid = -1, .cpu = 0});
}

TEST(BpfSyscallOutput, EmitsExactlyTheListedProcessCallsThroughTheOutputChannel) {
  auto obj = Object::open_file(TRACER_BPF_SYSCALL_OUTPUT_OBJECT);
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->set_global("nr_args", kReadaheadArgs).has_value());
  auto loaded = obj->load();
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  auto schema = obj->struct_schema("syscall_output_event");
  ASSERT_TRUE(schema.has_value()) << schema.error().describe();
  const SchemaField *ts = schema->field("ts"), *pid = schema->field("pid"),
                    *tid = schema->field("tid"), *nr = schema->field("nr"),
                    *args = schema->field("args"), *comm = schema->field("comm");
  ASSERT_TRUE(ts && pid && tid && nr && args && comm);

  auto channel = OutputChannel::open(*obj, "events", {.data_pages = 32});
  ASSERT_TRUE(channel.has_value()) << channel.error().describe();
  std::size_t online = 0;
  for (auto& c : channel->cpus())
    online += c.has_value() ? 1 : 0;
  EXPECT_EQ(online, static_cast<std::size_t>(::sysconf(_SC_NPROCESSORS_ONLN)));

  testing::Child child([](int k) { readaheads(k * kPerStep, kPerStep); });
  ASSERT_TRUE((obj->update_elem<std::uint32_t, std::uint8_t>(
                   "tgids", static_cast<std::uint32_t>(child.pid()), 1))
                  .has_value());
  auto ev = tracepoint_event("sys_enter_readahead");
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto prog = obj->program_fd("syscall_output");
  ASSERT_TRUE(prog.has_value());
  ASSERT_TRUE(ev->set_bpf(*prog).has_value());
  ASSERT_TRUE(ev->enable().has_value());

  const std::string child_comm = testing::slurp("/proc/" + std::to_string(child.pid()) + "/comm");
  std::map<std::uint32_t, std::int64_t> last_offset_per_cpu;
  std::int64_t total = 0;
  std::uint64_t lost = 0, last_ts = 0;
  const auto drain = [&] {
    for (auto& c : channel->cpus()) {
      if (!c)
        continue;
      c->ring.load_head();
      for (auto p = c->ring.peek(); !p.record.empty(); p = c->ring.peek()) {
        perf::Record r;
        ASSERT_EQ(perf::decode(p.record, channel->layout(), r), perf::DecodeError::kOk);
        if (const auto* l = std::get_if<perf::Lost>(&r.body))
          lost += l->lost;
        if (const auto* s = std::get_if<perf::Sample>(&r.body)) {
          // The raw payload is the struct, padded by the kernel to keep the record 8-aligned.
          ASSERT_GE(s->raw.size(), schema->size);
          EXPECT_EQ(s->cpu, static_cast<std::uint32_t>(c->cpu));
          EXPECT_EQ(field<std::uint32_t>(s->raw, *pid), static_cast<std::uint32_t>(child.pid()));
          EXPECT_EQ(field<std::uint32_t>(s->raw, *tid), static_cast<std::uint32_t>(child.pid()));
          EXPECT_EQ(field<std::int64_t>(s->raw, *nr), SYS_readahead);
          EXPECT_EQ(field<std::uint64_t>(s->raw, *args, 0), static_cast<std::uint64_t>(kBadFd));
          EXPECT_EQ(field<std::uint64_t>(s->raw, *args, 2), 7U);
          for (std::uint32_t i = kReadaheadArgs; i < args->count; ++i)
            EXPECT_EQ(field<std::uint64_t>(s->raw, *args, i), 0U) << "args the record lacks";
          const auto offset = static_cast<std::int64_t>(field<std::uint64_t>(s->raw, *args, 1));
          auto [it, fresh] = last_offset_per_cpu.try_emplace(s->cpu, offset);
          if (!fresh) {
            EXPECT_GT(offset, it->second) << "in call order on one CPU";
          }
          it->second = offset;
          const std::string name(
              reinterpret_cast<const char*>(s->raw.data() + comm->offset),
              ::strnlen(reinterpret_cast<const char*>(s->raw.data() + comm->offset), comm->count));
          EXPECT_EQ(name + "\n", child_comm);
          const auto t = field<std::uint64_t>(s->raw, *ts);
          EXPECT_GE(t, last_ts) << "one task, one step at a time";
          EXPECT_LE(t, s->time) << "bpf_ktime_get_ns() before the sample's CLOCK_MONOTONIC time";
          last_ts = t;
          ++total;
        }
        c->ring.consume(p.record.size());
      }
      c->ring.commit();
    }
  };

  readaheads(0, kParentCalls / 2);  // this process is not in `tgids`: nothing
  for (int step = 0; step < kSteps; ++step) {
    ASSERT_TRUE(child.go());
    drain();
  }
  readaheads(0, kParentCalls / 2);
  drain();

  EXPECT_EQ(total, kSteps * kPerStep);
  EXPECT_EQ(lost, 0U);
  std::int64_t seen_offsets = 0;
  for (const auto& [cpu, last] : last_offset_per_cpu)
    seen_offsets = std::max(seen_offsets, last);
  EXPECT_EQ(seen_offsets, kSteps * kPerStep - 1);
  EXPECT_EQ(obj->percpu_array_sum<std::uint64_t>("output_drops"), 0U);
  EXPECT_EQ(obj->percpu_array_sum<std::uint64_t>("hits"),
            static_cast<std::uint64_t>(kSteps * kPerStep));
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  EXPECT_LE(last_ts, static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + now.tv_nsec);

  // Removing the child from `tgids` stops its events.
  ASSERT_TRUE(obj->delete_elem("tgids", static_cast<std::uint32_t>(child.pid())).has_value());
  ASSERT_TRUE(child.go());
  drain();
  EXPECT_EQ(total, kSteps * kPerStep);
}

TEST(BpfSyscallOutput, ReadingArgsPastASyscallTracepointsRecordIsRefusedAtAttach) {
  // With nr_args left at 6 the program may read past the end of sys_enter_readahead's record
  // (3 args): the kernel refuses to attach it (perf_event_set_bpf_prog: max_ctx_offset).
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->load().has_value());
  auto ev = tracepoint_event("sys_enter_readahead");
  ASSERT_TRUE(ev.has_value()) << ev.error().describe();
  auto st = ev->set_bpf(*obj->program_fd("syscall_output"));
  ASSERT_FALSE(st.has_value());
  EXPECT_EQ(st.error().errno_value(), EACCES);
}

}  // namespace
}  // namespace tracer::bpf
