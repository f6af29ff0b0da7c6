#include "tracer/perf/record.hpp"

#include "sample_decode.hpp"
#include "tracer/common/byte_cursor.hpp"

#include <bit>

#include "tracer/perf/event_attr.hpp"

namespace tracer::perf {
namespace {

using abi::RecordType;

constexpr std::uint32_t kHeaderSize = sizeof(perf_event_header);

/// A bounds-checked forward reader over one record's body: every take* fails (and stays failed)
/// instead of reading past the end.
using Cursor = tracer::detail::ByteCursor<const std::byte>;

/// `n` u64s (n from the record; overflow-safe).
U64Array take_u64s(Cursor& c, std::uint64_t n) noexcept {
  const auto b = c.take_array(n, 8);
  return c.ok() ? U64Array{b.data(), n} : U64Array{};
}

std::uint32_t id_trailer_size_for(std::uint64_t st) noexcept {
  std::uint32_t n = 0;
  if ((st & PERF_SAMPLE_TID) != 0U)
    n += 8;
  if ((st & PERF_SAMPLE_TIME) != 0U)
    n += 8;
  if ((st & PERF_SAMPLE_ID) != 0U)
    n += 8;
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    n += 8;
  if ((st & PERF_SAMPLE_CPU) != 0U)
    n += 8;
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    n += 8;
  return n;
}

// Kernel counterpart: perf_event__output_id_sample() (kernel/events/core.c), same field order.
void read_sample_id(Cursor& c, std::uint64_t st, SampleId& id) noexcept {
  if ((st & PERF_SAMPLE_TID) != 0U) {
    id.pid = c.take<std::uint32_t>();
    id.tid = c.take<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_TIME) != 0U)
    id.time = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_ID) != 0U)
    id.id = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    id.stream_id = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    id.cpu = c.take<std::uint32_t>();
    id.res = c.take<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    id.id = c.take<std::uint64_t>();
  id.present = c.ok();
}

ReadView take_read(Cursor& c, std::uint64_t format) noexcept {
  ReadView v{format, c.pos(), 0};
  std::uint64_t nr = 1;
  if ((format & PERF_FORMAT_GROUP) != 0U) {
    if (c.left() < 8) {
      c.fail();
      return v;
    }
    nr = load<std::uint64_t>(c.pos());
  }
  // nr comes from the record: bound it by what is left before multiplying.
  const std::uint32_t per = ReadView::size_for(format, 1) - ReadView::size_for(format, 0);
  if (per != 0 && nr > c.left() / per) {
    c.fail();
    return v;
  }
  const std::uint32_t n = ReadView::size_for(format, nr);
  c.take_bytes(n);
  v.bytes = n;
  return v;
}

Regs take_regs(Cursor& c, std::uint32_t count) noexcept {
  Regs r;
  r.abi = c.take<std::uint64_t>();
  if (r.abi != PERF_SAMPLE_REGS_ABI_NONE)
    r.regs = take_u64s(c, count);
  return r;
}

