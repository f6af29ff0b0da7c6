// Thread names (comm) of every thread a pipeline sees: from COMM records as they pass, from
// /proc/TID/comm on a miss, in fixed storage.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// comm of every thread: from COMM records as they pass, from /proc/TID/comm on a miss.

struct CommCacheOptions {
  std::size_t capacity = 32768;     // entries (rounded up to a multiple of kWays); bounded memory
  std::string proc_root = "/proc";  // tests point this at a fake tree
  bool read_proc = true;
};

/// A bounded thread id -> comm map. Lookups and updates do not allocate; a miss reads
/// /proc/TID/comm once with open/read into the entry (an absent task is remembered as "").
class CommCache {
 public:
  explicit CommCache(CommCacheOptions options = {});
  static constexpr std::size_t kWays = 4;
  static constexpr std::size_t kCommLen = 16;  // TASK_COMM_LEN

  /// Reads the comm of every thread now in /proc (proc_root), so threads that exit before their
  /// first event is looked at keep their name. Does nothing without read_proc.
  /// @return the threads read.
  std::size_t seed();
  /// A COMM record: the thread was renamed (exec or prctl).
  void update(std::uint32_t tid, std::string_view comm) noexcept;
  /// A FORK record: the new thread `child` starts with the comm of `parent` (as the kernel's
  /// copy_process copies task->comm), so short-lived children keep a name after they exit.
  void fork(std::uint32_t parent, std::uint32_t child) noexcept;
  /// The comm of `tid` ("swapper" for tid 0, the idle tasks, as perf names them), or "" when
  /// unknown. The view stays valid until that entry is evicted (at
  /// least until `capacity / kWays` other threads were looked up).
  [[nodiscard]] std::string_view lookup(std::uint32_t tid) noexcept;
  [[nodiscard]] std::uint64_t proc_reads() const noexcept { return proc_reads_; }
  [[nodiscard]] std::uint64_t evictions() const noexcept { return evictions_; }

 private:
  struct Entry {
    std::uint32_t tid = 0;
    std::uint32_t stamp = 0;  // 0: free; else last use (LRU within a set)
    std::uint8_t len = 0;
    std::array<char, kCommLen> comm{};
  };
  Entry& slot_for(std::uint32_t tid, bool& found) noexcept;
  struct Free {
    void operator()(Entry* p) const noexcept;
  };
  CommCacheOptions options_;
  /// calloc'd: all-zero entries are free ones, and the pages of a large cache are only
  /// touched as threads fill them (a replay's cache holds 2^18 threads).
  std::unique_ptr<Entry[], Free> entries_;
  std::size_t size_ = 0;
  std::uint32_t clock_ = 0;
  std::uint64_t proc_reads_ = 0, evictions_ = 0;
};

}  // namespace tracer

#pragma GCC visibility pop
