// Byte swapping of perf.data contents written on a machine of the other endianness. Each field
// is swapped by its own width, in the order the kernel (perf_output_sample,
// perf_event__output_id_sample) and perf (tools/lib/perf/include/perf/event.h) lay them out.
#include <linux/perf_event.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "internal.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/perfdata/format.hpp"

namespace tracer::perfdata::detail {
namespace {

namespace abi = perf::abi;

/// Walks a mutable record, swapping each field in place (take_swapped) and returning its native
/// value.
using Swapper = tracer::detail::ByteCursor<std::byte>;

/// Swaps `n` u64s in place (n from the record; overflow-safe).
void swap_u64s(Swapper& s, std::uint64_t n) noexcept {
  if (n > s.left() / 8) {
    s.fail();
    return;
  }
  for (std::uint64_t i = 0; i < n; ++i)
    (void)s.take_swapped<std::uint64_t>();
}

std::uint8_t reverse_bits(std::uint8_t b) noexcept {
  b = static_cast<std::uint8_t>((b & 0xf0U) >> 4 | (b & 0x0fU) << 4);
  b = static_cast<std::uint8_t>((b & 0xccU) >> 2 | (b & 0x33U) << 2);
  b = static_cast<std::uint8_t>((b & 0xaaU) >> 1 | (b & 0x55U) << 1);
  return b;
}

void swap_sample_id(Swapper& s, std::uint64_t st) noexcept {
  if ((st & PERF_SAMPLE_TID) != 0U) {
    (void)s.take_swapped<std::uint32_t>();
    (void)s.take_swapped<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_TIME) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_ID) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    (void)s.take_swapped<std::uint32_t>();
    (void)s.take_swapped<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    (void)s.take_swapped<std::uint64_t>();
}

void swap_read(Swapper& s, std::uint64_t format) noexcept {
  // Every member of a read_format block is a u64 (perf_output_read_one/_group).
  std::uint64_t nr = 1;
  std::uint64_t consumed = 0;
  if ((format & PERF_FORMAT_GROUP) != 0U) {
    nr = s.take_swapped<std::uint64_t>();
    consumed = 8;
  }
  const std::uint32_t per =
      perf::ReadView::size_for(format, 1) - perf::ReadView::size_for(format, 0);
  if (per != 0 && nr > s.left() / per) {
    s.fail();
    return;
  }
  swap_u64s(s, (perf::ReadView::size_for(format, nr) - consumed) / 8);
}

void swap_regs(Swapper& s, std::uint32_t count) noexcept {
  if (s.take_swapped<std::uint64_t>() != PERF_SAMPLE_REGS_ABI_NONE)
    swap_u64s(s, count);
}

void swap_sample(Swapper& s, const perf::SampleLayout& l, const tracefs::Format* format) noexcept {
  const std::uint64_t st = l.sample_type;
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_IP) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_TID) != 0U) {
    (void)s.take_swapped<std::uint32_t>();
    (void)s.take_swapped<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_TIME) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_ADDR) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_ID) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    (void)s.take_swapped<std::uint32_t>();
    (void)s.take_swapped<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_PERIOD) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_READ) != 0U)
    swap_read(s, l.read_format);
  if ((st & PERF_SAMPLE_CALLCHAIN) != 0U)
    swap_u64s(s, s.take_swapped<std::uint64_t>());
  if ((st & PERF_SAMPLE_RAW) != 0U) {
    const auto size = s.take_swapped<std::uint32_t>();
    std::byte* raw = s.skip(size);
    if (raw != nullptr && format != nullptr)
      swap_raw({raw, size}, *format);
  }
  if ((st & PERF_SAMPLE_BRANCH_STACK) != 0U) {
    const auto nr = s.take_swapped<std::uint64_t>();
    if ((l.branch_sample_type & abi::kBranchHwIndex) != 0U)
      (void)s.take_swapped<std::uint64_t>();
    if (nr > s.left() / 24) {
      s.fail();
      return;
    }
    swap_u64s(s, nr * 3);
    if ((l.branch_sample_type & abi::kBranchCounters) != 0U)
      swap_u64s(s, nr);
  }
  if ((st & PERF_SAMPLE_REGS_USER) != 0U)
    swap_regs(s, l.regs_user_count);
  if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
    const auto size = s.take_swapped<std::uint64_t>();
    if (size != 0) {
      (void)s.skip(size);  // stack bytes stay as the machine had them
      (void)s.take_swapped<std::uint64_t>();
    }
  }
  if ((st & abi::kSampleWeightStruct) != 0U) {
    (void)s.take_swapped<std::uint32_t>();
    (void)s.take_swapped<std::uint16_t>();
    (void)s.take_swapped<std::uint16_t>();
  } else if ((st & PERF_SAMPLE_WEIGHT) != 0U) {
    (void)s.take_swapped<std::uint64_t>();
  }
  if ((st & PERF_SAMPLE_DATA_SRC) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_TRANSACTION) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & PERF_SAMPLE_REGS_INTR) != 0U)
    swap_regs(s, l.regs_intr_count);
  if ((st & PERF_SAMPLE_PHYS_ADDR) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & abi::kSampleCgroup) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & abi::kSampleDataPageSize) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & abi::kSampleCodePageSize) != 0U)
    (void)s.take_swapped<std::uint64_t>();
  if ((st & abi::kSampleAux) != 0U)
    (void)s.skip(s.take_swapped<std::uint64_t>());
}

