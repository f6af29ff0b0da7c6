// Recipes in the kernel (issue #18): what a count by pid of a workload's getppid calls costs the
// traced program and tracer, per placement and channel, against hand-written references.
//   (d) untraced, the reference for slowdown
//   (f) the BPF floor: a program that only increments a per-CPU array
//   (h) hand-written libbpf program doing the recipe's work: tgid filter + per-CPU hash by pid
//   (t) bpftrace '@[pid] = count()' with a pid filter          [when bpftrace is installed]
//   (k) tracer, the pure TOML recipe (count by pid) placed in the kernel
//   (r) tracer, per event through the BPF ring buffer channel into a user-space count stage
//   (p) tracer, per event through the BPF perf channel into a user-space count stage
//   (s) tracer, per event: the workload's own tracepoint samples (a -p target's perf events,
//       no BPF: --delivery perf) into a user-space count stage
//   (q) tracer, per event to the -p target through the BPF ring buffer (the delivery program
//       tests the target) into a user-space count stage: the default for a target
//   (L) a libbpf ring_buffer consumer of the target's copies only (a tgid test, then the copy):
//       the reference of the per-event rows to a target
//   (P) perf record -p of the workload's tracepoint, to a file              [when perf is there]
//   (l) a libbpf ring_buffer consumer of a per-event copy (batched wakeups): the reference of
//       the per-event rows
//   (c) the channel's floor: the same copy read by tracer's RingBuffer, woken as the engine is,
//       no stage: what reading the records costs before any work on them
// (r), (p), (l) and (c) copy every getppid of the machine (system-wide, as tracer's delivery does);
// (h), (k) and (t) count the workload's only. CPU per event is the bench process's CPU time
// (tracer's or libbpf's consumer; '-' where the consumer is another process or there is none)
// from the workload's start to the end of the final read.
// Usage: tracer_bench_recipes [--pin] [--rounds] [N [ROUNDS [K]]] (default 2,000,000 calls, 3
// rounds); ratios per round against (h).
#include <bpf/libbpf.h>
#include <fmt/core.h>
#include <sys/epoll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <boost/asio/io_context.hpp>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <string>

#include "bench_common.hpp"
#include "tracer/bpf/object.hpp"
#include "tracer/bpf/ring_buffer.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::bench {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kRingbufBytes = 4U << 20;

/// The reference programs, compiled once (the compile cache keeps them across runs).
struct Refs {
  bpf::Object object;
  perf::Event event;  // the tracepoint event the program is attached to
};

[[noreturn]] void die(const std::string& what) {
  fmt::print(stderr, "tracer_bench_recipes: {}\n", what);
  std::exit(1);
}

/// Loads recipe_refs.bpf.c with the workload's tgid and attaches `prog` with SET_BPF to a
/// counting event on sys_enter_getppid (of `pid`, or on CPU 0 when pid is -1: a tracepoint's
/// program runs for every CPU either way).
Refs attach_ref(const char* prog, pid_t pid) {
  auto obj = bpf::Object::compile_and_open(TRACER_BENCH_REFS_BPF_C);
  if (!obj)
    die("recipe_refs.bpf.c: " + obj.error().message + " " + obj.error().hint);
  const auto tgid = static_cast<std::uint32_t>(pid);
  const std::uint64_t wakeup = kRingbufBytes / 4;
  if (!obj->set_global("target_tgid", tgid) || !obj->set_global("wakeup_bytes", wakeup))
    die("recipe_refs.bpf.c: no globals");
  if (auto st = obj->load(); !st)
    die("recipe_refs.bpf.c: " + st.error().message + "\n" + st.error().hint);
  auto fsys = tracefs::Tracefs::open();
  if (!fsys)
    die("no tracefs");
  auto id = fsys->tracepoint_id({"syscalls", "sys_enter_getppid"});
  if (!id)
    die("no syscalls:sys_enter_getppid");
  perf::EventAttr ta;
  ta.type(PERF_TYPE_TRACEPOINT).config(*id);
  auto tp = perf::Event::open(ta, {.pid = pid, .cpu = pid > 0 ? -1 : 0});
  if (!tp)
    die("perf_event_open: " + tp.error().message);
  auto fd = obj->program_fd(prog);
  if (!fd || !tp->set_bpf(*fd) || !tp->enable())
    die(std::string("cannot attach ") + prog);
  return Refs{std::move(*obj), std::move(*tp)};
}

Row run_floor(long calls) {
  Workload w(calls);
  auto refs = attach_ref("floor_prog", w.pid());
  w.start();
  const double secs = w.wait();
  const auto n = refs.object.percpu_array_sum<std::uint64_t>("floor_counts", 0);
  return {.name = "(f) BPF floor: per-CPU array increment",
          .workload_seconds = secs,
          .events = n ? *n : 0,
          .lost = 0,
          .consumer_cpu_seconds = 0,
          .cpu_measured = false};
}

