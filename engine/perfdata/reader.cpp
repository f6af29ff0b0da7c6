// perfdata::Reader: file mode (tools/perf/util/header.c perf_session__read_header), pipe mode
// (perf_header__read_pipe + the HEADER_* records), records in file order with the attr chosen by
// sample id (tools/perf/util/evlist.c evlist__event2evsel), COMPRESSED records inflated with a
// zstd stream that lives as long as the file (tools/perf/util/zstd.c).
#include "tracer/perfdata/reader.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "internal.hpp"
#include "tracer/perf/abi.hpp"

namespace tracer::perfdata {

using perf::load;
namespace abi = perf::abi;

namespace {

constexpr std::uint64_t kNoEnd = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint32_t kTracepointType = 2;  // PERF_TYPE_TRACEPOINT
constexpr std::uint32_t kZstd = 1;            // enum perf_compress_type: PERF_COMP_ZSTD
// A COMPRESSED record inflates to at most one ring's worth (mmap_len): perf's own rings are
// far below this, and a file claiming more is not given the memory.
constexpr std::size_t kMaxInflate = std::size_t{128} << 20;
// The last record type a kernel writes: PERF_RECORD_AUX_OUTPUT_HW_ID (21) in uapi 6.1, and
// PERF_RECORD_CALLCHAIN_DEFERRED (22) after it in newer kernels (enum perf_event_type).
constexpr std::uint32_t kLastKernelRecordType = 22;
// The last of perf's own record types (tools/lib/perf/include/perf/event.h perf_user_event_type).
constexpr std::uint32_t kLastUserRecordType = kCompressed2;

/// Could a record of this type be in a perf.data file? 0, 23..63 and past perf's own types
/// are not written by anyone: the header there is not a record header.
constexpr bool valid_record_type(std::uint32_t type) noexcept {
  return (type >= 1 && type <= kLastKernelRecordType) ||
         (type >= kHeaderAttr && type <= kLastUserRecordType);
}

// evsel__calc_id_pos(): where the id sits in a SAMPLE body, in u64s from its start.
int id_pos(std::uint64_t st) noexcept {
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    return 0;
  if ((st & PERF_SAMPLE_ID) == 0U)
    return -1;
  int idx = 0;
  for (const std::uint64_t bit :
       {std::uint64_t{PERF_SAMPLE_IP}, std::uint64_t{PERF_SAMPLE_TID},
        std::uint64_t{PERF_SAMPLE_TIME}, std::uint64_t{PERF_SAMPLE_ADDR}}) {
    if ((st & bit) != 0U)
      ++idx;
  }
  return idx;
}

// evsel__calc_is_pos(): where the id sits in a sample_id trailer, in u64s from the record's end.
int is_pos(std::uint64_t st) noexcept {
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    return 1;
  if ((st & PERF_SAMPLE_ID) == 0U)
    return -1;
  int idx = 1;
  if ((st & PERF_SAMPLE_CPU) != 0U)
    ++idx;
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    ++idx;
  return idx;
}

std::string record_name(std::uint32_t type) {
  return std::string(type >= kHeaderAttr ? user_record_name(type) : perf::record_type_name(type));
}

struct ZstdFree {
  void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

}  // namespace

struct Reader::Impl {
  ReaderOptions options;

  // Source: the whole file in memory (mmap or caller's bytes), or a stream read into `buf`.
  std::span<const std::byte> mem;
  void* map = nullptr;
  std::size_t map_len = 0;
  int fd = -1;
  bool stream = false;
  bool stream_eof = false;
  std::vector<std::byte> buf;
  std::uint64_t buf_start = 0;  // stream offset of buf[0]
  std::size_t buf_len = 0;
  std::uint64_t keep_from = 0;  // bytes before this offset may be dropped

  bool pipe = false;
  bool swap = false;
  FileHeader hdr{};
  Features features;
  std::optional<TracingData> tracing;
  std::vector<EventDesc> events;
  std::vector<std::pair<std::uint64_t, std::uint32_t>> ids;  // sorted id -> event index
  std::vector<detail::EventDescEntry> descs;
  int sample_id_pos = -1, trailer_id_pos = -1;
  bool first_sample_id_all = false;

  std::uint64_t pos = 0;       // next record
  std::uint64_t end = kNoEnd;  // end of the data section
  std::uint64_t file_end = kNoEnd;
  std::uint64_t preamble_end = 0;  // pipe mode: records before this were processed at open
  bool done = false;
  std::optional<ReadError> error;
  std::optional<ReadError> deferred;  // a damaged feature: reported after the records
  ReadStats stats;
  std::vector<std::byte> scratch;  // swapped copy of the current record

  // Compressed records: one decompression stream for the whole file; records that straddle two
  // COMPRESSED records are carried over (tools/perf/util/session.c
  // perf_session__process_decomp_events).
  std::unique_ptr<ZSTD_DCtx, ZstdFree> dctx;
  std::vector<std::byte> dbuf;
  std::size_t dpos = 0, dlen = 0;
  std::uint64_t doffset = 0;  // offset of the COMPRESSED record the pending bytes came from
  std::span<const std::byte> pending_compressed;
  std::uint64_t pending_offset = 0;

