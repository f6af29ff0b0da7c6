// Reading the small text files of procfs, sysfs and tracefs.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

#include "tracer/result.hpp"

namespace tracer::detail {

/// Reads a whole file as a root process must, the one reader of the layers: opened O_CLOEXEC
/// and O_NONBLOCK (a FIFO put in a file's place cannot block the read), a regular file only
/// (procfs, sysfs and tracefs files are), EINTR retried; procfs files such as /proc/kallsyms
/// report size 0, so the text grows as it is read, up to `max_bytes` (a guard against an
/// unexpectedly huge file under a fake root).
/// @return the contents; or the errno of open()/fstat()/read() with "<subsystem>: cannot
/// open|stat|read <path>: <strerror>"; EINVAL "<subsystem>: <path> is not a regular file";
/// EFBIG "<subsystem>: <path> is larger than N bytes: not read" (never a cut text).
[[nodiscard]] Result<std::string> read_text_file(const std::filesystem::path& path,
                                                 std::string_view subsystem,
                                                 std::size_t max_bytes = std::size_t{1} << 20);

/// read_text_file's reading part, for a file the caller opened and checked itself (its owner,
/// say) through the same fd: `path` and `subsystem` name it in errors.
[[nodiscard]] Result<std::string> read_text_fd(int fd,
                                               const std::filesystem::path& path,
                                               std::string_view subsystem,
                                               std::size_t max_bytes = std::size_t{1} << 20);

/// read_text_file's open, checks and bound, line by line through one reused buffer of 64 KiB
/// instead of a string of the whole file: for a large file of which a part is kept (kallsyms:
/// 5 MB of lines, of which the names are kept). `on_line` gets each line without its '\n',
/// valid during the call only; a last line without one counts too; a line longer than the
/// buffer is given cut to its first 64 KiB.
/// @return the bytes read, or read_text_file's errors.
[[nodiscard]] Result<std::size_t> read_text_lines(
    const std::filesystem::path& path,
    std::string_view subsystem,
    std::size_t max_bytes,
    const std::function<void(std::string_view line)>& on_line);

/// The bound for /proc/mounts: a host of many containers has thousands of mounts.
inline constexpr std::size_t kMaxMountsBytes = std::size_t{16} << 20;

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

/// `s` without leading and trailing white space (as std::isspace has it in the C locale).
[[nodiscard]] inline std::string_view trim(std::string_view s) noexcept {
  constexpr std::string_view kSpace = " \t\n\v\f\r";
  const auto first = s.find_first_not_of(kSpace);
  if (first == std::string_view::npos)
    return {};
  return s.substr(first, s.find_last_not_of(kSpace) - first + 1);
}

/// The lines of a text (procfs, sysfs, tracefs files), each without its '\n'; a last line
/// without one counts too, and an empty text has none.
/// Usage: for (const std::string_view line : detail::lines(text)) { ... }
class LineRange {
 public:
  explicit LineRange(std::string_view text) noexcept : text_(text) {}

  class iterator {
   public:
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;

    iterator() = default;
    explicit iterator(std::string_view rest) noexcept : rest_(rest) { ++*this; }
    std::string_view operator*() const noexcept { return line_; }
    iterator& operator++() noexcept {
      if (rest_.empty()) {
        done_ = true;
        return *this;
      }
      const auto eol = rest_.find('\n');
      line_ = rest_.substr(0, eol);
      rest_ = eol == std::string_view::npos ? std::string_view{} : rest_.substr(eol + 1);
      return *this;
    }
    iterator operator++(int) noexcept {
      auto old = *this;
      ++*this;
      return old;
    }
    bool operator==(std::default_sentinel_t) const noexcept { return done_; }

   private:
    std::string_view rest_;
    std::string_view line_;
    bool done_ = false;
  };

  [[nodiscard]] iterator begin() const noexcept { return iterator(text_); }
  [[nodiscard]] std::default_sentinel_t end() const noexcept { return {}; }

 private:
  std::string_view text_;
};

[[nodiscard]] inline LineRange lines(std::string_view text) noexcept {
  return LineRange(text);
}

}  // namespace tracer::detail