// Kernel counterpart: perf_output_sample() (kernel/events/core.c), same field order.
void decode_sample(Cursor& c, const SampleLayout& l, Sample& s) noexcept {
  const std::uint64_t st = l.sample_type;
  s.sample_type = st;
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    s.identifier = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_IP) != 0U)
    s.ip = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_TID) != 0U) {
    s.pid = c.take<std::uint32_t>();
    s.tid = c.take<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_TIME) != 0U)
    s.time = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_ADDR) != 0U)
    s.addr = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_ID) != 0U)
    s.id = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    s.stream_id = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_CPU) != 0U) {
    s.cpu = c.take<std::uint32_t>();
    s.res = c.take<std::uint32_t>();
  }
  if ((st & PERF_SAMPLE_PERIOD) != 0U)
    s.period = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_READ) != 0U)
    s.read = take_read(c, l.read_format);
  if ((st & PERF_SAMPLE_CALLCHAIN) != 0U)
    s.callchain = take_u64s(c, c.take<std::uint64_t>());
  if ((st & PERF_SAMPLE_RAW) != 0U)
    s.raw = c.take_bytes(c.take<std::uint32_t>());
  if ((st & PERF_SAMPLE_BRANCH_STACK) != 0U) {
    auto& b = s.branch_stack;
    b.nr = c.take<std::uint64_t>();
    if ((l.branch_sample_type & abi::kBranchHwIndex) != 0U) {
      b.hw_idx = c.take<std::uint64_t>();
      b.has_hw_idx = true;
    }
    if (b.nr > c.left() / 24) {
      c.fail();
    } else {
      b.entries = c.take_bytes(b.nr * 24).data();
      if ((l.branch_sample_type & abi::kBranchCounters) != 0U)
        b.counters = take_u64s(c, b.nr);
    }
  }
  if ((st & PERF_SAMPLE_REGS_USER) != 0U)
    s.regs_user = take_regs(c, l.regs_user_count);
  if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
    const auto size = c.take<std::uint64_t>();
    if (size != 0) {
      s.stack_user = c.take_bytes(size);
      s.stack_user_dyn_size = c.take<std::uint64_t>();
      if (s.stack_user_dyn_size > size)
        c.fail();
    }
  }
  if ((st & (PERF_SAMPLE_WEIGHT | abi::kSampleWeightStruct)) != 0U) {
    s.weight = c.take<std::uint64_t>();
    s.weight_var1_dw = static_cast<std::uint32_t>(s.weight);
    s.weight_var2_w = static_cast<std::uint16_t>(s.weight >> 32);
    s.weight_var3_w = static_cast<std::uint16_t>(s.weight >> 48);
  }
  if ((st & PERF_SAMPLE_DATA_SRC) != 0U)
    s.data_src = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_TRANSACTION) != 0U)
    s.transaction = c.take<std::uint64_t>();
  if ((st & PERF_SAMPLE_REGS_INTR) != 0U)
    s.regs_intr = take_regs(c, l.regs_intr_count);
  if ((st & abi::kSamplePhysAddr) != 0U)
    s.phys_addr = c.take<std::uint64_t>();
  if ((st & abi::kSampleCgroup) != 0U)
    s.cgroup = c.take<std::uint64_t>();
  if ((st & abi::kSampleDataPageSize) != 0U)
    s.data_page_size = c.take<std::uint64_t>();
  if ((st & abi::kSampleCodePageSize) != 0U)
    s.code_page_size = c.take<std::uint64_t>();
  if ((st & abi::kSampleAux) != 0U)
    s.aux = c.take_bytes(c.take<std::uint64_t>());
}

}  // namespace

namespace detail {
DecodeError decode_general_sample(const std::byte* p,
                                  const std::byte* end,
                                  const SampleLayout& l,
                                  Sample& s) noexcept {
  Cursor c(p, end);
  decode_sample(c, l, s);
  if (!c.ok())
    return DecodeError::kFieldOverrun;
  return c.left() >= 8 ? DecodeError::kUndescribed : DecodeError::kOk;
}
}  // namespace detail

SampleLayout SampleLayout::from(std::uint64_t sample_type,
                                std::uint64_t read_format,
                                bool sample_id_all,
                                std::uint64_t branch_sample_type,
                                std::uint64_t regs_user,
                                std::uint64_t regs_intr) noexcept {
  SampleLayout l;
  l.sample_type = sample_type;
  l.read_format = read_format;
  l.branch_sample_type = branch_sample_type;
  l.regs_user_count = static_cast<std::uint32_t>(std::popcount(regs_user));
  l.regs_intr_count = static_cast<std::uint32_t>(std::popcount(regs_intr));
  l.sample_id_all = sample_id_all;
  l.id_trailer_size = sample_id_all ? id_trailer_size_for(sample_type) : 0;
  l.fixed = detail::is_fixed(sample_type);
  l.fixed_bytes =
      static_cast<std::uint32_t>(std::popcount(sample_type & detail::kFixedSampleFields)) * 8;
  return l;
}

SampleLayout::FixedOffsets SampleLayout::fixed_offsets() const noexcept {
  FixedOffsets o;
  if (!fixed)
    return o;
  // perf_output_sample()'s order of the u64 fields, after the 8-byte header.
  std::int16_t at = 8;
  const auto next = [&](std::uint64_t bit) {
    const std::int16_t here = at;
    if ((sample_type & bit) == 0U)
      return std::int16_t{-1};
    at = static_cast<std::int16_t>(at + 8);
    return here;
  };
  next(PERF_SAMPLE_IDENTIFIER);
  next(PERF_SAMPLE_IP);
  if (const std::int16_t tid = next(PERF_SAMPLE_TID); tid >= 0) {
    o.pid = tid;
    o.tid = static_cast<std::int16_t>(tid + 4);
  }
  o.time = next(PERF_SAMPLE_TIME);
  next(PERF_SAMPLE_ADDR);
  next(PERF_SAMPLE_ID);
  next(PERF_SAMPLE_STREAM_ID);
  o.cpu = next(PERF_SAMPLE_CPU);
  next(PERF_SAMPLE_PERIOD);
  o.raw = static_cast<std::uint16_t>(at + (has(PERF_SAMPLE_RAW) ? 4 : 0));
  return o;
}