  int owned_fd = -1;

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;
  ~Impl() {
    if (map != nullptr)
      ::munmap(map, map_len);
    if (owned_fd >= 0)
      ::close(owned_fd);
  }

  // ---- source -------------------------------------------------------------------------------

  /// Up to `n` bytes at `off` (fewer at the end of the file or stream). Views from earlier calls
  /// may move (streams).
  std::span<const std::byte> view(std::uint64_t off, std::uint64_t n) noexcept {
    if (!stream) {
      if (off >= mem.size())
        return {};
      return mem.subspan(off, std::min<std::uint64_t>(n, mem.size() - off));
    }
    if (off < buf_start)  // never happens: offsets only move forward past keep_from
      return {};
    const std::uint64_t want = off - buf_start + n;
    while (buf_len < want && !stream_eof) {
      if (keep_from > buf_start && keep_from <= off) {  // drop what no view needs any more
        const auto drop =
            static_cast<std::size_t>(std::min<std::uint64_t>(keep_from - buf_start, buf_len));
        std::memmove(buf.data(), buf.data() + drop, buf_len - drop);
        buf_len -= drop;
        buf_start += drop;
        return view(off, n);
      }
      if (buf.size() < want) {
        // Grown as the bytes arrive (at most doubling), never to a size the stream only claims:
        // a 14 KB stream whose TRACING_DATA said 4 GB took 4 GB before its end was found.
        try {
          buf.resize(std::min<std::size_t>(static_cast<std::size_t>(want),
                                           std::max<std::size_t>(buf.size() * 2, 1U << 20)));
        } catch (...) {
          return {};
        }
      }
      const ssize_t r = ::read(fd, buf.data() + buf_len, buf.size() - buf_len);
      if (r < 0 && errno == EINTR)
        continue;
      if (r <= 0) {
        stream_eof = true;
        break;
      }
      buf_len += static_cast<std::size_t>(r);
    }
    if (off - buf_start >= buf_len)
      return {};
    const std::uint64_t have = buf_len - (off - buf_start);
    return {buf.data() + (off - buf_start), static_cast<std::size_t>(std::min(n, have))};
  }

  bool fail(std::uint64_t off, std::string message) {
    if (!error)
      error = ReadError{.offset = off, .message = std::move(message)};
    done = true;
    return false;
  }

  // ---- attrs and ids ------------------------------------------------------------------------

  std::uint32_t add_event(const perf::EventAttr& attr, std::vector<std::uint64_t> event_ids) {
    EventDesc e;
    e.index = static_cast<std::uint32_t>(events.size());
    e.attr = attr;
    e.ids = std::move(event_ids);
    e.layout = perf::SampleLayout::from(attr);
    events.push_back(std::move(e));
    index_ids();
    return events.back().index;
  }

  void index_ids() {
    ids.clear();
    for (const auto& e : events) {
      for (auto id : e.ids)
        ids.emplace_back(id, e.index);
    }
    std::sort(ids.begin(), ids.end());
    if (!events.empty()) {
      const auto st = events.front().layout.sample_type;
      sample_id_pos = id_pos(st);
      trailer_id_pos = is_pos(st);
      first_sample_id_all = events.front().layout.sample_id_all;
    }
  }

  /// Names and formats, once attrs, EVENT_DESC/EVENT_UPDATE and TRACING_DATA are known.
  void describe_events() {
    for (auto& e : events) {
      const auto* a = e.attr.raw();
      if (a->type == kTracepointType && tracing) {
        if (const auto* f = tracing->find(static_cast<std::uint32_t>(a->config)))
          e.format = *f;
      }
      if (e.name.empty()) {
        for (const auto& d : descs) {
          const bool by_id = !d.ids.empty() && !e.ids.empty() &&
                             std::find(e.ids.begin(), e.ids.end(), d.ids.front()) != e.ids.end();
          if (by_id) {
            e.name = d.name;
            break;
          }
        }
      }
      if (e.name.empty() && descs.size() == events.size() && descs[e.index].ids.empty())
        e.name = descs[e.index].name;  // EVENT_DESC without ids (perf stat): by position
      if (e.name.empty() && e.format)
        e.name = e.format->system + ":" + e.format->name;
      if (e.name.empty())
        e.name = event_name(e.attr, tracing ? &*tracing : nullptr);
    }
  }

  std::int32_t lookup(std::uint64_t id) const noexcept {
    const auto it =
        std::lower_bound(ids.begin(), ids.end(), std::pair<std::uint64_t, std::uint32_t>{id, 0});
    if (it == ids.end() || it->first != id)
      return -1;
    return static_cast<std::int32_t>(it->second);
  }

