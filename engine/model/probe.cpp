#include "tracer/probe.hpp"

namespace tracer {

std::string_view to_string(DeliveryChannel c) noexcept {
  return c == DeliveryChannel::kRingbuf ? "ringbuf" : "perf";
}

std::optional<DeliveryChannel> parse_delivery_channel(std::string_view text) noexcept {
  if (text == "ringbuf")
    return DeliveryChannel::kRingbuf;
  if (text == "perf")
    return DeliveryChannel::kPerf;
  return std::nullopt;
}

std::string_view to_string(ProbeKind k) noexcept {
  switch (k) {
    case ProbeKind::kTracepoint:
      return "tracepoint";
    case ProbeKind::kKprobe:
      return "kprobe";
    case ProbeKind::kKretprobe:
      return "kretprobe";
    case ProbeKind::kUprobe:
      return "uprobe";
    case ProbeKind::kUretprobe:
      return "uretprobe";
    case ProbeKind::kSoftware:
      return "software";
    case ProbeKind::kHardware:
      return "hardware";
    case ProbeKind::kCache:
      return "cache";
    case ProbeKind::kRawPmu:
      return "pmu";
    case ProbeKind::kBreakpoint:
      return "breakpoint";
    case ProbeKind::kAux:
      return "aux";
    case ProbeKind::kBpfOutput:
      return "bpf-output";
    case ProbeKind::kUsdt:
      return "usdt";
  }
  return "?";
}

bool ProbeOptions::same_probe(const ProbeOptions& other) const {
  ProbeOptions a = *this;
  a.origin = other.origin;
  return a == other;
}

}  // namespace tracer
