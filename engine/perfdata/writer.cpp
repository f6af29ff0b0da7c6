// perf.data writer (see writer.hpp for the layout). Facts from perf 6.1's reader
// (tools/perf/util/header.c, session.c, ordered-events.c, synthetic-events.c):
// - read_attr() refuses an attr larger than its own struct: perf 6.1 knows 128 bytes (VER7), so
//   attrs are written with size 128 unless config3 (VER8) is used.
// - Non-sample records are mapped to their attr through the last u64 of their sample_id trailer
//   (IDENTIFIER); an id of 0 (synthesized records, zeroed trailer) maps to the first attr, whose
//   trailer size they must then have. Every attr must agree on sample_id_all.
// - Records with time 0 are not queued by ordered-events: they take effect at their position.
// - FINISHED_ROUND flushes queued records up to the newest time seen before the previous round
//   ended, so a record must not be older than that: the engine's passes over every ring (its
//   on_round) give exactly perf record's guarantee.
// - Feature sections: a table of {offset, size} right after the data section, one per set bit
//   in bit order; the contents may be anywhere.
// - Pipe mode: HEADER_ATTR = header + attr (attr.size bytes) + ids; HEADER_FEATURE = header +
//   u64 feature + content; HEADER_TRACING_DATA = 16-byte record (u32 size, u32 pad) followed by
//   the blob padded to 8; EVENT_UPDATE NAME gives each attr its name.
#include "tracer/perfdata/writer.hpp"

#include "tracer/output_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "record_bytes.hpp"
#include "synthesize.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/software.hpp"

namespace tracer::perfdata {
namespace {

namespace abi = perf::abi;
using detail::align8;
using detail::header;
using detail::put;
using detail::put_raw;
using detail::put_zeros;

constexpr std::uint64_t kIdBits = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID |
                                  PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | PERF_SAMPLE_IDENTIFIER;
/// What a rebuilt attr (BPF output channel) samples: perf record's bpf-output event.
constexpr std::uint64_t kRebuiltSampleType = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP |
                                             PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                                             PERF_SAMPLE_PERIOD;
constexpr std::size_t kMaxIdIndexEntries = 2000;  // ID_INDEX records stay under 64 KiB
constexpr std::size_t kDefaultMaxRoundBytes = 64U << 20;

[[nodiscard]] std::uint32_t trailer_size(std::uint64_t sample_type) noexcept {
  return static_cast<std::uint32_t>(std::popcount(sample_type & kIdBits)) * 8;
}

struct AttrOut {
  std::uint32_t probe = 0;
  std::string name;
  abi::Attr attr{};               // as written (size patched)
  std::uint64_t sample_type = 0;  // written
  std::uint64_t kernel_sample_type = 0;
  bool kernel_sample_id_all = false;
  bool rebuild = false;       // records rebuilt (no IDENTIFIER or no sample_id_all in the kernel's)
  std::uint32_t trailer = 0;  // written trailer size
  std::uint32_t kernel_trailer = 0;
  int sample_id_offset = -1;       // PERF_SAMPLE_ID in a kernel sample (from the record start)
  int trailer_id_offset = -1;      // PERF_SAMPLE_ID in a trailer (from the trailer start)
  std::vector<std::uint64_t> ids;  // one per CPU slot
  AuxtraceType aux = AuxtraceType::kUnknown;
  bool aux_info_written = false;
  // BPF payload fields giving pid/tid of rebuilt samples (offset in RAW data, size 4 or 8).
  std::int32_t pid_off = -1, tid_off = -1;
  std::uint32_t pid_size = 0, tid_size = 0;
};

struct FeatureSection {
  Feature bit;
  FileSection where;
};

/// do_write_string(): u32 length (NUL included, padded to 64), then the padded bytes.
void put_string(std::vector<std::byte>& out, std::string_view s) {
  const std::size_t len = (s.size() + 1 + kNameAlign - 1) / kNameAlign * kNameAlign;
  put<std::uint32_t>(out, static_cast<std::uint32_t>(len));
  put_raw(out, s.data(), s.size());
  put_zeros(out, len - s.size());
}

Failure io_failure(int err, const std::string& what) {
  return Failure{std::error_code(err, std::generic_category()),
                 "perf-data: " + what + ": " + std::strerror(err),
                 {}};
}

}  // namespace

struct Writer::Impl final : detail::RecordSink {
  int fd = -1;
  bool owns_fd = false;
  bool pipe = false;
  std::string path;
  WriterOptions opts;
  std::shared_ptr<const HostInfo> host;

  std::vector<AttrOut> attrs;
  std::vector<int> probe_attr;  // probe index -> attrs index, -1: not written
  std::uint32_t file_attr_size = kFileAttrSize;
  std::uint32_t nslots = 1;  // CPU slots per attr: CPUs 0..nslots-2, then one for cpu -1

