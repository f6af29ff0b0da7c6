// CommCache: set-associative (kWays per set), LRU within a set, fixed storage.
#include "tracer/comm_cache.hpp"

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

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

// CommCache: set-associative (kWays per set), LRU within a set, fixed storage.

void CommCache::Free::operator()(Entry* p) const noexcept {
  std::free(p);  // NOLINT(cppcoreguidelines-no-malloc): calloc'd, see entries_
}

CommCache::CommCache(CommCacheOptions options) : options_(std::move(options)) {
  static_assert(std::is_trivially_copyable_v<Entry> && std::is_trivially_destructible_v<Entry>);
  const std::size_t sets = std::max<std::size_t>(1, (options_.capacity + kWays - 1) / kWays);
  size_ = sets * kWays;
  // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): zero pages on demand, see entries_
  entries_.reset(static_cast<Entry*>(std::calloc(size_, sizeof(Entry))));
  if (!entries_)
    throw std::bad_alloc();
}

CommCache::Entry& CommCache::slot_for(std::uint32_t tid, bool& found) noexcept {
  const std::size_t sets = size_ / kWays;
  // Fibonacci hashing spreads consecutive tids over the sets.
  const std::size_t set = static_cast<std::size_t>((tid * 0x9E3779B97F4A7C15ULL) >> 32) % sets;
  Entry* base = &entries_[set * kWays];
  Entry* victim = base;
  for (std::size_t w = 0; w < kWays; ++w) {
    Entry& e = base[w];
    if (e.stamp != 0 && e.tid == tid) {
      found = true;
      return e;
    }
    if (e.stamp < victim->stamp)
      victim = &e;
  }
  found = false;
  if (victim->stamp != 0)
    ++evictions_;
  victim->tid = tid;
  victim->len = 0;
  return *victim;
}

void CommCache::update(std::uint32_t tid, std::string_view comm) noexcept {
  bool found = false;
  Entry& e = slot_for(tid, found);
  const std::size_t n = std::min(comm.size(), kCommLen);
  std::memcpy(e.comm.data(), comm.data(), n);
  e.len = static_cast<std::uint8_t>(n);
  e.stamp = ++clock_;
}

std::size_t CommCache::seed() {
  if (!options_.read_proc)
    return 0;
  std::size_t n = 0;
  std::error_code ec;
  namespace fs = std::filesystem;
  for (const auto& proc : fs::directory_iterator(options_.proc_root, ec)) {
    const auto pid_name = proc.path().filename().string();
    if (pid_name.empty() || pid_name.find_first_not_of("0123456789") != std::string::npos)
      continue;
    std::error_code task_ec;
    for (const auto& task : fs::directory_iterator(proc.path() / "task", task_ec)) {
      std::uint32_t tid = 0;
      const auto name = task.path().filename().string();
      if (std::from_chars(name.data(), name.data() + name.size(), tid).ec != std::errc{})
        continue;
      (void)lookup(tid);  // a miss reads /proc/TID/comm into the cache
      ++n;
    }
  }
  return n;
}

void CommCache::fork(std::uint32_t parent, std::uint32_t child) noexcept {
  if (parent == child)
    return;  // the first thread of a new process forked by itself: nothing new
  std::array<char, kCommLen> name{};
  const std::string_view p = lookup(parent);
  const std::size_t n = std::min(p.size(), kCommLen);
  std::memcpy(name.data(), p.data(), n);  // before the child's slot may evict the parent's
  if (n == 0)
    return;
  update(child, std::string_view(name.data(), n));
}

std::string_view CommCache::lookup(std::uint32_t tid) noexcept {
  if (tid == 0)
    return "swapper";  // the idle tasks (perf script's name for tid 0)
  bool found = false;
  Entry& e = slot_for(tid, found);
  e.stamp = ++clock_;
  if (found)
    return {e.comm.data(), e.len};
  e.len = 0;
  if (options_.read_proc) {
    // /proc/TID/comm is "name\n"; a thread id works there too (the task dir is hidden, not
    // absent). The path goes in a stack buffer: no allocation on this path.
    char path[128];
    std::snprintf(path, sizeof(path), "%s/%u/comm", options_.proc_root.c_str(), tid);
    ++proc_reads_;
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[kCommLen + 1];
      const ssize_t got = ::read(fd, buf, sizeof(buf));
      ::close(fd);
      if (got > 0) {
        auto n = static_cast<std::size_t>(got);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0'))
          --n;
        n = std::min(n, kCommLen);
        std::memcpy(e.comm.data(), buf, n);
        e.len = static_cast<std::uint8_t>(n);
      }
    }
  }
  return {e.comm.data(), e.len};
}

}  // namespace tracer
