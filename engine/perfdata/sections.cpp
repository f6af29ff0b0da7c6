// perf.data header features (tools/perf/util/header.c write_*/process_*), TRACING_DATA
// (tools/perf/util/trace-event-read.c) and perf's own record types
// (tools/lib/perf/include/perf/event.h).
#include <fmt/core.h>

#include <algorithm>
#include <cstring>

#include "internal.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/perfdata/reader.hpp"

namespace tracer::perfdata {

using perf::load;

std::string ReadError::describe() const {
  return fmt::format("offset {} (0x{:x}): {}", offset, offset, message);
}

const tracefs::Format* TracingData::find(std::uint32_t id) const noexcept {
  for (const auto& f : formats) {
    if (f.id == id)
      return &f;
  }
  return nullptr;
}

IdIndexEntry IdIndex::entry(std::uint64_t i) const noexcept {
  const std::byte* p = entries + i * sizeof(IdIndexEntry);
  return {load<std::uint64_t>(p), load<std::uint64_t>(p + 8), load<std::uint64_t>(p + 16),
          load<std::uint64_t>(p + 24)};
}

std::uint64_t ThreadMap::pid(std::uint64_t i) const noexcept {
  return load<std::uint64_t>(entries + i * 24);
}

std::string_view ThreadMap::comm(std::uint64_t i) const noexcept {
  std::string_view s(reinterpret_cast<const char*>(entries + i * 24 + 8), 16);
  return s.substr(0, s.find('\0'));
}

std::uint64_t StatConfig::tag(std::uint64_t i) const noexcept {
  return load<std::uint64_t>(entries + i * 16);
}

std::uint64_t StatConfig::val(std::uint64_t i) const noexcept {
  return load<std::uint64_t>(entries + i * 16 + 8);
}

bool CpuMapData::cpus(std::vector<std::int32_t>& out) const {
  out.clear();
  detail::Cursor c(data, false);
  const auto type = c.take<std::uint16_t>();
  if (type == 0) {  // PERF_CPU_MAP__CPUS
    const auto nr = c.take<std::uint16_t>();
    for (std::uint32_t i = 0; i < nr && c.ok(); ++i)
      out.push_back(static_cast<std::int16_t>(c.take<std::uint16_t>()));
  } else if (type == 1) {  // PERF_CPU_MAP__MASK
    const auto nr = c.take<std::uint16_t>();
    const auto long_size = c.take<std::uint16_t>();
    if (long_size != 4 && long_size != 8)
      return false;
    if (long_size == 8)
      c.skip(4);
    for (std::uint32_t i = 0; i < nr && c.ok(); ++i) {
      const std::uint64_t m = long_size == 4 ? c.take<std::uint32_t>() : c.take<std::uint64_t>();
      for (std::uint32_t b = 0; b < long_size * 8U; ++b) {
        if (((m >> b) & 1U) != 0)
          out.push_back(static_cast<std::int32_t>(i * long_size * 8U + b));
      }
    }
  } else if (type == 2) {  // PERF_CPU_MAP__RANGE_CPUS
    const auto any = c.take<std::uint8_t>();
    c.skip(1);
    const auto start = c.take<std::uint16_t>();
    const auto end = c.take<std::uint16_t>();
    if (any != 0)
      out.push_back(-1);
    for (std::uint32_t cpu = start; cpu <= end && c.ok(); ++cpu)
      out.push_back(static_cast<std::int32_t>(cpu));
  } else {
    return false;
  }
  return c.ok();
}

namespace {

// The records of more than a few fields, one function each (decode_user's cases). Assigning
// to the variant cannot throw: every alternative is a view of trivial members.
// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_build_id(detail::Cursor& c, std::uint16_t misc, UserRecord& out) noexcept {
  BuildIdRecord b;
  b.pid = static_cast<std::int32_t>(c.take<std::uint32_t>());
  const auto id = c.take_bytes(24);
  if (!c.ok())
    return false;
  const bool sized = (misc & (1U << 15)) != 0;  // PERF_RECORD_MISC_BUILD_ID_SIZE
  const auto n = sized ? std::min<std::size_t>(static_cast<std::uint8_t>(id[20]), 20) : 20;
  b.build_id = id.first(n);
  const auto name = c.take_bytes(c.left());
  std::string_view s(reinterpret_cast<const char*>(name.data()), name.size());
  b.filename = s.substr(0, s.find('\0'));
  out = b;
  return true;
}

// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_auxtrace(detail::Cursor& c, UserRecord& out) noexcept {
  Auxtrace a;
  a.size = c.take<std::uint64_t>();
  a.offset = c.take<std::uint64_t>();
  a.reference = c.take<std::uint64_t>();
  a.idx = c.take<std::uint32_t>();
  a.tid = c.take<std::uint32_t>();
  a.cpu = c.take<std::uint32_t>();
  if (!c.ok())
    return false;
  out = a;
  return true;
}

// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_auxtrace_error(detail::Cursor& c, UserRecord& out) noexcept {
  AuxtraceError e;
  e.type = c.take<std::uint32_t>();
  e.code = c.take<std::uint32_t>();
  e.cpu = c.take<std::uint32_t>();
  e.pid = c.take<std::uint32_t>();
  e.tid = c.take<std::uint32_t>();
  e.fmt = c.take<std::uint32_t>();
  e.ip = c.take<std::uint64_t>();
  e.time = c.take<std::uint64_t>();
  const auto msg = c.take_bytes(64);
  if (!c.ok())
    return false;
  std::string_view s(reinterpret_cast<const char*>(msg.data()), msg.size());
  e.msg = s.substr(0, s.find('\0'));
  if (e.fmt >= 2 && c.left() >= 8) {
    e.machine_pid = c.take<std::uint32_t>();
    e.vcpu = c.take<std::uint32_t>();
  }
  out = e;
  return true;
}

// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_stat(detail::Cursor& c, UserRecord& out) noexcept {
  Stat s;
  s.id = c.take<std::uint64_t>();
  s.cpu = c.take<std::uint32_t>();
  s.thread = c.take<std::uint32_t>();
  s.val = c.take<std::uint64_t>();
  s.ena = c.take<std::uint64_t>();
  s.run = c.take<std::uint64_t>();
  if (!c.ok())
    return false;
  out = s;
  return true;
}

// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_event_update(detail::Cursor& c, UserRecord& out) noexcept {
  EventUpdate e;
  e.type = c.take<std::uint64_t>();
  e.id = c.take<std::uint64_t>();
  if (!c.ok())
    return false;
  const auto data = c.take_bytes(c.left());
  if (e.type == 0 || e.type == 2) {
    std::string_view s(reinterpret_cast<const char*>(data.data()), data.size());
    e.text = s.substr(0, s.find('\0'));
  } else if (e.type == 1) {
    if (data.size() < 8)
      return false;
    std::memcpy(&e.scale, data.data(), 8);
  } else if (e.type == 3) {
    e.cpus = CpuMapData{data};
  }
  out = e;
  return true;
}

// NOLINTNEXTLINE(bugprone-exception-escape)
bool decode_time_conv(detail::Cursor& c, UserRecord& out) noexcept {
  TimeConv t;
  t.time_shift = c.take<std::uint64_t>();
  t.time_mult = c.take<std::uint64_t>();
  t.time_zero = c.take<std::uint64_t>();
  if (!c.ok())
    return false;
  if (c.left() >= 24) {  // perf 5.13+: the TSC fields
    t.time_cycles = c.take<std::uint64_t>();
    t.time_mask = c.take<std::uint64_t>();
    t.cap_user_time_zero = c.take<std::uint8_t>() != 0;
    t.cap_user_time_short = c.take<std::uint8_t>() != 0;
  }
  out = t;
  return true;
}

}  // namespace

