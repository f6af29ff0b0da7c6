// Private to the perf.data writer: the records perf record synthesizes from /proc when it
// starts (tools/perf/util/synthetic-events.c): a COMM per thread, an MMAP2 per executable
// mapping of each process (and per readable file mapping when an event has mmap_data), the kernel's
// text as an MMAP; and the same for a thread first seen in a sample, which started after the
// recording did.
//
// Usage (the writer's):
//   ProcSynthesizer synth(opts.proc_root, first_attr_trailer, writer_impl);
//   synth.kernel(); synth.all();         // at the start of the data section
//   synth.thread(pid, tid);              // per sample (allocation-free)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tracer::perfdata::detail {

/// Where synthesized records go: the writer's buffer.
class RecordSink {
 public:
  /// The buffer to append one synthesized record of `size` bytes to (counted as synthesized),
  /// or nullptr when it has no room (the writer's error is then set).
  virtual std::vector<std::byte>* synthesized_record(std::size_t size) noexcept = 0;

 protected:
  ~RecordSink() = default;
};

/// A set of u32 keys in fixed memory (linear probing). Full: everything counts as seen (and
/// nothing more is synthesized), never an allocation.
class SeenSet {
 public:
  SeenSet();
  /// True if `key` was already there; inserts it otherwise.
  bool check_insert(std::uint32_t key) noexcept;

 private:
  static constexpr std::uint32_t kEmpty = 0xffffffffU;
  std::vector<std::uint32_t> keys_;
  std::size_t used_ = 0;
};

class ProcSynthesizer {
 public:
  /// `proc_root`: where /proc is (tests point it elsewhere). `trailer`: the sample_id trailer
  /// size of the file's first attr, which records with id 0 (synthesized) must have, zeroed.
  /// `data`: readable non-executable file mappings are announced too (with
  /// PERF_RECORD_MISC_MMAP_DATA), as perf record does for events with mmap_data: a DWARF unwind
  /// reads .eh_frame_hdr through them.
  ProcSynthesizer(std::string proc_root,
                  std::uint32_t trailer,
                  RecordSink& sink,
                  bool data = false);

  /// The kernel's text as perf record announces it: MMAP of "[kernel.kallsyms]_text" (nothing
  /// when kptr_restrict hides the addresses).
  void kernel();
  /// Every process in /proc: COMM per thread, MMAP2 per executable mapping.
  void all();
  /// COMM and maps for a thread first seen in a sample (once per tid and per pid).
  void thread(std::uint32_t pid, std::uint32_t tid) noexcept;

 private:
  /// Reads a small /proc file into proc_buf_; the text without a trailing newline.
  std::string_view read_proc_small(const char* file) noexcept;
  void synthesize_comm(std::uint32_t pid, std::uint32_t tid) noexcept;
  /// Whether `pid` is a child of this process (a command target before its exec).
  bool own_child(std::uint32_t pid) noexcept;
  /// MMAP2 for every executable mapping of `pid` (and data mapping, with `data_`), from
  /// /proc/PID/maps read in fixed chunks.
  void synthesize_maps(std::uint32_t pid) noexcept;

  std::string proc_root_;
  std::uint32_t trailer_;
  RecordSink& sink_;
  bool data_;
  SeenSet seen_pids_, seen_tids_;
  std::vector<char> proc_buf_;
};

}  // namespace tracer::perfdata::detail
