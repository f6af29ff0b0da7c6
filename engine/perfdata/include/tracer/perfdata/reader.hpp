// perfdata::Reader: reads perf.data files (file mode and pipe mode, either byte order) written by
// `perf record`, `perf stat record` or tracer's perf-data sink.
//
// Usage:
//   auto reader = perfdata::Reader::open("perf.data");  // "-": a pipe-mode stream on stdin
//   if (!reader) die(reader.error().describe());
//   for (const auto& ev : reader->events()) show(ev.name, ev.layout, ev.format);
//   perfdata::Item item;
//   while (reader->next(item)) {
//     if (const auto* s = std::get_if<perf::Sample>(&item.record.body)) use(item.attr, *s);
//   }
//   if (const auto& err = reader->error()) report(err->describe());  // offset + problem
//
// Records are handed out in file order, in the machine's byte order (a byte-swapped file is
// converted record by record into a scratch buffer), and stay valid until the next call to
// next(). Compressed records (perf record -z) are inflated with libzstd and their records are
// handed out one by one. next() allocates nothing once warm: the file is mmapped, a pipe is read
// into a buffer that only grows, and records are decoded in place.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/perfdata/format.hpp"
#include "tracer/result.hpp"
#include "tracer/tracefs/tracefs.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perfdata {

/// Where a file stops making sense: the byte offset (from the start of the file or stream) and
/// what is wrong there.
struct ReadError {
  std::uint64_t offset = 0;
  std::string message;
  /// "perf.data: offset 4968 (0x1368): ..."
  [[nodiscard]] std::string describe() const;
};

// ---------------------------------------------------------------------------------------------
// Header features (tools/perf/util/header.c write_* / process_*).

struct NrCpus {
  std::uint32_t available = 0;  // nr_cpus_avail (max present CPU + 1)
  std::uint32_t online = 0;
};
struct CpuTopology {
  std::vector<std::string> core_siblings;    // "0-1"
  std::vector<std::string> thread_siblings;  // "0", "1"
  struct Cpu {
    std::uint32_t core_id = 0, socket_id = 0, die_id = 0;
  };
  std::vector<Cpu> cpus;  // per CPU, when the file has them
  std::vector<std::string> die_siblings;
};
struct NumaNode {
  std::uint32_t node = 0;
  std::uint64_t mem_total_kb = 0, mem_free_kb = 0;
  std::string cpus;
};
struct GroupDesc {
  std::string name;
  std::uint32_t leader_idx = 0, nr_members = 0;
};
struct CacheLevel {
  std::uint32_t level = 0, line_size = 0, sets = 0, ways = 0;
  std::string type, size, map;
};
struct SampleTime {
  std::uint64_t first_ns = 0, last_ns = 0;
};
struct ClockData {
  std::uint32_t version = 0, clockid = 0;
  std::uint64_t tod_ns = 0, clockid_ns = 0;  // the same instant on the wall clock and on clockid
};
struct Compression {
  std::uint32_t version = 0, type = 0, level = 0, ratio = 0, mmap_len = 0;  // type 1: zstd
};
struct PmuCaps {
  std::string pmu;  // empty for CPU_PMU_CAPS
  std::vector<std::pair<std::string, std::string>> caps;
};
struct HybridNode {
  std::string pmu, cpus;
};
struct BuildId {
  std::int32_t pid = 0;
  std::uint16_t misc = 0;  // cpumode
  std::string build_id;    // lower-case hex
  std::string filename;
};

/// One feature section as the file lists it.
struct FeatureSection {
  std::uint32_t bit = 0;
  std::uint64_t offset = 0, size = 0;  // pipe mode: the HEADER_FEATURE record's
  bool parsed = false;                 // a known feature whose contents parsed
};

/// Every feature the file carries. Sections of unknown bits are listed in `sections` and
/// otherwise skipped by their size.
struct Features {
  std::array<std::uint64_t, 4> bits{};
  std::vector<FeatureSection> sections;
  std::string hostname, osrelease, version, arch, cpudesc, cpuid;
  std::optional<NrCpus> nrcpus;
  std::optional<std::uint64_t> total_mem_kb;
  std::vector<std::string> cmdline;
  std::optional<CpuTopology> cpu_topology;
  std::vector<NumaNode> numa_nodes;
  std::vector<std::pair<std::uint32_t, std::string>> pmu_mappings;  // type -> name
  std::vector<GroupDesc> groups;
  std::vector<CacheLevel> caches;
  std::optional<SampleTime> sample_time;
  std::optional<std::uint64_t> clockid_res_ns;
  std::optional<std::uint64_t> dir_format;
  std::optional<ClockData> clock_data;
  std::optional<Compression> compressed;
  PmuCaps cpu_pmu_caps;
  std::vector<PmuCaps> pmu_caps;
  std::vector<HybridNode> hybrid_topology;
  std::vector<BuildId> build_ids;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> auxtrace_index;  // file offset, size

