// Reading the small text files of procfs, sysfs and tracefs.
#pragma once

#include <charconv>
#include <cstddef>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "tracer/result.hpp"

namespace tracer::detail {

/// Reads a whole file (opened O_CLOEXEC, EINTR retried), stopping after `max_bytes` (a guard
/// against an unexpectedly huge file under a fake root).
/// @return the contents, or the errno of open()/read() with "<subsystem>: cannot open|read
/// <path>: <strerror>".
[[nodiscard]] Result<std::string> read_text_file(const std::filesystem::path& path,
                                                 std::string_view subsystem,
                                                 std::size_t max_bytes = std::size_t{1} << 20);

/// A whole string as an unsigned number in `base` (no sign, no spaces, no trailing text).
/// @return the value, or std::nullopt.
template <typename T>
[[nodiscard]] std::optional<T> parse_uint(std::string_view s, int base = 10) {
  T v{};
  const auto* end = s.data() + s.size();
  // NOLINTNEXTLINE(bugprone-suspicious-stringview-data-usage): from_chars is bounded by `end`.
  const auto [ptr, ec] = std::from_chars(s.data(), end, v, base);
  if (s.empty() || ec != std::errc() || ptr != end)
    return std::nullopt;
  return v;
}

}  // namespace tracer::detail