SampleLayout SampleLayout::from(const EventAttr& attr) noexcept {
  const auto* a = attr.raw();
  return from(a->sample_type, a->read_format, a->sample_id_all != 0, a->branch_sample_type,
              a->sample_regs_user, a->sample_regs_intr);
}

std::uint32_t ReadView::size_for(std::uint64_t format, std::uint64_t nr) noexcept {
  std::uint64_t per_value = 8;  // value
  if ((format & PERF_FORMAT_ID) != 0U)
    per_value += 8;
  if ((format & abi::kFormatLost) != 0U)
    per_value += 8;
  std::uint64_t fixed = 0;
  if ((format & PERF_FORMAT_TOTAL_TIME_ENABLED) != 0U)
    fixed += 8;
  if ((format & PERF_FORMAT_TOTAL_TIME_RUNNING) != 0U)
    fixed += 8;
  if ((format & PERF_FORMAT_GROUP) != 0U)
    return static_cast<std::uint32_t>(8 + fixed + nr * per_value);
  return static_cast<std::uint32_t>(fixed + per_value);
}

namespace {
// Byte offsets inside a read_format blob.
struct ReadOffsets {
  std::uint32_t enabled = 0, running = 0, first_value = 0, per_value = 0, id = 0, lost = 0;
};
ReadOffsets read_offsets(std::uint64_t f) noexcept {
  // Kernel counterpart: perf_read_one()/perf_read_group() and perf_output_read_*().
  //   single: value, [time_enabled], [time_running], [id], [lost]
  //   group:  nr, [time_enabled], [time_running], nr * { value, [id], [lost] }
  // Offsets of 0 mean "absent": every present field sits at 8 or later.
  ReadOffsets o;
  const bool group = (f & PERF_FORMAT_GROUP) != 0U;
  std::uint32_t p = 8;  // past value (single) or nr (group)
  if ((f & PERF_FORMAT_TOTAL_TIME_ENABLED) != 0U)
    o.enabled = p, p += 8;
  if ((f & PERF_FORMAT_TOTAL_TIME_RUNNING) != 0U)
    o.running = p, p += 8;
  if (group) {
    o.first_value = p;
    std::uint32_t q = 8;  // inside one { value, id, lost } entry
    if ((f & PERF_FORMAT_ID) != 0U)
      o.id = q, q += 8;
    if ((f & abi::kFormatLost) != 0U)
      o.lost = q, q += 8;
    o.per_value = q;
  } else {
    o.first_value = 0;
    if ((f & PERF_FORMAT_ID) != 0U)
      o.id = p, p += 8;
    if ((f & abi::kFormatLost) != 0U)
      o.lost = p;
  }
  return o;
}
}  // namespace

std::uint64_t ReadView::count() const noexcept {
  if ((format & PERF_FORMAT_GROUP) == 0U)
    return bytes >= 8 ? 1 : 0;
  return bytes >= 8 ? load<std::uint64_t>(data) : 0;
}

std::uint64_t ReadView::time_enabled() const noexcept {
  const auto o = read_offsets(format);
  return o.enabled != 0 && o.enabled + 8 <= bytes ? load<std::uint64_t>(data + o.enabled) : 0;
}

std::uint64_t ReadView::time_running() const noexcept {
  const auto o = read_offsets(format);
  return o.running != 0 && o.running + 8 <= bytes ? load<std::uint64_t>(data + o.running) : 0;
}

std::uint64_t ReadView::value(std::uint64_t i) const noexcept {
  const auto o = read_offsets(format);
  const std::uint64_t off =
      (format & PERF_FORMAT_GROUP) != 0U ? o.first_value + i * o.per_value : 0;
  return off + 8 <= bytes ? load<std::uint64_t>(data + off) : 0;
}

std::uint64_t ReadView::id(std::uint64_t i) const noexcept {
  if ((format & PERF_FORMAT_ID) == 0U)
    return 0;
  const auto o = read_offsets(format);
  const std::uint64_t off =
      (format & PERF_FORMAT_GROUP) != 0U ? o.first_value + i * o.per_value + o.id : o.id;
  return off + 8 <= bytes ? load<std::uint64_t>(data + off) : 0;
}

