// Private to the engine: Engine::Impl, whose concerns live in their own files:
//   engine.cpp          lifecycle: check()/start() (one resolve path), the reactor, stop
//   engine_bpf.cpp      the BPF object: load, programs, the output channel, tgids, maps()
//   engine_delivery.cpp tracepoint delivery through BPF and the tracepoint hit counters
//   engine_stats.cpp    Stats: per probe and CPU, from the rings, the events and the counters
//   targets.cpp         the traced processes (core::Targets)
#pragma once

#include <unistd.h>

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "probe_resolver.hpp"
#include "ring_wait.hpp"
#include "targets.hpp"
#include "tp_delivery.hpp"
#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/ring_reader.hpp"
#include "tracer/tracefs/dynamic_probes.hpp"

namespace tracer {

namespace core {
/// Whether a probe of kind `k` opens a tracepoint or a probe-PMU event: what needs the tracing
/// privilege (core::Needs::tracepoints).
[[nodiscard]] inline bool opens_trace_event(ProbeKind k) noexcept {
  return k == ProbeKind::kTracepoint || k == ProbeKind::kKprobe || k == ProbeKind::kKretprobe ||
         is_user_probe(k);
}
/// The usage error of a second probe named `name`.
[[noreturn]] void throw_duplicate_probe(const std::string& name);
[[noreturn]] void throw_failure(ErrorCategory cat,
                                const Failure& f,
                                const std::string& prefix = {},
                                ErrorSubject subject = {});
}  // namespace core

struct Engine::Impl : std::enable_shared_from_this<Engine::Impl> {
  /// What an error about probe `p` is about (ErrorSubject), with the option it names.
  [[nodiscard]] ErrorSubject about(std::size_t p, std::string option = {}) const {
    return {.probe = p,
            .recipe_probe = p < opts.probes.size() ? opts.probes[p].origin : std::nullopt,
            .option = std::move(option)};
  }
  /// An Error thrown about probe `p` without a subject yet gets it (rethrown by the caller).
  void mark(Error& e, std::size_t p) const {
    if (!e.subject().probe)
      e.subject() = about(p, std::move(e.subject().option));
  }
  struct Reader {
    Reader(perf::RingReader r,
           const boost::asio::any_io_executor& executor,
           int fd,
           const perf::EventAttr& attr)
        : reader(std::move(r)),
          wait(executor,
               fd,
               *reader.ring().meta(),
               attr.raw()->watermark != 0 ? attr.raw()->wakeup_watermark : 0) {}
    perf::RingReader reader;
    core::RingWait wait;
    BatchHandler via;  // set: this ring's batches go through it (tracepoint delivery)  // on the
                       // ring's event fd (not owned); destroyed before the ring unmaps
    std::uint64_t round_head = 0;  // the ring's head when the last round ended
    bool armed = false;
    bool parked = false;   // held (backpressure): re-armed by the first pass that reads again
    bool retired = false;  // its probe was removed: never drained or armed again
  };
  // The events of one probe on one CPU (one per traced thread for a pid target): the first
  // owns the ring, the others SET_OUTPUT into it.
  struct CpuEvents {
    int cpu = -1;
    std::vector<perf::Event> events;
    /// The site of each event (ProbeInfo::sites: 0 is attr's own). Events of one site
    /// share one kernel probe where its program is attached once.
    std::vector<std::uint32_t> site_of;
    /// Timebase sampling: the counting members of each event's group (ProbeOptions::read_events),
    /// closed with it.
    std::vector<perf::Event> members;
    Reader* reader = nullptr;
  };

  Impl(boost::asio::any_io_executor ex, EngineOptions o)
      : serial(core::serial_executor(ex)),
        opts(std::move(o)),
        flush_timer(serial),
        free_wait(serial) {}

