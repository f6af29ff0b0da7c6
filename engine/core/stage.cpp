// The stage API's data side: record kinds, values, field binding (Schema/FieldRef), the comm
// cache, sinks and option reading.
#include "tracer/stage.hpp"

#include "tracer/output_file.hpp"

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

#include "common/edit_distance.hpp"
#include "core/recipe_schema.hpp"
#include "tracer/duration.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/syscall_names.hpp"

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

// ---------------------------------------------------------------------------------------------
// CommCache: set-associative (kWays per set), LRU within a set, fixed storage.

void CommCache::Free::operator()(Entry* p) const noexcept {
  std::free(p);  // NOLINT(cppcoreguidelines-no-malloc): calloc'd, see entries_
}

CommCache::CommCache(CommCacheOptions options) : options_(std::move(options)) {
  static_assert(std::is_trivially_copyable_v<Entry> && std::is_trivially_destructible_v<Entry>);
  const std::size_t sets = std::max<std::size_t>(1, (options_.capacity + kWays - 1) / kWays);
  size_ = sets * kWays;
  // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): zero pages on demand, see entries_
  entries_.reset(static_cast<Entry*>(std::calloc(size_, sizeof(Entry))));
  if (!entries_)
    throw std::bad_alloc();
}

CommCache::Entry& CommCache::slot_for(std::uint32_t tid, bool& found) noexcept {
  const std::size_t sets = size_ / kWays;
  // Fibonacci hashing spreads consecutive tids over the sets.
  const std::size_t set = static_cast<std::size_t>((tid * 0x9E3779B97F4A7C15ULL) >> 32) % sets;
  Entry* base = &entries_[set * kWays];
  Entry* victim = base;
  for (std::size_t w = 0; w < kWays; ++w) {
    Entry& e = base[w];
    if (e.stamp != 0 && e.tid == tid) {
      found = true;
      return e;
    }
    if (e.stamp < victim->stamp)
      victim = &e;
  }
  found = false;
  if (victim->stamp != 0)
    ++evictions_;
  victim->tid = tid;
  victim->len = 0;
  return *victim;
}

void CommCache::update(std::uint32_t tid, std::string_view comm) noexcept {
  bool found = false;
  Entry& e = slot_for(tid, found);
  const std::size_t n = std::min(comm.size(), kCommLen);
  std::memcpy(e.comm.data(), comm.data(), n);
  e.len = static_cast<std::uint8_t>(n);
  e.stamp = ++clock_;
}

std::size_t CommCache::seed() {
  if (!options_.read_proc)
    return 0;
  std::size_t n = 0;
  std::error_code ec;
  namespace fs = std::filesystem;
  for (const auto& proc : fs::directory_iterator(options_.proc_root, ec)) {
    const auto pid_name = proc.path().filename().string();
    if (pid_name.empty() || pid_name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::error_code task_ec;
    for (const auto& task : fs::directory_iterator(proc.path() / "task", task_ec)) {
      std::uint32_t tid = 0;
      const auto name = task.path().filename().string();
      if (std::from_chars(name.data(), name.data() + name.size(), tid).ec != std::errc{})
        continue;
      (void)lookup(tid);  // a miss reads /proc/TID/comm into the cache
      ++n;
    }
  }
  return n;
}

void CommCache::fork(std::uint32_t parent, std::uint32_t child) noexcept {
  if (parent == child)
    return;  // the first thread of a new process forked by itself: nothing new
  std::array<char, kCommLen> name{};
  const std::string_view p = lookup(parent);
  const std::size_t n = std::min(p.size(), kCommLen);
  std::memcpy(name.data(), p.data(), n);  // before the child's slot may evict the parent's
  if (n == 0)
    return;
  update(child, std::string_view(name.data(), n));
}

std::string_view CommCache::lookup(std::uint32_t tid) noexcept {
  if (tid == 0)
    return "swapper";  // the idle tasks (perf script's name for tid 0)
  bool found = false;
  Entry& e = slot_for(tid, found);
  e.stamp = ++clock_;
  if (found)
    return {e.comm.data(), e.len};
  e.len = 0;
  if (options_.read_proc) {
    // /proc/TID/comm is "name\n"; a thread id works there too (the task dir is hidden, not
    // absent). The path goes in a stack buffer: no allocation on this path.
    char path[128];
    std::snprintf(path, sizeof(path), "%s/%u/comm", options_.proc_root.c_str(), tid);
    ++proc_reads_;
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[kCommLen + 1];
      const ssize_t got = ::read(fd, buf, sizeof(buf));
      ::close(fd);
      if (got > 0) {
        auto n = static_cast<std::size_t>(got);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0'))
          --n;
        n = std::min(n, kCommLen);
        std::memcpy(e.comm.data(), buf, n);
        e.len = static_cast<std::uint8_t>(n);
      }
    }
  }
  return {e.comm.data(), e.len};
}