std::uint64_t ReadView::lost(std::uint64_t i) const noexcept {
  if ((format & abi::kFormatLost) == 0U)
    return 0;
  const auto o = read_offsets(format);
  const std::uint64_t off =
      (format & PERF_FORMAT_GROUP) != 0U ? o.first_value + i * o.per_value + o.lost : o.lost;
  return off + 8 <= bytes ? load<std::uint64_t>(data + off) : 0;
}

double ReadView::scaled(std::uint64_t i) const noexcept {
  const auto v = static_cast<double>(value(i));
  const bool have_times = (format & PERF_FORMAT_TOTAL_TIME_ENABLED) != 0U &&
                          (format & PERF_FORMAT_TOTAL_TIME_RUNNING) != 0U;
  if (!have_times)
    return v;
  const std::uint64_t en = time_enabled();
  const std::uint64_t run = time_running();
  if (run == 0)
    return 0.0;
  if (run >= en)
    return v;
  return v * static_cast<double>(en) / static_cast<double>(run);
}

std::string_view to_string(DecodeError e) noexcept {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kTruncatedHeader:
      return "record header truncated (fewer than 8 bytes)";
    case DecodeError::kZeroSize:
      return "record size 0";
    case DecodeError::kSizePastData:
      return "record size past the end of the data";
    case DecodeError::kMisaligned:
      return "record size not a multiple of 8";
    case DecodeError::kFieldOverrun:
      return "a field runs past the end of the record";
    case DecodeError::kTrailerOverrun:
      return "sample_id trailer does not fit the record";
    case DecodeError::kUndescribed:
      return "the record is longer than the fields its sample_type describes (a damaged attr?)";
  }
  return "unknown decode error";
}

std::string_view record_type_name(std::uint32_t type) noexcept {
  switch (type) {
    case RecordType::kMmap:
      return "MMAP";
    case RecordType::kLost:
      return "LOST";
    case RecordType::kComm:
      return "COMM";
    case RecordType::kExit:
      return "EXIT";
    case RecordType::kThrottle:
      return "THROTTLE";
    case RecordType::kUnthrottle:
      return "UNTHROTTLE";
    case RecordType::kFork:
      return "FORK";
    case RecordType::kRead:
      return "READ";
    case RecordType::kSample:
      return "SAMPLE";
    case RecordType::kMmap2:
      return "MMAP2";
    case RecordType::kAux:
      return "AUX";
    case RecordType::kItraceStart:
      return "ITRACE_START";
    case RecordType::kLostSamples:
      return "LOST_SAMPLES";
    case RecordType::kSwitch:
      return "SWITCH";
    case RecordType::kSwitchCpuWide:
      return "SWITCH_CPU_WIDE";
    case RecordType::kNamespaces:
      return "NAMESPACES";
    case RecordType::kKsymbol:
      return "KSYMBOL";
    case RecordType::kBpfEvent:
      return "BPF_EVENT";
    case RecordType::kCgroup:
      return "CGROUP";
    case RecordType::kTextPoke:
      return "TEXT_POKE";
    case RecordType::kAuxOutputHwId:
      return "AUX_OUTPUT_HW_ID";
    default:
      return "UNKNOWN";
  }
}

std::uint64_t peek_identifier(std::span<const std::byte> bytes, bool sample_id_all) noexcept {
  if (bytes.size() < kHeaderSize)
    return 0;
  const auto h = load<perf_event_header>(bytes.data());
  if (h.size < kHeaderSize || h.size > bytes.size())
    return 0;
  if (h.type == RecordType::kSample) {
    return h.size >= kHeaderSize + 8 ? load<std::uint64_t>(bytes.data() + kHeaderSize) : 0;
  }
  if (!sample_id_all || h.size < kHeaderSize + 8)
    return 0;
  return load<std::uint64_t>(bytes.data() + h.size - 8);
}