// struct perf_record_cpu_map_data (packed): u16 type, then per type.
void swap_cpu_map_data(Swapper& s) noexcept {
  const auto type = s.take_swapped<std::uint16_t>();
  if (type == 0) {  // PERF_CPU_MAP__CPUS: u16 nr, u16 cpu[nr]
    const auto nr = s.take_swapped<std::uint16_t>();
    for (std::uint32_t i = 0; i < nr && s.ok(); ++i)
      (void)s.take_swapped<std::uint16_t>();
  } else if (type == 1) {  // PERF_CPU_MAP__MASK: u16 nr, u16 long_size, masks
    const auto nr = s.take_swapped<std::uint16_t>();
    const auto long_size = s.take_swapped<std::uint16_t>();
    if (long_size == 4) {
      for (std::uint32_t i = 0; i < nr && s.ok(); ++i)
        (void)s.take_swapped<std::uint32_t>();
    } else {
      (void)s.skip(4);
      swap_u64s(s, nr);
    }
  } else if (type == 2) {  // PERF_CPU_MAP__RANGE_CPUS: u8 any_cpu, u8 pad, u16 start, u16 end
    (void)s.skip(2);
    (void)s.take_swapped<std::uint16_t>();
    (void)s.take_swapped<std::uint16_t>();
  }
}