// Emplacing into the variant cannot throw: every alternative is a view of trivial members.
bool decode_user(std::span<const std::byte> bytes,  // NOLINT(bugprone-exception-escape)
                 UserRecord& out) noexcept {
  out.emplace<std::monostate>();
  if (bytes.size() < 8)
    return false;
  const auto h = load<perf_event_header>(bytes.data());
  if (h.size > bytes.size() || h.size < 8)
    return false;
  detail::Cursor c(bytes.subspan(8, h.size - 8U), false);
  const auto rest = [&] { return c.take_bytes(c.left()); };
  switch (h.type) {
    case kHeaderAttr: {
      HeaderAttr a;
      const auto body = bytes.subspan(8, h.size - 8U);
      const std::uint32_t size = detail::read_attr(body.data(), body.size(), false, a.attr);
      if (size == 0)
        return false;
      a.ids = {body.data() + size, (body.size() - size) / 8};
      out = a;
      return true;
    }
    case kHeaderTracingData: {
      TracingDataRecord t;
      t.size = c.take<std::uint32_t>();
      if (!c.ok())
        return false;
      out = t;
      return true;
    }
    case kHeaderBuildId:
      return decode_build_id(c, h.misc, out);
    case kFinishedRound:
      out = FinishedRound{};
      return true;
    case kFinishedInit:
      out = FinishedInit{};
      return true;
    case kIdIndex: {
      IdIndex x;
      x.nr = c.take<std::uint64_t>();
      if (!c.ok() || x.nr > c.left() / sizeof(IdIndexEntry))
        return false;
      x.entries = c.take_bytes(x.nr * sizeof(IdIndexEntry)).data();
      out = x;
      return true;
    }
    case kAuxtraceInfo: {
      AuxtraceInfo a;
      a.type = c.take<std::uint32_t>();
      c.skip(4);
      const auto priv = rest();
      if (!c.ok())
        return false;
      a.priv = {priv.data(), priv.size() / 8};
      out = a;
      return true;
    }
    case kAuxtrace:
      return decode_auxtrace(c, out);
    case kAuxtraceError:
      return decode_auxtrace_error(c, out);
    case kThreadMap: {
      ThreadMap t;
      t.nr = c.take<std::uint64_t>();
      if (!c.ok() || t.nr > c.left() / 24)
        return false;
      t.entries = c.take_bytes(t.nr * 24).data();
      out = t;
      return true;
    }
    case kCpuMap:
      out = CpuMapData{rest()};
      return true;
    case kStatConfig: {
      StatConfig s;
      s.nr = c.take<std::uint64_t>();
      if (!c.ok() || s.nr > c.left() / 16)
        return false;
      s.entries = c.take_bytes(s.nr * 16).data();
      out = s;
      return true;
    }
    case kStat:
      return decode_stat(c, out);
    case kStatRound: {
      StatRound s;
      s.type = c.take<std::uint64_t>();
      s.time = c.take<std::uint64_t>();
      if (!c.ok())
        return false;
      out = s;
      return true;
    }
    case kEventUpdate:
      return decode_event_update(c, out);
    case kTimeConv:
      return decode_time_conv(c, out);
    case kHeaderFeature: {
      HeaderFeatureRecord f;
      f.feature = c.take<std::uint64_t>();
      if (!c.ok())
        return false;
      f.data = rest();
      out = f;
      return true;
    }
    case kCompressed:
      out = CompressedRecord{rest()};
      return true;
    case kCompressed2: {
      const auto n = c.take<std::uint64_t>();
      const auto data = c.take_bytes(n);
      if (!c.ok())
        return false;
      out = CompressedRecord{data};
      return true;
    }
    default:  // EVENT_TYPE (deprecated) and types past perf's: header only
      return true;
  }
}