  std::vector<std::byte> buf;     // bytes not yet written (file: they start at `pos`)
  std::uint64_t pos = 0;          // file offset of buf[0]
  std::uint64_t data_offset = 0;  // file mode
  std::vector<FeatureSection> static_features;
  bool sample_time_feature = false;
  std::uint64_t first_time = std::numeric_limits<std::uint64_t>::max(), last_time = 0;
  std::vector<std::uint64_t> slot_time;  // last time seen per CPU slot (trailers we add)
  bool pending_round = false;
  bool closed = false;
  std::size_t max_round_bytes = kDefaultMaxRoundBytes;
  std::optional<Failure> error;
  WriterStats stats;

  std::optional<detail::ProcSynthesizer> synth;  // set up once the first attr's trailer is known
  std::vector<std::byte> tail;  // SAMPLE_TIME + feature table (file mode checkpoints)

  ~Impl() {
    if (owns_fd && fd >= 0)
      ::close(fd);
  }

  /// The remembered error (EIO if, impossibly, there is none).
  [[nodiscard]] Failure current_error() const {
    return error.value_or(io_failure(EIO, "writing " + path));
  }

  [[nodiscard]] std::uint32_t slot(std::int32_t cpu) const noexcept {
    return cpu >= 0 && static_cast<std::uint32_t>(cpu) + 1 < nslots
               ? static_cast<std::uint32_t>(cpu)
               : nslots - 1;
  }

  // -- output -----------------------------------------------------------------------------------

  /// Writes all of `iov` at `offset` (file) or sequentially (pipe); remembers the first error.
  bool write_out(std::span<iovec> iov, std::uint64_t offset) noexcept {
    if (error)
      return false;
    std::size_t total = 0;
    for (const auto& v : iov)
      total += v.iov_len;
    std::size_t done = 0, idx = 0;
    while (done < total) {
      while (idx < iov.size() && iov[idx].iov_len == 0)
        ++idx;
      const int cnt = static_cast<int>(std::min<std::size_t>(iov.size() - idx, IOV_MAX));
      const ssize_t n = pipe ? ::writev(fd, &iov[idx], cnt)
                             : ::pwritev(fd, &iov[idx], cnt, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR)
          continue;
        if (errno == EAGAIN) {
          pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
          ::poll(&p, 1, -1);
          continue;
        }
        error = io_failure(errno, "writing " + path);
        return false;
      }
      done += static_cast<std::size_t>(n);
      auto left = static_cast<std::size_t>(n);
      while (left > 0 && idx < iov.size()) {
        const std::size_t k = std::min(left, iov[idx].iov_len);
        iov[idx].iov_base = static_cast<char*>(iov[idx].iov_base) + k;
        iov[idx].iov_len -= k;
        left -= k;
        if (iov[idx].iov_len == 0)
          ++idx;
      }
    }
    return true;
  }

  /// Writes the buffer (and `extra` right after it) out; the buffer becomes empty.
  void flush_buffer(std::span<const std::byte> extra = {}) noexcept {
    if (buf.empty() && extra.empty())
      return;
    std::array<iovec, 2> iov{iovec{buf.data(), buf.size()},
                             iovec{const_cast<std::byte*>(extra.data()), extra.size()}};
    if (write_out(iov, pos)) {
      pos += buf.size();
      stats.bytes = std::max<std::uint64_t>(stats.bytes, pos + extra.size());
    }
    buf.clear();
  }

  /// Room for `n` more bytes; false (error set) if memory ran out.
  bool room(std::size_t n) noexcept {
    if (error)
      return false;
    const std::size_t limit = pipe ? opts.buffer_bytes : max_round_bytes;
    if (!buf.empty() && buf.size() + n > limit)
      flush_buffer();
    if (buf.capacity() - buf.size() >= n)
      return true;
    try {
      buf.reserve(std::max(buf.size() + n, buf.capacity() * 2));
      return true;
    } catch (...) {
      error = io_failure(ENOMEM, "buffering records for " + path);
      return false;
    }
  }

  // -- records ------------------------------------------------------------------------------------

  std::vector<std::byte>* synthesized_record(std::size_t size) noexcept override {
    if (!room(size))
      return nullptr;
    ++stats.synthesized;
    return &buf;
  }

  void put_id_index() {
    std::vector<IdIndexEntry> entries;
    for (std::size_t a = 0; a < attrs.size(); ++a) {
      for (std::uint32_t s = 0; s < nslots; ++s) {
        entries.push_back({.id = attrs[a].ids[s],
                           .idx = a,
                           .cpu = s + 1 < nslots ? s : ~std::uint64_t{0},
                           .tid = ~std::uint64_t{0}});
      }
    }
    for (std::size_t i = 0; i < entries.size(); i += kMaxIdIndexEntries) {
      const std::size_t n = std::min(kMaxIdIndexEntries, entries.size() - i);
      const std::size_t size = 16 + n * sizeof(IdIndexEntry);
      room(size);
      put(buf, header(kIdIndex, 0, size));
      put<std::uint64_t>(buf, n);
      put_raw(buf, entries.data() + i, n * sizeof(IdIndexEntry));
    }
  }

