// Record kinds and values.
#include "tracer/value.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <ranges>
#include <system_error>
#include <type_traits>

#include "tracer/perf/abi.hpp"

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

namespace abi = perf::abi;

// ---------------------------------------------------------------------------------------------
// Record kinds

RecordKind kind_of(const perf::Record& record) noexcept {
  switch (record.type) {
    case abi::kSample:
      return RecordKind::kSample;
    case abi::kAux:
      return RecordKind::kAux;
    case abi::kItraceStart:
      return RecordKind::kItraceStart;
    case abi::kLost:
      return RecordKind::kLost;
    case abi::kLostSamples:
      return RecordKind::kLostSamples;
    case abi::kComm:
      return RecordKind::kComm;
    case abi::kMmap:
    case abi::kMmap2:
      return RecordKind::kMmap;
    case abi::kFork:
      return RecordKind::kFork;
    case abi::kExit:
      return RecordKind::kExit;
    case abi::kSwitch:
    case abi::kSwitchCpuWide:
      return RecordKind::kSwitch;
    case abi::kThrottle:
    case abi::kUnthrottle:
      return RecordKind::kThrottle;
    default:
      return RecordKind::kOther;
  }
}

namespace {
constexpr std::array<std::string_view, kRecordKindCount> kKindNames = {
    "sample", "aux",  "itrace_start", "lost",   "lost_samples", "comm",
    "mmap",   "fork", "exit",         "switch", "throttle",     "other"};
}  // namespace

std::string_view to_string(RecordKind k) noexcept {
  const auto i = static_cast<std::size_t>(k);
  return i < kKindNames.size() ? kKindNames[i] : "other";
}

std::optional<RecordKind> parse_record_kind(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kKindNames.size(); ++i) {
    if (kKindNames[i] == name)
      return static_cast<RecordKind>(i);
  }
  return std::nullopt;
}

std::string_view to_string(FieldType t) noexcept {
  switch (t) {
    case FieldType::kInt:
      return "int";
    case FieldType::kUint:
      return "uint";
    case FieldType::kDouble:
      return "float";
    case FieldType::kString:
      return "string";
    case FieldType::kIps:
      return "ip list";
    case FieldType::kNone:
      break;
  }
  return "none";
}

std::optional<double> to_double(const Value& v) noexcept {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&v))
    return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&v))
    return *d;
  return std::nullopt;
}

std::optional<std::int64_t> to_int(const Value& v) noexcept {
  if (const auto* i = std::get_if<std::int64_t>(&v))
    return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&v))
    return static_cast<std::int64_t>(*u);
  if (const auto* d = std::get_if<double>(&v))
    return static_cast<std::int64_t>(*d);
  return std::nullopt;
}

}  // namespace tracer