  /// evlist__event2evsel(): the attr of a kernel record, or -1 for an id that matches none.
  std::int32_t pick(std::span<const std::byte> rec, std::uint32_t type) const noexcept {
    if (events.empty())
      return -1;
    if (events.size() == 1)
      return 0;
    if (type != abi::kSample && !first_sample_id_all)
      return 0;
    std::uint64_t off = 0;
    if (type == abi::kSample) {
      if (sample_id_pos < 0)
        return 0;
      off = 8 + static_cast<std::uint64_t>(sample_id_pos) * 8;
    } else {
      if (trailer_id_pos < 0)
        return 0;
      const auto back = static_cast<std::uint64_t>(trailer_id_pos) * 8;
      if (rec.size() < 8 + back)
        return -1;
      off = rec.size() - back;
    }
    if (off + 8 > rec.size())
      return -1;
    const auto id = detail::maybe_swap(load<std::uint64_t>(rec.data() + off), swap);
    if (id == 0)  // perf's synthesized records carry id 0
      return 0;
    return lookup(id);
  }

  // ---- header -------------------------------------------------------------------------------

  Status open_header() {
    const auto m = view(0, 16);
    if (m.size() < 16) {
      return bad_header(
          EINVAL, fmt::format("perf.data: offset 0: {} bytes is too short for a header", m.size()));
    }
    const auto magic = load<std::uint64_t>(m.data());
    if (magic == kMagic) {
      swap = false;
    } else if (magic == kMagicSwapped) {
      swap = true;
    } else if (std::memcmp(m.data(), "PERFFILE", 8) == 0) {
      return bad_header(EINVAL,
                        "perf.data: offset 0: version 1 file (\"PERFFILE\") is not supported",
                        "re-record it with a perf from this decade");
    } else {
      return bad_header(EINVAL, "perf.data: offset 0: not a perf.data file (bad magic)");
    }
    const auto size = detail::maybe_swap(load<std::uint64_t>(m.data() + 8), swap);
    hdr.magic = kMagic;
    hdr.size = size;
    if (size == sizeof(PipeHeader)) {
      pipe = true;
      file_end = stream ? kNoEnd : mem.size();
      return open_pipe();
    }
    // perf_file_header__read: the header is 104 bytes, or 72 in files written before the
    // feature bitmap (adds_features) existed; any other size cannot be a perf.data header.
    constexpr std::uint64_t kHeaderWithoutFeatures = offsetof(FileHeader, features);
    if (size != sizeof(FileHeader) && size != kHeaderWithoutFeatures) {
      return bad_header(
          EINVAL, fmt::format("perf.data: offset 8: header size {} (expected {}, {} or {})", size,
                              sizeof(FileHeader), kHeaderWithoutFeatures, sizeof(PipeHeader)));
    }
    if (stream) {  // a file-mode file on a pipe: its sections point anywhere, read it whole
      while (!stream_eof)
        (void)view(0, buf_len + (std::uint64_t{1} << 20));
      mem = {buf.data(), buf_len};
      stream = false;
    }
    const auto h = view(0, sizeof(FileHeader));
    if (h.size() < sizeof(FileHeader)) {
      return bad_header(
          EINVAL, fmt::format("perf.data: offset {}: file ends inside the {}-byte header", h.size(),
                              sizeof(FileHeader)));
    }
    std::uint64_t w[sizeof(FileHeader) / 8];
    std::memcpy(w, h.data(), sizeof(w));
    for (auto& x : w)
      x = detail::maybe_swap(x, swap);
    std::memcpy(&hdr, w, sizeof(hdr));
    hdr.magic = kMagic;
    if (size != sizeof(FileHeader))  // no feature bitmap: what follows is not one
      std::fill(std::begin(hdr.features), std::end(hdr.features), 0);
    return open_file();
  }

  static Unexpected bad_header(int err, std::string message, std::string hint = {}) {
    return tracer::fail(err, std::move(message), std::move(hint));
  }

