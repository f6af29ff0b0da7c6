// perf.data writer: what the engine collected, as a file (or a pipe stream) that perf 6.x's
// `perf script`, `perf report` and `perf evlist` read.
//
// Usage:
//   auto w = perfdata::Writer::open("out.data", engine.probes(), {.cmdline = argv});
//   if (!w) ...;                              // Failure: errno of open/write, the path
//   engine.on_batch([&](const Batch& b) { for (auto& r : b.records) w->write(r); });
//   engine.on_round([&] { w->end_round(); }); // FINISHED_ROUND + crash-safe header update
//   ...
//   auto st = w->close();                     // final header, features; idempotent
//
// What goes in the file (file mode):
//   header | ids | feature contents (all but SAMPLE_TIME) | attrs | data | SAMPLE_TIME | sections
//   The data section starts with ID_INDEX, AUXTRACE_INFO for AUX probes, then COMM/MMAP2 records
//   synthesized from /proc and the kernel's MMAP, then the engine's records. Every end_round()
//   writes FINISHED_ROUND, then SAMPLE_TIME and the feature table right after it, then updates the
//   header's data size: a process killed at any point outside those two writes leaves a file
//   perf reads up to the last FINISHED_ROUND, features included.
// Pipe mode (path "-" or a FIFO/pipe/socket): the pipe header, HEADER_ATTR per probe,
//   HEADER_FEATURE per feature, HEADER_TRACING_DATA, then the records as above.
//
// Ids: every written attr gets its own ids (one per CPU ring); the identifier of every record is
// rewritten to them in the copy. The BPF output channel's records (RAW|TIME|CPU, no identifier)
// are rebuilt with IDENTIFIER|IP|TID|TIME|CPU|PERIOD|RAW and sample_id_all, as perf record writes
// a bpf-output event, so perf maps every record to its attr and `perf script` prints the payload.
// pid/tid of those samples come from the payload's `pid`/`tid` fields (BTF) when it has them.
//
// Threading: none; call from one thread. write()/end_round() never throw and do not allocate
// once warm (a new process or thread seen in a sample reads /proc into preallocated buffers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tracer/perf/record_ref.hpp"
#include "tracer/perfdata/format.hpp"
#include "tracer/probe.hpp"
#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perfdata {

/// PERF_RECORD_HEADER_FEATURE / ID_INDEX and friends that format.hpp does not spell out.
inline constexpr std::size_t kNameAlign = 64;        // NAME_ALIGN: feature strings are padded to it
inline constexpr std::uint32_t kFileAttrSize = 128;  // PERF_ATTR_SIZE_VER7: what perf 6.1 reads
inline constexpr std::uint32_t kEventUpdateName = 2;  // PERF_EVENT_UPDATE__NAME
/// enum auxtrace_type (tools/perf/util/auxtrace.h).
enum class AuxtraceType : std::uint32_t {
  kUnknown = 0,
  kIntelPt = 1,
  kIntelBts = 2,
  kCsEtm = 3,
  kArmSpe = 4,
  kS390Cpumsf = 5,
};
/// The perf auxtrace type for a PMU name ("intel_bts" -> kIntelBts), kUnknown otherwise.
[[nodiscard]] AuxtraceType auxtrace_type_for_pmu(std::string_view pmu) noexcept;

/// The machine description perf keeps in header features.
struct HostInfo {
  std::string hostname, os_release, version, arch, cpu_desc, cpuid;
  std::uint32_t nr_cpus_avail = 0;   // max present CPU + 1
  std::uint32_t nr_cpus_online = 0;  // sysconf(_SC_NPROCESSORS_ONLN)
  std::uint64_t total_mem_kb = 0;
  /// CPU_TOPOLOGY: sibling lists ("0-1") and per CPU core/socket/die ids.
  std::vector<std::string> core_siblings, thread_siblings, die_siblings;
  struct CpuTopo {
    std::uint32_t core_id = 0, socket_id = 0, die_id = 0;
  };
  std::vector<CpuTopo> cpus;                                // nr_cpus_avail entries
  std::vector<std::pair<std::uint32_t, std::string>> pmus;  // PMU_MAPPINGS: type, name
  std::uint64_t clock_res_ns = 1;  // CLOCKID: resolution of CLOCK_MONOTONIC
  /// CLOCK_DATA: the same instant on the wall clock and on CLOCK_MONOTONIC (ns).
  std::uint64_t tod_ns = 0, clock_ns = 0;
  /// BUILD_ID: the running kernel's build-id (hex, /sys/kernel/notes), what a reader checks
  /// before it names kernel frames with its own kernel's symbols; empty: not written.
  std::string kernel_build_id{};