// ---------------------------------------------------------------------------------------------
// FieldRef

namespace {

std::uint32_t pid_of(const Event& e) noexcept {
  if (e.sample != nullptr)
    return e.sample->pid;
  const auto& body = e.ref->record.body;
  if (const auto* c = std::get_if<perf::Comm>(&body))
    return c->pid;
  if (const auto* t = std::get_if<perf::TaskEvent>(&body))
    return t->pid;
  if (const auto* m = std::get_if<perf::Mmap2>(&body))
    return m->pid;
  if (const auto* i = std::get_if<perf::ItraceStart>(&body))
    return i->pid;
  if (e.kind == RecordKind::kAux && e.ref->itrace_pid != 0)
    return e.ref->itrace_pid;
  return e.ref->record.sample_id.pid;
}

/// The part of a sample's callchain after the `context` marker (PERF_CONTEXT_KERNEL or _USER), up
/// to the next marker: the kernel's or the user's frames, leaf first.
IpList stack_part(const Event& e, std::uint64_t context) noexcept {
  const perf::U64Array& c = e.sample->callchain;
  std::uint64_t begin = c.size;
  std::uint64_t end = c.size;
  for (std::uint64_t i = 0; i < c.size; ++i) {
    if (c[i] < perf::abi::kContextMax)
      continue;
    if (begin != c.size) {
      end = i;
      break;
    }
    if (c[i] == context)
      begin = i + 1;
  }
  return {.ips = {.data = c.data + begin * 8, .size = end - begin}, .pid = pid_of(e)};
}

std::uint32_t tid_of(const Event& e) noexcept {
  if (e.sample != nullptr)
    return e.sample->tid;
  const auto& body = e.ref->record.body;
  if (const auto* c = std::get_if<perf::Comm>(&body))
    return c->tid;
  if (const auto* t = std::get_if<perf::TaskEvent>(&body))
    return t->tid;
  if (const auto* m = std::get_if<perf::Mmap2>(&body))
    return m->tid;
  if (const auto* i = std::get_if<perf::ItraceStart>(&body))
    return i->tid;
  if (e.kind == RecordKind::kAux && e.ref->itrace_tid != 0)
    return e.ref->itrace_tid;
  return e.ref->record.sample_id.tid;
}

std::uint64_t time_of(const Event& e) noexcept {
  if (e.sample != nullptr)
    return e.sample->time;
  if (const auto* t = std::get_if<perf::TaskEvent>(&e.ref->record.body))
    return t->time;
  return e.ref->record.sample_id.time;
}

Value load_number(const std::byte* p, std::uint32_t size, bool is_signed) noexcept {
  switch (size) {
    case 1:
      return is_signed ? Value{std::int64_t{perf::load<std::int8_t>(p)}}
                       : Value{std::uint64_t{perf::load<std::uint8_t>(p)}};
    case 2:
      return is_signed ? Value{std::int64_t{perf::load<std::int16_t>(p)}}
                       : Value{std::uint64_t{perf::load<std::uint16_t>(p)}};
    case 4:
      return is_signed ? Value{std::int64_t{perf::load<std::int32_t>(p)}}
                       : Value{std::uint64_t{perf::load<std::uint32_t>(p)}};
    case 8:
      return is_signed ? Value{perf::load<std::int64_t>(p)} : Value{perf::load<std::uint64_t>(p)};
    default:
      return {};
  }
}

}  // namespace

bool FieldRef::available(std::uint32_t probe) const noexcept {
  if (derived_.source == Source::kDerived)
    return true;
  return probe < by_probe_.size() && by_probe_[probe].source != Source::kMissing;
}

