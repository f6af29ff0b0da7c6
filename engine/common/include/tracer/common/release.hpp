// ConcurrentRelease: kernel objects closed side by side. Closing a BPF link, or the last perf
// event of a tracepoint, waits for RCU grace periods inside close() (about 35 ms each on this
// machine's 6.18, 70 ms beside a busy CPU): a recipe of 12 tracepoints took 1.3 s to stop. Links
// closed on threads of their own share their grace periods; the last closes of tracepoint events
// still follow one another (the kernel holds its event_mutex through the wait), but no longer
// wait behind the links.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

namespace tracer::common {

class ConcurrentRelease {
 public:
  ConcurrentRelease() = default;
  ConcurrentRelease(const ConcurrentRelease&) = delete;
  ConcurrentRelease& operator=(const ConcurrentRelease&) = delete;
  ConcurrentRelease(ConcurrentRelease&&) noexcept = default;
  ConcurrentRelease& operator=(ConcurrentRelease&&) = delete;
  ~ConcurrentRelease() { run(); }

  /// Takes `owner` (an fd's owner: perf::Event, UniqueFd, a BPF link...) to destroy in run().
  template <typename T>
  void add(T&& owner) {
    items_.push_back(std::make_unique<Holder<std::remove_cvref_t<T>>>(std::forward<T>(owner)));
  }
  /// Takes every element of `owners`, which is left empty.
  template <typename T>
  void add_each(std::vector<T>& owners) {
    for (auto& o : owners)
      add(std::move(o));
    owners.clear();
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }

  /// Destroys what it holds, up to `max_threads` at a time, and returns once every one is gone.
  /// A thread that cannot start leaves its share to the caller's thread (nothing is left open).
  void run(std::size_t max_threads = 32) noexcept;

 private:
  struct Item {
    virtual ~Item() = default;
  };
  template <typename T>
  struct Holder final : Item {
    explicit Holder(T&& v) : value(std::move(v)) {}
    explicit Holder(const T& v) : value(v) {}
    T value;
  };
  std::vector<std::unique_ptr<Item>> items_;
};

}  // namespace tracer::common