namespace {

/// MMAP2: a build id or the device and inode, by PERF_RECORD_MISC_MMAP_BUILD_ID.
// NOLINTNEXTLINE(bugprone-exception-escape): emplace of nothrow alternatives
void decode_mmap2(Cursor& c, const perf_event_header& h, Record& out) noexcept {
  auto& m = out.body.emplace<Mmap2>();
  m.pid = c.take<std::uint32_t>();
  m.tid = c.take<std::uint32_t>();
  m.addr = c.take<std::uint64_t>();
  m.len = c.take<std::uint64_t>();
  m.pgoff = c.take<std::uint64_t>();
  m.has_build_id = (h.misc & abi::kMiscMmapBuildId) != 0U;
  if (m.has_build_id) {
    m.build_id_size = c.take<std::uint8_t>();
    c.take_bytes(3);
    m.build_id = c.take_bytes(20);
    if (m.build_id_size > 20)
      c.fail();
    m.maj = m.min = 0;
    m.ino = m.ino_generation = 0;
  } else {
    m.build_id_size = 0;
    m.maj = c.take<std::uint32_t>();
    m.min = c.take<std::uint32_t>();
    m.ino = c.take<std::uint64_t>();
    m.ino_generation = c.take<std::uint64_t>();
  }
  m.prot = c.take<std::uint32_t>();
  m.flags = c.take<std::uint32_t>();
  m.filename = c.take_string();
}

/// SWITCH and SWITCH_CPU_WIDE (the latter names the other task).
// NOLINTNEXTLINE(bugprone-exception-escape): emplace of nothrow alternatives
void decode_switch(Cursor& c, const perf_event_header& h, Record& out) noexcept {
  auto& s = out.body.emplace<Switch>();
  s.out = (h.misc & abi::kMiscSwitchOut) != 0U;
  s.preempt = (h.misc & abi::kMiscSwitchOutPreempt) != 0U;
  s.cpu_wide = h.type == RecordType::kSwitchCpuWide;
  s.next_prev_pid = s.next_prev_tid = 0;
  if (s.cpu_wide) {
    s.next_prev_pid = c.take<std::uint32_t>();
    s.next_prev_tid = c.take<std::uint32_t>();
  }
}

/// NAMESPACES: nr (dev, inode) pairs.
// NOLINTNEXTLINE(bugprone-exception-escape): emplace of nothrow alternatives
void decode_namespaces(Cursor& c, Record& out) noexcept {
  auto& n = out.body.emplace<Namespaces>();
  n.pid = c.take<std::uint32_t>();
  n.tid = c.take<std::uint32_t>();
  n.nr = c.take<std::uint64_t>();
  if (n.nr > c.left() / 16) {
    c.fail();
    n.entries = nullptr;
  } else {
    n.entries = c.take_bytes(n.nr * 16).data();
  }
}

/// KSYMBOL.
// NOLINTNEXTLINE(bugprone-exception-escape): emplace of nothrow alternatives
void decode_ksymbol(Cursor& c, Record& out) noexcept {
  auto& k = out.body.emplace<Ksymbol>();
  k.addr = c.take<std::uint64_t>();
  k.len = c.take<std::uint32_t>();
  k.ksym_type = c.take<std::uint16_t>();
  k.flags = c.take<std::uint16_t>();
  k.name = c.take_string();
}

/// TEXT_POKE: the old and new bytes.
// NOLINTNEXTLINE(bugprone-exception-escape): emplace of nothrow alternatives
void decode_text_poke(Cursor& c, Record& out) noexcept {
  auto& t = out.body.emplace<TextPoke>();
  t.addr = c.take<std::uint64_t>();
  t.old_len = c.take<std::uint16_t>();
  t.new_len = c.take<std::uint16_t>();
  t.old_bytes = c.take_bytes(t.old_len);
  t.new_bytes = c.take_bytes(t.new_len);
}

}  // namespace

