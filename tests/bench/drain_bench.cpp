// Cheap draining (issue #26): tracer's own system calls while a count of 10,000 keys is kept in
// the kernel, against bpftrace keeping the same count on the same workload in the same run.
//   (b) bpftrace '@[args->offset] = count()' with a pid filter: reads its map once, at the end
//   (k) tracer, the TOML count by offset placed in the kernel, no `every`: read at the end
//   (e) tracer, the same with every = "1s": one batched read per interval
// The workload is a forked child that calls lseek(12345, i % 10000, SEEK_CUR) for a fixed time.
// A system call counter (raw_syscalls:sys_enter, counting) on the consumer's thread counts its
// calls from the workload's start to the end of its final read; for bpftrace, on its main thread.
// Every run must count every call (events = the workload's calls, lost 0).
// Usage: tracer_bench_drain [SECONDS [ROUNDS [KEYS]]] (default 3 s, 3 rounds, 10,000 keys).
#include <fmt/core.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::bench {
namespace {

namespace fs = std::filesystem;

double g_seconds = 3;
long g_keys = 10000;

[[noreturn]] void die(const std::string& what) {
  fmt::print(stderr, "tracer_bench_drain: {}\n", what);
  std::exit(1);
}

/// A child that waits for start(), then calls lseek(12345, i % keys) for g_seconds and writes
/// its number of calls to a pipe.
class Loop {
 public:
  Loop() {
    int go[2], done[2];
    if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0)
      die("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      char c = 0;
      if (::read(go[0], &c, 1) != 1)
        ::_exit(1);
      const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(g_seconds);
      long calls = 0;
      while (std::chrono::steady_clock::now() < end) {
        for (int j = 0; j < 1000; ++j, ++calls)
          ::syscall(SYS_lseek, 12345, calls % g_keys, SEEK_CUR);
      }
      if (::write(done[1], &calls, sizeof calls) != sizeof calls)
        ::_exit(1);
      ::_exit(0);
    }
    ::close(go[0]);
    ::close(done[1]);
    go_ = go[1];
    done_ = done[0];
  }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;
  ~Loop() {
    if (go_ >= 0)
      ::close(go_);
    if (done_ >= 0)
      ::close(done_);
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  void start() {
    const char c = 1;
    if (::write(go_, &c, 1) != 1)
      die("start");
  }
  [[nodiscard]] int done_fd() const { return done_; }
  long wait() {
    long calls = 0;
    if (::read(done_, &calls, sizeof calls) != sizeof calls)
      die("workload");
    ::waitpid(pid_, nullptr, 0);
    return calls;
  }

 private:
  pid_t pid_ = -1;
  int go_ = -1, done_ = -1;
};

/// Counts `pid`'s system calls (0: this thread), from now on.
perf::Event syscall_counter(pid_t pid) {
  auto fsys = tracefs::Tracefs::open();
  if (!fsys)
    die("no tracefs");
  auto id = fsys->tracepoint_id({"raw_syscalls", "sys_enter"});
  if (!id)
    die("no raw_syscalls:sys_enter");
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(*id);
  auto ev = perf::Event::open(a, {.pid = pid, .cpu = -1});
  if (!ev)
    die("perf_event_open: " + ev.error().message);
  return std::move(*ev);
}

std::uint64_t count_of(const perf::Event& e) {
  auto c = e.read();
  return c && !c->values.empty() ? c->values[0].value : 0;
}

struct DrainRow {
  std::string name;
  double seconds = 0;
  long calls = 0;            // the workload's
  std::uint64_t events = 0;  // the consumer's count
  std::uint64_t lost = 0;
  std::uint64_t syscalls = 0;  // the consumer's own
};

DrainRow run_bpftrace() {
  Loop w;
  Bpftrace bt(
      fmt::format(
          "tracepoint:syscalls:sys_enter_lseek /pid == {}/ {{ @[args->offset] = count(); }}",
          w.pid()),
      16384);
  const auto counter = syscall_counter(bt.pid());
  const auto t0 = std::chrono::steady_clock::now();
  w.start();
  const long calls = w.wait();
  const std::string text = bt.stop();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::uint64_t events = 0;
  const std::regex row(R"(@\[-?\d+\]: (\d+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator();
       ++it)
    events += std::stoull((*it)[1]);
  return {.name = "(b) bpftrace @[args->offset] = count()",
          .seconds = secs,
          .calls = calls,
          .events = events,
          .lost = 0,
          .syscalls = count_of(counter)};
}

DrainRow run_tracer(const char* name, const char* every) {
  const std::string text = fmt::format(R"([recipe]
name = "count-by-offset"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["offset"]
max_keys = 16384
{}
)",
                                       every);
  const Recipe recipe =
      Recipe::load_string(text, "count-by-offset.toml", {.stages = stage_catalog()});
  Loop w;
  FILE* devnull = std::fopen("/dev/null", "we");
  Sink out = Sink::to_file(devnull);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = Target{.kind = Target::Kind::kPid, .pid = w.pid()},
                   .placement = Placement::kKernel});
  session.start();
  const auto counter = syscall_counter(0);
  const std::uint64_t before = count_of(counter);
  const auto t0 = std::chrono::steady_clock::now();
  w.start();
  boost::asio::posix::stream_descriptor done(io, ::fcntl(w.done_fd(), F_DUPFD_CLOEXEC, 0));
  done.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [&](const boost::system::error_code&) { io.stop(); });
  io.run();
  const long calls = w.wait();
  session.stop();
  const std::uint64_t syscalls = count_of(counter) - before;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fclose(devnull);
  const auto stats = session.stats();
  const auto& probe = stats.engine.probes[0];
  const auto st = probe.total();
  return {.name = name,
          .seconds = secs,
          .calls = calls,
          .events = st.samples,
          .lost = st.lost + probe.kernel_dropped,
          .syscalls = syscalls};
}

}  // namespace
}  // namespace tracer::bench

