// Captures ring-buffer bytes from this kernel into tests/data/rings/<kernel>-<arch>/: a child
// makes 5 lseek calls, renames itself, forks and reaps a grandchild and maps a data file, while a
// tracepoint event on it (with comm/task/mmap2/mmap_data/context_switch/sample_id_all) records.
// Writes <case>.hex (xxd format; header comments give each record as text), <case>.attr (the
// layout) and <case>.expected (golden decode, tracepoint fields included).
//
// Usage: tracer_capture_ring OUTDIR   (as root; run once per kernel, commit the files)
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/child.hpp"
#include "support/recorded_ring.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/tracefs/tracefs.hpp"

using namespace tracer;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTDIR\n", argv[0]);
    return 2;
  }
  auto fs = tracefs::Tracefs::open();
  if (!fs)
    return std::fprintf(stderr, "%s\n", fs.error().describe().c_str()), 1;
  auto format = fs->format({"syscalls", "sys_enter_lseek"});
  if (!format)
    return std::fprintf(stderr, "%s\n", format.error().describe().c_str()), 1;

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
      .config(format->id)
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
  auto ev = perf::Event::open(a, {.pid = child.pid(), .cpu = -1});
  if (!ev)
    return std::fprintf(stderr, "%s\n", ev.error().describe().c_str()), 1;
  auto ring = perf::Ring::map(ev->fd(), {.data_pages = 8});
  if (!ring)
    return std::fprintf(stderr, "%s\n", ring.error().describe().c_str()), 1;
  if (!ev->enable())
    return 1;
  child.go();
  child.finish();

  std::vector<std::byte> bytes;
  ring->load_head();
  for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
    bytes.insert(bytes.end(), p.record.begin(), p.record.end());
    ring->consume(p.record.size());
  }
  ring->commit();

  utsname u{};
  ::uname(&u);
  std::string release = u.release;
  release = release.substr(0, release.find('.', release.find('.') + 1));  // "6.18"
  const std::filesystem::path dir =
      std::filesystem::path(argv[1]) / fmt::format("{}-{}", release, u.machine);
  std::filesystem::create_directories(dir);
  testing::RecordedRing rec;
  rec.layout = perf::SampleLayout::from(a);
  rec.attr_text = a.describe();
  rec.bytes = std::move(bytes);
  rec.format_file = "syscalls__sys_enter_lseek.format";
  const auto stem = dir / "lseek_task";
  if (auto st = testing::write_recorded_ring(rec, *format, stem.string()); !st) {
    std::fprintf(stderr, "%s\n", st.error().describe().c_str());
    return 1;
  }
  std::printf("wrote %s.{hex,attr,expected}: %zu bytes\n", stem.c_str(), rec.bytes.size());
  return 0;
}