Row run_handwritten(long calls) {
  Workload w(calls);
  auto refs = attach_ref("handwritten", w.pid());
  w.start();
  const double secs = w.wait();
  std::uint64_t events = 0;
  const auto key = static_cast<std::uint32_t>(w.pid());
  if (auto v = refs.object.percpu_values("pid_counts", std::as_bytes(std::span(&key, 1))); v) {
    for (const auto& cpu : *v) {
      std::uint64_t c = 0;
      std::memcpy(&c, cpu.data(), sizeof(c));
      events += c;
    }
  }
  return {.name = "(h) hand-written libbpf: tgid + per-CPU hash",
          .workload_seconds = secs,
          .events = events,
          .lost = 0,
          .consumer_cpu_seconds = 0,
          .cpu_measured = false};
}

Row run_bpftrace(long calls) {
  Workload w(calls);
  Bpftrace bt(fmt::format(
      "tracepoint:syscalls:sys_enter_getppid /pid == {}/ {{ @[pid] = count(); }}", w.pid()));
  w.start();
  const double secs = w.wait();
  const std::string text = bt.stop();
  std::smatch m;
  std::uint64_t events = 0;
  if (std::regex_search(text, m, std::regex(R"(@\[\d+\]: (\d+))")))
    events = std::stoull(m[1]);
  return {.name = "(t) bpftrace @[pid] = count()",
          .workload_seconds = secs,
          .events = events,
          .lost = 0,
          .consumer_cpu_seconds = 0,
          .cpu_measured = false};
}

const char* kRecipe = R"([recipe]
name = "count-by-pid"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
by = ["pid"]
)";

/// The recipe through a Session on this thread's io_context: its events (the probe's, in the
/// kernel or delivered), losses and this process's CPU from the workload's start to the end of
/// stop() (the final drain, or the final read of the kernel's maps). `bpf_delivery` false: a
/// -p target's tracepoint samples come from its own perf events (--delivery perf).
Row run_session(long calls,
                const char* name,
                Placement placement,
                std::optional<DeliveryChannel> channel,
                bool system_wide,
                bool bpf_delivery = true) {
  static const Recipe recipe =
      Recipe::load_string(kRecipe, "count-by-pid.toml", {.stages = stage_catalog()});
  Workload w(calls);
  FILE* devnull = std::fopen("/dev/null", "we");
  Sink out = Sink::to_file(devnull);
  boost::asio::io_context io(1);
  // System-wide per event: through the BPF delivery channel. The workload's process: in the
  // kernel, its tgid a constant of the generated program; per event, its own perf events'
  // tracepoint samples.
  Session session(
      io.get_executor(), recipe, out,
      {.target = system_wide ? Target{} : Target{.kind = Target::Kind::kPid, .pid = w.pid()},
       .deliver_tracepoints_via_bpf = bpf_delivery,
       .placement = placement,
       .channel = channel});
  session.start();
  const double cpu0 = process_cpu_seconds();
  w.start();
  w.run_until_finished(io);
  const double secs = w.wait();
  session.stop();
  const double cpu = process_cpu_seconds() - cpu0;
  std::fclose(devnull);
  const auto stats = session.stats();
  const auto& probe = stats.engine.probes[0];
  const auto st = probe.total();
  return {.name = name,
          .workload_seconds = secs,
          .events = st.samples,
          .lost = st.lost + probe.kernel_dropped,
          .consumer_cpu_seconds = cpu,
          .cpu_measured = true};
}

Row run_kernel(long calls) {
  return run_session(calls, "(k) tracer, TOML count by pid, in the kernel", Placement::kKernel,
                     std::nullopt, false);
}
Row run_ringbuf(long calls) {
  return run_session(calls, "(r) tracer, per event: ring buffer -> count", Placement::kUser,
                     DeliveryChannel::kRingbuf, true);
}
Row run_perf(long calls) {
  return run_session(calls, "(p) tracer, per event: perf rings -> count", Placement::kUser,
                     DeliveryChannel::kPerf, true);
}
Row run_samples(long calls) {
  return run_session(calls, "(s) tracer, per event: -p perf samples -> count", Placement::kUser,
                     std::nullopt, false, false);
}
Row run_target_ringbuf(long calls) {
  return run_session(calls, "(q) tracer, per event: -p ring buffer -> count", Placement::kUser,
                     DeliveryChannel::kRingbuf, false);
}