namespace detail {

std::uint32_t read_attr(const std::byte* p,
                        std::uint64_t avail,
                        bool swap,
                        perf::EventAttr& out) noexcept {
  if (avail < perf::abi::kAttrSizeVer0)
    return 0;
  std::uint32_t size = maybe_swap(load<std::uint32_t>(p + 4), swap);
  if (size == 0)  // tools/perf/util/header.c read_attr(): 0 means VER0
    size = perf::abi::kAttrSizeVer0;
  if (size > avail || size < perf::abi::kAttrSizeVer0)
    return 0;
  std::byte buf[sizeof(perf::abi::Attr)] = {};
  const std::uint32_t n = std::min<std::uint32_t>(size, sizeof(buf));
  std::memcpy(buf, p, n);
  if (swap)
    swap_attr(buf, n);
  out = perf::EventAttr();
  std::memcpy(out.raw(), buf, sizeof(perf_event_attr));
  out.config3(load<std::uint64_t>(buf + sizeof(perf_event_attr)));
  out.size(size);
  return size;
}

namespace {

std::optional<ReadError> problem(const Cursor& c, std::string message) {
  return ReadError{.offset = c.offset(), .message = std::move(message)};
}

// Counts read from the file bound every loop: each item takes at least `min_item` bytes.
bool plausible(const Cursor& c, std::uint64_t n, std::uint64_t min_item) {
  return min_item == 0 || n <= c.left() / min_item;
}

std::vector<std::string> string_list(Cursor& c) {
  std::vector<std::string> out;
  const auto nr = c.take<std::uint32_t>();
  if (!plausible(c, nr, 4)) {
    c.fail();
    return out;
  }
  for (std::uint32_t i = 0; i < nr && c.ok(); ++i)
    out.push_back(c.string());
  return out;
}

void parse_caps(Cursor& c, PmuCaps& caps, bool with_pmu_name) {
  const auto nr = c.take<std::uint32_t>();
  if (!plausible(c, nr, 8)) {
    c.fail();
    return;
  }
  for (std::uint32_t i = 0; i < nr && c.ok(); ++i) {
    std::string name = c.string();
    std::string value = c.string();
    caps.caps.emplace_back(std::move(name), std::move(value));
  }
  if (with_pmu_name)
    caps.pmu = c.string();
}

std::string hex(std::span<const std::byte> b) {
  std::string s;
  for (auto x : b)
    s += fmt::format("{:02x}", static_cast<unsigned>(x));
  return s;
}

/// `nr` (read as N) entries, each at least `min_item` bytes, read by `one` while the cursor
/// holds: the shape of most list sections.
template <typename N, typename F>
void for_each_entry(Cursor& c, std::uint64_t min_item, F&& one) {
  const auto nr = c.take<N>();
  if (!plausible(c, nr, min_item)) {
    c.fail();
    return;
  }
  for (N i = 0; i < nr && c.ok(); ++i)
    one();
}

/// HEADER_BUILD_ID: a sequence of struct perf_record_header_build_id.
std::optional<ReadError> parse_build_ids(std::span<const std::byte> data, bool swap, Features& f) {
  std::uint64_t pos = 0;
  while (data.size() - pos >= 8) {
    const auto h = load<perf_event_header>(data.data() + pos);
    const std::uint16_t size = maybe_swap(h.size, swap);
    if (size < 8 + 4 + 24 || size > data.size() - pos)
      return ReadError{.offset = pos, .message = fmt::format("build_id: entry of {} bytes", size)};
    Cursor e(data.subspan(pos + 8, size - 8U), swap);
    BuildId b;
    b.misc = maybe_swap(h.misc, swap);
    b.pid = static_cast<std::int32_t>(e.take<std::uint32_t>());
    const auto id = e.take_bytes(24);
    const bool sized = (b.misc & (1U << 15)) != 0;
    b.build_id =
        hex(id.first(sized ? std::min<std::size_t>(static_cast<std::uint8_t>(id[20]), 20) : 20));
    const auto fname = e.take_bytes(e.left());
    std::string_view s(reinterpret_cast<const char*>(fname.data()), fname.size());
    b.filename = std::string(s.substr(0, s.find('\0')));
    b.misc &= perf::abi::kMiscCpumodeMask;
    f.build_ids.push_back(std::move(b));
    pos += size;
  }
  return std::nullopt;
}

/// HEADER_EVENT_DESC: each event's attr, name and sample ids.
std::optional<ReadError> parse_event_desc(Cursor& c,
                                          bool swap,
                                          std::vector<EventDescEntry>& descs) {
  const auto nre = c.take<std::uint32_t>();
  const auto sz = c.take<std::uint32_t>();
  if (!c.ok())
    return std::nullopt;
  if (sz < perf::abi::kAttrSizeVer0 || !plausible(c, nre, sz))
    return problem(c, fmt::format("event_desc: {} events of {} bytes", nre, sz));
  for (std::uint32_t i = 0; i < nre && c.ok(); ++i) {
    EventDescEntry e;
    const auto attr = c.take_bytes(sz);
    if (!c.ok())
      break;
    if (read_attr(attr.data(), attr.size(), swap, e.attr) == 0)
      return problem(c, fmt::format("event_desc: attr {} is damaged", i));
    const auto nr_ids = c.take<std::uint32_t>();
    e.name = c.string();
    if (!plausible(c, nr_ids, 8)) {
      c.fail();
      break;
    }
    for (std::uint32_t j = 0; j < nr_ids; ++j)
      e.ids.push_back(c.take<std::uint64_t>());
    descs.push_back(std::move(e));
  }
  return std::nullopt;
}

/// HEADER_CPU_TOPOLOGY: sibling lists, then per-CPU core and socket ids (perf 4.x+), then dies
/// (5.x+): optional tails.
void parse_cpu_topology(Cursor& c, Features& f) {
  CpuTopology t;
  t.core_siblings = string_list(c);
  t.thread_siblings = string_list(c);
  const std::uint32_t ncpu = f.nrcpus ? f.nrcpus->available : 0;
  if (c.ok() && ncpu != 0 && c.left() >= std::uint64_t{ncpu} * 8) {
    t.cpus.resize(ncpu);
    for (auto& cpu : t.cpus) {
      cpu.core_id = c.take<std::uint32_t>();
      cpu.socket_id = c.take<std::uint32_t>();
    }
    if (c.left() >= 4) {
      t.die_siblings = string_list(c);
      if (c.ok() && c.left() >= std::uint64_t{ncpu} * 4) {
        for (auto& cpu : t.cpus)
          cpu.die_id = c.take<std::uint32_t>();
      }
    }
  }
  if (c.ok())
    f.cpu_topology = std::move(t);
}

/// HEADER_CACHE: version 1, then the levels.
std::optional<ReadError> parse_cache(Cursor& c, Features& f) {
  const auto version = c.take<std::uint32_t>();
  const auto nr = c.take<std::uint32_t>();
  if (!c.ok())
    return std::nullopt;
  if (version != 1)
    return problem(c, fmt::format("cache: version {} (expected 1)", version));
  if (!plausible(c, nr, 28)) {
    c.fail();
    return std::nullopt;
  }
  for (std::uint32_t i = 0; i < nr && c.ok(); ++i) {
    CacheLevel l;
    l.level = c.take<std::uint32_t>();
    l.line_size = c.take<std::uint32_t>();
    l.sets = c.take<std::uint32_t>();
    l.ways = c.take<std::uint32_t>();
    l.type = c.string();
    l.size = c.string();
    l.map = c.string();
    f.caches.push_back(std::move(l));
  }
  return std::nullopt;
}

/// A fixed struct of the section's start, kept when the section holds it whole.
template <typename T, typename Read>
void parse_fixed(Cursor& c, std::optional<T>& out, Read&& read) {
  T v{};
  read(v);
  if (c.ok())
    out = v;
}

/// The list sections: NUMA nodes, PMU mappings, groups, the AUX trace index, hybrid topology,
/// PMU capabilities. False for another feature.
bool parse_list_feature(Feature feature, Cursor& c, Features& f) {
  switch (feature) {
    case Feature::kNumaTopology:
      for_each_entry<std::uint32_t>(c, 24, [&] {
        NumaNode n;
        n.node = c.take<std::uint32_t>();
        n.mem_total_kb = c.take<std::uint64_t>();
        n.mem_free_kb = c.take<std::uint64_t>();
        n.cpus = c.string();
        f.numa_nodes.push_back(std::move(n));
      });
      return true;
    case Feature::kPmuMappings:
      for_each_entry<std::uint32_t>(c, 8, [&] {
        const auto type = c.take<std::uint32_t>();
        f.pmu_mappings.emplace_back(type, c.string());
      });
      return true;
    case Feature::kGroupDesc:
      for_each_entry<std::uint32_t>(c, 12, [&] {
        GroupDesc g;
        g.name = c.string();
        g.leader_idx = c.take<std::uint32_t>();
        g.nr_members = c.take<std::uint32_t>();
        f.groups.push_back(std::move(g));
      });
      return true;
    case Feature::kAuxtrace:
      for_each_entry<std::uint64_t>(c, 16, [&] {
        const auto off = c.take<std::uint64_t>();
        f.auxtrace_index.emplace_back(off, c.take<std::uint64_t>());
      });
      return true;
    case Feature::kHybridTopology:
      for_each_entry<std::uint32_t>(c, 8, [&] {
        HybridNode n;
        n.pmu = c.string();
        n.cpus = c.string();
        f.hybrid_topology.push_back(std::move(n));
      });
      return true;
    case Feature::kPmuCaps:
      for_each_entry<std::uint32_t>(c, 8, [&] {
        PmuCaps p;
        parse_caps(c, p, true);
        f.pmu_caps.push_back(std::move(p));
      });
      return true;
    default:
      return false;
  }
}

/// The sections of a string or a fixed struct. False for another feature.
bool parse_value_feature(Feature feature, Cursor& c, Features& f) {
  switch (feature) {
    case Feature::kHostname:
      f.hostname = c.string();
      return true;
    case Feature::kOsRelease:
      f.osrelease = c.string();
      return true;
    case Feature::kVersion:
      f.version = c.string();
      return true;
    case Feature::kArch:
      f.arch = c.string();
      return true;
    case Feature::kCpuDesc:
      f.cpudesc = c.string();
      return true;
    case Feature::kCpuId:
      f.cpuid = c.string();
      return true;
    case Feature::kCmdline:
      f.cmdline = string_list(c);
      return true;
    case Feature::kNrCpus:
      parse_fixed(c, f.nrcpus, [&](NrCpus& n) {
        n.available = c.take<std::uint32_t>();
        n.online = c.take<std::uint32_t>();
      });
      return true;
    case Feature::kTotalMem:
      parse_fixed(c, f.total_mem_kb, [&](std::uint64_t& kb) { kb = c.take<std::uint64_t>(); });
      return true;
    case Feature::kSampleTime:
      parse_fixed(c, f.sample_time, [&](SampleTime& t) {
        t.first_ns = c.take<std::uint64_t>();
        t.last_ns = c.take<std::uint64_t>();
      });
      return true;
    case Feature::kClockId:
      parse_fixed(c, f.clockid_res_ns, [&](std::uint64_t& r) { r = c.take<std::uint64_t>(); });
      return true;
    case Feature::kDirFormat:
      parse_fixed(c, f.dir_format, [&](std::uint64_t& v) { v = c.take<std::uint64_t>(); });
      return true;
    case Feature::kCompressed:
      parse_fixed(c, f.compressed, [&](Compression& z) {
        z.version = c.take<std::uint32_t>();
        z.type = c.take<std::uint32_t>();
        z.level = c.take<std::uint32_t>();
        z.ratio = c.take<std::uint32_t>();
        z.mmap_len = c.take<std::uint32_t>();
      });
      return true;
    case Feature::kClockData:
      parse_fixed(c, f.clock_data, [&](ClockData& d) {
        d.version = c.take<std::uint32_t>();
        d.clockid = c.take<std::uint32_t>();
        d.tod_ns = c.take<std::uint64_t>();
        d.clockid_ns = c.take<std::uint64_t>();
      });
      return true;
    default:
      return false;
  }
}

}  // namespace

std::optional<ReadError> parse_feature(std::uint32_t bit,
                                       std::span<const std::byte> data,
                                       bool swap,
                                       Features& f,
                                       std::optional<TracingData>& tracing,
                                       std::vector<EventDescEntry>& descs) {
  Cursor c(data, swap);
  const auto feature = static_cast<Feature>(bit);
  switch (feature) {
    case Feature::kTracingData: {
      TracingData t;
      if (auto err = parse_tracing_data(data, t))
        return err;
      tracing = std::move(t);
      return std::nullopt;
    }
    case Feature::kBuildId:
      return parse_build_ids(data, swap, f);
    case Feature::kEventDesc:
      if (auto err = parse_event_desc(c, swap, descs))
        return err;
      break;
    case Feature::kCpuTopology:
      parse_cpu_topology(c, f);
      break;
    case Feature::kCache:
      if (auto err = parse_cache(c, f))
        return err;
      break;
    case Feature::kBranchStack:
    case Feature::kStat:
      break;  // presence only
    case Feature::kCpuPmuCaps:
      parse_caps(c, f.cpu_pmu_caps, false);
      break;
    default:
      // MEM_TOPOLOGY, BPF_PROG_INFO, BPF_BTF and unknown bits: listed, skipped by size.
      if (!parse_value_feature(feature, c, f) && !parse_list_feature(feature, c, f))
        return std::nullopt;
  }
  if (!c.ok())
    return problem(c, fmt::format("{}: section of {} bytes ends inside its contents",
                                  feature_name(bit), data.size()));
  return std::nullopt;
}

}  // namespace detail

