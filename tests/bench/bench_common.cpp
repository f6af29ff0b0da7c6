// The throughput benchmarks' harness: the workload, CPU time, rounds and the table of medians and
// per-round ratios with confidence intervals.
#include "bench_common.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tracer::bench {

void pin_to(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (::sched_setaffinity(0, sizeof(set), &set) != 0)
    std::abort();
}

Workload::Workload(long calls) : calls_(calls) {
  int go[2], done[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(done, O_CLOEXEC) != 0)
    std::abort();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(go[1]);
    ::close(done[0]);
    char c = 0;
    if (::read(go[0], &c, 1) != 1)
      ::_exit(1);
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < calls_; ++i)
      ::syscall(SYS_getppid);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    [[maybe_unused]] auto n = ::write(done[1], &secs, sizeof(secs));
    ::_exit(0);
  }
  ::close(go[0]);
  ::close(done[1]);
  go_ = go[1];
  done_ = done[0];
}

void Workload::start() {
  const char c = 'g';
  [[maybe_unused]] auto n = ::write(go_, &c, 1);
  ::close(go_);
}

bool Workload::finished() const {
  pollfd p{done_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

void Workload::run_until_finished(boost::asio::io_context& io) const {
  boost::asio::posix::stream_descriptor done(io, ::fcntl(done_, F_DUPFD_CLOEXEC, 0));
  done.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                  [&io](const boost::system::error_code&) { io.stop(); });
  io.run();
  io.restart();
}

double Workload::wait() {
  double secs = 0;
  [[maybe_unused]] auto n = ::read(done_, &secs, sizeof(secs));
  ::close(done_);
  ::waitpid(pid_, nullptr, 0);
  return secs;
}

double process_cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

Row run_untraced(long calls) {
  Workload w(calls);
  w.start();
  return {"(d) untraced", w.wait(), 0, 0, 0};
}

namespace {

/// One row per run kind: the median over rounds of workload time and of consumer CPU per event,
/// with the delivered/lost counts of every round (loss comes and goes with scheduling).

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

/// A distribution-free 95% confidence interval of the median of `v` (order statistics: the
/// k-th smallest and largest values, with k the largest for which a Binomial(n, 1/2) tail
/// below k is at most 2.5%). Empty (lo > hi) below 6 values, too few for 95%.
std::pair<double, double> median_ci95(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  double tail = 0, term = std::pow(0.5, static_cast<double>(n));  // P(B = 0)
  std::size_t k = 0;  // P(B <= k - 1) <= 0.025 holds for k
  for (std::size_t j = 0; j < n / 2; ++j) {
    tail += term;
    if (tail > 0.025)
      break;
    k = j + 1;
    term = term * static_cast<double>(n - j) / static_cast<double>(j + 1);
  }
  if (k == 0)
    return {1, 0};
  return {v[k - 1], v[n - k]};
}

std::string ratio_with_ci(const std::vector<double>& v) {
  const auto [lo, hi] = median_ci95(v);
  if (lo > hi)
    return fmt::format("{:.3f}x", median(v));
  return fmt::format("{:.3f}x [{:.3f}, {:.3f}]", median(v), lo, hi);
}

double per_event_ns(const Row& r) {
  return r.events > 0 ? r.consumer_cpu_seconds * 1e9 / static_cast<double>(r.events) : 0;
}

void print(const std::vector<Summary>& runs, long calls, int rounds, std::string_view ref_prefix) {
  std::vector<double> base;
  for (const auto& r : runs.front().rounds)
    base.push_back(r.workload_seconds);
  const double base_median = median(base);
  fmt::print("workload: {} getppid calls, {} CPUs, {} rounds (runs interleaved), medians\n\n",
             calls, ::sysconf(_SC_NPROCESSORS_ONLN), rounds);
  fmt::print("{:<46} {:>10} {:>9} {:>12} {:>26}\n", "run", "workload s", "slowdown", "CPU ns/event",
             "lost per round");
  for (const auto& run : runs) {
    if (run.rounds.empty())
      continue;
    std::vector<double> secs, cpu;
    std::string lost;
    bool traced = false;
    for (const auto& r : run.rounds) {
      secs.push_back(r.workload_seconds);
      if (r.events > 0 && r.cpu_measured)
        cpu.push_back(per_event_ns(r));
      if (r.events > 0)
        traced = true;
      lost += fmt::format("{}{}", lost.empty() ? "" : " ", r.lost);
    }
    const double m = median(secs);
    fmt::print("{:<46} {:>10.3f} {:>8.2f}x {:>12} {:>26}\n", run.name, m, m / base_median,
               cpu.empty() ? "-" : fmt::format("{:.1f}", median(cpu)), traced ? lost : "-");
  }
  // The machine's speed drifts between rounds (and with where the scheduler puts the consumer):
  // each round's ratio to the reference run of the same round is steadier than a ratio of
  // medians.
  const auto ref = std::find_if(runs.begin(), runs.end(),
                                [&](const Summary& r) { return r.name.starts_with(ref_prefix); });
  if (ref == runs.end() || ref->rounds.empty())
    return;
  fmt::print(
      "\nper round, against {}: median of the rounds' ratios [95% confidence interval of that "
      "median], rounds below 1:\n",
      ref->name);
  fmt::print("{:<46} {:>26} {:>26} {:>9}\n", "run", "slowdown", "CPU per event", "CPU wins");
  for (const auto& run : runs) {
    if (&run == &*ref || run.rounds.size() != ref->rounds.size() || run.rounds[0].events == 0)
      continue;
    std::vector<double> slow, cpu;
    int wins = 0;
    for (std::size_t i = 0; i < run.rounds.size(); ++i) {
      slow.push_back(run.rounds[i].workload_seconds / ref->rounds[i].workload_seconds);
      // No CPU ratio against a run that measures none (a reference without a consumer).
      if (!run.rounds[i].cpu_measured || !ref->rounds[i].cpu_measured)
        continue;
      cpu.push_back(per_event_ns(run.rounds[i]) / per_event_ns(ref->rounds[i]));
      wins += cpu.back() < 1 ? 1 : 0;
    }
    fmt::print("{:<46} {:>26} {:>26} {:>9}\n", run.name, ratio_with_ci(slow),
               cpu.empty() ? "-" : ratio_with_ci(cpu),
               cpu.empty() ? "-" : fmt::format("{}/{}", wins, run.rounds.size()));
  }
}

}  // namespace

int run_bench(int argc,
              char** argv,
              std::vector<std::function<Row(long)>> kinds,
              std::string_view ref_prefix) {
  std::vector<std::string> args;
  bool pin = false, detail = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--pin") {
      pin = true;
    } else if (a == "--rounds") {
      detail = true;
    } else if (a.starts_with("--")) {
      fmt::print(stderr, "usage: {} [--pin] [--rounds] [N [ROUNDS [K]]]\n", argv[0]);
      return 2;
    } else {
      args.push_back(a);
    }
  }
  const long calls = !args.empty() ? std::atol(args[0].c_str()) : 2'000'000;
  const int rounds = args.size() > 1 ? std::atoi(args[1].c_str()) : 3;
  // A third argument runs only the untraced reference and run number K (1: (a), 2: (b), ...),
  // to profile one consumer.
  const std::size_t only =
      args.size() > 2 ? static_cast<std::size_t>(std::atoi(args[2].c_str())) : 0;
  // --pin: the workload on CPU 0, every consumer on the last CPU. Takes out where the scheduler
  // puts a woken consumer (next to the workload, or not), which swings the consumer's CPU per
  // event 2-3x between rounds here.
  const auto cpus = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  if (pin && cpus >= 2) {
    workload_cpu = 0;
    pin_to(cpus - 1);
  }
  std::vector<Summary> runs(kinds.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      if (k > 0 && only != 0 && k != only)
        continue;
      Row row = kinds[k](calls);
      runs[k].name = row.name;
      runs[k].rounds.push_back(std::move(row));
    }
  }
  if (pin)
    fmt::print("pinned: workload on CPU 0, consumers on CPU {}\n", cpus - 1);
  print(runs, calls, rounds, ref_prefix);
  // --rounds: every round's workload seconds and consumer CPU ns per event.
  if (detail) {
    fmt::print("\nper round: workload s / CPU ns per event\n");
    for (const auto& run : runs) {
      std::string l;
      for (const auto& r : run.rounds)
        l += r.events > 0 && r.cpu_measured
                 ? fmt::format(" {:.3f}/{:.1f}", r.workload_seconds, per_event_ns(r))
                 : fmt::format(" {:.3f}/-", r.workload_seconds);
      fmt::print("{:<46}{}\n", run.name, l);
    }
  }
  return 0;
}

