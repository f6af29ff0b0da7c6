// Kernel perf_event ABI constants newer than the installed <linux/perf_event.h> (Debian 12 ships
// 6.1 headers; this kernel is 6.18). Values are from include/uapi/linux/perf_event.h upstream.
#pragma once

#include <linux/perf_event.h>

#include <cstddef>
#include <cstdint>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf::abi {

// attr.size versions. VER8 (6.3) added config3.
inline constexpr std::uint32_t kAttrSizeVer0 = 64;
inline constexpr std::uint32_t kAttrSizeVer8 = 136;

// read_format: PERF_FORMAT_LOST (6.0).
inline constexpr std::uint64_t kFormatLost = 1U << 4;

// branch_sample_type bits newer than the seed header.
inline constexpr std::uint64_t kBranchHwIndex = 1U << 17;   // PERF_SAMPLE_BRANCH_HW_INDEX (5.7)
inline constexpr std::uint64_t kBranchCounters = 1U << 19;  // PERF_SAMPLE_BRANCH_COUNTERS (6.8)

// sample_type bits after the seed (4.x) header.
inline constexpr std::uint64_t kSamplePhysAddr = 1U << 19;
inline constexpr std::uint64_t kSampleAux = 1U << 20;
inline constexpr std::uint64_t kSampleCgroup = 1U << 21;
inline constexpr std::uint64_t kSampleDataPageSize = 1U << 22;
inline constexpr std::uint64_t kSampleCodePageSize = 1U << 23;
inline constexpr std::uint64_t kSampleWeightStruct = 1U << 24;
inline constexpr std::uint64_t kSampleMax = 1U << 25;  // first bit this code does not know

// Record types.
enum RecordType : std::uint32_t {
  kMmap = 1,
  kLost = 2,
  kComm = 3,
  kExit = 4,
  kThrottle = 5,
  kUnthrottle = 6,
  kFork = 7,
  kRead = 8,
  kSample = 9,
  kMmap2 = 10,
  kAux = 11,
  kItraceStart = 12,
  kLostSamples = 13,
  kSwitch = 14,
  kSwitchCpuWide = 15,
  kNamespaces = 16,
  kKsymbol = 17,
  kBpfEvent = 18,
  kCgroup = 19,
  kTextPoke = 20,
  kAuxOutputHwId = 21,
  kRecordTypeEnd,  // first type this code does not know; later ones are skipped by size
};

// header.misc bits.
inline constexpr std::uint16_t kMiscCpumodeMask = 7;
inline constexpr std::uint16_t kMiscMmapData = 1U << 13;
inline constexpr std::uint16_t kMiscCommExec = 1U << 13;
inline constexpr std::uint16_t kMiscForkExec = 1U << 13;
inline constexpr std::uint16_t kMiscSwitchOut = 1U << 13;
inline constexpr std::uint16_t kMiscExactIp = 1U << 14;
inline constexpr std::uint16_t kMiscSwitchOutPreempt = 1U << 14;
inline constexpr std::uint16_t kMiscMmapBuildId = 1U << 14;
inline constexpr std::uint16_t kMiscExtReserved = 1U << 15;

// PERF_RECORD_AUX flags.
inline constexpr std::uint64_t kAuxFlagTruncated = 0x01;
inline constexpr std::uint64_t kAuxFlagOverwrite = 0x02;
inline constexpr std::uint64_t kAuxFlagPartial = 0x04;
inline constexpr std::uint64_t kAuxFlagCollision = 0x08;
inline constexpr std::uint64_t kAuxFlagPmuFormatTypeMask = 0xff00;

// Callchain context markers (PERF_CONTEXT_*), as u64 values in the ip array.
inline constexpr std::uint64_t kContextHv = static_cast<std::uint64_t>(-32);
inline constexpr std::uint64_t kContextKernel = static_cast<std::uint64_t>(-128);
inline constexpr std::uint64_t kContextUser = static_cast<std::uint64_t>(-512);
inline constexpr std::uint64_t kContextGuest = static_cast<std::uint64_t>(-2048);
inline constexpr std::uint64_t kContextGuestKernel = static_cast<std::uint64_t>(-2176);
inline constexpr std::uint64_t kContextGuestUser = static_cast<std::uint64_t>(-2560);
inline constexpr std::uint64_t kContextMax = static_cast<std::uint64_t>(-4095);

// ioctls newer than the seed.
#ifndef PERF_EVENT_IOC_PAUSE_OUTPUT
#define PERF_EVENT_IOC_PAUSE_OUTPUT _IOW('$', 9, __u32)
#endif
#ifndef PERF_EVENT_IOC_MODIFY_ATTRIBUTES
#define PERF_EVENT_IOC_MODIFY_ATTRIBUTES _IOW('$', 11, struct perf_event_attr*)
#endif

/// perf_event_attr as of 6.3+ (VER8): the installed struct plus config3. Offsets past the 6.1
/// struct are ours; static_asserts below pin the shared prefix.
struct Attr {
  perf_event_attr base;
  std::uint64_t config3;
};
static_assert(sizeof(perf_event_attr) == 128, "installed perf_event_attr is VER7");
static_assert(offsetof(Attr, config3) == 128);
static_assert(sizeof(Attr) == kAttrSizeVer8);

}  // namespace tracer::perf::abi

#pragma GCC visibility pop
