#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>

#include "tracer/unique_fd.hpp"

namespace tracer::detail {

Result<std::string> read_text_fd(int fd,
                                 const std::filesystem::path& path,
                                 std::string_view subsystem,
                                 std::size_t max_bytes) {
  // Straight into the string, in reads as large as the file (a regular file's size is known:
  // one read and one allocation; an 8 KiB buffer appended to made a 5 MB kallsyms copy 660 reads
  // and a dozen reallocations) or growing with what came (procfs sizes are 0). One byte past
  // the bound at most: a file over it is refused, never cut.
  constexpr std::size_t kTail = 4096;  // after a file's known size: its end, or what it grew by
  const std::size_t limit = max_bytes == SIZE_MAX ? max_bytes : max_bytes + 1;
  std::size_t want = std::size_t{64} << 10;
  std::size_t known = 0;
  std::string out;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    known = std::min(static_cast<std::size_t>(st.st_size), max_bytes);
    want = known + 1;
    out.reserve(known + kTail + 1);
  }
  for (;;) {
    const std::size_t old = out.size();
    const std::size_t room = std::min(want, limit - old);
    ssize_t n = 0;
    int err = 0;
    out.resize_and_overwrite(old + room, [&](char* p, std::size_t) noexcept {
      n = ::read(fd, p + old, room);
      err = errno;
      return old + static_cast<std::size_t>(std::max<ssize_t>(n, 0));
    });
    if (n < 0) {
      if (err == EINTR)
        continue;
      return fail(
          err, fmt::format("{}: cannot read {}: {}", subsystem, path.string(), std::strerror(err)));
    }
    if (n == 0)
      return out;
    if (out.size() > max_bytes) {
      return fail(EFBIG, fmt::format("{}: {} is larger than {} bytes: not read", subsystem,
                                     path.string(), max_bytes));
    }
    // A file of unknown size: each read as large as the text so far.
    want = known != 0 && out.size() >= known ? kTail : std::max(want, out.size());
  }
}

namespace {

/// `path` opened as read_text_file opens it: a regular file only.
Result<UniqueFd> open_regular(const std::filesystem::path& path, std::string_view subsystem) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot open {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot stat {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode))
    return fail(EINVAL, fmt::format("{}: {} is not a regular file", subsystem, path.string()));
  return fd;
}

}  // namespace

Result<std::string> read_text_file(const std::filesystem::path& path,
                                   std::string_view subsystem,
                                   std::size_t max_bytes) {
  TRACER_ASSIGN_OR_RETURN(const UniqueFd fd, open_regular(path, subsystem));
  return read_text_fd(fd.get(), path, subsystem, max_bytes);
}

Result<std::size_t> read_text_lines(const std::filesystem::path& path,
                                    std::string_view subsystem,
                                    std::size_t max_bytes,
                                    const std::function<void(std::string_view line)>& on_line) {
  TRACER_ASSIGN_OR_RETURN(const UniqueFd fd, open_regular(path, subsystem));
  constexpr std::size_t kBuffer = std::size_t{64} << 10;
  const auto buf = std::make_unique_for_overwrite<char[]>(kBuffer);
  std::size_t have = 0;   // bytes in buf not given yet: the start of a line
  std::size_t total = 0;  // bytes read
  bool cut = false;       // the rest of a line longer than the buffer is being skipped
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf.get() + have, kBuffer - have);
    if (n < 0) {
      const int err = errno;
      if (err == EINTR)
        continue;
      return fail(
          err, fmt::format("{}: cannot read {}: {}", subsystem, path.string(), std::strerror(err)));
    }
    total += static_cast<std::size_t>(n);
    if (total > max_bytes) {
      return fail(EFBIG, fmt::format("{}: {} is larger than {} bytes: not read", subsystem,
                                     path.string(), max_bytes));
    }
    if (n == 0) {
      if (have != 0 && !cut)
        on_line({buf.get(), have});
      return total;
    }
    have += static_cast<std::size_t>(n);
    std::size_t at = 0;
    while (const void* eol = std::memchr(buf.get() + at, '\n', have - at)) {
      const auto len = static_cast<std::size_t>(static_cast<const char*>(eol) - (buf.get() + at));
      if (!cut)
        on_line({buf.get() + at, len});
      cut = false;
      at += len + 1;
    }
    if (at == 0 && have == kBuffer) {  // no end of line in a full buffer
      if (!cut)
        on_line({buf.get(), have});
      cut = true;
      have = 0;
      continue;
    }
    std::memmove(buf.get(), buf.get() + at, have - at);
    have -= at;
  }
}

}  // namespace tracer::detail