Value FieldRef::read_raw(const Accessor& a,
                         std::uint32_t probe,
                         std::span<const std::byte> raw) const noexcept {
  switch (a.source) {
    case Source::kTracefs:
      if (a.type == FieldType::kString) {
        if (auto s = tracefs::read_string(*a.field, raw))
          return *s;
        return {};
      }
      if (a.type == FieldType::kIps) {
        if (auto b = tracefs::read_bytes(*a.field, raw))
          return IpList{{b->data(), b->size() / 8}};
        return {};
      }
      if (auto v = tracefs::read_int(*a.field, raw)) {
        if (a.type == FieldType::kUint)
          return static_cast<std::uint64_t>(*v);
        return *v;
      }
      return {};
    case Source::kTracefsElement: {
      auto b = tracefs::read_bytes(*a.field, raw);
      if (!b || (std::uint64_t{a.index} + 1) * a.size > b->size())
        return {};
      return load_number(b->data() + std::size_t{a.index} * a.size, a.size, a.is_signed);
    }
    case Source::kPayload: {
      if (std::uint64_t{a.offset} + a.size > raw.size())
        return {};
      const std::byte* p = raw.data() + a.offset;
      if (a.type == FieldType::kString) {
        const auto* c = reinterpret_cast<const char*>(p);
        return std::string_view(c, ::strnlen(c, a.size));
      }
      if (a.type == FieldType::kDouble) {
        return a.size == 4 ? Value{double{perf::load<float>(p)}} : Value{perf::load<double>(p)};
      }
      return load_number(p, a.size, a.is_signed);
    }
    case Source::kSyscallName: {
      if (a.field == nullptr) {  // syscalls:sys_enter_X: the name is the event's
        const auto& format = schema_->probes()[probe].format;
        return format.has_value() ? std::string_view(format->name).substr(a.offset)
                                  : std::string_view{};
      }
      const auto nr = tracefs::read_int(*a.field, raw);
      if (!nr)
        return {};
      if (const auto name = core::syscall_name(*nr); !name.empty())
        return name;
      return *nr;  // a number this build's table lacks stays a number
    }
    default:
      return {};
  }
}

bool FieldRef::reads_delivered(std::uint32_t probe) const noexcept {
  if (derived_.source == Source::kDerived)
    return false;
  if (probe >= by_probe_.size())
    return true;  // read() gives nothing either way
  switch (by_probe_[probe].source) {
    case Source::kMissing:
    case Source::kPid:
    case Source::kTid:
    case Source::kCpu:
    case Source::kTime:
    case Source::kProbe:
    case Source::kKind:
    case Source::kTracefs:
    case Source::kTracefsElement:
    case Source::kSyscallName:
      return true;
    default:
      return false;
  }
}

std::optional<IntReader> FieldRef::int_reader(std::uint32_t probe) const noexcept {
  if (derived_.source == Source::kDerived)
    return std::nullopt;
  if (probe >= by_probe_.size())
    return IntReader{};
  // The header's words as read(DeliveredSample) gives them: pid, tid, cpu as int64, time uint64.
  const auto header = [](std::size_t offset, std::uint8_t size, bool as_uint) {
    return IntReader{.offset = static_cast<std::uint32_t>(offset),
                     .size = size,
                     .is_signed = false,
                     .as_uint = as_uint,
                     .in_header = true};
  };
  const Accessor& a = by_probe_[probe];
  switch (a.source) {
    case Source::kMissing:
      return IntReader{};
    case Source::kPid:
      return header(offsetof(DeliveredHeader, pid), 4, false);
    case Source::kTid:
      return header(offsetof(DeliveredHeader, tid), 4, false);
    case Source::kCpu:
      return header(offsetof(DeliveredHeader, cpu), 4, false);
    case Source::kTime:
      return header(offsetof(DeliveredHeader, time), 8, true);
    case Source::kTracefs: {
      // tracefs::read_int's reading: a fixed-width field of 1, 2, 4 or 8 bytes.
      const tracefs::Field* f = a.field;
      if ((a.type != FieldType::kInt && a.type != FieldType::kUint) || f == nullptr ||
          f->is_data_loc || f->is_rel_loc || f->array_len.has_value() ||
          (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8))
        return std::nullopt;
      return IntReader{.offset = static_cast<std::uint32_t>(sizeof(DeliveredHeader) + f->offset),
                       .size = static_cast<std::uint8_t>(f->size),
                       .is_signed = f->is_signed && f->size != 8,
                       .as_uint = a.type == FieldType::kUint,
                       .in_header = false};
    }
    default:
      return std::nullopt;
  }
}

Value FieldRef::read(const DeliveredSample& s) const noexcept {
  const std::uint32_t probe = s.probe();
  if (probe >= by_probe_.size())
    return {};
  const Accessor& a = by_probe_[probe];
  switch (a.source) {
    case Source::kPid:
      return std::int64_t{s.pid()};
    case Source::kTid:
      return std::int64_t{s.tid()};
    case Source::kCpu:
      return std::int64_t{s.cpu()};
    case Source::kTime:
      return s.time();
    case Source::kProbe:
      return std::string_view(schema_->probes()[probe].name);
    case Source::kKind:
      return to_string(RecordKind::kSample);
    case Source::kTracefs:
    case Source::kTracefsElement:
    case Source::kSyscallName:
      return read_raw(a, probe, s.raw());
    default:
      return {};
  }
}

