// Durations and sizes as people write them in recipes and on the command line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "tracer/result.hpp"

namespace tracer {

/// "250ms", "5s", "1.5s", "2m", "1h", "100us", "10ns"; a bare number is seconds.
/// @return the duration, or EINVAL with a message that shows the accepted forms.
[[nodiscard]] Result<std::chrono::nanoseconds> parse_duration(std::string_view text);

/// "4096", "64k"/"64KiB", "8m"/"8MiB", "1g"/"1GiB" (binary units).
/// @return the size in bytes, or EINVAL.
[[nodiscard]] Result<std::uint64_t> parse_size(std::string_view text);

}  // namespace tracer
