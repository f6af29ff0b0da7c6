// kernel::gen::Reader: the rows of a generated program's aggregation (tracer/kernel/codegen.hpp),
// read one generation at a time so that interval output loses and double-counts nothing.
//
// A Row is the stage API's KernelRow (tracer/ext/kernel_form.hpp): the key's cells and its value
// bytes as the stage's kernel part (KernelAgg) laid them out, which the stage absorbs into its
// own state and orders, cuts (top) and labels itself.
//
// Usage:
//   gen::Reader reader(obj, prog, {.syscall_name = [](std::int64_t nr) { return name(nr); }});
//   every interval:  auto snap = reader.flip_and_read();   // rows of the interval just ended
//   at the end, after detaching: reader.flip_and_read() once more (the rest).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <variant>
#include <vector>

#include "tracer/kernel/codegen.hpp"

namespace tracer::kernel::gen {

/// A stack key: its addresses, leaf first (Source::kCallchain: with the PERF_CONTEXT_KERNEL and
/// PERF_CONTEXT_USER markers before each part, as perf writes a callchain), and the process
/// whose address space the user addresses belong to (0 for kernel stacks). The stage API's
/// types (tracer/ext/kernel_form.hpp): the rows go to the stages as they are read.
using Ips = KernelIps;
using Cell = KernelCell;

/// A row as the stage absorbs it: its key cells and its value bytes (each CPU's, or the one
/// shared value), which the stage's kernel part laid out and the stage decodes.
using Row = KernelRow;

/// A probe's counters since load (cumulative), summed over CPUs.
struct ProbeStats {
  std::string name;
  Stats total;
  std::vector<std::uint64_t> hits_per_cpu;  // index = CPU number
  /// Runs the kernel skipped because another BPF program was running on that CPU
  /// (bpf_prog_info.recursion_misses): events the probe's program did not see.
  std::uint64_t recursion_misses = 0;
};

struct Snapshot {
  std::vector<std::string> key_names;
  std::vector<Row> rows;         // in the map's order, keys with events only (the stage orders,
                                 // cuts and labels them)
  std::uint32_t generation = 0;  // the generation these rows were read from
  // Cumulative counters (since load), at the time of the read.
  std::vector<ProbeStats> probes;
  Stats pipeline;                 // latency counters, targets_dropped (the pipeline's slot)
  std::uint64_t map_full = 0;     // events whose key did not fit, every probe
  std::uint64_t truncated = 0;    // string keys cut, every probe
  std::uint64_t stacks_lost = 0;  // events whose stack did not fit tr_stacks, every probe
  std::uint64_t pending = 0;      // latency: entries waiting for their exit now
};

struct ReaderOptions {
  /// Names a system call number (Field::syscall_id keys); empty or unset: the number.
  std::function<std::string(std::int64_t)> syscall_name{};
};

/// One reader per loaded object, used from one thread (it owns the flip).
class Reader {
 public:
  /// `obj` is the loaded object of `prog` and must outlive the reader.
  Reader(bpf::Object& obj, GeneratedProgram prog, ReaderOptions opts = {});

  /// Flips the generation the programs write (tr_gen), waits until no program can still be
  /// writing the old one (a grace period: every BPF program running when it began has
  /// returned), then reads the old generation's rows and clears it.
  /// @return the rows and counters, or the failing map operation's errno.
  [[nodiscard]] Result<Snapshot> flip_and_read();
  /// The generation being written, read without flipping: a live view, not interval-exact
  /// (an update may land between two keys' reads).
  [[nodiscard]] Result<Snapshot> peek() const;
  /// The counters alone.
  [[nodiscard]] Result<std::vector<ProbeStats>> probe_stats() const;
  /// Whether the generation being written may be half full (keys added since the last flip
  /// reach max_keys / 2): a reader that flips only when an output is due flips now, so that
  /// max_keys still holds per read. One map read; always false for an array layout.
  [[nodiscard]] Result<bool> filling() const;
  /// The generation programs write now (0 or 1).
  [[nodiscard]] std::uint32_t generation() const noexcept { return gen_; }
  [[nodiscard]] const GeneratedProgram& program() const noexcept { return prog_; }

 private:
  [[nodiscard]] Result<std::vector<Row>> read_rows(std::uint32_t gen, bool clear) const;
  /// A hash map's rows through batched calls; ENOTSUP where the kernel has none.
  [[nodiscard]] Result<std::vector<Row>> read_batched(int fd, const char* map, bool clear) const;
  [[nodiscard]] Status fill_counters(Snapshot& s) const;
  /// tr_stats: every slot's per-CPU counters, slot-major.
  [[nodiscard]] Result<std::vector<std::byte>> read_stats() const;
  /// Keys inserted into either generation since load (Stats::keys_added, every slot).
  [[nodiscard]] Result<std::uint64_t> keys_added() const;
  [[nodiscard]] Status set_generation(std::uint32_t gen);
  [[nodiscard]] Status wait_for_programs() const;
  [[nodiscard]] Row make_row(const std::byte* key,
                             std::span<const std::byte> values,
                             std::uint32_t slot) const;
  [[nodiscard]] Cell decode_key(const KeyColumn& c, const std::byte* key) const;
  /// A stack column's cell: its hashes looked up in tr_stacks (each once: a hash names the same
  /// stack for the whole run, the map is never cleared).
  [[nodiscard]] Cell decode_stack(const KeyColumn& c, const std::byte* p) const;
  [[nodiscard]] const std::vector<std::uint64_t>& stack_of(std::uint64_t hash) const;
  [[nodiscard]] Snapshot empty_snapshot() const;
  /// Whether a row's value holds an event (a value of zeros is none: KernelAgg).
  [[nodiscard]] static bool has_events(const Row& row) noexcept;

  bpf::Object* obj_;
  GeneratedProgram prog_;
  ReaderOptions opts_;
  std::uint32_t gen_ = 0;
  std::uint32_t cpus_ = 1;
  std::uint64_t keys_at_flip_ = 0;  // keys_added() just before the last flip
  mutable std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> stacks_;  // hash -> ips
};

}  // namespace tracer::kernel::gen
