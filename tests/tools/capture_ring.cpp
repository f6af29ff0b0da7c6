// Captures ring-buffer bytes from this kernel into tests/data/rings/<kernel>-<arch>/, one case
// per file stem: <case>.hex (xxd format; header comments give each record as text), <case>.attr
// (the layout) and <case>.expected (golden decode, tracepoint fields or raw bytes included).
//
//   lseek_task   a tracepoint event on a child that makes 5 lseek calls, renames itself, forks
//                and reaps a grandchild and maps a data file (comm/task/mmap2/mmap_data/
//                context_switch/sample_id_all);
//   uprobe_regs  a uprobe through the uprobe PMU (the kprobe PMU's path) on a function of this
//                tool, hit 3 times by a child, sampling IP, user registers and 256 bytes of user
//                stack; the child maps this executable (MMAP2 with its build id);
//   bpf_output   syscall_output.bpf.c on sys_enter_lseek, emitting 4 calls of a child through a
//                bpf-output event (RAW payloads that are a BPF struct, not a tracepoint record);
//   bpf_load     a dummy event with ksymbol and bpf_event while that program loads and unloads
//                (KSYMBOL and BPF_EVENT records).
// No AUX case: this kernel has no AUX-capable PMU (intel_pt); the AUX records are covered by
// synthetic rings (tests/engine/perf).
//
// Usage: tracer_capture_ring OUTDIR   (as root; run once per kernel, commit the files)
#include <fcntl.h>
#include <fmt/core.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "support/child.hpp"
#include "support/recorded_ring.hpp"
#include "syscall_output.h"
#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/tracefs/tracefs.hpp"

using namespace tracer;

// The uprobe's target: a function of this tool, kept out of line.
extern "C" [[gnu::noinline]] int tracer_capture_target(int x) {
  asm volatile("" ::: "memory");
  return x * 3;
}

