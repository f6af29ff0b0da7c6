// EventAttr: a typed builder over perf_event_attr, every field of the ABI up to VER8 (6.3+).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "tracer/perf/abi.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::perf {

/// Every single-bit flag of perf_event_attr (the bitfield word at offset 40 and, from 6.13, the
/// aux_action word at offset 124).
enum class Flag : std::uint8_t {
  kDisabled,
  kInherit,
  kPinned,
  kExclusive,
  kExcludeUser,
  kExcludeKernel,
  kExcludeHv,
  kExcludeIdle,
  kMmap,
  kComm,
  kFreq,
  kInheritStat,
  kEnableOnExec,
  kTask,
  kWatermark,
  kMmapData,
  kSampleIdAll,
  kExcludeHost,
  kExcludeGuest,
  kExcludeCallchainKernel,
  kExcludeCallchainUser,
  kMmap2,
  kCommExec,
  kUseClockid,
  kContextSwitch,
  kWriteBackward,
  kNamespaces,
  kKsymbol,
  kBpfEvent,
  kAuxOutput,
  kCgroup,
  kTextPoke,
  kBuildId,
  kInheritThread,
  kRemoveOnExec,
  kSigtrap,
  kAuxStartPaused,  // 6.13 aux_action
  kAuxPause,
  kAuxResume,
};

/// Flag's field name as in the kernel header ("exclude_kernel").
[[nodiscard]] std::string_view flag_name(Flag f) noexcept;

/// Usage:
///   EventAttr attr;
///   attr.type(PERF_TYPE_TRACEPOINT).config(id).sample_period(1)
///       .sample_type(PERF_SAMPLE_RAW | PERF_SAMPLE_TID).flag(Flag::kDisabled);
///   auto ev = Event::open(attr, {.pid = -1, .cpu = 0});
class EventAttr {
 public:
  EventAttr() noexcept {
    std::memset(&attr_, 0, sizeof(attr_));
    attr_.base.size = abi::kAttrSizeVer8;
  }

  EventAttr& type(std::uint32_t t) noexcept { return attr_.base.type = t, *this; }
  EventAttr& config(std::uint64_t c) noexcept { return attr_.base.config = c, *this; }
  EventAttr& config1(std::uint64_t c) noexcept { return attr_.base.config1 = c, *this; }
  EventAttr& config2(std::uint64_t c) noexcept { return attr_.base.config2 = c, *this; }
  EventAttr& config3(std::uint64_t c) noexcept { return attr_.config3 = c, *this; }
  /// Sample every `n` events (clears freq).
  EventAttr& sample_period(std::uint64_t n) noexcept;
  /// Sample at `hz` per second (sets freq).
  EventAttr& sample_freq(std::uint64_t hz) noexcept;
  EventAttr& sample_type(std::uint64_t bits) noexcept {
    return attr_.base.sample_type = bits, *this;
  }
  EventAttr& add_sample_type(std::uint64_t bits) noexcept {
    return attr_.base.sample_type |= bits, *this;
  }
  EventAttr& read_format(std::uint64_t bits) noexcept {
    return attr_.base.read_format = bits, *this;
  }
  EventAttr& flag(Flag f, bool on = true) noexcept;
  /// 0 arbitrary skid .. 3 must have zero skid.
  EventAttr& precise_ip(std::uint8_t level) noexcept;
  /// Wake up every `n` samples (clears watermark).
  EventAttr& wakeup_events(std::uint32_t n) noexcept;
  /// Wake up when `bytes` are in the ring (sets watermark).
  EventAttr& wakeup_watermark(std::uint32_t bytes) noexcept;
  EventAttr& bp_type(std::uint32_t t) noexcept { return attr_.base.bp_type = t, *this; }
  EventAttr& bp_addr(std::uint64_t a) noexcept { return attr_.base.bp_addr = a, *this; }
  EventAttr& bp_len(std::uint64_t l) noexcept { return attr_.base.bp_len = l, *this; }
  EventAttr& branch_sample_type(std::uint64_t b) noexcept {
    return attr_.base.branch_sample_type = b, *this;
  }
  EventAttr& sample_regs_user(std::uint64_t mask) noexcept {
    return attr_.base.sample_regs_user = mask, *this;
  }
  EventAttr& sample_stack_user(std::uint32_t bytes) noexcept {
    return attr_.base.sample_stack_user = bytes, *this;
  }
  /// Timestamps from `clk` (sets use_clockid).
  EventAttr& clockid(std::int32_t clk) noexcept;
  EventAttr& sample_regs_intr(std::uint64_t mask) noexcept {
    return attr_.base.sample_regs_intr = mask, *this;
  }
  EventAttr& aux_watermark(std::uint32_t bytes) noexcept {
    return attr_.base.aux_watermark = bytes, *this;
  }
  EventAttr& sample_max_stack(std::uint16_t n) noexcept {
    return attr_.base.sample_max_stack = n, *this;
  }
  EventAttr& aux_sample_size(std::uint32_t n) noexcept {
    return attr_.base.aux_sample_size = n, *this;
  }
  EventAttr& sig_data(std::uint64_t v) noexcept { return attr_.base.sig_data = v, *this; }
  /// The size the kernel is told (attr.size); normally left at VER8.
  EventAttr& size(std::uint32_t s) noexcept { return attr_.base.size = s, *this; }

  [[nodiscard]] bool has(Flag f) const noexcept;
  [[nodiscard]] std::uint32_t type() const noexcept { return attr_.base.type; }
  [[nodiscard]] std::uint64_t config() const noexcept { return attr_.base.config; }
  [[nodiscard]] std::uint64_t sample_type() const noexcept { return attr_.base.sample_type; }
  [[nodiscard]] std::uint64_t read_format() const noexcept { return attr_.base.read_format; }
  [[nodiscard]] std::uint32_t size() const noexcept { return attr_.base.size; }

  /// The smallest attr.size that still carries every non-zero byte (never below VER0): what an
  /// older kernel must understand for this attr to mean what it says.
  [[nodiscard]] std::uint32_t required_size() const noexcept;
  /// The field that holds byte `offset` ("config3", "sample_type", "flags (bit field)"...).
  [[nodiscard]] static std::string_view field_at(std::uint32_t offset) noexcept;
  /// The first non-zero field at or past `offset`, or empty.
  [[nodiscard]] std::string_view first_field_set_from(std::uint32_t offset) const noexcept;
  /// A one-line human summary for error messages: "type=2 config=0x1a2 sample_type=TID|RAW ...".
  [[nodiscard]] std::string describe() const;

  [[nodiscard]] perf_event_attr* raw() noexcept { return &attr_.base; }
  [[nodiscard]] const perf_event_attr* raw() const noexcept { return &attr_.base; }
  [[nodiscard]] const abi::Attr& storage() const noexcept { return attr_; }

 private:
  abi::Attr attr_;
};

/// "IP|TID|TIME|..." for a sample_type.
[[nodiscard]] std::string sample_type_names(std::uint64_t sample_type);
/// "TOTAL_TIME_ENABLED|ID|GROUP|..." for a read_format.
[[nodiscard]] std::string read_format_names(std::uint64_t read_format);

}  // namespace tracer::perf

#pragma GCC visibility pop