/// perf record -p of the workload's getppid tracepoint into a file (a private directory),
/// attached before the workload starts (perf prints nothing when it is: a second's wait).
Row run_perf_record(long calls) {
  char dir[] = "/tmp/tracer-bench-XXXXXX";
  if (::mkdtemp(dir) == nullptr)
    die("mkdtemp");
  const std::string data = std::string(dir) + "/perf.data";
  Workload w(calls);
  const std::string pid = std::to_string(w.pid());
  const pid_t perf = ::fork();
  if (perf == 0) {
    const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execlp("perf", "perf", "record", "-q", "-e", "syscalls:sys_enter_getppid", "-p", pid.c_str(),
             "-o", data.c_str(), nullptr);
    ::_exit(127);
  }
  ::sleep(1);
  w.start();
  const double secs = w.wait();
  int status = 0;
  ::waitpid(perf, &status, 0);  // perf record -p ends with the process
  std::uint64_t events = 0;
  const std::string cmd = "perf script -i " + data + " 2>/dev/null | wc -l";
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    unsigned long long n = 0;
    if (std::fscanf(p, "%llu", &n) == 1)
      events = n;
    ::pclose(p);
  }
  fs::remove_all(dir);
  return {.name = "(P) perf record -p (to a file)",
          .workload_seconds = secs,
          .events = events,
          .lost = 0,
          .consumer_cpu_seconds = 0,
          .cpu_measured = false};
}

/// The channel's floor: tracer's own RingBuffer reader on the reference's ring, woken as the
/// engine is (edge-triggered epoll: only the program's forced wakeups), its callback counting
/// records and doing nothing else: what reading the records costs before any stage.
Row run_consume_floor(long calls) {
  Workload w(calls);
  auto refs = attach_ref("rb_ref", -1);
  auto rb = bpf::RingBuffer::open(refs.object, "rb");
  if (!rb)
    die("ring buffer: " + rb.error().message);
  std::uint64_t events = 0;
  const auto drain = [&] { rb->consume([&](std::span<const std::byte>) { ++events; }); };
  const int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  if (ep < 0 || ::epoll_ctl(ep, EPOLL_CTL_ADD, rb->fd(), &ev) != 0)
    die("epoll");
  const double cpu0 = process_cpu_seconds();
  w.start();
  while (!w.finished()) {
    epoll_event out{};
    ::epoll_wait(ep, &out, 1, 100);
    drain();
  }
  const double secs = w.wait();
  drain();
  const double cpu = process_cpu_seconds() - cpu0;
  ::close(ep);
  return {.name = "(c) channel floor: ring read, no stage",
          .workload_seconds = secs,
          .events = events,
          .lost = 0,
          .consumer_cpu_seconds = cpu,
          .cpu_measured = true};
}

Row run_libbpf_ringbuf_of(long calls, const char* prog, const char* name) {
  Workload w(calls);
  auto refs = attach_ref(prog, std::string_view(prog) == "rb_ref" ? -1 : w.pid());
  auto map_fd = refs.object.map_fd("rb");
  std::uint64_t events = 0;
  ring_buffer* rb = ::ring_buffer__new(
      *map_fd,
      [](void* ctx, void*, std::size_t) {
        ++*static_cast<std::uint64_t*>(ctx);
        return 0;
      },
      &events, nullptr);
  if (rb == nullptr)
    die("ring_buffer__new");
  const double cpu0 = process_cpu_seconds();
  w.start();
  while (!w.finished())
    ::ring_buffer__poll(rb, 100);
  const double secs = w.wait();
  ::ring_buffer__consume(rb);
  const double cpu = process_cpu_seconds() - cpu0;
  ::ring_buffer__free(rb);
  return {.name = name,
          .workload_seconds = secs,
          .events = events,
          .lost = 0,
          .consumer_cpu_seconds = cpu,
          .cpu_measured = true};
}

Row run_libbpf_ringbuf(long calls) {
  return run_libbpf_ringbuf_of(calls, "rb_ref", "(l) libbpf ring_buffer consumer (reference)");
}
Row run_libbpf_ringbuf_target(long calls) {
  return run_libbpf_ringbuf_of(calls, "rb_ref_target",
                               "(L) libbpf ring_buffer, -p target's copies (reference)");
}

}  // namespace
}  // namespace tracer::bench

int main(int argc, char** argv) {
  using namespace tracer::bench;
  std::vector<std::function<Row(long)>> kinds = {run_untraced, run_floor, run_handwritten};
  if (fs::exists("/usr/bin/bpftrace"))
    kinds.emplace_back(run_bpftrace);
  else
    fmt::print("bpftrace is not installed: no (t) row\n");
  kinds.emplace_back(run_kernel);
  kinds.emplace_back(run_ringbuf);
  kinds.emplace_back(run_perf);
  kinds.emplace_back(run_samples);
  kinds.emplace_back(run_target_ringbuf);
  kinds.emplace_back(run_libbpf_ringbuf_target);
  if (std::system("perf --version >/dev/null 2>&1") == 0)
    kinds.emplace_back(run_perf_record);
  else
    fmt::print("perf is not installed: no (P) row\n");
  kinds.emplace_back(run_libbpf_ringbuf);
  kinds.emplace_back(run_consume_floor);
  return run_bench(argc, argv, std::move(kinds), "(h)");
}