  Status open_file() {
    const std::uint64_t fsize = mem.size();
    file_end = fsize;
    const auto section_ok = [&](const FileSection& s) {
      return s.offset <= fsize && s.size <= fsize - s.offset;
    };
    // Attrs: struct perf_file_attr { attr (attr_size - 16 bytes); perf_file_section ids; }.
    if (hdr.attr_size < perf::abi::kAttrSizeVer0 + sizeof(FileSection) && hdr.attrs.size != 0) {
      return bad_header(
          EINVAL, fmt::format("perf.data: offset 16: attr_size {} is too small", hdr.attr_size));
    }
    if (!section_ok(hdr.attrs)) {
      return bad_header(EINVAL,
                        fmt::format("perf.data: offset 24: attr section [{}, +{}) lies past the "
                                    "end of the file ({} bytes)",
                                    hdr.attrs.offset, hdr.attrs.size, fsize));
    }
    if (hdr.attrs.size % std::max<std::uint64_t>(hdr.attr_size, 1) != 0) {
      return bad_header(EINVAL, fmt::format("perf.data: offset 32: attr section of {} bytes is "
                                            "not a whole number of {}-byte entries (attr_size)",
                                            hdr.attrs.size, hdr.attr_size));
    }
    if (hdr.attrs.size == 0 && hdr.data.size != 0) {
      return bad_header(EINVAL,
                        fmt::format("perf.data: offset 32: no event attributes, but {} bytes of "
                                    "data: its samples cannot be decoded",
                                    hdr.data.size));
    }
    const std::uint64_t nattrs = hdr.attrs.size == 0 ? 0 : hdr.attrs.size / hdr.attr_size;
    for (std::uint64_t i = 0; i < nattrs; ++i) {
      const std::uint64_t at = hdr.attrs.offset + i * hdr.attr_size;
      const auto entry = mem.subspan(at, hdr.attr_size);
      perf::EventAttr attr;
      const std::uint64_t attr_bytes = hdr.attr_size - sizeof(FileSection);
      if (detail::read_attr(entry.data(), attr_bytes, swap, attr) == 0) {
        return bad_header(
            EINVAL,
            fmt::format("perf.data: offset {}: attr {} has size {} (entry holds {})", at + 4, i,
                        detail::maybe_swap(load<std::uint32_t>(entry.data() + 4), swap),
                        attr_bytes));
      }
      FileSection id_section{};
      id_section.offset = detail::maybe_swap(load<std::uint64_t>(entry.data() + attr_bytes), swap);
      id_section.size =
          detail::maybe_swap(load<std::uint64_t>(entry.data() + attr_bytes + 8), swap);
      if (!section_ok(id_section)) {
        return bad_header(
            EINVAL, fmt::format("perf.data: offset {}: ids of attr {} [{}, +{}) lie past the end "
                                "of the file ({} bytes)",
                                at + attr_bytes, i, id_section.offset, id_section.size, fsize));
      }
      std::vector<std::uint64_t> event_ids(id_section.size / 8);
      for (std::size_t j = 0; j < event_ids.size(); ++j)
        event_ids[j] =
            detail::maybe_swap(load<std::uint64_t>(mem.data() + id_section.offset + j * 8), swap);
      add_event(attr, std::move(event_ids));
    }
    // Data, then the feature table right after it.
    pos = hdr.data.offset;
    end = hdr.data.offset + hdr.data.size;
    if (hdr.data.offset > fsize || end < hdr.data.offset) {
      return bad_header(EINVAL,
                        fmt::format("perf.data: offset 40: data section at {} lies past the end "
                                    "of the file ({} bytes)",
                                    hdr.data.offset, fsize));
    }
    // The header says which features were written even when their sections are cut off.
    features.bits = {hdr.features[0], hdr.features[1], hdr.features[2], hdr.features[3]};
    if (end > fsize) {
      // Records up to the end of the file are still read; the truncation is reported there.
      deferred = ReadError{.offset = fsize,
                           .message = fmt::format("file truncated: the data section should end "
                                                  "at {}, the file ends at {}",
                                                  end, fsize)};
    } else {
      read_feature_table(end);
    }
    describe_events();
    return {};
  }

  void read_feature_table(std::uint64_t at) {
    std::uint32_t nbits = 0;
    for (std::uint32_t b = 0; b < 256; ++b) {
      if (((hdr.features[b / 64] >> (b % 64)) & 1U) != 0)
        ++nbits;
    }
    features.bits = {hdr.features[0], hdr.features[1], hdr.features[2], hdr.features[3]};
    std::uint64_t entry = at;
    for (std::uint32_t b = 0; b < 256; ++b) {
      if (((hdr.features[b / 64] >> (b % 64)) & 1U) == 0)
        continue;
      const auto e = view(entry, sizeof(FileSection));
      if (e.size() < sizeof(FileSection)) {
        note(entry, fmt::format("feature table truncated: {} sections from {}, the file ends at {}",
                                nbits, at, mem.size()));
        return;
      }
      FeatureSection s;
      s.bit = b;
      s.offset = detail::maybe_swap(load<std::uint64_t>(e.data()), swap);
      s.size = detail::maybe_swap(load<std::uint64_t>(e.data() + 8), swap);
      entry += sizeof(FileSection);
      if (s.offset > mem.size() || s.size > mem.size() - s.offset) {
        note(entry - sizeof(FileSection),
             fmt::format("feature {} (bit {}): section [{}, +{}) lies past the end of the file "
                         "({} bytes)",
                         feature_name(b), b, s.offset, s.size, mem.size()));
        features.sections.push_back(s);
        continue;
      }
      s.parsed = parse(b, mem.subspan(s.offset, s.size), s.offset);
      features.sections.push_back(s);
    }
  }

  bool parse(std::uint32_t bit, std::span<const std::byte> data, std::uint64_t base) {
    try {
      if (auto err = detail::parse_feature(bit, data, swap, features, tracing, descs)) {
        note(base + err->offset, fmt::format("feature {}: {}", feature_name(bit), err->message));
        return false;
      }
    } catch (const std::exception& e) {
      note(base, fmt::format("feature {}: {}", feature_name(bit), e.what()));
      return false;
    }
    return bit > 0 && bit < static_cast<std::uint32_t>(Feature::kLast);
  }