Value FieldRef::read(const Event& e) const noexcept {
  if (derived_.source == Source::kDerived)
    return e.derived[static_cast<std::size_t>(derived_.slot)];
  const std::uint32_t probe = e.probe();
  if (probe >= by_probe_.size())
    return {};
  const Accessor& a = by_probe_[probe];
  switch (a.source) {
    case Source::kMissing:
    case Source::kDerived:
      return {};
    case Source::kPid:
      return std::int64_t{pid_of(e)};
    case Source::kTid:
      return std::int64_t{tid_of(e)};
    case Source::kComm:
      if (const auto* c = std::get_if<perf::Comm>(&e.ref->record.body))
        return c->comm;
      if (e.sample == nullptr && tid_of(e) == 0 && !e.ref->record.sample_id.present)
        return std::string_view{};  // no thread at all (LOST without sample_id_all)
      return schema_->comm().lookup(tid_of(e));
    case Source::kCpu:
      if (e.sample != nullptr && (e.sample->sample_type & PERF_SAMPLE_CPU) != 0)
        return std::int64_t{e.sample->cpu};
      if (e.ref->cpu >= 0)
        return std::int64_t{e.ref->cpu};
      return std::int64_t{e.ref->record.sample_id.cpu};
    case Source::kTime:
      return time_of(e);
    case Source::kIp:
      return e.sample != nullptr ? Value{e.sample->ip} : Value{};
    case Source::kAddr:
      return e.sample != nullptr ? Value{e.sample->addr} : Value{};
    case Source::kPeriod:
      return e.sample != nullptr ? Value{e.sample->period} : Value{};
    case Source::kCallchain:
      return e.sample != nullptr ? Value{IpList{.ips = e.sample->callchain, .pid = pid_of(e)}}
                                 : Value{};
    case Source::kKernelStack:
      return e.sample != nullptr ? Value{stack_part(e, perf::abi::kContextKernel)} : Value{};
    case Source::kUserStack:
      return e.sample != nullptr ? Value{stack_part(e, perf::abi::kContextUser)} : Value{};
    case Source::kUserStackDwarf:
    case Source::kCallchainDwarf:
      return e.sample != nullptr
                 ? Value{schema_->unwound_stack(e, a.source == Source::kCallchainDwarf)}
                 : Value{};
    case Source::kProbe:
      return std::string_view(schema_->probes()[probe].name);
    case Source::kKind:
      return to_string(e.kind);
    case Source::kLost:
      if (const auto* l = std::get_if<perf::Lost>(&e.ref->record.body))
        return l->lost;
      if (const auto* ls = std::get_if<perf::LostSamples>(&e.ref->record.body))
        return ls->lost;
      return {};
    case Source::kAuxSize:
      if (const auto* x = std::get_if<perf::Aux>(&e.ref->record.body))
        return x->aux_size;
      return {};
    case Source::kTracefs:
    case Source::kTracefsElement:
    case Source::kPayload:
    case Source::kSyscallName:
      if (e.sample == nullptr)
        return {};
      return read_raw(a, probe, e.sample->raw);
    case Source::kReg: {
      if (e.sample == nullptr || e.sample->regs_user.abi == 0)
        return {};
      const auto& regs = e.sample->regs_user.regs;
      const auto slot = static_cast<std::uint64_t>(a.slot);
      if (slot >= regs.size)
        return {};
      if (a.type == FieldType::kInt)
        return static_cast<std::int64_t>(regs[slot]);
      return regs[slot];
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------
// Schema

namespace {

using Source = FieldRef::Source;

struct SampleFieldDef {
  std::string_view name;
  Source source;
  FieldType type;
  std::uint64_t needs;  // sample_type bit the probe must sample, or 0
};
constexpr SampleFieldDef kSampleFields[] = {
    {"pid", Source::kPid, FieldType::kInt, 0},
    {"tid", Source::kTid, FieldType::kInt, 0},
    {"comm", Source::kComm, FieldType::kString, 0},
    {"cpu", Source::kCpu, FieldType::kInt, 0},
    {"time", Source::kTime, FieldType::kUint, 0},
    {"ip", Source::kIp, FieldType::kUint, PERF_SAMPLE_IP},
    {"addr", Source::kAddr, FieldType::kUint, PERF_SAMPLE_ADDR},
    {"period", Source::kPeriod, FieldType::kUint, PERF_SAMPLE_PERIOD},
    {"callchain", Source::kCallchain, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"kstack", Source::kKernelStack, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"ustack", Source::kUserStack, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"probe", Source::kProbe, FieldType::kString, 0},
    {"kind", Source::kKind, FieldType::kString, 0},
    {"lost", Source::kLost, FieldType::kUint, 0},
    {"aux_size", Source::kAuxSize, FieldType::kUint, 0},
};

struct RegDef {
  std::string_view name;
  int reg;
  FieldType type;
};
#if defined(__x86_64__)
// x86-64 SysV argument registers, and rax for the return value (arch/x86/include/uapi/asm/
// perf_regs.h order, which is the order the kernel writes sample_regs_user in).
constexpr RegDef kRegs[] = {
    {"arg0", PERF_REG_X86_DI, FieldType::kUint},  {"arg1", PERF_REG_X86_SI, FieldType::kUint},
    {"arg2", PERF_REG_X86_DX, FieldType::kUint},  {"arg3", PERF_REG_X86_CX, FieldType::kUint},
    {"arg4", PERF_REG_X86_R8, FieldType::kUint},  {"arg5", PERF_REG_X86_R9, FieldType::kUint},
    {"retval", PERF_REG_X86_AX, FieldType::kInt},
};
#else
// TODO(stages): argument registers of other architectures.
constexpr RegDef kRegs[] = {{"", -1, FieldType::kNone}};
#endif

FieldType tracefs_type(const tracefs::Field& f) noexcept {
  if (f.is_string)
    return FieldType::kString;
  const bool array = f.array_len.has_value() || f.is_data_loc || f.is_rel_loc;
  if (array)
    return f.element_size == 8 ? FieldType::kIps : FieldType::kNone;
  return f.is_signed ? FieldType::kInt : FieldType::kUint;
}

/// Whether a probe's samples carry what a DWARF unwind of the user stack needs: every register
/// the CFI may name and a copy of the stack.
bool dwarf_unwinds(const ProbeInfo& info) noexcept {
  return info.layout.has(PERF_SAMPLE_REGS_USER) && info.layout.has(PERF_SAMPLE_STACK_USER) &&
         symbols::UserRegs::unwindable(info.sample_regs_user);
}

/// The candidate nearest to `name`, when near enough to be a typo; empty if none.
std::string closest(std::string_view name, const std::vector<std::string>& candidates) {
  auto near = detail::nearest(name, candidates, {.max_distance = 2, .related_only = false});
  return near.empty() ? std::string() : std::move(near.front());
}

}  // namespace

PayloadSchema payload_from_btf(const bpf::StructSchema& s) {
  // The BPF output channel's struct, as its BTF describes it: integers by signedness, char
  // arrays as strings, arrays of integers element by element ("args[0]", ...).
  PayloadSchema out;
  for (const auto& f : s.fields) {
    using K = bpf::FieldKind;
    const bool scalar_size = f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8;
    switch (f.kind) {
      case K::kSigned:
      case K::kUnsigned:
        if (scalar_size && f.bit_size == 0) {
          out.push_back({.name = f.name,
                         .offset = f.offset,
                         .size = f.size,
                         .kind = f.kind == K::kSigned ? PayloadField::Kind::kInt
                                                      : PayloadField::Kind::kUint});
        }
        break;
      case K::kPointer:
        out.push_back(
            {.name = f.name, .offset = f.offset, .size = 8, .kind = PayloadField::Kind::kUint});
        break;
      case K::kString:
        out.push_back({.name = f.name,
                       .offset = f.offset,
                       .size = f.size,
                       .kind = PayloadField::Kind::kString});
        break;
      case K::kArray: {
        const std::uint32_t es = f.element_size;
        if (es != 1 && es != 2 && es != 4 && es != 8)
          break;
        for (std::uint32_t i = 0; i < f.count; ++i) {
          out.push_back({.name = fmt::format("{}[{}]", f.name, i),
                         .offset = f.offset + i * es,
                         .size = es,
                         .kind = PayloadField::Kind::kUint});
        }
        break;
      }
      case K::kOther:
        if (f.size == 8 && f.type_name == "double")
          out.push_back(
              {.name = f.name, .offset = f.offset, .size = 8, .kind = PayloadField::Kind::kDouble});
        break;
      case K::kStruct:
        break;
    }
  }
  return out;
}

Schema::Schema(std::span<const ProbeInfo> probes,
               std::span<const PayloadSchema> payloads,
               CommCache& comm)
    : probes_(probes.begin(), probes.end()),
      payloads_(payloads.begin(), payloads.end()),
      comm_(&comm) {
  payloads_.resize(probes_.size());
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (const auto& pl = probes_[i].payload; payloads_[i].empty() && pl.has_value())
      payloads_[i] = payload_from_btf(*pl);
  }
}

std::optional<std::uint32_t> Schema::probe_index(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (probes_[i].name == name)
      return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

namespace {

/// `syscall`: the system call's name, where the event's own fields only have its number.
constexpr std::string_view kSyscallField = "syscall";

/// raw_syscalls:sys_enter/sys_exit read `id` and name it; syscalls:sys_enter_X/sys_exit_X are
/// one system call each: X (the kernel's name, e.g. "newfstatat").
std::optional<FieldRef::Accessor> syscall_accessor(const ProbeInfo& info) {
  if (!info.format || info.format->field(kSyscallField) != nullptr)
    return std::nullopt;
  const auto& fmt = *info.format;
  if (fmt.system == "raw_syscalls") {
    const tracefs::Field* id = fmt.field("id");
    if (id == nullptr || id->is_string || id->array_len || id->is_data_loc || id->is_rel_loc)
      return std::nullopt;
    return FieldRef::Accessor{
        .source = Source::kSyscallName, .type = FieldType::kString, .field = id};
  }
  if (fmt.system == "syscalls") {
    for (std::string_view prefix : {"sys_enter_", "sys_exit_"}) {
      if (fmt.name.starts_with(prefix) && fmt.name.size() > prefix.size())
        return FieldRef::Accessor{.source = Source::kSyscallName,
                                  .type = FieldType::kString,
                                  .offset = static_cast<std::uint32_t>(prefix.size())};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<FieldRef::Accessor> Schema::resolve(std::uint32_t probe,
                                                  std::string_view name) const {
  const ProbeInfo& info = probes_[probe];
  // The event's own fields (tracepoint format, BPF payload) come first: in sched_wakeup `pid`
  // is the woken task, while the sample's pid is the waker. "sample.pid" names the sample's.
  const auto sample_field = [&](std::string_view n) -> std::optional<FieldRef::Accessor> {
    for (const auto& d : kSampleFields) {
      if (d.name != n)
        continue;
      if (d.needs != 0 && !info.layout.has(d.needs))
        return std::nullopt;
      if ((d.source == Source::kUserStack || d.source == Source::kCallchain) && dwarf_unwinds(info))
        return FieldRef::Accessor{.source = d.source == Source::kUserStack
                                                ? Source::kUserStackDwarf
                                                : Source::kCallchainDwarf,
                                  .type = d.type};
      return FieldRef::Accessor{.source = d.source, .type = d.type};
    }
    return std::nullopt;
  };
  if (name.starts_with("sample."))
    return sample_field(name.substr(7));
  if (info.format) {
    std::string_view base = name;
    std::optional<std::uint32_t> index;
    if (const auto open = name.find('['); open != std::string_view::npos && name.back() == ']') {
      base = name.substr(0, open);
      const auto digits = name.substr(open + 1, name.size() - open - 2);
      std::uint32_t i = 0;
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
      if (ec != std::errc{} || p != digits.data() + digits.size())
        return std::nullopt;
      index = i;
    }
    if (const tracefs::Field* f = info.format->field(base)) {
      if (!index) {
        const FieldType t = tracefs_type(*f);
        if (t == FieldType::kNone)
          return std::nullopt;
        return FieldRef::Accessor{.source = Source::kTracefs, .type = t, .field = f};
      }
      const bool array = f->array_len.has_value() || f->is_data_loc || f->is_rel_loc;
      const std::uint32_t es = f->element_size;
      if (!array || f->is_string || (es != 1 && es != 2 && es != 4 && es != 8) ||
          (f->array_len && *index >= *f->array_len))
        return std::nullopt;
      return FieldRef::Accessor{.source = Source::kTracefsElement,
                                .type = f->is_signed ? FieldType::kInt : FieldType::kUint,
                                .size = es,
                                .index = *index,
                                .is_signed = f->is_signed,
                                .field = f};
    }
  }
  if (name == kSyscallField) {
    if (auto a = syscall_accessor(info))
      return a;
  }
  for (const auto& pf : payloads_[probe]) {
    if (pf.name != name)
      continue;
    FieldRef::Accessor a{.source = Source::kPayload, .offset = pf.offset, .size = pf.size};
    switch (pf.kind) {
      case PayloadField::Kind::kInt:
        a.type = FieldType::kInt;
        a.is_signed = true;
        break;
      case PayloadField::Kind::kUint:
        a.type = FieldType::kUint;
        break;
      case PayloadField::Kind::kDouble:
        a.type = FieldType::kDouble;
        break;
      case PayloadField::Kind::kString:
        a.type = FieldType::kString;
        break;
    }
    return a;
  }
  if (auto s = sample_field(name))
    return s;
  for (const auto& r : kRegs) {
    if (r.name != name || r.reg < 0)
      continue;
    const int slot = perf::reg_slot(info.sample_regs_user, r.reg);
    if (slot < 0 || !info.layout.has(PERF_SAMPLE_REGS_USER))
      return std::nullopt;
    return FieldRef::Accessor{.source = Source::kReg, .type = r.type, .slot = slot};
  }
  return std::nullopt;
}

IpList Schema::unwound_stack(const Event& e, bool with_kernel) const noexcept {
  constexpr std::size_t kMaxFrames = 127;  // perf's default kernel.perf_event_max_stack
  const perf::Sample& s = *e.sample;
  unwound_.resize(kMaxFrames + 2);
  std::size_t n = 0;
  if (with_kernel) {  // the kernel's part as the kernel wrote it, markers included
    for (std::uint64_t i = 0; i < s.callchain.size && n < kMaxFrames; ++i) {
      if (s.callchain[i] == perf::abi::kContextUser)
        break;
      unwound_[n++] = s.callchain[i];
    }
  }
  const std::uint32_t pid = pid_of(e);
#if defined(__x86_64__)
  if (s.regs_user.abi != 0 && pid != 0) {
    const auto regs =
        symbols::UserRegs::from_perf(s.regs_user.regs, probes_[e.probe()].sample_regs_user);
    const auto stack =
        s.stack_user.first(std::min<std::size_t>(s.stack_user.size(), s.stack_user_dyn_size));
    if (with_kernel)
      unwound_[n++] = perf::abi::kContextUser;
    try {
      n += symbolizer().unwind_user(pid, regs, stack,
                                    std::span(unwound_).subspan(n, kMaxFrames + 2 - n));
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): out of memory: no frames
    }
  }
#endif
  return {.ips = {.data = reinterpret_cast<const std::byte*>(unwound_.data()), .size = n},
          .pid = pid};
}

symbols::Symbolizer& Schema::symbolizer() const {
  if (!symbolizer_)
    symbolizer_ = std::make_unique<symbols::Symbolizer>(symbolize_options_);
  return *symbolizer_;
}

std::optional<FieldRef> Schema::bind(std::string_view name,
                                     const SourceRegion& where,
                                     Diagnostics& diags) const {
  FieldRef ref;
  ref.name_ = std::string(name);
  ref.schema_ = this;
  for (std::size_t i = 0; i < derived_.size(); ++i) {
    if (derived_[i].first == name) {
      ref.derived_ = {
          .source = Source::kDerived, .type = derived_[i].second, .slot = static_cast<int>(i)};
      ref.type_ = derived_[i].second;
      return ref;
    }
  }
  bool any = false;
  ref.by_probe_.resize(probes_.size());
  for (std::uint32_t p = 0; p < probes_.size(); ++p) {
    if (auto a = resolve(p, name)) {
      if (a->source == Source::kComm)
        comm_bound_ = true;
      if (a->source == Source::kCallchain || a->source == Source::kKernelStack ||
          a->source == Source::kUserStack || a->source == Source::kUserStackDwarf ||
          a->source == Source::kCallchainDwarf)
        stacks_bound_ = true;
      ref.by_probe_[p] = *a;
      if (!any)
        ref.type_ = a->type;
      any = true;
    }
  }
  if (any)
    return ref;

  std::string listing;
  std::vector<std::string> all;
  for (std::uint32_t p = 0; p < probes_.size(); ++p) {
    auto names = field_names(p);
    listing += fmt::format("{}probe '{}' ({}) has: {}", listing.empty() ? "" : "; ",
                           probes_[p].name, probes_[p].spec, fmt::join(names, ", "));
    all.insert(all.end(), names.begin(), names.end());
  }
  if (probes_.empty())
    listing = "the pipeline has no probes";
  std::string hint = listing;
  if (auto c = closest(name, all); !c.empty())
    hint = fmt::format("did you mean '{}'? {}", c, listing);
  diags.add(where, fmt::format("unknown field '{}'", name), std::move(hint));
  return std::nullopt;
}

std::vector<std::string> Schema::field_names(std::uint32_t probe) const {
  std::vector<std::string> out;
  if (probe >= probes_.size())
    return out;
  const ProbeInfo& info = probes_[probe];
  for (const auto& d : kSampleFields) {
    if (d.needs == 0 || info.layout.has(d.needs))
      out.emplace_back(d.name);
  }
  auto payload = payload_field_names(probe);
  out.insert(out.end(), payload.begin(), payload.end());
  if (syscall_accessor(info))
    out.emplace_back(kSyscallField);
  for (const auto& r : kRegs) {
    if (r.reg >= 0 && info.layout.has(PERF_SAMPLE_REGS_USER) &&
        perf::reg_slot(info.sample_regs_user, r.reg) >= 0)
      out.emplace_back(r.name);
  }
  for (const auto& d : derived_)
    out.push_back(d.first);
  return out;
}

std::vector<std::string> Schema::payload_field_names(std::uint32_t probe) const {
  std::vector<std::string> out;
  if (probe >= probes_.size())
    return out;
  if (const auto& fmt = probes_[probe].format) {
    for (const auto& f : fmt->fields) {
      if (!f.is_common && tracefs_type(f) != FieldType::kNone)
        out.push_back(f.name);
    }
  }
  for (const auto& pf : payloads_[probe])
    out.push_back(pf.name);
  return out;
}

std::optional<std::uint32_t> Schema::add_derived(std::string name, FieldType type) {
  if (derived_.size() >= kMaxDerived)
    return std::nullopt;
  for (const auto& d : derived_) {
    if (d.first == name)
      return std::nullopt;
  }
  derived_.emplace_back(std::move(name), type);
  return static_cast<std::uint32_t>(derived_.size() - 1);
}

// ---------------------------------------------------------------------------------------------
// Sink

void Sink::Closer::operator()(std::FILE* f) const noexcept {
  if (f != nullptr)
    std::fclose(f);
}

Sink Sink::to_file(std::FILE* file) noexcept {
  Sink s;
  s.file_ = file;
  return s;
}

Sink Sink::to_string(std::string* text) noexcept {
  Sink s;
  s.text_ = text;
  return s;
}

Result<Sink> Sink::open(const std::string& path) {
  TRACER_ASSIGN_OR_RETURN(auto fd, open_output_file(path));
  std::FILE* f = ::fdopen(fd.get(), "w");
  if (f == nullptr) {
    const int err = errno;
    return fail(err, fmt::format("sink: cannot write '{}': {}", path, std::strerror(err)));
  }
  [[maybe_unused]] const int owned_by_file = fd.release();
  Sink s;
  s.owned_.reset(f);
  s.file_ = f;
  return s;
}

void Sink::write(std::string_view bytes) noexcept {
  if (text_ != nullptr) {
    try {
      text_->append(bytes);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a test sink out of memory drops output
    }
  } else if (file_ != nullptr) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() && error_ == 0)
      error_ = errno != 0 ? errno : EIO;
  }
}

void Sink::flush() noexcept {
  if (file_ != nullptr && (std::fflush(file_) != 0 || std::ferror(file_) != 0) && error_ == 0)
    error_ = errno != 0 ? errno : EIO;
}

std::string folded_text(const Stack& s) {
  std::string out;
  for (const auto& f : std::views::reverse(s.frames)) {
    if (!out.empty())
      out += ';';
    out += symbols::frame_label(f, /*with_offset=*/false);
  }
  return out;
}

std::string to_text(const Cell& c) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return {};
        else if constexpr (std::is_same_v<T, std::string>)
          return v;
        else if constexpr (std::is_same_v<T, Stack>)
          return folded_text(v);
        else
          return fmt::format("{}", v);
      },
      c);
}

// ---------------------------------------------------------------------------------------------
// StageOptions

StageOptions::StageOptions(const StageSpec& spec, const ConfigValue& table, Diagnostics& diags)
    : table_(&table), diags_(&diags) {
  // The validator the recipe loader runs too: one check and one wording for each mistake.
  core::check_stage_options(spec, table, diags);
}

const ConfigValue* StageOptions::get(std::string_view name) const noexcept {
  return table_->find(name);
}

SourceRegion StageOptions::where(std::string_view name) const {
  if (const auto* v = get(name))
    return v->where;
  return table_->where;
}

std::optional<std::string> StageOptions::string(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_string())
    return *v->string();
  return std::nullopt;
}