bool swap_user(Swapper& s, std::uint32_t type, std::uint16_t misc) noexcept {
  switch (type) {
    case kHeaderAttr: {
      std::byte* attr = s.pos();
      if (s.left() < 8)
        return false;
      std::uint32_t size = 0;
      std::memcpy(&size, attr + 4, 4);
      size = std::byteswap(size);
      if (size == 0)
        size = perf::abi::kAttrSizeVer0;
      if (size > s.left())
        return false;
      swap_attr(attr, size);
      (void)s.skip(size);
      swap_u64s(s, s.left() / 8);
      return true;
    }
    case kHeaderTracingData:  // u32 size
    case kHeaderBuildId:      // pid; the build id and the file name are bytes
      (void)s.take_swapped<std::uint32_t>();
      return s.ok();
    case kIdIndex:
    case kStatConfig:
    case kStatRound:
      swap_u64s(s, s.left() / 8);
      return s.ok();
    case kAuxtraceInfo:
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      swap_u64s(s, s.left() / 8);
      return s.ok();
    case kAuxtrace:
      swap_u64s(s, 3);
      for (int i = 0; i < 4; ++i)
        (void)s.take_swapped<std::uint32_t>();
      return s.ok();
    case kAuxtraceError: {
      std::uint32_t fmt = 0;
      for (int i = 0; i < 6; ++i) {
        const auto v = s.take_swapped<std::uint32_t>();
        if (i == 5)
          fmt = v;
      }
      swap_u64s(s, 2);
      (void)s.skip(64);
      if (fmt >= 2 && s.left() >= 8) {
        (void)s.take_swapped<std::uint32_t>();
        (void)s.take_swapped<std::uint32_t>();
      }
      return s.ok();
    }
    case kThreadMap: {
      const auto nr = s.take_swapped<std::uint64_t>();
      if (nr > s.left() / 24)
        return false;
      for (std::uint64_t i = 0; i < nr; ++i) {
        (void)s.take_swapped<std::uint64_t>();
        (void)s.skip(16);
      }
      return s.ok();
    }
    case kCpuMap:
      swap_cpu_map_data(s);
      return s.ok();
    case kStat:
      (void)s.take_swapped<std::uint64_t>();
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      swap_u64s(s, 3);
      return s.ok();
    case kEventUpdate: {
      const auto kind = s.take_swapped<std::uint64_t>();
      (void)s.take_swapped<std::uint64_t>();
      if (kind == 1)  // scale: a double, swapped as a u64
        (void)s.take_swapped<std::uint64_t>();
      else if (kind == 3)
        swap_cpu_map_data(s);
      return s.ok();
    }
    case kTimeConv:
      swap_u64s(s, std::min<std::uint64_t>(5, s.left() / 8));
      return s.ok();
    case kHeaderFeature:  // feat_id; the contents are parsed with the swap flag
    case kCompressed2:    // data_size; zstd frames are bytes
      (void)s.take_swapped<std::uint64_t>();
      return s.ok();
    default:  // FINISHED_ROUND, FINISHED_INIT, COMPRESSED, EVENT_TYPE: nothing to swap
      (void)misc;
      return true;
  }
}

}  // namespace

void swap_attr(std::byte* attr, std::uint32_t size) noexcept {
  // Offsets and widths of struct perf_event_attr (VER8, 136 bytes); fields past `size` are not
  // in the file.
  struct Field {
    std::uint16_t offset;
    std::uint8_t width;
  };
  static constexpr Field kFields[] = {
      {0, 4},   {4, 4},   {8, 8},   {16, 8},  {24, 8},  {32, 8},  {48, 4}, {52, 4},
      {56, 8},  {64, 8},  {72, 8},  {80, 8},  {88, 4},  {92, 4},  {96, 8}, {104, 4},
      {108, 2}, {110, 2}, {112, 4}, {116, 4}, {120, 8}, {128, 8},
  };
  for (const auto& f : kFields) {
    if (f.offset + f.width > size)
      break;
    std::byte* p = attr + f.offset;
    if (f.width == 2) {
      std::uint16_t v;
      std::memcpy(&v, p, 2);
      v = std::byteswap(v);
      std::memcpy(p, &v, 2);
    } else if (f.width == 4) {
      std::uint32_t v;
      std::memcpy(&v, p, 4);
      v = std::byteswap(v);
      std::memcpy(p, &v, 4);
    } else {
      std::uint64_t v;
      std::memcpy(&v, p, 8);
      v = std::byteswap(v);
      std::memcpy(p, &v, 8);
    }
  }
  if (size >= 48) {
    for (int i = 40; i < 48; ++i)
      attr[i] = static_cast<std::byte>(reverse_bits(static_cast<std::uint8_t>(attr[i])));
  }
}

