// The clocks of events and ticks: CLOCK_MONOTONIC is the probes' (their samples' TIME), the
// stages' interval ticks and the session's; CLOCK_REALTIME places them on the wall clock.
#pragma once

#include <time.h>

#include <chrono>
#include <cstdint>

namespace tracer::clocks {

/// `id` now, in ns since its epoch.
[[nodiscard]] inline std::int64_t now_ns(clockid_t id) noexcept {
  timespec ts{};
  ::clock_gettime(id, &ts);
  return (std::int64_t{ts.tv_sec} * 1'000'000'000) + ts.tv_nsec;
}

/// CLOCK_MONOTONIC now: the probes' sample time.
[[nodiscard]] inline std::chrono::nanoseconds monotonic_now() noexcept {
  return std::chrono::nanoseconds(now_ns(CLOCK_MONOTONIC));
}

}  // namespace tracer::clocks