  /// AUXTRACE_INFO for the AUX PMU perf knows how to set up from what we have (intel_bts: the PMU
  /// type). The TSC conversion of the ring's user page is not part of ProbeInfo: an identity
  /// conversion (shift 0, mult 1, zero 0) keeps perf's tsc<->time arithmetic defined (it divides
  /// by time_mult).
  void put_auxtrace_info() {
    for (auto& a : attrs) {
      if (a.aux != AuxtraceType::kIntelBts)
        continue;
      constexpr std::size_t kPriv = 6;  // INTEL_BTS_AUXTRACE_PRIV_MAX
      const std::size_t size = 16 + kPriv * 8;
      room(size);
      put(buf, header(kAuxtraceInfo, 0, size));
      put<std::uint32_t>(buf, static_cast<std::uint32_t>(a.aux));
      put<std::uint32_t>(buf, 0);
      put<std::uint64_t>(buf, a.attr.base.type);                         // INTEL_BTS_PMU_TYPE
      put<std::uint64_t>(buf, 0);                                        // TIME_SHIFT
      put<std::uint64_t>(buf, 1);                                        // TIME_MULT
      put<std::uint64_t>(buf, 0);                                        // TIME_ZERO
      put<std::uint64_t>(buf, 0);                                        // CAP_USER_TIME_ZERO
      put<std::uint64_t>(buf, a.attr.base.write_backward != 0 ? 1 : 0);  // SNAPSHOT_MODE
      a.aux_info_written = true;
      break;  // perf sets up one AUX decoder per session
    }
  }

  // -- features ---------------------------------------------------------------------------------