std::optional<ReadError> parse_tracing_data(std::span<const std::byte> bytes, TracingData& out) {
  detail::Cursor c(bytes, false);
  const auto fail = [&](std::string what) {
    return ReadError{.offset = c.offset(), .message = "tracing_data: " + std::move(what)};
  };
  const auto magic = c.take_bytes(kTracingMagic.size());
  if (!c.ok() || std::memcmp(magic.data(), kTracingMagic.data(), magic.size()) != 0)
    return fail(R"(no "\027\bDtracing" magic)");
  out.version = c.c_string();
  const auto endian = c.take<std::uint8_t>();
  out.long_size = c.take<std::uint8_t>();
  if (!c.ok())
    return fail("truncated before the page size");
  out.big_endian = endian != 0;
  const bool swap = out.big_endian != (std::endian::native == std::endian::big);
  // From here numbers are in the recording machine's order (trace-event-read.c read4/read8).
  detail::Cursor n(bytes.subspan(c.offset()), swap);
  const std::uint64_t base = c.offset();
  const auto nfail = [&](std::string what) {
    return ReadError{.offset = base + n.offset(), .message = "tracing_data: " + std::move(what)};
  };
  const auto text = [](std::span<const std::byte> b) {
    return std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
  };
  out.page_size = n.take<std::uint32_t>();
  const auto hp = n.take_bytes(12);
  if (!n.ok() || text(hp) != std::string_view("header_page\0", 12))
    return nfail("no header_page");
  n.skip(n.take<std::uint64_t>());
  const auto he = n.take_bytes(13);
  if (!n.ok() || text(he) != std::string_view("header_event\0", 13))
    return nfail("no header_event");
  n.skip(n.take<std::uint64_t>());
  const auto nftrace = n.take<std::uint32_t>();
  for (std::uint32_t i = 0; i < nftrace && n.ok(); ++i)
    n.skip(n.take<std::uint64_t>());
  if (!n.ok())
    return nfail("truncated in the ftrace formats");
  const auto systems = n.take<std::uint32_t>();
  for (std::uint32_t s = 0; s < systems && n.ok(); ++s) {
    const std::string sys = n.c_string();
    const auto count = n.take<std::uint32_t>();
    for (std::uint32_t e = 0; e < count && n.ok(); ++e) {
      const auto size = n.take<std::uint64_t>();
      const std::uint64_t at = base + n.offset();
      const auto body = n.take_bytes(size);
      if (!n.ok())
        break;
      auto fmt = tracefs::parse_format(text(body), sys);
      if (!fmt) {
        return ReadError{.offset = at,
                         .message = fmt::format("tracing_data: format of {} event {}: {}", sys, e,
                                                fmt.error().message)};
      }
      fmt->system = sys;
      out.formats.push_back(std::move(*fmt));
    }
  }
  if (!n.ok())
    return nfail("truncated in the event formats");
  // kallsyms (u32 size), printk formats (u32 size), saved cmdlines (u64 size, version >= 0.6).
  n.skip(n.take<std::uint32_t>());
  n.skip(n.take<std::uint32_t>());
  if (!n.ok())
    return nfail("truncated in kallsyms or printk formats");
  if (std::strtod(out.version.c_str(), nullptr) >= 0.6) {
    n.skip(n.take<std::uint64_t>());
    if (!n.ok())
      return nfail("truncated in saved cmdlines");
  }
  return std::nullopt;
}

}  // namespace tracer::perfdata
