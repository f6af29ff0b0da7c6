// FieldRef: reading a bound field from an event, a sample read in place or record bytes.
#include "tracer/schema.hpp"

#include "event_fields.hpp"

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
#include "tracer/syscall_names.hpp"

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

namespace abi = perf::abi;
using detail::load_number;
using detail::pid_of;
using detail::stack_part;
using detail::tid_of;
using detail::time_of;

// FieldRef

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

namespace {

/// Where probe `info`'s samples read in place hold pid, tid, cpu and time (bytes from the start
/// of InPlaceSample::bytes(), -1: absent), and where their raw() starts; nullopt for a probe
/// whose samples are never read in place.
struct InPlaceForm {
  std::int32_t pid = -1, tid = -1, cpu = -1, time = -1;
  std::int32_t comm = -1;  // a delivered sample's comm (ProbeInfo::delivered_comm)
  std::uint32_t raw = 0;
};
std::optional<InPlaceForm> in_place_form(const ProbeInfo& info) noexcept {
  if (info.delivered) {
    return InPlaceForm{
        .pid = offsetof(DeliveredHeader, pid),
        .tid = offsetof(DeliveredHeader, tid),
        .cpu = offsetof(DeliveredHeader, cpu),
        .time = offsetof(DeliveredHeader, time),
        .comm = info.delivered_comm ? std::int32_t{offsetof(DeliveredHeader, comm)} : -1,
        .raw = sizeof(DeliveredHeader)};
  }
  // perf::RingReader hands on in place the samples of a fixed layout whose time is its own
  // (not a BPF payload's: decode() reads that one from the payload).
  if (!info.layout.fixed || info.layout.raw_time_offset >= 0)
    return std::nullopt;
  const auto o = info.layout.fixed_offsets();
  return InPlaceForm{.pid = o.pid, .tid = o.tid, .cpu = o.cpu, .time = o.time, .raw = o.raw};
}

}  // namespace

bool FieldRef::reads_in_place(std::uint32_t probe) const noexcept {
  if (derived_.source == Source::kDerived)
    return false;
  if (probe >= by_probe_.size())
    return true;  // read() gives nothing either way
  const auto form = in_place_form(schema_->probes()[probe]);
  if (!form)
    return false;
  switch (by_probe_[probe].source) {
    case Source::kMissing:
    case Source::kProbe:
    case Source::kKind:
    case Source::kTracefs:
    case Source::kTracefsElement:
    case Source::kSyscallName:
      return true;
    case Source::kPid:
      return form->pid >= 0;
    case Source::kTid:
      return form->tid >= 0;
    case Source::kCpu:
      return form->cpu >= 0;
    case Source::kTime:
      return form->time >= 0;
    case Source::kComm:
      return form->comm >= 0;
    default:
      return false;
  }
}

std::optional<IntReader> FieldRef::int_reader(std::uint32_t probe) const noexcept {
  if (probe < in_place_readers_.size())
    return in_place_readers_[probe];
  return compute_int_reader(probe);
}

std::optional<IntReader> FieldRef::compute_int_reader(std::uint32_t probe) const noexcept {
  if (derived_.source == Source::kDerived)
    return std::nullopt;
  if (probe >= by_probe_.size())
    return IntReader{};
  const Accessor& a = by_probe_[probe];
  if (a.source == Source::kMissing)
    return IntReader{};
  const auto form = in_place_form(schema_->probes()[probe]);
  if (!form)
    return std::nullopt;
  // The words before raw() as read(InPlaceSample) gives them: pid, tid, cpu as int64, time
  // uint64.
  const auto header = [](std::int32_t offset, std::uint8_t size,
                         bool as_uint) -> std::optional<IntReader> {
    if (offset < 0)
      return std::nullopt;
    return IntReader{.offset = static_cast<std::uint32_t>(offset),
                     .size = size,
                     .is_signed = false,
                     .as_uint = as_uint,
                     .in_header = true};
  };
  switch (a.source) {
    case Source::kPid:
      return header(form->pid, 4, false);
    case Source::kTid:
      return header(form->tid, 4, false);
    case Source::kCpu:
      return header(form->cpu, 4, false);
    case Source::kTime:
      return header(form->time, 8, true);
    case Source::kComm:
      if (form->comm < 0)
        return std::nullopt;
      return IntReader{.offset = static_cast<std::uint32_t>(form->comm),
                       .size = sizeof(DeliveredHeader::comm),
                       .is_signed = false,
                       .as_uint = false,
                       .in_header = true,
                       .is_string = true};
    case Source::kTracefs: {
      const tracefs::Field* f = a.field;
      // tracefs::read_string's reading of a char array that fits a fixed key (16 bytes).
      if (a.type == FieldType::kString && f != nullptr && f->is_string && !f->is_data_loc &&
          !f->is_rel_loc && f->size != 0 && f->size <= 16) {
        return IntReader{.offset = static_cast<std::uint32_t>(form->raw + f->offset),
                         .size = static_cast<std::uint8_t>(f->size),
                         .is_signed = false,
                         .as_uint = false,
                         .in_header = false,
                         .is_string = true};
      }
      // tracefs::read_int's reading: a fixed-width field of 1, 2, 4 or 8 bytes.
      if ((a.type != FieldType::kInt && a.type != FieldType::kUint) || f == nullptr ||
          f->is_data_loc || f->is_rel_loc || f->array_len.has_value() ||
          (f->size != 1 && f->size != 2 && f->size != 4 && f->size != 8))
        return std::nullopt;
      return IntReader{.offset = static_cast<std::uint32_t>(form->raw + f->offset),
                       .size = static_cast<std::uint8_t>(f->size),
                       .is_signed = f->is_signed && f->size != 8,
                       .as_uint = a.type == FieldType::kUint,
                       .in_header = false};
    }
    default:
      return std::nullopt;
  }
}

Value FieldRef::read(const InPlaceSample& s) const noexcept {
  const std::uint32_t probe = s.probe();
  if (probe >= by_probe_.size())
    return {};
  const Accessor& a = by_probe_[probe];
  switch (a.source) {
    case Source::kPid:
    case Source::kTid:
    case Source::kCpu:
    case Source::kTime: {
      const auto r = int_reader(probe);
      std::uint64_t v = 0;
      if (!r || !r->read(s, v))
        return {};
      if (r->as_uint)
        return v;
      return static_cast<std::int64_t>(v);
    }
    case Source::kComm: {
      // The name at the hit (the program leaves it empty when it could not get it).
      const auto r = int_reader(probe);
      std::string_view comm;
      if (!r || !r->read_string(s, comm))
        return {};
      return comm;
    }
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

}  // namespace tracer