  /// Reads uname, /proc/cpuinfo, /proc/meminfo, /sys/devices/system/cpu and
  /// /sys/bus/event_source. Missing pieces stay empty (their features are then left out).
  [[nodiscard]] static HostInfo read();
};

struct WriterOptions {
  /// Pipe mode even for a regular file (a path of "-" or a FIFO, pipe or socket is always pipe
  /// mode: the header cannot be rewritten there).
  bool pipe = false;
  /// CMDLINE feature: argv of the program that wrote the file.
  std::vector<std::string> cmdline{};
  /// COMM for every thread and MMAP2 for every executable mapping of the processes in /proc at
  /// open(), and the kernel's MMAP, so perf resolves comms and symbols (as perf record does).
  bool synthesize = true;
  /// Processes first seen in a sample later get the same, read then.
  bool synthesize_new = true;
  std::string proc_root = "/proc";
  /// tracefs root for TRACING_DATA; empty: found as the engine finds it.
  std::string tracefs_root{};
  /// The machine description; default: HostInfo::read().
  std::shared_ptr<const HostInfo> host{};
  /// Bytes buffered before a write(2).
  std::size_t buffer_bytes = std::size_t{256} * 1024;
};

struct WriterStats {
  std::uint64_t records = 0;      // engine records written
  std::uint64_t synthesized = 0;  // COMM/MMAP/MMAP2 records made from /proc
  std::uint64_t skipped = 0;      // records of probes not in the file (counting probes), malformed
  std::uint64_t aux_bytes = 0;    // AUX payload written in AUXTRACE records
  /// AUX payload not written: its PMU has no AUXTRACE_INFO perf could set up (only intel_bts
  /// has one), and perf refuses AUXTRACE records it cannot decode.
  std::uint64_t aux_bytes_dropped = 0;
  std::uint64_t rounds = 0;  // FINISHED_ROUND records
  std::uint64_t bytes = 0;   // file size so far
};

class Writer {
 public:
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  ~Writer();  // close()s, ignoring errors

  /// Creates or truncates `path` ("-": stdout, pipe mode) and writes what precedes the records:
  /// file mode the provisional header (data size 0 until the first round), ids, static features,
  /// attrs; pipe mode the pipe header and HEADER_* records. Probes that deliver no records
  /// (counting probes) are left out. TRACING_DATA is built from tracefs when any probe is a
  /// tracepoint (or tracefs-backed).
  /// @return the writer, or a Failure: EINVAL when no probe produces records, the errno of
  /// open/write/tracefs otherwise (message names the path).
  [[nodiscard]] static Result<Writer> open(const std::string& path,
                                           std::span<const ProbeInfo> probes,
                                           WriterOptions options = {});
  /// The same on an fd the caller owns (not closed); pipe mode is chosen as for a path.
  [[nodiscard]] static Result<Writer> open_fd(int fd,
                                              std::span<const ProbeInfo> probes,
                                              WriterOptions options = {});

  /// Appends one engine record (a copy with the identifier rewritten; AUX records are followed by
  /// an AUXTRACE record carrying the chunk). Errors are remembered and reported by close().
  void write(const RecordRef& ref) noexcept;
  /// Ends a round: FINISHED_ROUND (if anything was written since the last), flush, and in file
  /// mode the crash-safe header update. Errors are remembered and reported by close().
  void end_round() noexcept;
  /// Writes buffered bytes out (no FINISHED_ROUND); in file mode also updates the header, so a
  /// crash keeps them even when the engine never signals rounds.
  void flush() noexcept;
  /// Final round, SAMPLE_TIME and feature table, header. Idempotent.
  /// @return the first error met since open(), if any.
  [[nodiscard]] Status close();

  [[nodiscard]] const WriterStats& stats() const noexcept;
  [[nodiscard]] bool pipe_mode() const noexcept;

  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's

 private:
  explicit Writer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// TRACING_DATA as perf's trace-event-read.c (version 0.6) reads it: header_page, header_event,
/// the format files of `formats` ("system:event", grouped by system), no kallsyms, printk formats
/// and saved_cmdlines from tracefs.
/// @return the blob, or the errno of reading tracefs (message names the file).
[[nodiscard]] Result<std::vector<std::byte>> build_tracing_data(
    const std::string& tracefs_root,
    std::span<const std::pair<std::string, std::string>> formats);

}  // namespace tracer::perfdata

#pragma GCC visibility pop