Bpftrace::Bpftrace(const std::string& prog, unsigned keys_max) {
  // "Attaching" comes before the probes are attached; BEGIN runs once they all are.
  const std::string full = R"(BEGIN { printf("bpftrace attached\n"); } )" + prog;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    std::abort();
  pid_ = ::fork();
  if (pid_ == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    if (keys_max != 0)
      ::setenv("BPFTRACE_MAP_KEYS_MAX", std::to_string(keys_max).c_str(), 1);
    ::execl("/usr/bin/bpftrace", "bpftrace", "-e", full.c_str(), nullptr);
    ::_exit(127);
  }
  ::close(out[1]);
  out_ = ::fdopen(out[0], "r");
  char line[512];
  while (std::fgets(line, sizeof(line), out_) != nullptr) {
    text_ += line;
    if (text_.find("bpftrace attached") != std::string::npos)
      break;
  }
}

Bpftrace::~Bpftrace() {
  if (out_ != nullptr)
    stop();
}

std::string Bpftrace::stop() {
  ::kill(pid_, SIGINT);
  char line[512];
  while (std::fgets(line, sizeof(line), out_) != nullptr)
    text_ += line;
  std::fclose(out_);
  out_ = nullptr;
  ::waitpid(pid_, nullptr, 0);
  return text_;
}

}  // namespace tracer::bench
