// The benchmarks' libbpf reference set-up: the shipped syscall_output program on
// sys_enter_getppid of one process, read through a libbpf perf_buffer whose wakeups are batched
// as the engine's output channel batches them.
#pragma once

#include <linux/perf_event.h>
#include <sys/types.h>

#include <cstdint>
#include <expected>
#include <string>

#include "tracer/bpf/object.hpp"
#include "tracer/engine.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::bench {

/// The program and the tracepoint event it is attached to (detached when the event closes).
struct SyscallOutputOnGetppid {
  bpf::Object object;
  perf::Event tracepoint;
};

/// Loads syscall_output (no arguments), lets `pid` through its tgid gate and attaches it
/// (SET_BPF, as the engine does) to one counting event on sys_enter_getppid of `pid`.
/// @return the attached program, or what failed.
inline std::expected<SyscallOutputOnGetppid, std::string> attach_syscall_output(pid_t pid) {
  auto obj = bpf::Object::open_shipped("syscall_output");
  if (!obj)
    return std::unexpected("syscall_output does not open");
  if (!obj->set_global("nr_args", std::uint32_t{0}) || !obj->load() ||
      !obj->update_elem<std::uint32_t, std::uint8_t>("tgids", static_cast<std::uint32_t>(pid), 1))
    return std::unexpected("syscall_output does not load (root and BPF needed)");
  auto fs = tracefs::Tracefs::open();
  if (!fs)
    return std::unexpected("no tracefs");
  auto id = fs->tracepoint_id({"syscalls", "sys_enter_getppid"});
  if (!id)
    return std::unexpected("no tracepoint syscalls:sys_enter_getppid");
  perf::EventAttr ta;
  ta.type(PERF_TYPE_TRACEPOINT).config(*id);
  auto tp = perf::Event::open(ta, {.pid = pid, .cpu = -1});
  if (!tp || !tp->set_bpf(*obj->program_fd("syscall_output")))
    return std::unexpected("cannot attach syscall_output");
  return SyscallOutputOnGetppid{std::move(*obj), std::move(*tp)};
}

/// The attr for perf_buffer__new_raw: RAW only, woken at a quarter of a channel-size ring like
/// the engine's output channel (perf_buffer__new would wake on every sample).
inline perf_event_attr reference_output_attr() {
  perf_event_attr attr{};
  attr.size = sizeof(attr);
  attr.type = PERF_TYPE_SOFTWARE;
  attr.config = PERF_COUNT_SW_BPF_OUTPUT;
  attr.sample_type = PERF_SAMPLE_RAW;
  attr.sample_period = 1;
  attr.watermark = 1;
  attr.wakeup_watermark = kDefaultOutputPages * 4096 / 4;
  return attr;
}

}  // namespace tracer::bench