namespace {

constexpr std::uint32_t kLseekArgs = 3;  // fd, offset, whence

void pin_to_cpu0() {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(0, &set);
  ::sched_setaffinity(0, sizeof(set), &set);
}

std::vector<std::byte> drain(perf::Ring& ring) {
  std::vector<std::byte> bytes;
  ring.load_head();
  for (auto p = ring.peek(); !p.record.empty(); p = ring.peek()) {
    bytes.insert(bytes.end(), p.record.begin(), p.record.end());
    ring.consume(p.record.size());
  }
  ring.commit();
  return bytes;
}

// Opens `a` on the child, lets it run its step and exit, and returns what the ring holds.
// Fails when the child does not exit 0.
Result<testing::RecordedRing> record_child(const perf::EventAttr& a, testing::Child& child) {
  TRACER_ASSIGN_OR_RETURN(auto ev, perf::Event::open(a, {.pid = child.pid(), .cpu = -1}));
  TRACER_ASSIGN_OR_RETURN(auto ring, perf::Ring::map(ev.fd(), {.data_pages = 8}));
  TRACER_TRY(ev.enable());
  child.go();
  if (const int st = child.finish(); !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    return fail(EIO, fmt::format("the captured child failed (status {})", st));
  testing::RecordedRing rec;
  rec.layout = perf::SampleLayout::from(a);
  rec.attr_text = a.describe();
  rec.bytes = drain(ring);
  return rec;
}

struct Capture {
  std::string name;
  testing::RecordedRing rec;
  std::optional<tracefs::Format> format;
};

Result<Capture> capture_lseek_task(tracefs::Tracefs& fs) {
  TRACER_ASSIGN_OR_RETURN(auto format, fs.format({"syscalls", "sys_enter_lseek"}));
  testing::Child child([](int) {
    for (int i = 0; i < 5; ++i)
      ::syscall(SYS_lseek, 12345, i, SEEK_CUR);
    ::prctl(PR_SET_NAME, "captured");
    if (pid_t g = ::fork(); g == 0) {
      ::_exit(0);
    } else {
      ::waitpid(g, nullptr, 0);
    }
    const int fd = ::open("/etc/hostname", O_RDONLY | O_CLOEXEC);
    void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    ::munmap(p, 4096);
    ::close(fd);
  });
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT)
      .config(format.id)
      .sample_period(1)
      .sample_type(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                   PERF_SAMPLE_PERIOD | PERF_SAMPLE_RAW)
      .flag(perf::Flag::kSampleIdAll)
      .flag(perf::Flag::kComm)
      .flag(perf::Flag::kTask)
      .flag(perf::Flag::kMmap2)
      .flag(perf::Flag::kMmapData)
      .flag(perf::Flag::kContextSwitch)
      .flag(perf::Flag::kDisabled)
      .clockid(CLOCK_MONOTONIC);
  Capture c{.name = "lseek_task", .rec = {}, .format = format};
  TRACER_ASSIGN_OR_RETURN(c.rec, record_child(a, child));
  c.rec.format_file = "syscalls__sys_enter_lseek.format";
  return c;
}

Result<Capture> capture_uprobe_regs() {
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe");
  TRACER_ASSIGN_OR_RETURN(auto fn, symbols::find_function(self, "tracer_capture_target"));
  TRACER_ASSIGN_OR_RETURN(auto pmu, perf::find_pmu("uprobe"));
  testing::Child child([&self](int) {
    int sum = 0;
    for (int i = 0; i < 3; ++i)
      sum += tracer_capture_target(i + 1);
    // An executable mapping of this tool: MMAP2 with its build id (attr.build_id).
    const int fd = ::open(self.c_str(), O_RDONLY | O_CLOEXEC);
    void* p = ::mmap(nullptr, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED || sum != 18)
      ::_exit(3);
    ::munmap(p, 4096);
    ::close(fd);
  });
  // x86-64 perf_regs: AX, BX, CX, DX, SI, DI, BP, SP, IP (bits 0-8).
  constexpr std::uint64_t kRegs = 0x1FF;
  perf::EventAttr a;
  a.type(pmu.type)
      .config1(reinterpret_cast<std::uint64_t>(self.c_str()))  // uprobe_path
      .config2(fn.file_offset)                                 // probe_offset
      .sample_period(1)
      .sample_type(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
                   PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD | PERF_SAMPLE_REGS_USER |
                   PERF_SAMPLE_STACK_USER)
      .sample_regs_user(kRegs)
      .sample_stack_user(256)
      .flag(perf::Flag::kSampleIdAll)
      .flag(perf::Flag::kMmap)  // the kernel counts mmap events by mmap/mmap_data, as perf sets
      .flag(perf::Flag::kMmap2)
      .flag(perf::Flag::kBuildId)
      .flag(perf::Flag::kTask)
      .flag(perf::Flag::kDisabled)
      .clockid(CLOCK_MONOTONIC);
  Capture c{.name = "uprobe_regs", .rec = {}, .format = std::nullopt};
  TRACER_ASSIGN_OR_RETURN(c.rec, record_child(a, child));
  c.rec.sample_regs_user = kRegs;
  return c;
}

// bpf_output and bpf_load in one go: the dummy event sees the program load and unload, the
// bpf-output event on CPU 0 the payloads of the child's calls there.
Result<std::vector<Capture>> capture_bpf(tracefs::Tracefs& fs) {
  pin_to_cpu0();  // KSYMBOL and BPF_EVENT go to the side-band events of the loading CPU
  perf::EventAttr d;
  d.type(PERF_TYPE_SOFTWARE)
      .config(PERF_COUNT_SW_DUMMY)
      .sample_type(PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU)
      .flag(perf::Flag::kSampleIdAll)
      .flag(perf::Flag::kKsymbol)
      .flag(perf::Flag::kBpfEvent)
      .clockid(CLOCK_MONOTONIC);
  TRACER_ASSIGN_OR_RETURN(auto dummy, perf::Event::open(d, {.pid = -1, .cpu = 0}));
  TRACER_ASSIGN_OR_RETURN(auto dummy_ring, perf::Ring::map(dummy.fd(), {.data_pages = 8}));

  std::vector<std::byte> output;
  perf::EventAttr output_attr;
  perf::SampleLayout output_layout;
  {
    TRACER_ASSIGN_OR_RETURN(auto obj, bpf::Object::open_file(TRACER_BPF_SYSCALL_OUTPUT_OBJECT));
    TRACER_TRY(obj.set_global("nr_args", kLseekArgs));
    TRACER_TRY(obj.load());
    TRACER_ASSIGN_OR_RETURN(auto channel, bpf::OutputChannel::open(obj, "events", {}));
    output_attr = bpf::OutputChannel::attr_for({});
    output_layout = channel.layout();
    testing::Child child([](int) {
      for (int i = 0; i < 4; ++i)
        ::syscall(SYS_lseek, 4321, i * 10, SEEK_SET);
    });
    TRACER_TRY((obj.update_elem<std::uint32_t, std::uint8_t>(
        "tgids", static_cast<std::uint32_t>(child.pid()), 1)));
    TRACER_ASSIGN_OR_RETURN(auto id, fs.tracepoint_id({"syscalls", "sys_enter_lseek"}));
    perf::EventAttr t;
    t.type(PERF_TYPE_TRACEPOINT).config(id).sample_period(1).sample_type(PERF_SAMPLE_RAW);
    t.flag(perf::Flag::kDisabled);
    TRACER_ASSIGN_OR_RETURN(auto carrier, perf::Event::open(t, {.pid = -1, .cpu = 0}));
    TRACER_ASSIGN_OR_RETURN(auto prog, obj.program_fd("syscall_output"));
    TRACER_TRY(carrier.set_bpf(prog));
    TRACER_TRY(carrier.enable());
    child.go();  // the child inherits CPU 0
    child.finish();
    for (auto& cpu : channel.cpus()) {
      if (cpu && cpu->cpu == 0)
        output = drain(cpu->ring);
    }
  }  // the program unloads: BPF_EVENT unload, KSYMBOL unregister
  std::vector<Capture> out;
  Capture o{.name = "bpf_output", .rec = {}, .format = std::nullopt};
  o.rec.layout = output_layout;
  o.rec.attr_text = output_attr.describe();
  o.rec.bytes = std::move(output);
  out.push_back(std::move(o));
  Capture l{.name = "bpf_load", .rec = {}, .format = std::nullopt};
  l.rec.layout = perf::SampleLayout::from(d);
  l.rec.attr_text = d.describe();
  l.rec.bytes = drain(dummy_ring);
  out.push_back(std::move(l));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  auto fs = tracefs::Tracefs::open();
  if (!fs)
    return std::fprintf(stderr, "%s\n", fs.error().describe().c_str()), 1;
  std::vector<Capture> captures;
  const auto add = [&](Result<Capture> c) {
    if (!c)
      return std::fprintf(stderr, "%s\n", c.error().describe().c_str()), false;
    captures.push_back(std::move(*c));
    return true;
  };
  if (!add(capture_lseek_task(*fs)) || !add(capture_uprobe_regs()))
    return 1;
  auto bpf = capture_bpf(*fs);
  if (!bpf)
    return std::fprintf(stderr, "%s\n", bpf.error().describe().c_str()), 1;
  for (auto& c : *bpf)
    captures.push_back(std::move(c));

  utsname u{};
  ::uname(&u);
  std::string release = u.release;
  release = release.substr(0, release.find('.', release.find('.') + 1));  // "6.18"
  const std::filesystem::path dir =
      std::filesystem::path(argv[1]) / fmt::format("{}-{}", release, u.machine);
  std::filesystem::create_directories(dir);
  for (const auto& c : captures) {
    const auto stem = dir / c.name;
    const tracefs::Format* format = c.format ? &*c.format : nullptr;
    if (auto st = testing::write_recorded_ring(c.rec, format, stem.string()); !st) {
      std::fprintf(stderr, "%s\n", st.error().describe().c_str());
      return 1;
    }
    std::printf("wrote %s.{hex,attr,expected}: %zu bytes\n", stem.c_str(), c.rec.bytes.size());
  }
  return 0;
}