int main(int argc, char** argv) {
  using namespace tracer::bench;
  int rounds = 3;
  if (argc > 1)
    g_seconds = std::atof(argv[1]);
  if (argc > 2)
    rounds = std::atoi(argv[2]);
  if (argc > 3)
    g_keys = std::atol(argv[3]);
  std::vector<std::function<DrainRow()>> kinds;
  const bool bpftrace = fs::exists("/usr/bin/bpftrace");
  if (bpftrace)
    kinds.emplace_back(run_bpftrace);
  else
    fmt::print("bpftrace is not installed: no (b) row, no ratio\n");
  kinds.emplace_back([] { return run_tracer("(k) tracer, count by offset in the kernel", ""); });
  kinds.emplace_back(
      [] { return run_tracer("(e) tracer, the same with every = \"1s\"", "every = \"1s\""); });
  fmt::print("{} keys, {:.1f} s of lseek per run, {} rounds\n", g_keys, g_seconds, rounds);
  std::vector<std::vector<DrainRow>> all(kinds.size());
  bool exact = true;
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      DrainRow row = kinds[k]();
      exact = exact && row.events == static_cast<std::uint64_t>(row.calls) && row.lost == 0;
      all[k].push_back(std::move(row));
    }
  }
  fmt::print("{:<44} {:>8} {:>11} {:>11} {:>6} {:>9} {:>9} {:>8}\n", "run (median of rounds)",
             "seconds", "calls", "counted", "lost", "syscalls", "per sec", "vs (b)");
  std::vector<double> ref_rates(rounds, 0);
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    auto rows = all[k];
    std::vector<double> rates;
    for (const auto& row : rows)
      rates.push_back(static_cast<double>(row.syscalls) / row.seconds);
    if (k == 0 && bpftrace)
      ref_rates = rates;
    std::vector<double> ratios;
    for (std::size_t i = 0; i < rates.size(); ++i)
      ratios.push_back(ref_rates[i] > 0 ? rates[i] / ref_rates[i] : 0);
    std::ranges::sort(rates);
    std::ranges::sort(ratios);
    std::ranges::sort(rows, {}, &DrainRow::syscalls);
    const DrainRow& m = rows[rows.size() / 2];
    fmt::print("{:<44} {:>8.2f} {:>11} {:>11} {:>6} {:>9} {:>9.1f} {:>7.2f}x\n", m.name, m.seconds,
               m.calls, m.events, m.lost, m.syscalls, rates[rates.size() / 2],
               bpftrace ? ratios[ratios.size() / 2] : 0.0);
  }
  fmt::print("{}\n", exact ? "every run counted every call, lost 0"
                           : "MISMATCH: a run did not count every call");
  return exact ? 0 : 1;
}
