// The perfmon buffer format (../shared/seeds/fuchsia-perfmon.h.txt, buffer version 0): per CPU,
// a 24-byte header (version, arch, flags with the FULL bit when records were dropped, ticks per
// second, the offset where the data ends), then records of a 4-byte header (type, flags, a
// 16-bit event id) and their fields, packed and 4-byte aligned: TIME (12 bytes: the time for
// the records after it), TICK (4: the event reached its sample rate), COUNT and VALUE (12: a
// count, a value), PC (20: address space and pc), LAST_BRANCH (16 + 24 per branch).
//
// Event ids: the seed's split, a 6-bit group above a 10-bit event (PERFMON_MAKE_EVENT_ID); the
// other public version's 5/11 split is not used. Last-branch info: cycles in bits 0-15,
// mispredicted in bit 16, decoded by the documented shift and length (the seed's mask macros
// pass them in the wrong order).
//
// A file of tracer's holds the buffers of the CPUs one after another, CPU 0 first: each starts
// 4-byte aligned where the one before ended (its header's capture_end, counted from its start).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perfmon {

constexpr std::uint16_t kBufferVersion = 0;
enum class Arch : std::uint16_t { kUnknown = 0, kX86_64 = 1, kArm64 = 2 };
constexpr std::uint32_t kFlagFull = 1U << 0;  // the buffer filled and records were dropped
constexpr std::size_t kHeaderSize = 24;

enum class RecordType : std::uint8_t {
  kReserved = 0,
  kTime = 1,
  kTick = 2,
  kCount = 3,
  kValue = 4,
  kPc = 5,
  kLastBranch = 6,
};
/// The size of a record of `type` (a LAST_BRANCH's without its branches); 0 for kReserved.
[[nodiscard]] std::size_t record_size(RecordType type, std::uint32_t branches = 0) noexcept;

enum class Group : std::uint16_t { kReserved = 0, kArch = 1, kFixed = 2, kModel = 3, kMisc = 4 };
constexpr std::uint16_t kMaxGroup = 0x3f;
constexpr std::uint16_t kMaxEvent = 0x3ff;
[[nodiscard]] constexpr std::uint16_t make_event_id(std::uint16_t group, std::uint16_t event) {
  return static_cast<std::uint16_t>(((group & kMaxGroup) << 10) | (event & kMaxEvent));
}
[[nodiscard]] constexpr std::uint16_t group_of(std::uint16_t id) {
  return (id >> 10) & kMaxGroup;
}
[[nodiscard]] constexpr std::uint16_t event_of(std::uint16_t id) {
  return id & kMaxEvent;
}

constexpr std::uint32_t kMaxLastBranches = 32;
struct LastBranch {
  std::uint64_t from = 0, to = 0, info = 0;
  [[nodiscard]] std::uint16_t cycles() const noexcept { return info & 0xffffU; }  // bits 0-15
  [[nodiscard]] bool mispredicted() const noexcept { return ((info >> 16) & 1U) != 0; }
  friend bool operator==(const LastBranch&, const LastBranch&) = default;
};

/// One record, decoded: the fields its type has are set. A TIME record with an event is also
/// that event's tick.
struct Record {
  RecordType type = RecordType::kReserved;
  std::uint8_t flags = 0;            // reserved_flags
  std::uint16_t event = 0;           // 0: none
  std::uint64_t time = 0;            // kTime
  std::uint64_t count = 0;           // kCount
  std::uint64_t value = 0;           // kValue
  std::uint64_t aspace = 0, pc = 0;  // kPc; aspace also kLastBranch
  std::vector<LastBranch> branches{};
  friend bool operator==(const Record&, const Record&) = default;
};

struct BufferHeader {
  std::uint16_t version = kBufferVersion;
  Arch arch = Arch::kUnknown;
  std::uint32_t flags = 0;
  std::uint64_t ticks_per_second = 0;
  std::uint64_t capture_end = kHeaderSize;  // from the buffer's start, header included
};

/// This machine's architecture as the header names it.
[[nodiscard]] Arch this_arch() noexcept;

/// Writes one CPU's buffer, at most `capacity` bytes (header included): a record that does not
/// fit is dropped and counted, and the header gets the FULL flag.
class BufferWriter {
 public:
  BufferWriter(std::size_t capacity, Arch arch, std::uint64_t ticks_per_second);
  /// @return false when the record was dropped (the buffer is full).
  /// A TIME record with an event (not 0) is also that counting event's tick (the seed's rule).
  bool time(std::uint64_t time, std::uint16_t event = 0);
  bool tick(std::uint16_t event);
  bool count(std::uint16_t event, std::uint64_t count);
  bool value(std::uint16_t event, std::uint64_t value);
  bool pc(std::uint16_t event, std::uint64_t aspace, std::uint64_t pc);
  /// At most kMaxLastBranches (more: the record is dropped).
  bool last_branch(std::uint16_t event, std::uint64_t aspace, std::span<const LastBranch> b);
  /// Any record as it is, its reserved flags too: what parse() read writes back the same.
  bool write(const Record& r);
  /// The buffer: its header (capture_end, FULL) and records.
  [[nodiscard]] const std::vector<std::byte>& bytes() const noexcept { return bytes_; }
  [[nodiscard]] std::uint64_t dropped() const noexcept { return dropped_; }
  /// The time of the last TIME record written (0: none yet).
  [[nodiscard]] std::uint64_t last_time() const noexcept { return last_time_; }

 private:
  bool room(std::size_t n);
  void put_header(RecordType type, std::uint16_t event);
  std::uint8_t flags_ = 0;  // reserved_flags of the record being written (write())
  void finish_record();
  std::size_t capacity_;
  std::vector<std::byte> bytes_;
  std::uint64_t dropped_ = 0;
  std::uint64_t last_time_ = 0;
};

struct Buffer {
  BufferHeader header;
  std::vector<Record> records;
};

/// Decodes the buffers of a file of tracer's (or one buffer). Every length is checked against
/// the bytes: a header or record that does not fit, an unknown version or record type, a
/// capture_end before the header or past the end, more than kMaxLastBranches branches, is an
/// error naming the buffer and the offset (EINVAL).
[[nodiscard]] Result<std::vector<Buffer>> parse(std::span<const std::byte> file);

/// Whether `file` starts like a perfmon buffer (version 0, a known arch, a capture_end inside
/// the file), and not like a perf.data file.
[[nodiscard]] bool looks_like_perfmon(std::span<const std::byte> file) noexcept;

}  // namespace tracer::perfmon

#pragma GCC visibility pop