  std::vector<std::byte> event_desc() const {
    std::vector<std::byte> out;
    put<std::uint32_t>(out, static_cast<std::uint32_t>(attrs.size()));
    put<std::uint32_t>(out, file_attr_size);
    for (const auto& a : attrs) {
      put_raw(out, &a.attr, file_attr_size);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(a.ids.size()));
      put_string(out, a.name);
      put_raw(out, a.ids.data(), a.ids.size() * 8);
    }
    return out;
  }

  /// Every feature but SAMPLE_TIME, in bit order (pipe mode: without TRACING_DATA).
  Result<std::vector<std::pair<Feature, std::vector<std::byte>>>> build_features(
      std::span<const ProbeInfo> probes) const {
    std::vector<std::pair<Feature, std::vector<std::byte>>> f;
    const HostInfo& h = *host;
    auto str = [&](Feature bit, const std::string& s) {
      if (s.empty())
        return;
      std::vector<std::byte> out;
      put_string(out, s);
      f.emplace_back(bit, std::move(out));
    };
    // TRACING_DATA: the formats of tracepoint (and tracefs-backed) probes.
    std::vector<std::pair<std::string, std::string>> formats;
    for (const auto& a : attrs) {
      const auto& p = probes[a.probe];
      if (a.attr.base.type == PERF_TYPE_TRACEPOINT && p.format)
        formats.emplace_back(p.format->system, p.format->name);
    }
    if (!formats.empty()) {
      TRACER_ASSIGN_OR_RETURN(auto blob, build_tracing_data(opts.tracefs_root, formats));
      f.emplace_back(Feature::kTracingData, std::move(blob));
    }
    if (h.kernel_build_id.size() >= 2 && h.kernel_build_id.size() <= 40) {
      // One perf_record_header_build_id for the kernel (perf's write_buildid): pid -1 (the
      // host's kernel), misc KERNEL | BUILD_ID_SIZE, the id in 24 bytes with its size at 20,
      // the name padded to 64.
      std::vector<std::byte> out;
      constexpr std::string_view kName = "[kernel.kallsyms]";
      constexpr std::size_t kNameLen = 64;
      constexpr std::uint16_t kMisc = 1U | (1U << 15);
      put<std::uint32_t>(out, 0);
      put<std::uint16_t>(out, kMisc);
      put<std::uint16_t>(out, static_cast<std::uint16_t>(8 + 4 + 24 + kNameLen));
      put<std::int32_t>(out, -1);
      std::array<std::uint8_t, 24> id{};
      const std::size_t n = h.kernel_build_id.size() / 2;
      for (std::size_t i = 0; i < n; ++i)
        id[i] =
            static_cast<std::uint8_t>(std::stoul(h.kernel_build_id.substr(i * 2, 2), nullptr, 16));
      id[20] = static_cast<std::uint8_t>(n);
      put_raw(out, id.data(), id.size());
      put_raw(out, kName.data(), kName.size());
      put_zeros(out, kNameLen - kName.size());
      f.emplace_back(Feature::kBuildId, std::move(out));
    }
    str(Feature::kHostname, h.hostname);
    str(Feature::kOsRelease, h.os_release);
    str(Feature::kVersion, h.version);
    str(Feature::kArch, h.arch);
    if (h.nr_cpus_avail != 0) {
      std::vector<std::byte> out;
      put<std::uint32_t>(out, h.nr_cpus_avail);
      put<std::uint32_t>(out, h.nr_cpus_online);
      f.emplace_back(Feature::kNrCpus, std::move(out));
    }
    str(Feature::kCpuDesc, h.cpu_desc);
    str(Feature::kCpuId, h.cpuid);
    if (h.total_mem_kb != 0) {
      std::vector<std::byte> out;
      put<std::uint64_t>(out, h.total_mem_kb);
      f.emplace_back(Feature::kTotalMem, std::move(out));
    }
    if (!opts.cmdline.empty()) {
      std::vector<std::byte> out;
      put<std::uint32_t>(out, static_cast<std::uint32_t>(opts.cmdline.size()));
      for (const auto& arg : opts.cmdline)
        put_string(out, arg);
      f.emplace_back(Feature::kCmdline, std::move(out));
    }
    f.emplace_back(Feature::kEventDesc, event_desc());
    if (!h.core_siblings.empty() && !h.thread_siblings.empty() &&
        h.cpus.size() == h.nr_cpus_avail) {
      std::vector<std::byte> out;
      put<std::uint32_t>(out, static_cast<std::uint32_t>(h.core_siblings.size()));
      for (const auto& s : h.core_siblings)
        put_string(out, s);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(h.thread_siblings.size()));
      for (const auto& s : h.thread_siblings)
        put_string(out, s);
      for (const auto& c : h.cpus) {
        put(out, c.core_id);
        put(out, c.socket_id);
      }
      if (!h.die_siblings.empty()) {
        put<std::uint32_t>(out, static_cast<std::uint32_t>(h.die_siblings.size()));
        for (const auto& s : h.die_siblings)
          put_string(out, s);
        for (const auto& c : h.cpus)
          put(out, c.die_id);
      }
      f.emplace_back(Feature::kCpuTopology, std::move(out));
    }
    if (!h.pmus.empty()) {
      std::vector<std::byte> out;
      put<std::uint32_t>(out, static_cast<std::uint32_t>(h.pmus.size()));
      for (const auto& [type, name] : h.pmus) {
        put(out, type);
        put_string(out, name);
      }
      f.emplace_back(Feature::kPmuMappings, std::move(out));
    }
    bool clock = false;
    for (const auto& a : attrs)
      clock = clock || a.attr.base.use_clockid != 0;
    if (clock) {
      std::vector<std::byte> res;
      put<std::uint64_t>(res, h.clock_res_ns);
      f.emplace_back(Feature::kClockId, std::move(res));
      std::vector<std::byte> data;
      put<std::uint32_t>(data, 1);  // version
      put<std::uint32_t>(data, static_cast<std::uint32_t>(attrs.front().attr.base.clockid));
      put<std::uint64_t>(data, h.tod_ns);
      put<std::uint64_t>(data, h.clock_ns);
      f.emplace_back(Feature::kClockData, std::move(data));
    }
    return f;
  }

  /// The features bitmap and SAMPLE_TIME + table bytes for a checkpoint at `pos + buf.size()`.
  FileHeader file_header(std::uint64_t data_end) {
    FileHeader h{};
    h.attr_size = file_attr_size + sizeof(FileSection);
    // attrs come right before the data section (see open_file)
    h.attrs = {.offset = data_offset - attrs.size() * h.attr_size,
               .size = attrs.size() * h.attr_size};
    h.data = {.offset = data_offset, .size = data_end - data_offset};
    for (const auto& s : static_features)
      h.features[static_cast<std::uint32_t>(s.bit) / 64] |=
          1ULL << (static_cast<std::uint32_t>(s.bit) % 64);
    if (sample_time_feature) {
      const auto bit = static_cast<std::uint32_t>(Feature::kSampleTime);
      h.features[bit / 64] |= 1ULL << (bit % 64);
    }
    return h;
  }

  /// The feature table (at `data_end`, where perf looks for it) and SAMPLE_TIME after it.
  void build_tail(std::uint64_t data_end) {
    tail.clear();
    const std::size_t n = static_features.size() + (sample_time_feature ? 1 : 0);
    const FileSection sample_time{.offset = data_end + n * sizeof(FileSection), .size = 16};
    bool placed = !sample_time_feature;
    for (const auto& f : static_features) {
      if (!placed && f.bit > Feature::kSampleTime) {
        put(tail, sample_time);
        placed = true;
      }
      put(tail, f.where);
    }
    if (!placed)
      put(tail, sample_time);
    if (sample_time_feature) {
      put<std::uint64_t>(tail,
                         first_time == std::numeric_limits<std::uint64_t>::max() ? 0 : first_time);
      put<std::uint64_t>(tail, last_time);
    }
  }

  /// File mode: the buffer, then the feature table and SAMPLE_TIME in the same write, then the
  /// header that points at them.
  void checkpoint() noexcept {
    if (pipe || error)
      return;
    const std::uint64_t data_end = pos + buf.size();
    try {
      build_tail(data_end);
    } catch (...) {
      error = io_failure(ENOMEM, "building the header of " + path);
      return;
    }
    flush_buffer(tail);
    if (error)
      return;
    const FileHeader h = file_header(data_end);
    std::array<iovec, 1> iov{iovec{const_cast<FileHeader*>(&h), sizeof(h)}};
    write_out(iov, 0);
  }

  // -- engine records ---------------------------------------------------------------------------

  void put_aux_payload(const perf::AuxChunk& c, const RecordRef& ref) noexcept {
    const std::size_t size = c.first.size() + c.second.size();
    const std::size_t padded = align8(size);
    if (!room(48))
      return;
    put(buf, header(kAuxtrace, 0, 48));
    put<std::uint64_t>(buf, padded);
    put<std::uint64_t>(buf, c.offset);
    put<std::uint64_t>(buf, ref.record.sample_id.time);  // reference
    put<std::uint32_t>(buf, slot(ref.cpu));              // idx: the per-CPU queue
    put<std::uint32_t>(buf, 0xffffffffU);                // tid: per-CPU tracing
    put<std::uint32_t>(buf, static_cast<std::uint32_t>(ref.cpu));
    put<std::uint32_t>(buf, 0);
    if (buf.size() + padded > (pipe ? opts.buffer_bytes : max_round_bytes)) {
      // A big chunk goes straight out after what is buffered.
      flush_buffer();
      std::array<std::byte, 8> zeros{};
      std::array<iovec, 3> iov{iovec{const_cast<std::byte*>(c.first.data()), c.first.size()},
                               iovec{const_cast<std::byte*>(c.second.data()), c.second.size()},
                               iovec{zeros.data(), padded - size}};
      if (write_out(iov, pos))
        pos += padded;
    } else if (room(padded)) {
      put_raw(buf, c.first.data(), c.first.size());
      put_raw(buf, c.second.data(), c.second.size());
      put_zeros(buf, padded - size);
    }
    stats.aux_bytes += size;
  }

  /// Records that name their event by id in the body: LOST {id, lost}, THROTTLE/UNTHROTTLE
  /// {time, id, stream_id} (perf attributes them to an attr by it).
  static void rewrite_body_id(std::uint32_t type,
                              std::byte* p,
                              std::size_t size,
                              std::uint64_t id) noexcept {
    if (type == abi::kLost && size >= 16)
      std::memcpy(p + 8, &id, 8);
    else if ((type == abi::kThrottle || type == abi::kUnthrottle) && size >= 32)
      std::memcpy(p + 16, &id, 8);
  }

  std::uint32_t payload_u32(std::span<const std::byte> raw,
                            std::int32_t off,
                            std::uint32_t size) const noexcept {
    if (off < 0 || static_cast<std::size_t>(off) + size > raw.size())
      return 0xffffffffU;
    std::uint64_t v = 0;
    std::memcpy(&v, raw.data() + off, std::min<std::uint32_t>(size, 8));
    return static_cast<std::uint32_t>(v);
  }

  void write(const RecordRef& ref) noexcept {
    if (error || closed)
      return;
    const auto& rec = ref.record;
    if (ref.probe >= probe_attr.size() || probe_attr[ref.probe] < 0 || rec.bytes.size() < 8) {
      ++stats.skipped;
      return;
    }
    const AttrOut& a = attrs[static_cast<std::size_t>(probe_attr[ref.probe])];
    const std::uint32_t s = slot(ref.cpu);
    const std::uint64_t id = a.ids[s];
    const auto* sample = rec.type == abi::kSample ? std::get_if<perf::Sample>(&rec.body) : nullptr;
    if (rec.type == abi::kSample && sample == nullptr) {
      ++stats.skipped;
      return;
    }
    std::uint32_t pid = 0xffffffffU, tid = 0xffffffffU;
    std::uint64_t time = 0;
    if (sample != nullptr) {
      time = sample->time;
      if ((sample->sample_type & PERF_SAMPLE_TID) != 0) {
        pid = sample->pid;
        tid = sample->tid;
      } else if (a.rebuild) {
        pid = payload_u32(sample->raw, a.pid_off, a.pid_size);
        tid = a.tid_off >= 0 ? payload_u32(sample->raw, a.tid_off, a.tid_size) : pid;
      }
      if (opts.synthesize_new && pid != 0xffffffffU && synth)
        synth->thread(pid, tid);
    } else if (rec.sample_id.present) {
      time = rec.sample_id.time;
    }
    if (time != 0) {
      slot_time[s] = time;
    } else {
      time = slot_time[s];
    }

    if (!a.rebuild) {
      // The kernel's bytes with our ids.
      const std::size_t size = rec.bytes.size();
      if (!room(size))
        return;
      const std::size_t at = buf.size();
      put_raw(buf, rec.bytes.data(), size);
      std::byte* p = buf.data() + at;
      if (rec.type == abi::kSample) {
        std::memcpy(p + 8, &id, 8);  // IDENTIFIER comes first
        if (a.sample_id_offset >= 0 && static_cast<std::size_t>(a.sample_id_offset) + 8 <= size)
          std::memcpy(p + a.sample_id_offset, &id, 8);
      } else if (rec.type < kHeaderAttr && a.kernel_sample_id_all && size >= 8 + a.trailer) {
        rewrite_body_id(rec.type, p, size, id);
        std::memcpy(p + size - 8, &id, 8);  // IDENTIFIER comes last in the trailer
        if (a.trailer_id_offset >= 0)
          std::memcpy(p + size - a.trailer + a.trailer_id_offset, &id, 8);
      }
    } else if (sample != nullptr) {
      // IDENTIFIER | IP | TID | TIME | CPU | PERIOD | RAW, as perf record writes bpf-output.
      const bool raw = (a.sample_type & PERF_SAMPLE_RAW) != 0;
      const std::size_t raw_bytes = raw ? align8(4 + sample->raw.size()) : 0;
      const std::size_t size = 8 + 6 * 8 + raw_bytes;
      if (size > 0xffff || !room(size))
        return;
      put(buf, header(abi::kSample, rec.misc, size));
      put(buf, id);
      put<std::uint64_t>(buf, sample->ip);
      put(buf, pid);
      put(buf, tid);
      put(buf, time);
      put<std::uint32_t>(buf, (sample->sample_type & PERF_SAMPLE_CPU) != 0
                                  ? sample->cpu
                                  : static_cast<std::uint32_t>(ref.cpu));
      put<std::uint32_t>(buf, 0);
      put<std::uint64_t>(buf, sample->period != 0 ? sample->period : 1);
      if (raw) {
        put<std::uint32_t>(buf, static_cast<std::uint32_t>(raw_bytes - 4));
        put_raw(buf, sample->raw.data(), sample->raw.size());
        put_zeros(buf, raw_bytes - 4 - sample->raw.size());
      }
    } else if (rec.type < kHeaderAttr) {
      // The body without the kernel's trailer (if any), then ours: TID, TIME, CPU, IDENTIFIER.
      const std::size_t body = rec.bytes.size() - (a.kernel_sample_id_all ? a.kernel_trailer : 0);
      const std::size_t size = body + a.trailer;
      if (body < 8 || size > 0xffff || !room(size))
        return;
      const std::size_t at = buf.size();
      put_raw(buf, rec.bytes.data(), body);
      rewrite_body_id(rec.type, buf.data() + at, body, id);
      perf_event_header h{};
      std::memcpy(&h, buf.data() + at, sizeof(h));
      h.size = static_cast<std::uint16_t>(size);
      std::memcpy(buf.data() + at, &h, sizeof(h));
      const bool known = rec.sample_id.present;
      put<std::uint32_t>(buf, known ? rec.sample_id.pid : 0xffffffffU);
      put<std::uint32_t>(buf, known ? rec.sample_id.tid : 0xffffffffU);
      put(buf, time);
      put<std::uint32_t>(buf, static_cast<std::uint32_t>(ref.cpu));
      put<std::uint32_t>(buf, 0);
      put(buf, id);
    } else {
      ++stats.skipped;
      return;
    }
    if (sample != nullptr && time != 0) {
      first_time = std::min(first_time, time);
      last_time = std::max(last_time, time);
    }
    ++stats.records;
    pending_round = true;
    if (rec.type == abi::kAux && ref.aux) {
      if (a.aux_info_written)
        put_aux_payload(*ref.aux, ref);
      else
        stats.aux_bytes_dropped += ref.aux->first.size() + ref.aux->second.size();
    }
  }

  void end_round() noexcept {
    if (error || closed)
      return;
    if (pending_round) {
      if (room(8)) {
        put(buf, header(kFinishedRound, 0, 8));
        ++stats.rounds;
      }
      pending_round = false;
    }
    if (pipe) {
      flush_buffer();
    } else {
      checkpoint();
    }
  }

  // -- setup ------------------------------------------------------------------------------------

  Status setup(std::span<const ProbeInfo> probes) {
    if (!host)
      host = std::make_shared<const HostInfo>(HostInfo::read());
    buf.reserve(opts.buffer_bytes);

    std::uint32_t max_cpu = 0;
    if (auto online = perf::online_cpus(); online && !online->empty())
      max_cpu = static_cast<std::uint32_t>(*std::max_element(online->begin(), online->end()));
    nslots = std::max(max_cpu + 1, host->nr_cpus_avail) + 1;
    slot_time.assign(nslots, 0);

    probe_attr.assign(probes.size(), -1);
    bool need_config3 = false;
    for (std::uint32_t i = 0; i < probes.size(); ++i) {
      const ProbeInfo& p = probes[i];
      if (p.attr.sample_type() == 0)
        continue;  // a counter: no records
      AttrOut a;
      a.probe = i;  // RecordRef::probe indexes the engine's probes
      a.name = p.name;
      a.kernel_sample_type = p.attr.sample_type();
      a.kernel_sample_id_all = p.attr.has(perf::Flag::kSampleIdAll);
      a.rebuild = (a.kernel_sample_type & PERF_SAMPLE_IDENTIFIER) == 0 || !a.kernel_sample_id_all;
      perf::EventAttr written = p.attr;
      if (a.rebuild) {
        written.sample_type(kRebuiltSampleType | (a.kernel_sample_type & PERF_SAMPLE_RAW));
        written.flag(perf::Flag::kSampleIdAll);
        if (p.payload) {
          for (const auto& f : p.payload->fields) {
            const bool integer =
                f.kind == bpf::FieldKind::kSigned || f.kind == bpf::FieldKind::kUnsigned;
            if (!integer || (f.size != 4 && f.size != 8))
              continue;
            if (f.name == "pid") {
              a.pid_off = static_cast<std::int32_t>(f.offset);
              a.pid_size = f.size;
            } else if (f.name == "tid") {
              a.tid_off = static_cast<std::int32_t>(f.offset);
              a.tid_size = f.size;
            }
          }
        }
      }
      a.sample_type = written.sample_type();
      a.trailer = trailer_size(a.sample_type);
      a.kernel_trailer = a.kernel_sample_id_all ? trailer_size(a.kernel_sample_type) : 0;
      if ((a.kernel_sample_type & PERF_SAMPLE_ID) != 0) {
        const std::uint64_t st = a.kernel_sample_type;
        a.sample_id_offset = static_cast<int>(
            8 + 8 * std::popcount(st & (PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID |
                                        PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR)));
        a.trailer_id_offset =
            static_cast<int>(8 * std::popcount(st & (PERF_SAMPLE_TID | PERF_SAMPLE_TIME)));
      }
      a.attr = written.storage();
      need_config3 = need_config3 || a.attr.config3 != 0;
      if (p.kind == ProbeKind::kAux)
        a.aux = auxtrace_type_for_pmu(p.pmu);
      probe_attr[a.probe] = static_cast<int>(attrs.size());
      attrs.push_back(std::move(a));
    }
    if (attrs.empty()) {
      return fail(EINVAL, "perf-data: no probe of the run produces records",
                  "counting probes have no records to write; add a sampling probe");
    }
    file_attr_size = need_config3 ? abi::kAttrSizeVer8 : kFileAttrSize;
    for (std::size_t i = 0; i < attrs.size(); ++i) {
      auto& a = attrs[i];
      a.attr.base.size = file_attr_size;
      a.ids.resize(nslots);
      for (std::uint32_t s = 0; s < nslots; ++s)
        a.ids[s] = 1 + i * nslots + s;  // 0 means "synthesized" to perf
    }
    // Trailers of synthesized records follow the first attr: every attr must agree on
    // sample_id_all (they do: rebuilt attrs get it).
    // With an event that has mmap_data (a DWARF unwind's: perf reads .eh_frame_hdr through the
    // data mappings), existing processes' data mappings are announced as the kernel announces
    // new ones.
    const bool data = std::any_of(attrs.begin(), attrs.end(),
                                  [](const auto& a) { return a.attr.base.mmap_data != 0; });
    synth.emplace(opts.proc_root, attrs.front().trailer, *this, data);
    TRACER_ASSIGN_OR_RETURN(auto features, build_features(probes));
    return pipe ? start_pipe(features) : start_file(features);
  }

  Status start_file(std::vector<std::pair<Feature, std::vector<std::byte>>>& features) {
    // header | ids | feature contents | attrs | data
    std::vector<std::byte> head;
    put_zeros(head, sizeof(FileHeader));
    std::vector<std::uint64_t> id_offsets;
    for (const auto& a : attrs) {
      id_offsets.push_back(head.size());
      put_raw(head, a.ids.data(), a.ids.size() * 8);
    }
    for (auto& [bit, content] : features) {
      static_features.push_back({bit, {.offset = head.size(), .size = content.size()}});
      put_raw(head, content.data(), content.size());
      put_zeros(head, align8(content.size()) - content.size());
    }
    sample_time_feature = true;
    for (std::size_t i = 0; i < attrs.size(); ++i) {
      put_raw(head, &attrs[i].attr, file_attr_size);
      put(head, FileSection{.offset = id_offsets[i], .size = attrs[i].ids.size() * 8});
    }
    data_offset = head.size();
    std::array<iovec, 1> iov{iovec{head.data(), head.size()}};
    if (!write_out(iov, 0))
      return fail(current_error());
    pos = data_offset;
    put_id_index();
    put_auxtrace_info();
    if (opts.synthesize && synth) {
      synth->kernel();
      synth->all();
    }
    checkpoint();  // valid from here on
    if (error)
      return fail(current_error());
    return {};
  }

  Status start_pipe(std::vector<std::pair<Feature, std::vector<std::byte>>>& features) {
    put(buf, PipeHeader{});
    for (const auto& a : attrs) {
      const std::size_t size = 8 + file_attr_size + a.ids.size() * 8;
      if (size > 0xffff)
        return fail(E2BIG, "perf-data: too many CPUs for a HEADER_ATTR record");
      put(buf, header(kHeaderAttr, 0, size));
      put_raw(buf, &a.attr, file_attr_size);
      put_raw(buf, a.ids.data(), a.ids.size() * 8);
    }
    const std::vector<std::byte>* tracing = nullptr;
    for (const auto& [bit, content] : features) {
      if (bit == Feature::kTracingData) {
        tracing = &content;
        continue;
      }
      const std::size_t size = 16 + content.size();
      if (size > 0xffff)
        continue;  // does not fit a record; perf does without it
      put(buf, header(kHeaderFeature, 0, size));
      put<std::uint64_t>(buf, static_cast<std::uint64_t>(bit));
      put_raw(buf, content.data(), content.size());
    }
    if (tracing != nullptr) {
      const std::size_t padded = align8(tracing->size());
      put(buf, header(kHeaderTracingData, 0, 16));
      put<std::uint32_t>(buf, static_cast<std::uint32_t>(padded));
      put<std::uint32_t>(buf, 0);
      put_raw(buf, tracing->data(), tracing->size());
      put_zeros(buf, padded - tracing->size());
    }
    for (const auto& a : attrs) {  // names by id (EVENT_DESC arrives before perf has attrs)
      const std::size_t name = align8(a.name.size() + 1);
      put(buf, header(kEventUpdate, 0, 24 + name));
      put<std::uint64_t>(buf, kEventUpdateName);
      put<std::uint64_t>(buf, a.ids.front());
      put_raw(buf, a.name.data(), a.name.size());
      put_zeros(buf, name - a.name.size());
    }
    put_id_index();
    put_auxtrace_info();
    if (opts.synthesize && synth) {
      synth->kernel();
      synth->all();
    }
    flush_buffer();
    if (error)
      return fail(current_error());
    return {};
  }

  Status close() {
    if (!closed) {
      end_round();
      if (pipe)
        flush_buffer();
      closed = true;
      if (owns_fd && fd >= 0) {
        if (::close(fd) != 0 && !error)
          error = io_failure(errno, "closing " + path);
        fd = -1;
      }
    }
    if (error)
      return fail(current_error());
    return {};
  }
};