  // Every handler of the engine's runs here: a strand of the given executor, or the executor
  // itself when one thread runs its io_context (core::serial_executor).
  boost::asio::any_io_executor serial;
  EngineOptions opts;
  BatchHandler batch_handler;
  InPlaceHandler in_place_handler;
  std::function<bool(std::uint32_t)> in_place_takes;  // probes whose perf rings go in place
  std::function<void()> done_handler;
  std::function<void(bool round)> pass_handler;  // Engine::on_pass (on_round wraps its handler)
  std::function<bool()> backlogged;              // hold_while()
  bool hold_posted = false;                      // a held pass is queued
  bool ringbuf_parked = false;                   // the delivery ring buffer's wait, held
  std::function<void()> before_enable;
  std::vector<ProbeInfo> probes;
  std::vector<bool> counting;
  std::vector<std::vector<CpuEvents>> events;  // [probe][cpu slot]
  std::vector<std::unique_ptr<Reader>> readers;
  boost::asio::steady_timer flush_timer;
  /// After the target's exit: the wait for its task to be freed (stop_once_freed).
  boost::asio::steady_timer free_wait;
  core::Targets targets;
  std::optional<tracefs::DynamicProbes> dynamic;  // removed after the events close
  std::vector<std::unique_ptr<tracefs::DynamicProbes>> added_dynamic;  // of probes added live
  /// A removed probe's rings and events, closed once the executor has run what it had queued
  /// for them (a posted drain then finds its reader retired); then its dynamic tracefs probe,
  /// which the kernel keeps while an event holds it (EBUSY). cleanup() closes what is left.
  struct Closing {
    std::vector<std::unique_ptr<Reader>> readers;
    std::vector<CpuEvents> events;
    std::string prefix;  // of its dynamic probe's event name
  };
  std::vector<std::unique_ptr<Closing>> closings;
  void finish_closing(const Closing* c) noexcept;
  /// By probe: its stats when it was removed (Engine::remove_probe).
  std::vector<std::optional<ProbeStats>> removed_stats;
  std::optional<bpf::Object> bpf_object;  // closed last: programs detach with the events
  // The tracepoint hit counter (count_tracepoint_hits): the object, each probe's tracepoint id
  // (0: not counted) and the per-CPU counts when the events were enabled.
  core::TracepointHits hit_counter;  // detached in cleanup()
  std::vector<std::uint32_t> hit_ids;
  std::vector<std::vector<std::uint64_t>> hit_base, hit_final, drop_base, drop_final;
  // Tracepoint probes delivered through BPF (deliver_tracepoints_via_bpf), by probe.
  std::optional<core::TracepointDelivery> delivery;
  std::vector<bool> delivered;
  // The delivery's BPF ring buffer (DeliveryChannel::kRingbuf): a wait on (a duplicate of) its
  // map fd, readable when records wait; the program wakes it once a fill threshold is reached.
  std::optional<boost::asio::posix::stream_descriptor> ringbuf_wait;
  bool ringbuf_armed = false;
  std::optional<DeliveryChannel> used_channel;  // Engine::delivery_channel()
  std::uint64_t ringbuf_wakeups = 0;
  std::unique_ptr<MapSource> map_source;     // Engine::maps(), made on first use
  std::optional<bpf::OutputChannel> output;  // bpf-output events (rings moved to readers)
  std::vector<Reader*> output_readers;       // readers of the output channel, per CPU
  bool running = false;
  bool prepared = false;  // prepare() opened everything (go() not yet: nothing armed)
  bool stopped = false;
  bool target_exited = false;  // the engine stopped because the command or pid target exited
  // Passes over every ring: when the last began, how many were made and how many of them the
  // flush timer woke the engine for. timer_generation counts arm_timer() calls: a timer wait
  // armed before the latest one is stale.
  std::chrono::steady_clock::time_point last_pass{};
  std::uint64_t passes = 0;
  std::uint64_t timer_passes = 0;
  std::uint64_t timer_generation = 0;
  std::string ring_note;                 // how the rings were sized (Engine::ring_note)
  std::uint32_t output_ring_pages = 0;   // the output channel's default within a budget, or 0
  std::uint32_t ring_pages_default = 0;  // core::plan_rings' pages per ring
  std::exception_ptr failure;
  Stats final_stats;

