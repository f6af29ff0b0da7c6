// ConcurrentRelease::run: a few threads take the owners one at a time and destroy them.
#include "tracer/common/release.hpp"

#include <algorithm>
#include <atomic>
#include <thread>

namespace tracer::common {

void ConcurrentRelease::run(std::size_t max_threads) noexcept {
  if (items_.size() <= 1) {
    items_.clear();
    return;
  }
  std::atomic<std::size_t> next{0};
  const auto work = [&]() noexcept {
    for (std::size_t i = next.fetch_add(1); i < items_.size(); i = next.fetch_add(1))
      items_[i].reset();
  };
  std::vector<std::thread> threads;
  const std::size_t n = std::min(items_.size(), std::max<std::size_t>(max_threads, 1)) - 1;
  try {
    threads.reserve(n);
    for (std::size_t t = 0; t < n; ++t)
      threads.emplace_back(work);
  } catch (...) {  // NOLINT(bugprone-empty-catch): no more threads, this one does the rest
  }
  work();
  for (auto& t : threads)
    t.join();
  items_.clear();
}

}  // namespace tracer::common
