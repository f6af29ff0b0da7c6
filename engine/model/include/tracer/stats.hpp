// An engine's counters: per probe and CPU (RingStats), per probe (ProbeStats: BPF output drops,
// in-kernel aggregation drops, skipped programs, and the loss total), and per engine (Stats).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tracer/perf/ring_stats.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct ProbeStats {
  std::string name;
  std::vector<std::pair<int, RingStats>> per_cpu;  // cpu -> stats
  /// kBpfOutput: failed bpf_perf_event_output calls, from the object's per-CPU array
  /// `output_drops` when it has one (the shipped programs do). A call that failed because the
  /// ring was full is also in the ring's LOST count: events lost = max(lost, drops) when the
  /// program counts every failure.
  std::uint64_t bpf_output_drops = 0;
  /// Placed in the kernel (tracer::Session): events an aggregation's map had no room for (its
  /// max_keys, or a stack the stack map could not hold), counted by the probe's program.
  /// Lost, and reported as such.
  std::uint64_t kernel_dropped = 0;
  /// The part of kernel_dropped whose stacks did not fit the stack map (the rest: map full).
  std::uint64_t kernel_stacks_lost = 0;
  /// Placed in the kernel for a pid or command target: descendants that the program's target
  /// map had no room for ([recipe] max_targets), whose events it then never saw. Processes,
  /// not events: reported on their own.
  std::uint64_t targets_dropped = 0;
  /// Placed in the kernel: events whose string key (a `char *` field's string, a __data_loc
  /// string) was longer than the key's bytes and was cut. Counted, not lost.
  std::uint64_t keys_truncated = 0;
  /// Placed in the kernel: `char *` strings its program could not read (their page was not in
  /// memory at the event: a tracepoint program cannot fault it in); they key and filter as
  /// empty strings. Not lost events: reported on their own.
  std::uint64_t string_faults = 0;
  /// Placed in the kernel: min/max updates of a shared (not per-CPU) map that the program gave
  /// up after 64 compare-and-swap retries: the events are counted, their value may not be the
  /// extreme. Reported on their own.
  std::uint64_t kernel_contended = 0;
  /// Hits the kernel ran the probe's BPF program for none of, because another BPF program was
  /// running on that CPU (bpf_prog_active; bpf_prog_info.recursion_misses): a program-gated
  /// tracepoint then writes no sample either, so they are neither events nor a LOST count, nor
  /// in kernel_hits (the program counts those). Lost, and reported as such.
  std::uint64_t bpf_skipped = 0;
  /// bpf_skipped is the count of a program several probes share (the tracepoint delivery
  /// program, the hit counter, a [bpf] program on several probes): the kernel counts per
  /// program, so each of those probes reports the same total, some of which may be another's.
  bool bpf_skipped_shared = false;
  [[nodiscard]] RingStats total() const noexcept;

  /// The events lost, each kind on its own; lost() is their sum.
  struct Losses {
    std::uint64_t ring = 0;          // LOST and LOST_SAMPLES records of the probe's rings
    std::uint64_t output_drops = 0;  // failed BPF output calls beyond those the rings counted
    std::uint64_t map_full = 0;      // in-kernel aggregation: keys the map had no room for
    std::uint64_t stacks_lost = 0;   // in-kernel aggregation: stacks the stack map could not hold
  };
  [[nodiscard]] Losses losses() const noexcept;
  /// Every event lost (the sum of losses()); targets_dropped, bpf_skipped and missed are
  /// reported beside it.
  [[nodiscard]] std::uint64_t lost() const noexcept;
};

struct Stats {
  std::vector<ProbeStats> probes;
  /// Passes over every ring, and those of them the flush timer woke the engine for; the others
  /// were made on a ring's wakeup. Each that read every ring to its head ends with on_round.
  std::uint64_t passes = 0;
  std::uint64_t timer_passes = 0;
  /// Passes that read no ring because the stages were behind (Engine::hold_while).
  std::uint64_t held_passes = 0;
  /// Passes that ended no round (Engine::on_pass) and were not held: a ring was not read yet up
  /// to its head at the last round's end (a pass cut by its time slice).
  std::uint64_t partial_passes = 0;
  /// How long each pass over the rings took (the drain's latency: reading, the stages, the
  /// round): passes by the bit width of their microseconds (bucket b: under 2^b µs), and the
  /// nanoseconds of all of them.
  std::array<std::uint64_t, 32> pass_us_log2{};
  std::uint64_t pass_ns = 0;
  /// Every event lost, all probes together (the sum of each probe's lost()): the one total the
  /// CLI's status line, summary and an embedder read.
  [[nodiscard]] std::uint64_t lost() const noexcept;
};

}  // namespace tracer

#pragma GCC visibility pop
