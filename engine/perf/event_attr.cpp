#include "tracer/perf/event_attr.hpp"

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <utility>

namespace tracer::perf {
namespace {

// aux_action (6.13) lives where 6.1's header has __reserved_3.
constexpr std::size_t kAuxActionOffset = offsetof(perf_event_attr, __reserved_3);

struct FieldSpan {
  std::uint32_t offset;
  std::uint32_t size;
  std::string_view name;
};

// Byte ranges of perf_event_attr (VER8), in order. Pinned against the installed header where it
// has the field, so a layout mistake fails to compile.
constexpr std::array kFields = {
    FieldSpan{0, 4, "type"},
    FieldSpan{4, 4, "size"},
    FieldSpan{8, 8, "config"},
    FieldSpan{16, 8, "sample_period/sample_freq"},
    FieldSpan{24, 8, "sample_type"},
    FieldSpan{32, 8, "read_format"},
    FieldSpan{40, 8, "flags (disabled..sigtrap bit field)"},
    FieldSpan{48, 4, "wakeup_events/wakeup_watermark"},
    FieldSpan{52, 4, "bp_type"},
    FieldSpan{56, 8, "config1 (bp_addr/kprobe_func/uprobe_path)"},
    FieldSpan{64, 8, "config2 (bp_len/kprobe_addr/probe_offset)"},
    FieldSpan{72, 8, "branch_sample_type"},
    FieldSpan{80, 8, "sample_regs_user"},
    FieldSpan{88, 4, "sample_stack_user"},
    FieldSpan{92, 4, "clockid"},
    FieldSpan{96, 8, "sample_regs_intr"},
    FieldSpan{104, 4, "aux_watermark"},
    FieldSpan{108, 2, "sample_max_stack"},
    FieldSpan{110, 2, "__reserved_2"},
    FieldSpan{112, 4, "aux_sample_size"},
    FieldSpan{116, 4, "aux_action (aux_start_paused/aux_pause/aux_resume)"},
    FieldSpan{120, 8, "sig_data"},
    FieldSpan{128, 8, "config3"},
};
static_assert(offsetof(perf_event_attr, config) == 8);
static_assert(offsetof(perf_event_attr, sample_type) == 24);
static_assert(offsetof(perf_event_attr, read_format) == 32);
static_assert(offsetof(perf_event_attr, wakeup_events) == 48);
static_assert(offsetof(perf_event_attr, bp_type) == 52);
static_assert(offsetof(perf_event_attr, config1) == 56);
static_assert(offsetof(perf_event_attr, config2) == 64);
static_assert(offsetof(perf_event_attr, branch_sample_type) == 72);
static_assert(offsetof(perf_event_attr, sample_regs_user) == 80);
static_assert(offsetof(perf_event_attr, sample_stack_user) == 88);
static_assert(offsetof(perf_event_attr, clockid) == 92);
static_assert(offsetof(perf_event_attr, sample_regs_intr) == 96);
static_assert(offsetof(perf_event_attr, aux_watermark) == 104);
static_assert(offsetof(perf_event_attr, sample_max_stack) == 108);
static_assert(offsetof(perf_event_attr, aux_sample_size) == 112);
static_assert(kAuxActionOffset == 116);
static_assert(offsetof(perf_event_attr, sig_data) == 120);

constexpr std::array<std::string_view, 39> kFlagNames = {
    "disabled",
    "inherit",
    "pinned",
    "exclusive",
    "exclude_user",
    "exclude_kernel",
    "exclude_hv",
    "exclude_idle",
    "mmap",
    "comm",
    "freq",
    "inherit_stat",
    "enable_on_exec",
    "task",
    "watermark",
    "mmap_data",
    "sample_id_all",
    "exclude_host",
    "exclude_guest",
    "exclude_callchain_kernel",
    "exclude_callchain_user",
    "mmap2",
    "comm_exec",
    "use_clockid",
    "context_switch",
    "write_backward",
    "namespaces",
    "ksymbol",
    "bpf_event",
    "aux_output",
    "cgroup",
    "text_poke",
    "build_id",
    "inherit_thread",
    "remove_on_exec",
    "sigtrap",
    "aux_start_paused",
    "aux_pause",
    "aux_resume",
};
static_assert(kFlagNames.size() == static_cast<std::size_t>(Flag::kAuxResume) + 1);

std::uint32_t aux_action(const abi::Attr& a) noexcept {
  std::uint32_t v = 0;
  std::memcpy(&v, reinterpret_cast<const std::byte*>(&a.base) + kAuxActionOffset, sizeof(v));
  return v;
}

void set_aux_action_bit(abi::Attr& a, int bit, bool on) noexcept {
  std::uint32_t v = aux_action(a);
  v = on ? (v | (1U << bit)) : (v & ~(1U << bit));
  std::memcpy(reinterpret_cast<std::byte*>(&a.base) + kAuxActionOffset, &v, sizeof(v));
}

// Accessing the named bit fields keeps this portable to big-endian layouts.
template <typename Fn>
void with_bit(perf_event_attr& a, Flag f, Fn&& fn) {
  switch (f) {
// NOLINTNEXTLINE(bugprone-macro-parentheses): the arguments are a name and a member.
#define TRACER_FLAG_CASE(enumerator, field) \
  case Flag::enumerator: {                  \
    std::uint64_t v = a.field;              \
    fn(v);                                  \
    a.field = v;                            \
    break;                                  \
  }
    TRACER_FLAG_CASE(kDisabled, disabled)
    TRACER_FLAG_CASE(kInherit, inherit)
    TRACER_FLAG_CASE(kPinned, pinned)
    TRACER_FLAG_CASE(kExclusive, exclusive)
    TRACER_FLAG_CASE(kExcludeUser, exclude_user)
    TRACER_FLAG_CASE(kExcludeKernel, exclude_kernel)
    TRACER_FLAG_CASE(kExcludeHv, exclude_hv)
    TRACER_FLAG_CASE(kExcludeIdle, exclude_idle)
    TRACER_FLAG_CASE(kMmap, mmap)
    TRACER_FLAG_CASE(kComm, comm)
    TRACER_FLAG_CASE(kFreq, freq)
    TRACER_FLAG_CASE(kInheritStat, inherit_stat)
    TRACER_FLAG_CASE(kEnableOnExec, enable_on_exec)
    TRACER_FLAG_CASE(kTask, task)
    TRACER_FLAG_CASE(kWatermark, watermark)
    TRACER_FLAG_CASE(kMmapData, mmap_data)
    TRACER_FLAG_CASE(kSampleIdAll, sample_id_all)
    TRACER_FLAG_CASE(kExcludeHost, exclude_host)
    TRACER_FLAG_CASE(kExcludeGuest, exclude_guest)
    TRACER_FLAG_CASE(kExcludeCallchainKernel, exclude_callchain_kernel)
    TRACER_FLAG_CASE(kExcludeCallchainUser, exclude_callchain_user)
    TRACER_FLAG_CASE(kMmap2, mmap2)
    TRACER_FLAG_CASE(kCommExec, comm_exec)
    TRACER_FLAG_CASE(kUseClockid, use_clockid)
    TRACER_FLAG_CASE(kContextSwitch, context_switch)
    TRACER_FLAG_CASE(kWriteBackward, write_backward)
    TRACER_FLAG_CASE(kNamespaces, namespaces)
    TRACER_FLAG_CASE(kKsymbol, ksymbol)
    TRACER_FLAG_CASE(kBpfEvent, bpf_event)
    TRACER_FLAG_CASE(kAuxOutput, aux_output)
    TRACER_FLAG_CASE(kCgroup, cgroup)
    TRACER_FLAG_CASE(kTextPoke, text_poke)
    TRACER_FLAG_CASE(kBuildId, build_id)
    TRACER_FLAG_CASE(kInheritThread, inherit_thread)
    TRACER_FLAG_CASE(kRemoveOnExec, remove_on_exec)
    TRACER_FLAG_CASE(kSigtrap, sigtrap)
#undef TRACER_FLAG_CASE
    case Flag::kAuxStartPaused:
    case Flag::kAuxPause:
    case Flag::kAuxResume:
      break;  // handled by the callers through aux_action
  }
}

int aux_bit(Flag f) noexcept {
  return static_cast<int>(f) - static_cast<int>(Flag::kAuxStartPaused);
}

bool is_aux_action(Flag f) noexcept {
  return f >= Flag::kAuxStartPaused;
}

}  // namespace

std::string_view flag_name(Flag f) noexcept {
  const auto i = static_cast<std::size_t>(f);
  return i < kFlagNames.size() ? kFlagNames[i] : std::string_view{"?"};
}

EventAttr& EventAttr::sample_period(std::uint64_t n) noexcept {
  attr_.base.freq = 0;
  attr_.base.sample_period = n;
  return *this;
}

EventAttr& EventAttr::sample_freq(std::uint64_t hz) noexcept {
  attr_.base.freq = 1;
  attr_.base.sample_freq = hz;
  return *this;
}

EventAttr& EventAttr::flag(Flag f, bool on) noexcept {
  if (is_aux_action(f)) {
    set_aux_action_bit(attr_, aux_bit(f), on);
  } else {
    with_bit(attr_.base, f, [on](std::uint64_t& v) { v = on ? 1 : 0; });
  }
  return *this;
}

bool EventAttr::has(Flag f) const noexcept {
  if (is_aux_action(f))
    return (aux_action(attr_) >> aux_bit(f) & 1U) != 0;
  std::uint64_t out = 0;
  auto copy = attr_.base;
  with_bit(copy, f, [&out](std::uint64_t& v) { out = v; });
  return out != 0;
}

EventAttr& EventAttr::precise_ip(std::uint8_t level) noexcept {
  attr_.base.precise_ip = level & 3U;
  return *this;
}

EventAttr& EventAttr::wakeup_events(std::uint32_t n) noexcept {
  attr_.base.watermark = 0;
  attr_.base.wakeup_events = n;
  return *this;
}

EventAttr& EventAttr::wakeup_watermark(std::uint32_t bytes) noexcept {
  attr_.base.watermark = 1;
  attr_.base.wakeup_watermark = bytes;
  return *this;
}

EventAttr& EventAttr::clockid(std::int32_t clk) noexcept {
  attr_.base.use_clockid = 1;
  attr_.base.clockid = clk;
  return *this;
}

std::uint32_t EventAttr::required_size() const noexcept {
  const auto* bytes = reinterpret_cast<const std::byte*>(&attr_);
  std::uint32_t last = 0;
  for (std::uint32_t i = 0; i < sizeof(attr_); ++i) {
    // attr.size itself is ours to negotiate; it is not content.
    if (i >= offsetof(perf_event_attr, size) && i < offsetof(perf_event_attr, config))
      continue;
    if (bytes[i] != std::byte{0})
      last = i + 1;
  }
  // Round up to the next published size: 64 + 8*k.
  std::uint32_t size = abi::kAttrSizeVer0;
  while (size < last)
    size += 8;
  return size;
}

std::string_view EventAttr::field_at(std::uint32_t offset) noexcept {
  for (const auto& f : kFields) {
    if (offset >= f.offset && offset < f.offset + f.size)
      return f.name;
  }
  return "beyond perf_event_attr";
}

std::string_view EventAttr::first_field_set_from(std::uint32_t offset) const noexcept {
  const auto* bytes = reinterpret_cast<const std::byte*>(&attr_);
  for (std::uint32_t i = offset; i < sizeof(attr_); ++i) {
    if (bytes[i] != std::byte{0})
      return field_at(i);
  }
  return {};
}

namespace {

template <std::size_t N>
std::string bit_names(std::uint64_t bits, const std::array<std::string_view, N>& names) {
  std::string out;
  for (std::size_t i = 0; i < 64; ++i) {
    if ((bits >> i & 1U) == 0)
      continue;
    if (!out.empty())
      out += '|';
    if (i < N) {
      out += names[i];
    } else {
      out += fmt::format("bit{}", i);
    }
  }
  return out.empty() ? "0" : out;
}

constexpr std::array<std::string_view, 25> kSampleNames = {
    "IP",
    "TID",
    "TIME",
    "ADDR",
    "READ",
    "CALLCHAIN",
    "ID",
    "CPU",
    "PERIOD",
    "STREAM_ID",
    "RAW",
    "BRANCH_STACK",
    "REGS_USER",
    "STACK_USER",
    "WEIGHT",
    "DATA_SRC",
    "IDENTIFIER",
    "TRANSACTION",
    "REGS_INTR",
    "PHYS_ADDR",
    "AUX",
    "CGROUP",
    "DATA_PAGE_SIZE",
    "CODE_PAGE_SIZE",
    "WEIGHT_STRUCT",
};
constexpr std::array<std::string_view, 5> kReadNames = {
    "TOTAL_TIME_ENABLED", "TOTAL_TIME_RUNNING", "ID", "GROUP", "LOST",
};

}  // namespace

std::string sample_type_names(std::uint64_t sample_type) {
  return bit_names(sample_type, kSampleNames);
}

std::string read_format_names(std::uint64_t read_format) {
  return bit_names(read_format, kReadNames);
}

std::string EventAttr::describe() const {
  const auto& a = attr_.base;
  std::string out = fmt::format("type={} config={:#x}", a.type, a.config);
  if (a.config1 != 0)
    out += fmt::format(" config1={:#x}", a.config1);
  if (a.config2 != 0)
    out += fmt::format(" config2={:#x}", a.config2);
  if (attr_.config3 != 0)
    out += fmt::format(" config3={:#x}", attr_.config3);
  if (a.sample_period != 0) {
    out += fmt::format(" {}={}", a.freq ? "sample_freq" : "sample_period", a.sample_period);
  }
  if (a.sample_type != 0)
    out += " sample_type=" + sample_type_names(a.sample_type);
  if (a.read_format != 0)
    out += " read_format=" + read_format_names(a.read_format);
  std::string flags;
  for (std::size_t i = 0; i < kFlagNames.size(); ++i) {
    const auto f = static_cast<Flag>(i);
    if (f == Flag::kFreq || f == Flag::kWatermark || f == Flag::kUseClockid)
      continue;
    if (has(f))
      flags += (flags.empty() ? "" : ",") + std::string(kFlagNames[i]);
  }
  if (!flags.empty())
    out += " flags=" + flags;
  if (a.precise_ip != 0)
    out += fmt::format(" precise_ip={}", a.precise_ip);
  if (a.use_clockid)
    out += fmt::format(" clockid={}", a.clockid);
  return out;
}

}  // namespace tracer::perf