Writer::Writer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;
Writer::~Writer() {
  if (impl_) [[maybe_unused]]
    auto st = impl_->close();
}

Result<Writer> Writer::open(const std::string& path,
                            std::span<const ProbeInfo> probes,
                            WriterOptions options) {
  if (path == "-") {
    options.pipe = true;
    auto w = open_fd(STDOUT_FILENO, probes, std::move(options));
    if (w)
      w->impl_->path = "<stdout>";
    return w;
  }
  auto opened = open_output_file(path);
  if (!opened) {
    Failure f = opened.error();
    f.message = "perf-data: " + f.message;
    return fail(std::move(f));
  }
  const int fd = opened->release();
  auto impl = std::make_unique<Impl>();
  impl->fd = fd;
  impl->owns_fd = true;
  impl->path = path;
  struct stat st {};
  impl->pipe = options.pipe || (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode));
  impl->opts = std::move(options);
  impl->host = impl->opts.host;
  if (auto s = impl->setup(probes); !s)
    return fail(s.error());
  return Writer(std::move(impl));
}

Result<Writer> Writer::open_fd(int fd, std::span<const ProbeInfo> probes, WriterOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->fd = fd;
  impl->path = "fd " + std::to_string(fd);
  struct stat st {};
  impl->pipe = options.pipe || (::fstat(fd, &st) == 0 && !S_ISREG(st.st_mode));
  if (!impl->pipe && ::lseek(fd, 0, SEEK_CUR) != 0) {
    return fail(EINVAL, "perf-data: " + impl->path + " is not at offset 0",
                "give a new file, or pipe mode");
  }
  impl->opts = std::move(options);
  impl->host = impl->opts.host;
  if (auto s = impl->setup(probes); !s)
    return fail(s.error());
  return Writer(std::move(impl));
}

void Writer::write(const RecordRef& ref) noexcept {
  impl_->write(ref);
}
void Writer::end_round() noexcept {
  impl_->end_round();
}
void Writer::flush() noexcept {
  if (impl_->pipe) {
    impl_->flush_buffer();
  } else if (!impl_->buf.empty()) {
    impl_->checkpoint();
  }
}
Status Writer::close() {
  return impl_->close();
}
const WriterStats& Writer::stats() const noexcept {
  return impl_->stats;
}
bool Writer::pipe_mode() const noexcept {
  return impl_->pipe;
}

}  // namespace tracer::perfdata
