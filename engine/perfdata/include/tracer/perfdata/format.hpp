// The perf.data file format: constants and on-disk structs shared by the reader and the writer.
// Source: ../shared/seeds/perf.data-file-format.txt, completed from perf 6.x (tools/perf/util/
// header.h, tools/lib/perf/include/perf/event.h) for features and record types the seed predates.
//
// All on-disk integers are in the byte order of the machine that wrote the file; the magic tells
// which ("PERFILE2" read as a little-endian u64 is kMagic; byte-swapped means the other order).
#pragma once

#include <cstdint>
#include <string_view>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perfdata {

/// "PERFILE2" as a u64 in the writer's byte order.
inline constexpr std::uint64_t kMagic = 0x32454c4946524550ULL;
inline constexpr std::uint64_t kMagicSwapped = 0x50455246494c4532ULL;

struct FileSection {
  std::uint64_t offset = 0;  // from the start of the file
  std::uint64_t size = 0;
};
static_assert(sizeof(FileSection) == 16);

/// struct perf_file_header.
struct FileHeader {
  std::uint64_t magic = kMagic;
  std::uint64_t size = sizeof(FileHeader);  // of this header
  std::uint64_t attr_size = 0;  // of one FileAttr entry: attr.size + sizeof(FileSection)
  FileSection attrs{};
  FileSection data{};
  FileSection event_types{};                 // unused since perf 3.x: zero
  std::uint64_t features[4] = {0, 0, 0, 0};  // a 256-bit bitmap of Feature
};
static_assert(sizeof(FileHeader) == 104);

/// struct perf_pipe_file_header: what a pipe-mode stream starts with.
struct PipeHeader {
  std::uint64_t magic = kMagic;
  std::uint64_t size = sizeof(PipeHeader);
};
static_assert(sizeof(PipeHeader) == 16);

/// Header feature bits (tools/perf/util/header.h). A file sets bit N and stores one FileSection
/// for each set bit, in bit order, right after the data section.
enum class Feature : std::uint32_t {
  kReserved = 0,
  kTracingData = 1,
  kBuildId = 2,
  kHostname = 3,
  kOsRelease = 4,
  kVersion = 5,
  kArch = 6,
  kNrCpus = 7,
  kCpuDesc = 8,
  kCpuId = 9,
  kTotalMem = 10,
  kCmdline = 11,
  kEventDesc = 12,
  kCpuTopology = 13,
  kNumaTopology = 14,
  kBranchStack = 15,
  kPmuMappings = 16,
  kGroupDesc = 17,
  kAuxtrace = 18,
  kStat = 19,
  kCache = 20,
  kSampleTime = 21,
  kMemTopology = 22,
  kClockId = 23,
  kDirFormat = 24,
  kBpfProgInfo = 25,
  kBpfBtf = 26,
  kCompressed = 27,
  kCpuPmuCaps = 28,
  kClockData = 29,
  kHybridTopology = 30,
  kPmuCaps = 31,
  kLast = 32,  // first bit this code does not know; the reader skips such sections by size
};
/// "tracing_data", "build_id", "hostname", ... (perf's names), "unknown" past kLast.
[[nodiscard]] std::string_view feature_name(std::uint32_t bit) noexcept;

/// Record types perf itself writes (PERF_RECORD_USER_TYPE_START and up). They never come from the
/// kernel; they carry no sample_id trailer.
enum UserRecordType : std::uint32_t {
  kHeaderAttr = 64,
  kHeaderEventType = 65,  // deprecated
  kHeaderTracingData = 66,
  kHeaderBuildId = 67,
  kFinishedRound = 68,
  kIdIndex = 69,
  kAuxtraceInfo = 70,
  kAuxtrace = 71,
  kAuxtraceError = 72,
  kThreadMap = 73,
  kCpuMap = 74,
  kStatConfig = 75,
  kStat = 76,
  kStatRound = 77,
  kEventUpdate = 78,
  kTimeConv = 79,
  kHeaderFeature = 80,
  kCompressed = 81,
  kFinishedInit = 82,
  kCompressed2 = 83,  // perf 6.x: COMPRESSED with the payload size made explicit
};
/// "HEADER_ATTR", "FINISHED_ROUND", ... ; "UNKNOWN" for other values.
[[nodiscard]] std::string_view user_record_name(std::uint32_t type) noexcept;

/// struct id_index_entry (ID_INDEX records).
struct IdIndexEntry {
  std::uint64_t id = 0, idx = 0, cpu = 0, tid = 0;
};
static_assert(sizeof(IdIndexEntry) == 32);

/// The magic TRACING_DATA starts with: "\027\bDtracing" then the version string.
inline constexpr std::string_view kTracingMagic = "\x17\x08\x44tracing";

}  // namespace tracer::perfdata

#pragma GCC visibility pop
