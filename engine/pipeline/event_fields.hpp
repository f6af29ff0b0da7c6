// Private to the core layer: what every field accessor reads of an event (its pid, tid, time,
// a part of its callchain, a number at an offset), shared by FieldRef and Schema.
#pragma once

#include <cstdint>
#include <cstring>

#include "tracer/perf/abi.hpp"
#include "tracer/schema.hpp"

namespace tracer::detail {

namespace abi = perf::abi;

inline std::uint32_t pid_of(const Event& e) noexcept {
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
inline IpList stack_part(const Event& e, std::uint64_t context) noexcept {
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

inline std::uint32_t tid_of(const Event& e) noexcept {
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

inline std::uint64_t time_of(const Event& e) noexcept {
  if (e.sample != nullptr)
    return e.sample->time;
  if (const auto* t = std::get_if<perf::TaskEvent>(&e.ref->record.body))
    return t->time;
  return e.ref->record.sample_id.time;
}

inline Value load_number(const std::byte* p, std::uint32_t size, bool is_signed) noexcept {
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

}  // namespace tracer::detail