  void note(std::uint64_t off, std::string message) {
    if (!deferred)
      deferred = ReadError{.offset = off, .message = std::move(message)};
  }

  // ---- pipe mode ----------------------------------------------------------------------------

  Status open_pipe() {
    pos = sizeof(PipeHeader);
    keep_from = pos;
    // Read the header records perf writes first (HEADER_ATTR, HEADER_FEATURE, TRACING_DATA,
    // EVENT_UPDATE, BUILD_ID...) so that events() is complete before the first next(); they
    // are delivered again by next() without being processed twice.
    Item item;
    while (true) {
      const auto h = view(pos, 8);
      if (h.size() < 8)
        break;
      const auto type = detail::maybe_swap(load<std::uint32_t>(h.data()), swap);
      if (type != kHeaderAttr && type != kHeaderFeature && type != kHeaderTracingData &&
          type != kEventUpdate && type != kHeaderBuildId && type != kThreadMap && type != kCpuMap &&
          type != kStatConfig && type != kIdIndex && type != kTimeConv && type != kAuxtraceInfo) {
        break;
      }
      if (!read_record(item, /*process=*/true))
        break;
      keep_from = sizeof(PipeHeader);  // keep the preamble for next()
    }
    preamble_end = pos;
    // next() delivers the preamble again: count its records then, not twice.
    stats = ReadStats{};
    pos = sizeof(PipeHeader);
    keep_from = pos;
    done = false;
    if (error) {  // a damaged preamble: report it when next() gets there
      deferred_preamble = std::move(error);
      error.reset();
    }
    describe_events();
    return {};
  }
  std::optional<ReadError> deferred_preamble;

  /// Applies a header record (pipe mode).
  bool process_user(const Item& item,
                    std::span<const std::byte> rec,
                    std::span<const std::byte> payload) {
    if (const auto* a = std::get_if<HeaderAttr>(&item.user)) {
      std::vector<std::uint64_t> event_ids(a->ids.size);
      for (std::uint64_t i = 0; i < a->ids.size; ++i)
        event_ids[i] = a->ids[i];
      add_event(a->attr, std::move(event_ids));
    } else if (const auto* f = std::get_if<HeaderFeatureRecord>(&item.user)) {
      const auto bit = static_cast<std::uint32_t>(std::min<std::uint64_t>(f->feature, 255));
      features.bits[bit / 64] |= std::uint64_t{1} << (bit % 64);
      FeatureSection s{.bit = bit, .offset = item.offset, .size = f->data.size(), .parsed = false};
      // The record was swapped in its header fields only; the contents are parsed with the
      // file's byte order.
      const auto raw = rec.subspan(16);
      s.parsed = parse(bit, raw, item.offset + 16);
      features.sections.push_back(s);
    } else if (std::holds_alternative<TracingDataRecord>(item.user)) {
      TracingData t;
      if (auto err = parse_tracing_data(payload, t))
        return fail(item.offset + rec.size() + err->offset, err->message);
      tracing = std::move(t);
    } else if (const auto* u = std::get_if<EventUpdate>(&item.user)) {
      if (u->type == 2) {  // PERF_EVENT_UPDATE__NAME
        const auto idx = lookup(u->id);
        if (idx >= 0)
          events[static_cast<std::size_t>(idx)].name = std::string(u->text);
      }
    } else if (const auto* b = std::get_if<BuildIdRecord>(&item.user)) {
      BuildId id;
      id.pid = b->pid;
      id.misc = item.record.misc & abi::kMiscCpumodeMask;
      for (auto x : b->build_id)
        id.build_id += fmt::format("{:02x}", static_cast<unsigned>(x));
      id.filename = std::string(b->filename);
      features.build_ids.push_back(std::move(id));
    }
    return true;
  }

  // ---- records ------------------------------------------------------------------------------

  /// Bytes that follow a record outside its header.size: AUXTRACE data, TRACING_DATA.
  std::uint64_t payload_size(std::span<const std::byte> h16, std::uint32_t type) const noexcept {
    if (type == kAuxtrace && h16.size() >= 16)
      return detail::maybe_swap(load<std::uint64_t>(h16.data() + 8), swap);
    if (type == kHeaderTracingData && h16.size() >= 12)
      return detail::maybe_swap(load<std::uint32_t>(h16.data() + 8), swap);
    return 0;
  }

