// bpf::OutputChannel: BPF_OUTPUT perf events per CPU behind a PERF_EVENT_ARRAY (TOOLCHAIN.md,
// "bpf_perf_event_output ... works").
#include "tracer/bpf/output_channel.hpp"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <linux/bpf.h>

#include <algorithm>
#include <cerrno>
#include <ctime>

#include <fmt/format.h>

#include "tracer/bpf/object.hpp"
#include "tracer/perf/software.hpp"

namespace tracer::bpf {

OutputChannel& OutputChannel::operator=(OutputChannel&& other) noexcept {
  if (this != &other) {
    clear_map();
    map_fd_ = std::move(other.map_fd_);
    attr_ = other.attr_;
    layout_ = other.layout_;
    cpus_ = std::move(other.cpus_);
  }
  return *this;
}

OutputChannel::~OutputChannel() {
  clear_map();
}

void OutputChannel::clear_map() noexcept {
  if (!map_fd_)
    return;
  // The map holds a reference to each event's file (perf_event_array's bpf_event_entry): without
  // this the events would outlive us for as long as the map does.
  for (std::uint32_t cpu = 0; cpu < cpus_.size(); ++cpu) {
    if (cpus_[cpu])
      bpf_map_delete_elem(map_fd_.get(), &cpu);
  }
  map_fd_.reset();
}

perf::EventAttr OutputChannel::attr_for(const OutputChannelOptions& opts) noexcept {
  const std::uint64_t clock_fields =
      opts.payload_time_offset >= 0 ? 0 : PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
  perf::EventAttr attr;
  attr.type(PERF_TYPE_SOFTWARE)
      .config(PERF_COUNT_SW_BPF_OUTPUT)
      .sample_period(1)
      .sample_type(PERF_SAMPLE_RAW | clock_fields | opts.extra_sample_type)
      .clockid(CLOCK_MONOTONIC);
  if (opts.wakeup_watermark_bytes != 0) {
    attr.wakeup_watermark(opts.wakeup_watermark_bytes);
  } else {
    attr.wakeup_events(std::max<std::uint32_t>(opts.wakeup_events, 1));
  }
  if (opts.start_disabled)
    attr.flag(perf::Flag::kDisabled);
  return attr;
}

perf::SampleLayout OutputChannel::layout_for(const OutputChannelOptions& opts) noexcept {
  perf::SampleLayout layout = perf::SampleLayout::from(attr_for(opts));
  if (!layout.has(PERF_SAMPLE_TIME))
    layout.raw_time_offset = opts.payload_time_offset;
  return layout;
}

Result<OutputChannel> OutputChannel::open(const Object& obj,
                                          std::string_view map,
                                          const OutputChannelOptions& opts) {
  TRACER_ASSIGN_OR_RETURN(const bpf_map_type type, obj.map_type(map));
  if (type != BPF_MAP_TYPE_PERF_EVENT_ARRAY)
    return fail(EINVAL, fmt::format("bpf: map '{}' of '{}' is not a PERF_EVENT_ARRAY (type {})",
                                    map, obj.name(), static_cast<int>(type)));
  TRACER_ASSIGN_OR_RETURN(const int map_fd, obj.map_fd(map));
  TRACER_ASSIGN_OR_RETURN(const std::uint32_t slots, obj.map_max_entries(map));
  TRACER_ASSIGN_OR_RETURN(const std::vector<int> online, perf::online_cpus());

  OutputChannel ch;
  ch.map_fd_.reset(::fcntl(map_fd, F_DUPFD_CLOEXEC, 0));
  if (!ch.map_fd_)
    return fail(errno, fmt::format("bpf: dup of map fd {}: {}", map_fd,
                                   std::generic_category().message(errno)));
  ch.attr_ = attr_for(opts);
  ch.layout_ = layout_for(opts);

  ch.cpus_.resize(slots);
  for (const int cpu : online) {
    if (cpu < 0 || static_cast<std::uint32_t>(cpu) >= slots)
      continue;  // the map has one slot per possible CPU; an online CPU is always possible
    TRACER_ASSIGN_OR_RETURN(perf::Event ev, perf::Event::open(ch.attr_, {.pid = -1, .cpu = cpu}));
    TRACER_ASSIGN_OR_RETURN(perf::Ring ring,
                            perf::Ring::map(ev.fd(), {.data_pages = opts.data_pages}));
    const auto key = static_cast<std::uint32_t>(cpu);
    const int value = ev.fd();
    if (bpf_map_update_elem(ch.map_fd_.get(), &key, &value, BPF_ANY) != 0) {
      const int err = errno;
      return fail(err, fmt::format("bpf: storing BPF output event of CPU {} in map '{}': {}", cpu,
                                   map, std::generic_category().message(err)));
    }
    ch.cpus_[key].emplace(CpuOutput{cpu, std::move(ev), std::move(ring)});
  }
  return ch;
}

Status OutputChannel::enable() const {
  for (const auto& c : cpus_) {
    if (c)
      TRACER_TRY(c->event.enable());
  }
  return {};
}

Status OutputChannel::disable() const {
  for (const auto& c : cpus_) {
    if (c)
      TRACER_TRY(c->event.disable());
  }
  return {};
}

}  // namespace tracer::bpf