// variant::emplace of nothrow-constructible alternatives cannot throw.
DecodeError decode(std::span<const std::byte> bytes,  // NOLINT(bugprone-exception-escape)
                   const SampleLayout& layout,
                   Record& out) noexcept {
  if (bytes.size() < kHeaderSize)
    return DecodeError::kTruncatedHeader;
  const auto h = load<perf_event_header>(bytes.data());
  if (h.size == 0)
    return DecodeError::kZeroSize;
  if (h.size > bytes.size())
    return DecodeError::kSizePastData;
  if (h.size < kHeaderSize)
    return DecodeError::kTruncatedHeader;
  if (h.size % 8 != 0)
    return DecodeError::kMisaligned;

  if (h.type == RecordType::kSample)
    return detail::decode_sample_record(bytes.first(h.size), h, layout, out);

  out.type = h.type;
  out.misc = h.misc;
  out.size = h.size;
  out.bytes = bytes.first(h.size);
  out.sample_id = {};
  const std::byte* body = bytes.data() + kHeaderSize;
  const std::byte* end = bytes.data() + h.size;
  // Non-sample records: the sample_id trailer (if any) takes the last id_trailer_size bytes.
  // Types this code does not know have no known trailer contract: treat them as opaque.
  if (h.type >= RecordType::kRecordTypeEnd || h.type == 0) {
    out.body.emplace<Unknown>();
    return DecodeError::kOk;
  }
  const std::byte* body_end = end;
  if (layout.sample_id_all) {
    if (static_cast<std::size_t>(end - body) < layout.id_trailer_size) {
      return DecodeError::kTrailerOverrun;
    }
    body_end = end - layout.id_trailer_size;
    Cursor t(body_end, end);
    read_sample_id(t, layout.sample_type, out.sample_id);
  }

  Cursor c(body, body_end);
  switch (h.type) {
    case RecordType::kMmap: {
      auto& m = out.body.emplace<Mmap>();
      m.pid = c.take<std::uint32_t>();
      m.tid = c.take<std::uint32_t>();
      m.addr = c.take<std::uint64_t>();
      m.len = c.take<std::uint64_t>();
      m.pgoff = c.take<std::uint64_t>();
      m.filename = c.take_string();
      break;
    }
    case RecordType::kMmap2:
      decode_mmap2(c, h, out);
      break;
    case RecordType::kLost: {
      auto& l = out.body.emplace<Lost>();
      l.id = c.take<std::uint64_t>();
      l.lost = c.take<std::uint64_t>();
      break;
    }
    case RecordType::kComm: {
      auto& m = out.body.emplace<Comm>();
      m.pid = c.take<std::uint32_t>();
      m.tid = c.take<std::uint32_t>();
      m.comm = c.take_string();
      m.exec = (h.misc & abi::kMiscCommExec) != 0U;
      break;
    }
    case RecordType::kExit:
    case RecordType::kFork: {
      auto& t = out.body.emplace<TaskEvent>();
      t.pid = c.take<std::uint32_t>();
      t.ppid = c.take<std::uint32_t>();
      t.tid = c.take<std::uint32_t>();
      t.ptid = c.take<std::uint32_t>();
      t.time = c.take<std::uint64_t>();
      break;
    }
    case RecordType::kThrottle:
    case RecordType::kUnthrottle: {
      auto& t = out.body.emplace<Throttle>();
      t.time = c.take<std::uint64_t>();
      t.id = c.take<std::uint64_t>();
      t.stream_id = c.take<std::uint64_t>();
      break;
    }
    case RecordType::kRead: {
      auto& r = out.body.emplace<ReadRecord>();
      r.pid = c.take<std::uint32_t>();
      r.tid = c.take<std::uint32_t>();
      r.values = take_read(c, layout.read_format);
      break;
    }
    case RecordType::kAux: {
      auto& a = out.body.emplace<Aux>();
      a.aux_offset = c.take<std::uint64_t>();
      a.aux_size = c.take<std::uint64_t>();
      a.flags = c.take<std::uint64_t>();
      break;
    }
    case RecordType::kItraceStart: {
      auto& i = out.body.emplace<ItraceStart>();
      i.pid = c.take<std::uint32_t>();
      i.tid = c.take<std::uint32_t>();
      break;
    }
    case RecordType::kLostSamples: {
      out.body.emplace<LostSamples>().lost = c.take<std::uint64_t>();
      break;
    }
    case RecordType::kSwitch:
    case RecordType::kSwitchCpuWide:
      decode_switch(c, h, out);
      break;
    case RecordType::kNamespaces:
      decode_namespaces(c, out);
      break;
    case RecordType::kKsymbol:
      decode_ksymbol(c, out);
      break;
    case RecordType::kBpfEvent: {
      auto& b = out.body.emplace<BpfEvent>();
      b.type = c.take<std::uint16_t>();
      b.flags = c.take<std::uint16_t>();
      b.id = c.take<std::uint32_t>();
      b.tag = c.take_bytes(8);
      break;
    }
    case RecordType::kCgroup: {
      auto& g = out.body.emplace<Cgroup>();
      g.id = c.take<std::uint64_t>();
      g.path = c.take_string();
      break;
    }
    case RecordType::kTextPoke:
      decode_text_poke(c, out);
      break;
    case RecordType::kAuxOutputHwId: {
      out.body.emplace<AuxOutputHwId>().hw_id = c.take<std::uint64_t>();
      break;
    }
    default:
      out.body.emplace<Unknown>();
      break;
  }
  return c.ok() ? DecodeError::kOk : DecodeError::kFieldOverrun;
}

}  // namespace tracer::perf