  [[nodiscard]] bool has(Feature f) const noexcept {
    const auto b = static_cast<std::uint32_t>(f);
    return b < 256 && ((bits[b / 64] >> (b % 64)) & 1U) != 0;
  }
};

/// TRACING_DATA: the tracefs format files of the recorded tracepoints, as the recording machine
/// had them (tools/perf/util/trace-event-read.c).
struct TracingData {
  std::string version;  // "0.6"
  bool big_endian = false;
  std::uint8_t long_size = 8;
  std::uint32_t page_size = 0;
  std::vector<tracefs::Format> formats;  // system, name and id set
  [[nodiscard]] const tracefs::Format* find(std::uint32_t id) const noexcept;
};

/// Parses TRACING_DATA bytes into `out`.
/// @return nullopt on success, else the problem with its offset relative to `bytes`.
[[nodiscard]] std::optional<ReadError> parse_tracing_data(std::span<const std::byte> bytes,
                                                          TracingData& out);

/// The name perf gives an event from its attr alone (evsel__name: "cpu-clock", "cycles:u",
/// "L1-dcache-load-misses", "sched:sched_switch" from `tracing`'s formats by id, "raw 0x1234"),
/// for files that carry no HEADER_EVENT_DESC.
[[nodiscard]] std::string event_name(const perf::EventAttr& attr, const TracingData* tracing);

/// One event (attr) of the file.
struct EventDesc {
  std::uint32_t index = 0;
  std::string name;  // EVENT_DESC / EVENT_UPDATE name, else from the attr as perf names it
  perf::EventAttr attr;
  std::vector<std::uint64_t> ids;
  perf::SampleLayout layout;
  std::optional<tracefs::Format> format;  // tracepoints, from TRACING_DATA
};

// ---------------------------------------------------------------------------------------------
// perf's own records (PERF_RECORD_USER_TYPE_START and up): views into the record bytes.

struct HeaderAttr {
  perf::EventAttr attr;
  perf::U64Array ids;
};
struct TracingDataRecord {
  std::uint32_t size = 0;             // of the payload that follows the record
  std::span<const std::byte> data{};  // that payload
};
struct BuildIdRecord {
  std::int32_t pid = 0;
  std::span<const std::byte> build_id{};  // size bytes when misc has BUILD_ID_SIZE, else 20
  std::string_view filename{};
};
struct FinishedRound {};
struct FinishedInit {};
struct IdIndex {
  std::uint64_t nr = 0;
  const std::byte* entries = nullptr;
  [[nodiscard]] IdIndexEntry entry(std::uint64_t i) const noexcept;
};
struct AuxtraceInfo {
  std::uint32_t type = 0;
  perf::U64Array priv{};
};
struct Auxtrace {
  std::uint64_t size = 0, offset = 0, reference = 0;
  std::uint32_t idx = 0, tid = 0, cpu = 0;
  std::span<const std::byte> data{};  // the trace bytes that follow the record
};
struct AuxtraceError {
  std::uint32_t type = 0, code = 0, cpu = 0, pid = 0, tid = 0, fmt = 0;
  std::uint64_t ip = 0, time = 0;
  std::string_view msg{};
  std::uint32_t machine_pid = 0, vcpu = 0;  // fmt >= 2
};
struct ThreadMap {
  std::uint64_t nr = 0;
  const std::byte* entries = nullptr;  // nr * {u64 pid, char comm[16]}
  [[nodiscard]] std::uint64_t pid(std::uint64_t i) const noexcept;
  [[nodiscard]] std::string_view comm(std::uint64_t i) const noexcept;
};
/// PERF_RECORD_CPU_MAP / EVENT_UPDATE cpus: struct perf_record_cpu_map_data.
struct CpuMapData {
  std::span<const std::byte> data{};
  /// The CPUs listed, in order. @return false if the encoding is malformed.
  [[nodiscard]] bool cpus(std::vector<std::int32_t>& out) const;
};
struct StatConfig {
  std::uint64_t nr = 0;
  const std::byte* entries = nullptr;  // nr * {u64 tag, u64 val}
  [[nodiscard]] std::uint64_t tag(std::uint64_t i) const noexcept;
  [[nodiscard]] std::uint64_t val(std::uint64_t i) const noexcept;
};
struct Stat {
  std::uint64_t id = 0;
  std::uint32_t cpu = 0, thread = 0;
  std::uint64_t val = 0, ena = 0, run = 0;
};
struct StatRound {
  std::uint64_t type = 0, time = 0;  // type 0: interval, 1: final
};
struct EventUpdate {
  std::uint64_t type = 0, id = 0;  // type: 0 unit, 1 scale, 2 name, 3 cpus
  std::string_view text{};         // unit and name
  double scale = 0;
  CpuMapData cpus{};
};
struct TimeConv {
  std::uint64_t time_shift = 0, time_mult = 0, time_zero = 0, time_cycles = 0, time_mask = 0;
  bool cap_user_time_zero = false, cap_user_time_short = false;
};
struct HeaderFeatureRecord {
  std::uint64_t feature = 0;
  std::span<const std::byte> data{};
};
struct CompressedRecord {
  std::span<const std::byte> data{};  // zstd frames; their records follow as Items
};