  /// Reads the record at `pos` from the file into `out`.
  bool read_record(Item& out, bool process) {
    if (pos >= end) {
      done = true;
      return false;
    }
    const std::uint64_t at = pos;
    const auto h = view(at, 16);
    if (h.empty() && (stream || at == file_end) && end == kNoEnd) {
      done = true;  // a stream (or a pipe-mode file) ends between records
      return false;
    }
    if (h.size() < 8) {
      return fail(at, fmt::format("truncated record header: {} of 8 bytes before the end of the "
                                  "file",
                                  h.size()));
    }
    const auto type = detail::maybe_swap(load<std::uint32_t>(h.data()), swap);
    const auto size = detail::maybe_swap(load<std::uint16_t>(h.data() + 6), swap);
    if (size < 8) {
      return fail(at, fmt::format("record of type {} ({}) has size {}, less than its header", type,
                                  record_name(type), size));
    }
    if (end != kNoEnd && size > end - at) {
      return fail(at, fmt::format("{} record of {} bytes runs past the end of the data section "
                                  "at {}",
                                  record_name(type), size, end));
    }
    std::uint64_t extra = 0;
    if (type == kAuxtrace || type == kHeaderTracingData) {
      const auto h16 = view(at, 16);
      extra = payload_size(h16, type);
      if (end != kNoEnd && extra > end - at - size) {
        return fail(at, fmt::format("{} record announces {} bytes of data past the end of the "
                                    "data section at {}",
                                    record_name(type), extra, end));
      }
      if (stream && extra > (std::uint64_t{1} << 32))
        return fail(at,
                    fmt::format("{} record announces {} bytes of data", record_name(type), extra));
    }
    const auto whole = view(at, size + extra);
    if (whole.size() < size + extra) {
      return fail(at, fmt::format("{} record of {} bytes{} is cut short: the file ends after {} "
                                  "of them",
                                  record_name(type), size,
                                  extra != 0 ? fmt::format(" (+{} bytes of data)", extra) : "",
                                  whole.size()));
    }
    keep_from = at;
    pos = at + size + extra;
    out.offset = at;
    out.from_compressed = false;
    out.stable = !stream && !swap;
    return deliver(out, whole.first(size), whole.subspan(size), process);
  }

  /// Native-order bytes of `rec`, decoded into `out`. Only a record that decodes is counted in
  /// stats.records (the count a read error reports as "read before it").
  bool deliver(Item& out,
               std::span<const std::byte> rec,
               std::span<const std::byte> payload,
               bool process) {
    if (!deliver_record(out, rec, payload, process))
      return false;
    ++stats.records;
    stats.bytes += rec.size();
    return true;
  }

  bool deliver_record(Item& out,
                      std::span<const std::byte> rec,
                      std::span<const std::byte> payload,
                      bool process) {
    const auto type = detail::maybe_swap(load<std::uint32_t>(rec.data()), swap);
    if (!valid_record_type(type)) {
      // perf stops here too ("failed to process type"): a type no kernel or perf writes means
      // the bytes are not a record, and whatever follows cannot be trusted to be one either.
      return fail(out.offset,
                  fmt::format("record type {} is neither a kernel record type (1-{}) nor a perf "
                              "record type ({}-{}): the file is damaged here",
                              type, kLastKernelRecordType, static_cast<std::uint32_t>(kHeaderAttr),
                              kLastUserRecordType));
    }
    std::int32_t attr = -1;
    if (type < kHeaderAttr) {
      attr = pick(rec, type);
    }
    if (swap) {
      if (scratch.size() < rec.size())
        scratch.resize(std::max<std::size_t>(rec.size(), 65536));
      std::memcpy(scratch.data(), rec.data(), rec.size());
      const auto* ev = attr >= 0 ? &events[static_cast<std::size_t>(attr)] : nullptr;
      const std::span<std::byte> mut(scratch.data(), rec.size());
      if (!detail::swap_record(mut, ev != nullptr ? &ev->layout : nullptr,
                               ev != nullptr && ev->format ? &*ev->format : nullptr)) {
        return fail(out.offset, fmt::format("{} record does not fit its {} bytes",
                                            record_name(type), rec.size()));
      }
      rec = mut;
    }
    out.attr = attr;
    if (type >= kHeaderAttr) {
      set_header_only(out.record, rec);
      if (!decode_user(rec, out.user)) {
        return fail(out.offset, fmt::format("{} record of {} bytes does not fit its fields",
                                            record_name(type), rec.size()));
      }
      ++stats.user_records;
      if (auto* a = std::get_if<Auxtrace>(&out.user))
        a->data = payload;
      if (auto* t = std::get_if<TracingDataRecord>(&out.user))
        t->data = payload;
      if (type == kCompressed || type == kCompressed2) {
        ++stats.compressed_records;
        pending_compressed = std::get<CompressedRecord>(out.user).data;
        pending_offset = out.offset;
      }
      if (process && (!pipe || out.offset >= preamble_end || !opened))
        return process_user(out, rec, payload);
      return true;
    }
    out.user.emplace<std::monostate>();
    if (attr < 0) {
      ++stats.unknown_id;
      set_header_only(out.record, rec);
      return true;
    }
    const auto err = perf::decode(rec, events[static_cast<std::size_t>(attr)].layout, out.record);
    if (err != perf::DecodeError::kOk) {
      return fail(out.offset,
                  fmt::format("{} record of event '{}' ({} bytes) does not decode: {}",
                              record_name(type), events[static_cast<std::size_t>(attr)].name,
                              rec.size(), perf::to_string(err)));
    }
    if (type == abi::kSample) {
      // A CPU the recording's machine did not have (HEADER_NRCPUS) is damage, not a sample to
      // print: perf would print it as it stands.
      const auto* s = std::get_if<perf::Sample>(&out.record.body);
      if (s != nullptr && (s->sample_type & PERF_SAMPLE_CPU) != 0U && features.nrcpus &&
          features.nrcpus->available != 0 && s->cpu >= features.nrcpus->available) {
        return fail(out.offset,
                    fmt::format("SAMPLE record of event '{}' names CPU {}, but the recording's "
                                "machine had {} (HEADER_NRCPUS): the file is damaged here",
                                events[static_cast<std::size_t>(attr)].name, s->cpu,
                                features.nrcpus->available));
      }
      ++stats.samples;
    }
    return true;
  }
  bool opened = false;

