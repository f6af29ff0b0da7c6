// ConcurrentRelease: every owner it takes is destroyed by the time run() returns, side by side on
// threads of its own (a stop's last closes of tracepoint events and BPF links wait for the
// kernel's grace periods: one after another they made a 12-tracepoint recipe's stop 1.3 s).
#include "tracer/common/release.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "tracer/unique_fd.hpp"

namespace tracer::common {
namespace {

/// Destroyed: counts itself, notes its thread and waits (at most 2 s) until `wait_for` of them
/// are being destroyed at once.
struct Owner {
  struct Shared {
    std::atomic<int> destroyed{0};
    std::atomic<bool> overlapped{true};
    std::mutex mu;
    std::set<std::thread::id> threads;
    int wait_for = 0;
  };
  explicit Owner(Shared* s) : shared(s) {}
  Owner(Owner&& o) noexcept : shared(std::exchange(o.shared, nullptr)) {}
  Owner& operator=(Owner&&) = delete;
  Owner(const Owner&) = delete;
  Owner& operator=(const Owner&) = delete;
  ~Owner() {
    if (shared == nullptr)
      return;
    {
      const std::lock_guard lock(shared->mu);
      shared->threads.insert(std::this_thread::get_id());
    }
    shared->destroyed.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (shared->destroyed.load() < shared->wait_for) {
      if (std::chrono::steady_clock::now() > until) {
        shared->overlapped = false;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  Shared* shared;
};

TEST(ConcurrentRelease, EveryOwnerIsDestroyedSideBySideBeforeRunReturns) {
  Owner::Shared s;
  s.wait_for = 16;  // each waits for all: done one after another, the first would time out
  ConcurrentRelease release;
  for (int i = 0; i < 16; ++i)
    release.add(Owner(&s));
  EXPECT_EQ(release.size(), 16u);
  EXPECT_EQ(s.destroyed.load(), 0);
  release.run();
  EXPECT_EQ(s.destroyed.load(), 16);
  EXPECT_TRUE(s.overlapped.load());
  EXPECT_EQ(s.threads.size(), 16u);
  EXPECT_EQ(release.size(), 0u);
}

TEST(ConcurrentRelease, AtMostMaxThreadsAtOnceAndTheCallersOwn) {
  Owner::Shared s;
  ConcurrentRelease release;
  std::vector<Owner> owners;
  for (int i = 0; i < 10; ++i)
    owners.emplace_back(&s);
  release.add_each(owners);
  EXPECT_TRUE(owners.empty());
  release.run(1);  // the caller's thread alone
  EXPECT_EQ(s.destroyed.load(), 10);
  ASSERT_EQ(s.threads.size(), 1u);
  EXPECT_EQ(*s.threads.begin(), std::this_thread::get_id());
}

TEST(ConcurrentRelease, DescriptorsAreClosedByRunOrTheDestructor) {
  std::vector<int> fds;
  {
    ConcurrentRelease release;
    for (int i = 0; i < 8; ++i) {
      int p[2];
      ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
      fds.insert(fds.end(), {p[0], p[1]});
      release.add(UniqueFd(p[0]));
      release.add(UniqueFd(p[1]));
    }
    for (const int fd : fds)
      EXPECT_NE(::fcntl(fd, F_GETFD), -1) << fd << " closed before the release";
  }  // no run(): the destructor runs it
  for (const int fd : fds)
    EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << fd << " left open";
}

}  // namespace
}  // namespace tracer::common