  // engine.cpp
  /// The one resolve path of check() and start(): every probe resolved (tracepoint ids and
  /// formats, symbols, PMUs) before anything opens, so a typo fails fast and opens nothing.
  /// Dynamic tracefs probes it had to create stay in `ctx`.
  [[nodiscard]] std::vector<core::ResolvedProbe> resolve(core::ResolveContext& ctx) const;
  /// Sizes the rings from the locked-memory budget: ring_note, ring_pages_default and
  /// output_ring_pages. @return the data pages of a ring whose probe gives none.
  std::uint32_t plan_ring_sizes();
  void start();
  void prepare();
  void go();
  /// `later`: where the closing of the events, links and tracefs probes goes (nullptr: now).
  void stop(std::function<void()>* later = nullptr);
  void cleanup(std::function<void()>* later = nullptr) noexcept;
  /// A delivered probe's side-band records (COMM, FORK, EXIT... when its attr asks for them)
  /// from a dummy event on `cpu` writing into the ring of `ce` (whose tracepoint event is never
  /// enabled).
  /// Drains `r` for at most drain_slice_ms, then re-arms its wait, or posts the rest when the
  /// slice ran out with records left.
  /// One drain of `r`: its records to the batch handler (or its `via`), its samples in place
  /// when the in-place handler takes its probe.
  void drain_reader(Reader& r) noexcept;
  void drain_slice(Reader& r);
  /// hold_while()'s predicate, false while stopping.
  [[nodiscard]] bool held() const;
  /// Queues one pass (rounds only, while held) after what else is ready.
  void post_held_pass();
  std::uint64_t held_passes = 0;
  std::uint64_t partial_passes = 0;              // passes not held that ended no round
  std::array<std::uint64_t, 32> pass_us_log2{};  // Stats::pass_us_log2
  std::uint64_t pass_ns = 0;
  bool stopping = false;  // stop()'s final drain: bounded by stop_deadline
  std::chrono::steady_clock::time_point stop_deadline{};
  /// The resolution context of the engine's target.
  void prepare(core::ResolveContext& ctx) const;
  /// check(): opens each probe's event once, disabled, into trial_events (what the kernel
  /// refuses of the recipe is an error at its probe, as in start()).
  void trial_open(const std::vector<core::ResolvedProbe>& resolved);
  /// The probe's event as run() would open it, on `cpu` (disabled), or none when not privileged to
  /// try. Throws the error run() would give.
  [[nodiscard]] perf::Event trial_open_one(const core::ResolvedProbe& rp, int cpu) const;
  void open_side_band(const core::ResolvedProbe& rp,
                      int cpu,
                      const std::vector<pid_t>& pids,
                      CpuEvents& ce);
  void open_probe(core::ResolvedProbe& rp,
                  const std::vector<int>& cpus,
                  const std::vector<pid_t>& pids);
  void arm(Reader& r);
  /// What every ring wakeup ends with, after its drain: a pass over every ring when one is due;
  /// stop() when a handler failed. @return false when the engine stopped (do not re-arm).
  bool after_wakeup();
  void arm_timer();
  /// True when a pass over every ring is due within half a flush interval.
  [[nodiscard]] bool pass_due() const noexcept;
  /// Stops the engine when `pid` exits (a started command, which is then reaped, or a pid
  /// target).
  void watch_exit(pid_t pid);
  /// Stops once the exited target `tgid` has left the delivery program's `tgids` map (its
  /// leader's task freed: after its last thread's final switch), at most until `deadline`.
  void stop_once_freed(pid_t tgid, std::chrono::steady_clock::time_point deadline);
  /// A pass over every ring, each for at most drain_slice_ms (until stop_deadline while
  /// stopping), skipped while held. `complete` (drain_now): every ring to the head it has at
  /// the pass, held or not (bounded by the rings' sizes): what a change of the pipelines or a
  /// read of the tables counts on has reached the pipelines.
  void drain_all(bool complete = false) noexcept;
  /// True (and `failure` set) when a batch handler threw: the engine must stop.
  bool check_handler_failure();

