// Reorder: merges the records of every ring (every probe, every CPU) into time order, the way
// perf's ordered_events does for perf report: records are queued (their bytes copied, since a
// ring's bytes are handed back to the kernel after each batch), and a queued record is released
// only once no record written before it can still arrive. The one ordering mechanism of live
// runs (Pipeline, fed by Engine::on_batch and Engine::on_round) and of replay (fed by a
// perf.data file, with its FINISHED_ROUND records as the rounds).
//
// When is a record safe to release? After a pass over every ring that began after the record was
// written. The engine's rounds (Engine::on_round) and perf's FINISHED_ROUND both mark the end of
// such a pass, so at the end of round n every record with a time up to the largest time seen by
// the end of round n-1 has been read (kernel tools/perf/util/session.c process_finished_round,
// ordered_events.c). round() releases exactly those. A record that arrives with a time before
// what was already released is late: it is counted (ReorderStats::late) and released at the
// next flush, never dropped. Memory is bounded: past `max_bytes` queued, the older half is
// released early (ReorderStats::forced_flushes); records it overtakes then count as late.
//
// Usage:
//   Reorder order({.max_bytes = 64 << 20});
//   on batch:  for (auto& r : batch.records) order.push(r, layout_of(r.probe), handler);
//   on round:  order.round(handler);          // hands on what is now safe, in time order
//   at stop:   order.flush_all(handler);
#pragma once

#include <array>
#include <chrono>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "tracer/perf/record_ref.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct ReorderOptions {
  /// Bytes of queued records before the older half is released early.
  std::size_t max_bytes = std::size_t{64} << 20;
  /// Records per batch handed on.
  std::size_t max_batch = 512;
};

struct ReorderStats {
  std::uint64_t queued = 0;          // records pushed
  std::uint64_t released = 0;        // records handed on
  std::uint64_t late = 0;            // records older than what was released before them
  std::uint64_t untimed = 0;         // records without a time (given the latest time seen)
  std::uint64_t forced_flushes = 0;  // early releases for want of memory
  std::uint64_t max_queued = 0;      // most records queued at once
  std::uint64_t rounds = 0;
  /// Records still queued when a release's give_up_at() passed (a stop past its time): dropped
  /// unprocessed, and counted.
  std::uint64_t unprocessed = 0;
};

class Reorder {
 public:
  explicit Reorder(ReorderOptions options = {});

  /// Queues a copy of `ref`, to be decoded again with `layout` (the one it was decoded with,
  /// which must outlive the queue) when released. Records that carry AUX data (RecordRef::aux)
  /// are not copied: the caller hands them on directly (see queueable()). Past max_bytes queued,
  /// the older half is released to `out` at once.
  void push(const RecordRef& ref, const perf::SampleLayout& layout, const BatchHandler& out);
  [[nodiscard]] static bool queueable(const RecordRef& ref) noexcept { return !ref.aux; }

  /// The end of a pass over every ring: releases, in time order, every record up to the largest
  /// time seen at the previous round's end.
  /// `yield_at` (steady clock): past it, the round stops after a batch and keeps the rest
  /// queued, in order, for the next one: a round of slow stages does not keep the reactor from
  /// its timers and signals.
  void round(const BatchHandler& out,
             std::chrono::steady_clock::time_point yield_at =
                 std::chrono::steady_clock::time_point::max());
  /// A pass that was no round (it left records in a ring, or read none): goes on releasing
  /// what the last round made safe (a release that yielded), and nothing later.
  void resume(const BatchHandler& out,
              std::chrono::steady_clock::time_point yield_at =
                  std::chrono::steady_clock::time_point::max());
  /// The last release stopped at its yield_at with records it could release still queued.
  [[nodiscard]] bool releasing() const noexcept { return releasing_; }
  /// Releases every record with a time up to `time`.
  void flush_until(std::uint64_t time, const BatchHandler& out);
  /// Releases everything (end of input).
  void flush_all(const BatchHandler& out);

  /// A release past `at` (steady clock) stops after its batch and drops what is still queued
  /// (ReorderStats::unprocessed): the end of a stop that must not wait on slow stages.
  void give_up_at(std::chrono::steady_clock::time_point at) noexcept { give_up_at_ = at; }

  [[nodiscard]] const ReorderStats& stats() const noexcept { return stats_; }
  [[nodiscard]] std::size_t queued() const noexcept { return entries_.size(); }
  /// Bytes of the queued records, and the budget past which half of them are released at once.
  [[nodiscard]] std::size_t queued_bytes() const noexcept {
    return arenas_[0].size() + arenas_[1].size();
  }
  [[nodiscard]] std::size_t max_bytes() const noexcept { return options_.max_bytes; }

  /// The time of a record: the sample's time, else its sample_id trailer's; nullopt without one.
  [[nodiscard]] static std::optional<std::uint64_t> time_of(const perf::Record& r) noexcept;

 private:
  struct Entry {
    std::uint64_t time = 0;
    std::uint64_t seq = 0;  // arrival order: ties keep it (records of one ring stay in order)
    std::uint32_t offset = 0, size = 0;
    std::uint32_t probe = 0;
    std::int32_t cpu = -1;
    std::uint32_t itrace_pid = 0, itrace_tid = 0;
    const perf::SampleLayout* layout = nullptr;
    std::uint8_t arena = 0;  // which of arenas_ holds its bytes
  };
  void release(std::size_t count, const BatchHandler& out);
  /// After a release: the records still queued in the older arena move to the current one
  /// (rare: a round that yielded, a record far ahead of the others), the older arena empties
  /// and takes the new records from now on. In steady state a round releases every record of
  /// the older arena, so nothing is copied twice.
  void recycle();

  ReorderOptions options_;
  std::vector<Entry> entries_;  // queued, in arrival order
  std::vector<Entry> held_;     // flush_until's scratch (kept: no allocation once warm)
  std::chrono::steady_clock::time_point give_up_at_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point yield_at_ = std::chrono::steady_clock::time_point::max();
  /// flush_until's sort keys: (time, index of the entry in arrival order), 16 bytes each.
  struct SortKey {
    std::uint64_t time = 0;
    std::uint64_t index = 0;
  };
  std::vector<SortKey> keys_, merged_;
  std::vector<std::size_t> runs_;  // sort_keys: where each ascending run of keys_ begins
  /// Sorts keys_; false when they were in order already.
  template <typename Less>
  bool sort_keys(const Less& less);
  std::vector<Entry> sorted_;
  /// The queued records' bytes, in two generations: new records go to arenas_[current_]; the
  /// other holds what came before the last release and was not released by it.
  std::array<std::vector<std::byte>, 2> arenas_;
  std::uint8_t current_ = 0;
  std::vector<RecordRef> refs_;  // max_batch slots, reused: a released batch
  std::uint64_t seq_ = 0;
  std::uint64_t max_time_ = 0;       // largest time pushed
  std::uint64_t next_flush_ = 0;     // round(): release up to this (max_time_ at the last round)
  std::uint64_t safe_ = 0;           // what the last round released up to (resume()'s bound)
  bool releasing_ = false;           // the last flush_until yielded (see releasing())
  std::uint64_t released_upto_ = 0;  // largest time released
  bool any_released_ = false;
  ReorderStats stats_;
};

}  // namespace tracer

#pragma GCC visibility pop