  // NOLINTNEXTLINE(bugprone-exception-escape): emplacing perf::Unknown cannot throw.
  static void set_header_only(perf::Record& r, std::span<const std::byte> rec) noexcept {
    const auto h = load<perf_event_header>(rec.data());
    r.type = h.type;
    r.misc = h.misc;
    r.size = h.size;
    r.bytes = rec;
    r.sample_id = {};
    r.body.emplace<perf::Unknown>();
  }

  /// Inflates the COMPRESSED record delivered last, after what is left of the previous one.
  bool inflate() {
    const auto data = pending_compressed;
    pending_compressed = {};
    if (!features.compressed || features.compressed->type != kZstd) {
      if (features.compressed)
        return fail(pending_offset, fmt::format("COMPRESSED record: compression type {} is not "
                                                "zstd",
                                                features.compressed->type));
      // Pipe mode may not have the feature: zstd is the only type perf writes.
    }
    if (!dctx) {
      dctx.reset(ZSTD_createDCtx());
      if (!dctx)
        return fail(pending_offset, "zstd: cannot create a decompression context");
    }
    if (dpos > 0) {  // carry the partial record over
      std::memmove(dbuf.data(), dbuf.data() + dpos, dlen - dpos);
      dlen -= dpos;
      dpos = 0;
    }
    ZSTD_inBuffer in{data.data(), data.size(), 0};
    while (true) {
      if (dbuf.size() - dlen < (std::size_t{1} << 16)) {
        // perf compresses at most one ring's worth (mmap_len) per push, so a record inflates to
        // no more than that: a bigger output is damage, not data.
        // The file's mmap_len is a claim: it raises the bound up to kMaxInflate, no further.
        const std::size_t limit =
            std::clamp<std::size_t>(features.compressed ? features.compressed->mmap_len : 0,
                                    std::size_t{16} << 20, kMaxInflate);
        // Room for the ring's worth and the part of a record (< 64 KiB) carried over.
        const std::size_t cap = limit + (std::size_t{1} << 16);
        if (dbuf.size() >= cap) {
          return fail(pending_offset,
                      fmt::format("COMPRESSED record inflates to more than {} bytes (the ring "
                                  "size the file claims, at most {} MiB)",
                                  cap, kMaxInflate >> 20));
        }
        // The cap reserved once (address space; pages are touched as data inflates): growing
        // never copies, and a bomb costs the cap, not the cap plus the copies it outgrew.
        if (dbuf.capacity() < cap)
          dbuf.reserve(cap);
        dbuf.resize(std::min(cap, std::max(std::size_t{1} << 20, dbuf.size() * 2)));
      }
      ZSTD_outBuffer outb{dbuf.data() + dlen, dbuf.size() - dlen, 0};
      const std::size_t r = ZSTD_decompressStream(dctx.get(), &outb, &in);
      if (ZSTD_isError(r) != 0) {
        return fail(pending_offset,
                    fmt::format("COMPRESSED record: zstd: {}", ZSTD_getErrorName(r)));
      }
      dlen += outb.pos;
      stats.decompressed_bytes += outb.pos;
      if (in.pos == in.size && outb.pos < outb.size)
        break;
    }
    doffset = pending_offset;
    return true;
  }

  /// The next record out of the decompressed bytes, if a whole one is there.
  bool next_decompressed(Item& out, bool& have) {
    have = false;
    if (dlen - dpos < 8)
      return true;
    const auto h = load<perf_event_header>(dbuf.data() + dpos);
    const std::uint16_t size = detail::maybe_swap(h.size, swap);
    if (size < 8) {
      return fail(doffset, fmt::format("record inside COMPRESSED data (at byte {} of its output) "
                                       "has size {}",
                                       dpos, size));
    }
    if (size > dlen - dpos)
      return true;  // continues in the next COMPRESSED record
    const std::span<const std::byte> rec(dbuf.data() + dpos, size);
    dpos += size;
    out.offset = doffset;
    out.from_compressed = true;
    out.stable = false;
    have = true;
    return deliver(out, rec, {}, true);
  }