using UserRecord = std::variant<std::monostate,
                                HeaderAttr,
                                TracingDataRecord,
                                BuildIdRecord,
                                FinishedRound,
                                IdIndex,
                                AuxtraceInfo,
                                Auxtrace,
                                AuxtraceError,
                                ThreadMap,
                                CpuMapData,
                                StatConfig,
                                Stat,
                                StatRound,
                                EventUpdate,
                                TimeConv,
                                HeaderFeatureRecord,
                                CompressedRecord,
                                FinishedInit>;

/// Decodes a perf user record (type 64..83) in native order.
/// @return false if it does not fit its own size (the variant is then monostate).
[[nodiscard]] bool decode_user(std::span<const std::byte> bytes, UserRecord& out) noexcept;

/// One record of the file.
struct Item {
  std::uint64_t offset = 0;  // of the record; inside a COMPRESSED record: of that record
  bool from_compressed = false;
  /// The bytes point into the mapped file and stay valid as long as the reader (a native-order
  /// file read from disk, outside COMPRESSED records); else until the next call to next().
  bool stable = false;
  std::int32_t attr = -1;  // index into Reader::events(); -1: perf's own record or unknown id
  perf::Record record;     // native order; body decoded for kernel record types
  UserRecord user;         // perf's own records
};

struct ReadStats {
  std::uint64_t records = 0;
  std::uint64_t samples = 0;
  std::uint64_t user_records = 0;
  std::uint64_t compressed_records = 0;
  std::uint64_t decompressed_bytes = 0;
  std::uint64_t unknown_id = 0;  // records whose id matched no attr (attr = -1)
  std::uint64_t bytes = 0;       // record bytes read (uncompressed)
};

struct ReaderOptions {
  /// Initial buffer for pipes (grows to the largest record plus its payload).
  std::size_t pipe_buffer_bytes = std::size_t{1} << 20;
};

class Reader {
 public:
  /// Opens `path` ("-": standard input). A regular file in file mode is mmapped; anything else
  /// (a pipe, a pipe-mode file) is read as a stream.
  /// @return the reader with its header, attrs and features parsed, or a Failure whose message
  /// names the byte offset and the problem (EINVAL: not perf.data or damaged header; errno of
  /// open/read/mmap otherwise).
  [[nodiscard]] static Result<Reader> open(const std::string& path, ReaderOptions options = {});
  /// Reads from `fd` (not closed by the reader).
  [[nodiscard]] static Result<Reader> open_fd(int fd, ReaderOptions options = {});
  /// Reads bytes in memory (tests, fuzzers); they must outlive the reader.
  [[nodiscard]] static Result<Reader> from_bytes(std::span<const std::byte> bytes,
                                                 ReaderOptions options = {});

  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  [[nodiscard]] bool pipe_mode() const noexcept;
  /// The writer's byte order differs from ours.
  [[nodiscard]] bool swapped() const noexcept;
  /// The file header in native order (pipe mode: only magic and size are set).
  [[nodiscard]] const FileHeader& header() const noexcept;
  [[nodiscard]] const Features& features() const noexcept;
  [[nodiscard]] std::span<const EventDesc> events() const noexcept;
  [[nodiscard]] const std::optional<TracingData>& tracing_data() const noexcept;
  /// The attr an event id belongs to, or -1.
  [[nodiscard]] std::int32_t event_of_id(std::uint64_t id) const noexcept;

  /// Reads the next record into `out`.
  /// @return false at the end of the data or at the first problem; error() then tells which.
  [[nodiscard]] bool next(Item& out) noexcept;
  /// Calls fn(const Item&) for every record. @return error() after the last one.
  template <typename Fn>
  const std::optional<ReadError>& read(Fn&& fn) {
    Item item;
    while (next(item))
      fn(static_cast<const Item&>(item));
    return error();
  }

  /// Set once next() returned false because of a problem: a damaged record, a truncated file, or
  /// a damaged feature section (reported after the records, which it does not affect).
  [[nodiscard]] const std::optional<ReadError>& error() const noexcept;
  [[nodiscard]] const ReadStats& stats() const noexcept;

  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's

 private:
  explicit Reader(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

/// perf's copy of /proc/kallsyms made when the file was recorded (perf record's build-id cache,
/// `$PERF_BUILDID_DIR` or `~/.debug`: .build-id/ab/cdef.../kallsyms, by the build-id the file lists
/// for "[kernel.kallsyms]"), or an empty path when the file lists none or the copy is not there.
/// A plain file: reading it costs a few ms where /proc/kallsyms makes the kernel format ~50 ms of
/// text, and it is the text of the recording's boot.
[[nodiscard]] std::filesystem::path cached_kallsyms(const Features& features);
/// The build-id (hex) the file lists for "[kernel.kallsyms]", the kernel it was recorded on;
/// empty when it lists none.
[[nodiscard]] std::string kernel_build_id(const Features& features);

}  // namespace tracer::perfdata

#pragma GCC visibility pop