void swap_raw(std::span<std::byte> raw, const tracefs::Format& format) noexcept {
  const auto swap_at = [&](std::uint64_t off, std::uint32_t width) {
    if (off + width > raw.size())
      return;
    std::byte* p = raw.data() + off;
    std::reverse(p, p + width);
  };
  for (const auto& f : format.fields) {
    if (f.is_data_loc || f.is_rel_loc) {
      swap_at(f.offset, 4);
      continue;
    }
    if (f.is_string)
      continue;
    const std::uint32_t width = f.array_len ? f.element_size : f.size;
    if (width != 2 && width != 4 && width != 8)
      continue;
    const std::uint32_t n = f.array_len ? *f.array_len : 1;
    for (std::uint32_t i = 0; i < n; ++i)
      swap_at(static_cast<std::uint64_t>(f.offset) + std::uint64_t{i} * width, width);
  }
}

bool swap_record(std::span<std::byte> rec,
                 const perf::SampleLayout* layout,
                 const tracefs::Format* format) noexcept {
  if (rec.size() < 8)
    return false;
  Swapper h(rec.data(), rec.data() + 8);
  const auto type = h.take_swapped<std::uint32_t>();
  const auto misc = h.take_swapped<std::uint16_t>();
  (void)h.take_swapped<std::uint16_t>();
  std::byte* body = rec.data() + 8;
  std::byte* end = rec.data() + rec.size();
  if (type >= kHeaderAttr) {
    Swapper s(body, end);
    return swap_user(s, type, misc) && s.ok();
  }
  if (type == abi::kSample) {
    if (layout == nullptr)
      return true;
    Swapper s(body, end);
    swap_sample(s, *layout, format);
    return s.ok();
  }
  // The sample_id trailer takes the last id_trailer_size bytes.
  std::uint32_t trailer = layout != nullptr ? layout->id_trailer_size : 0;
  if (type >= abi::kRecordTypeEnd)
    trailer = 0;
  if (static_cast<std::size_t>(end - body) < trailer)
    return false;
  if (trailer != 0) {
    Swapper t(end - trailer, end);
    swap_sample_id(t, layout->sample_type);
    end -= trailer;
  }
  Swapper s(body, end);
  switch (type) {
    case abi::kMmap:
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      swap_u64s(s, 3);
      break;
    case abi::kMmap2:
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      swap_u64s(s, 3);
      if ((misc & abi::kMiscMmapBuildId) != 0U) {
        (void)s.skip(24);  // u8 size, u8[3], u8 build_id[20]
      } else {
        (void)s.take_swapped<std::uint32_t>();
        (void)s.take_swapped<std::uint32_t>();
        swap_u64s(s, 2);
      }
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      break;
    case abi::kLost:
    case abi::kThrottle:
    case abi::kUnthrottle:
    case abi::kAux:
    case abi::kLostSamples:
    case abi::kAuxOutputHwId:
      swap_u64s(s, s.left() / 8);
      break;
    case abi::kComm:
    case abi::kItraceStart:
    case abi::kSwitchCpuWide:
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      break;
    case abi::kExit:
    case abi::kFork:
      for (int i = 0; i < 4; ++i)
        (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint64_t>();
      break;
    case abi::kRead:
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      if (layout != nullptr)
        swap_read(s, layout->read_format);
      break;
    case abi::kNamespaces: {
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint32_t>();
      swap_u64s(s, s.take_swapped<std::uint64_t>() * 2);
      break;
    }
    case abi::kKsymbol:
      (void)s.take_swapped<std::uint64_t>();
      (void)s.take_swapped<std::uint32_t>();
      (void)s.take_swapped<std::uint16_t>();
      (void)s.take_swapped<std::uint16_t>();
      break;
    case abi::kBpfEvent:
      (void)s.take_swapped<std::uint16_t>();
      (void)s.take_swapped<std::uint16_t>();
      (void)s.take_swapped<std::uint32_t>();
      break;
    case abi::kCgroup:
      (void)s.take_swapped<std::uint64_t>();
      break;
    case abi::kTextPoke:
      (void)s.take_swapped<std::uint64_t>();
      (void)s.take_swapped<std::uint16_t>();
      (void)s.take_swapped<std::uint16_t>();
      break;
    default:  // SWITCH and unknown kernel types: nothing to swap
      break;
  }
  return s.ok();
}

}  // namespace tracer::perfdata::detail