std::optional<std::int64_t> StageOptions::integer(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_int())
    return *v->integer();
  return std::nullopt;
}

std::optional<double> StageOptions::number(std::string_view name) const {
  if (const auto* v = get(name)) {
    if (v->is_int())
      return static_cast<double>(*v->integer());
    if (const auto* d = std::get_if<double>(&v->value))
      return *d;
  }
  return std::nullopt;
}

std::optional<bool> StageOptions::boolean(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_bool())
    return std::get<bool>(v->value);
  return std::nullopt;
}

std::optional<std::chrono::nanoseconds> StageOptions::duration(std::string_view name) {
  const auto* v = get(name);
  if (v == nullptr || !v->is_string())
    return std::nullopt;
  auto d = parse_duration(*v->string());
  if (!d)
    return std::nullopt;  // the constructor reported it
  if (d->count() <= 0) {
    diags_->add(v->where, fmt::format("option '{}' must be a positive duration", name));
    return std::nullopt;
  }
  return *d;
}

std::vector<std::pair<std::string, SourceRegion>> StageOptions::list(std::string_view name) const {
  std::vector<std::pair<std::string, SourceRegion>> out;
  const auto* v = get(name);
  if (v == nullptr)
    return out;
  if (const auto* s = v->string()) {
    out.emplace_back(*s, v->where);
  } else if (const auto* a = v->array()) {
    for (const auto& e : *a) {
      if (const auto* s2 = e.string())
        out.emplace_back(*s2, e.where);
    }
  }
  return out;
}

}  // namespace tracer