  // engine_bpf.cpp
  /// `scratch`: a source compiles in a temporary directory, not into the cache (check()).
  void load_bpf(const BpfOptions& b,
                const std::vector<core::ResolvedProbe>& resolved,
                bool scratch = false);
  /// The fd of the program probe `p` names. Throws kUsage when there is no BPF object or it
  /// has no such program.
  [[nodiscard]] int program_fd(std::size_t p) const;
  /// The output channel's probe as check() describes it (nullopt: the options ask for none).
  [[nodiscard]] std::optional<ProbeInfo> check_output_channel(const BpfOptions& b,
                                                              std::uint32_t index) const;
  void open_output_channel(const BpfOptions& b, bpf::Object& obj);
  void attach_bpf_programs();
  /// tracer_target.h in loaded `obj`: fills its `tgids` with `tgids` and the pid or command
  /// target (a command joins at its exec where the object has tracer_follow_exec), and attaches
  /// its followers (fork, free, exec) for a task target. Nothing when it has no `tgids`.
  void follow_target(bpf::Object& obj, std::vector<pid_t> tgids);
  /// Sizes `obj`'s tgids for the target (before its load).
  void size_targets(bpf::Object& obj) const;

  // engine_delivery.cpp
  /// Which probes deliver through BPF; their events then sample nothing (side-band records only).
  void plan_delivery(std::vector<core::ResolvedProbe>& resolved);
  void open_delivery();
  /// The channel the delivery uses (the options', else the ring buffer where the kernel has it).
  [[nodiscard]] DeliveryChannel delivery_channel() const noexcept;
  void arm_ringbuf();
  /// Drains the delivery's ring buffer (if any) through the batch handler; a throwing handler
  /// is kept in `failure`.
  /// `complete`: to the producer's position at the call, with no time slice (drain_all).
  void drain_ringbuf(bool complete = false) noexcept;
  /// Rounds (Engine::on_round): each ring's head when the last round ended. The next ends once
  /// every ring was read up to it, over one pass or several (a pass cut by its time slice, a
  /// ring's own wakeups): every record written before the last round ended was then read, so
  /// every time up to the largest one seen then is safe (perf's FINISHED_ROUND, whose passes
  /// read each ring to the head they found).
  [[nodiscard]] bool round_reached() noexcept;
  void mark_round() noexcept;
  std::uint64_t ringbuf_round_head = 0;
  void attach_hit_counters();
  /// Their events (sched_process_fork/exit/exec, one each per object), and those a task
  /// target's [bpf]
  /// programs attach to: system-wide, never inherited (cleanup() closes them).
  std::vector<perf::Event> follow_events;
  /// check()'s trial events, kept until start() has opened the probes' own events (trial_open).
  std::vector<perf::Event> trial_events;
  /// The process left out of system-wide tracing: this one, unless EngineOptions::trace_self.
  [[nodiscard]] std::uint32_t self_tgid() const noexcept {
    return opts.trace_self || opts.target.kind != Target::Kind::kAllCpus
               ? 0
               : static_cast<std::uint32_t>(::getpid());
  }
  [[nodiscard]] std::vector<std::uint64_t> read_drops(std::size_t p) const;
  /// Hits of probe `p`'s tracepoint the kernel ran our program on it for none of (another BPF
  /// program was running on the CPU), and whether that program serves other probes too.
  [[nodiscard]] std::pair<std::uint64_t, bool> read_skips(std::size_t p) const;
  /// Per-CPU hits of probe `p`'s tracepoint so far (empty when not counted).
  [[nodiscard]] std::vector<std::uint64_t> read_hits(std::size_t p) const;
  /// Every probe's read_hits() and read_drops() now (hit_base/drop_base when the events start,
  /// hit_final/drop_final when they stop). `at_start`: the bases, empty (zero) for the
  /// delivered probes.
  void read_kernel_counts(std::vector<std::vector<std::uint64_t>>& hits,
                          std::vector<std::vector<std::uint64_t>>& drops,
                          bool at_start) const;

  // engine_stats.cpp
  Stats collect_stats() const;
  /// Probe `p`'s stats now (collect_stats' for one probe).
  ProbeStats probe_stats(std::size_t p) const;

  // engine_live.cpp
  std::vector<std::uint32_t> add_probes(std::vector<ProbeOptions> added, bool enabled);
  void enable_probes(std::span<const std::uint32_t> indices);
  void remove_probe(std::uint32_t index);
};

}  // namespace tracer