  bool next(Item& out) {
    if (done)
      return false;
    if (!pending_compressed.empty() && !inflate())
      return false;
    bool have = false;
    if (!next_decompressed(out, have))
      return false;
    if (have)
      return true;
    if (pipe && deferred_preamble && pos >= deferred_preamble->offset) {
      error = std::move(deferred_preamble);
      deferred_preamble.reset();
      done = true;
      return false;
    }
    if (read_record(out, true))
      return true;
    if (!error) {
      if (dlen > dpos) {
        return fail(doffset, fmt::format("compressed data ends inside a record ({} bytes left)",
                                         dlen - dpos));
      }
      if (deferred) {
        error = std::move(deferred);
        deferred.reset();
      }
    }
    return false;
  }
};

// ---------------------------------------------------------------------------------------------

Reader::Reader(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Reader::Reader(Reader&&) noexcept = default;
Reader& Reader::operator=(Reader&&) noexcept = default;
Reader::~Reader() = default;

Result<Reader> Reader::from_bytes(std::span<const std::byte> bytes, ReaderOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->mem = bytes;
  TRACER_TRY(impl->open_header());
  impl->opened = true;
  return Reader(std::move(impl));
}

Result<Reader> Reader::open_fd(int fd, ReaderOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return tracer::fail(errno, fmt::format("perf.data: fstat fd {}: {}", fd, std::strerror(errno)));
  if (S_ISREG(st.st_mode) && st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      return tracer::fail(
          errno, fmt::format("perf.data: mmap of {} bytes: {}", st.st_size, std::strerror(errno)));
    }
    ::madvise(m, static_cast<std::size_t>(st.st_size), MADV_SEQUENTIAL);
    impl->map = m;
    impl->map_len = static_cast<std::size_t>(st.st_size);
    impl->mem = {static_cast<const std::byte*>(m), impl->map_len};
  } else {
    impl->stream = true;
    impl->fd = fd;
    impl->buf.resize(std::max<std::size_t>(options.pipe_buffer_bytes, 4096));
  }
  TRACER_TRY(impl->open_header());
  impl->opened = true;
  return Reader(std::move(impl));
}

Result<Reader> Reader::open(const std::string& path, ReaderOptions options) {
  if (path == "-")
    return open_fd(STDIN_FILENO, options);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return tracer::fail(errno,
                        fmt::format("perf.data: cannot open {}: {}", path, std::strerror(errno)));
  }
  auto r = open_fd(fd, options);
  if (r && r->impl_->stream) {
    r->impl_->owned_fd = fd;  // a FIFO: read it, close it with the reader
  } else {
    ::close(fd);  // the mapping stays valid
  }
  if (!r)
    r.error().message = path + ": " + r.error().message;
  return r;
}

bool Reader::pipe_mode() const noexcept {
  return impl_->pipe;
}
bool Reader::swapped() const noexcept {
  return impl_->swap;
}
const FileHeader& Reader::header() const noexcept {
  return impl_->hdr;
}
const Features& Reader::features() const noexcept {
  return impl_->features;
}
std::span<const EventDesc> Reader::events() const noexcept {
  return impl_->events;
}
const std::optional<TracingData>& Reader::tracing_data() const noexcept {
  return impl_->tracing;
}
std::int32_t Reader::event_of_id(std::uint64_t id) const noexcept {
  return impl_->lookup(id);
}
bool Reader::next(Item& out) noexcept {
  try {
    return impl_->next(out);
  } catch (const std::exception& e) {  // allocation failure while growing a buffer
    impl_->fail(impl_->pos, fmt::format("out of memory: {}", e.what()));
    return false;
  }
}
const std::optional<ReadError>& Reader::error() const noexcept {
  return impl_->error;
}
const ReadStats& Reader::stats() const noexcept {
  return impl_->stats;
}

std::string kernel_build_id(const Features& features) {
  for (const auto& b : features.build_ids) {
    if (b.filename == "[kernel.kallsyms]" && !b.build_id.empty())
      return b.build_id;
  }
  return {};
}

std::filesystem::path cached_kallsyms(const Features& features) {
  namespace fs = std::filesystem;
  for (const auto& b : features.build_ids) {
    if (b.filename != "[kernel.kallsyms]" || b.build_id.size() < 3)
      continue;
    fs::path dir;
    if (const char* env = std::getenv("PERF_BUILDID_DIR"); env != nullptr && *env != '\0')
      dir = env;
    else if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
      dir = fs::path(home) / ".debug";
    else
      return {};
    const fs::path copy =
        dir / ".build-id" / b.build_id.substr(0, 2) / b.build_id.substr(2) / "kallsyms";
    std::error_code ec;
    if (fs::is_regular_file(copy, ec))
      return copy;
  }
  return {};
}

}  // namespace tracer::perfdata
