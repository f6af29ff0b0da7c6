// RingWait on the real kernel: a page-fault sampling event on a child fills a ring by an exact
// amount (every first touch of a fresh page is one fault, one 16-byte sample; the child does
// nothing between the steps it is told to run), and the waits are checked for when they
// complete, for what completed them, and for the syscall each of them costs (a counting event on
// sys_enter_epoll_ctl of this thread).
#include "core/ring_wait.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "support/child.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {
namespace {

namespace asio = boost::asio;
using perf::EventAttr;

constexpr std::uint32_t kRecord = 16;  // header + PERF_SAMPLE_TID
constexpr std::uint32_t kWatermark = 4096;
constexpr std::size_t kStepPages = kWatermark / kRecord / 4;  // a quarter of the watermark

/// Faults in `pages` fresh pages of this process: one minor fault (one sample) each.
void fault_pages(std::size_t pages) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* p =
      ::mmap(nullptr, pages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  ::madvise(p, pages * page, MADV_NOHUGEPAGE);
  auto* bytes = static_cast<volatile char*>(p);
  for (std::size_t i = 0; i < pages; ++i)
    bytes[i * page] = 1;
  ::munmap(p, pages * page);
}

struct Outcome {
  boost::system::error_code ec;
  bool kernel_wakeup = false;
};

struct WaitKind {
  RingWait::Mode mode;
  bool one_thread;  // an io_context(1): handlers called directly, else on a strand
};

void PrintTo(const WaitKind& k, std::ostream* os) {
  *os << (k.mode == RingWait::Mode::kBest ? "best" : "portable") << " wait, "
      << (k.one_thread ? "io_context(1)" : "strand");
}

class RingWaitLive : public ::testing::TestWithParam<WaitKind> {
 protected:
  void SetUp() override {
    EventAttr a;
    a.type(PERF_TYPE_SOFTWARE)
        .config(PERF_COUNT_SW_PAGE_FAULTS)
        .sample_period(1)
        .sample_type(PERF_SAMPLE_TID)
        .flag(perf::Flag::kDisabled)
        .wakeup_watermark(kWatermark);
    child_.emplace([](int) { fault_pages(kStepPages); });
    auto ev = perf::Event::open(a, {.pid = child_->pid(), .cpu = -1});
    ASSERT_TRUE(ev.has_value()) << ev.error().describe();
    event_.emplace(std::move(*ev));
    auto ring = perf::Ring::map(event_->fd(), {.data_pages = 8});  // 32 KiB
    ASSERT_TRUE(ring.has_value()) << ring.error().describe();
    ring_.emplace(std::move(*ring));
    wait_.emplace(executor_, event_->fd(), *ring_->meta(), kWatermark, GetParam().mode);
    ASSERT_TRUE(event_->enable().has_value());
  }
  void TearDown() override {
    wait_.reset();
    io_.poll();  // the aborted waits' handlers
  }

  /// Why a test of the reactor-level wait's own behaviour does not apply, or nullptr.
  const char* reactor_level_only() const {
    if (GetParam().mode == RingWait::Mode::kPortable)
      return "the portable wait completes on every readiness of the descriptor";
    if (!wait_->reactor_level())
      return "this Asio has no reactor-level ring wait (Boost 1.74-1.77, epoll)";
    return nullptr;
  }

  /// The child faults in `quarters` quarters of a watermark's worth of samples.
  void produce(int quarters) {
    for (int i = 0; i < quarters; ++i)
      ASSERT_TRUE(child_->go());
  }

  /// Hands everything published back to the kernel, as a drain does.
  void drain() {
    ring_->load_head();
    for (auto p = ring_->peek(); !p.record.empty(); p = ring_->peek())
      ring_->consume(p.record.size());
    ring_->commit();
  }

  void start_wait() {
    outcome_.reset();
    wait_->async_wait([this](const boost::system::error_code& ec, bool kernel) {
      outcome_ = Outcome{ec, kernel};
    });
  }

  /// Runs the io_context until the wait completes or `limit` passes.
  bool run_until_done(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!outcome_ && std::chrono::steady_clock::now() < end) {
      io_.restart();
      io_.run_for(std::chrono::milliseconds(5));
    }
    return outcome_.has_value();
  }

  std::optional<testing::Child> child_;
  asio::io_context io_{GetParam().one_thread ? 1 : BOOST_ASIO_CONCURRENCY_HINT_DEFAULT};
  asio::any_io_executor executor_{serial_executor(io_.get_executor())};
  std::optional<perf::Event> event_;
  std::optional<perf::Ring> ring_;
  std::optional<RingWait> wait_;
  std::optional<Outcome> outcome_;
};

TEST_P(RingWaitLive, BelowTheWatermarkItWaitsForTheKernelsWakeup) {
  produce(1);  // a quarter of the watermark
  start_wait();
  EXPECT_FALSE(run_until_done(std::chrono::milliseconds(50)))
      << "no wakeup below the watermark, and the ring holds less than a wakeup's worth";
  produce(8);  // the kernel wakes the fd
  ASSERT_TRUE(run_until_done(std::chrono::seconds(5)));
  EXPECT_FALSE(outcome_->ec) << outcome_->ec.message();
  EXPECT_TRUE(outcome_->kernel_wakeup);
  EXPECT_GE(perf::unread_bytes(*ring_->meta()), kWatermark);
}

TEST_P(RingWaitLive, AWatermarksWorthAlreadyThereCompletesWithoutAWakeup) {
  if (const char* why = reactor_level_only())
    GTEST_SKIP() << why;
  produce(8);
  drain();     // what the wakeup was for is gone: the kernel's edge is spent
  produce(5);  // a watermark's worth again, past the next wakeup point
  start_wait();
  ASSERT_TRUE(run_until_done(std::chrono::seconds(5)));
  EXPECT_FALSE(outcome_->ec) << outcome_->ec.message();
  EXPECT_FALSE(outcome_->kernel_wakeup) << "the ring was looked at before waiting";
  EXPECT_GE(perf::unread_bytes(*ring_->meta()), kWatermark);
}

TEST_P(RingWaitLive, AWakeupForDataAlreadyDrainedDoesNotCompleteAnEmptyWait) {
  if (const char* why = reactor_level_only())
    GTEST_SKIP() << why;
  start_wait();
  produce(8);  // the kernel wakes the fd...
  drain();     // ...and a timer's drain takes the data first
  EXPECT_FALSE(run_until_done(std::chrono::milliseconds(50)))
      << "the wakeup found an empty ring: the wait goes on";
  produce(8);
  ASSERT_TRUE(run_until_done(std::chrono::seconds(5)));
  EXPECT_TRUE(outcome_->kernel_wakeup);
}

TEST_P(RingWaitLive, AHandlerStartsTheNextWait) {
  int completions = 0;
  std::function<void(const boost::system::error_code&, bool)> again;
  again = [&](const boost::system::error_code& ec, bool kernel) {
    ASSERT_FALSE(ec) << ec.message();
    outcome_ = Outcome{ec, kernel};
    if (++completions < 3) {
      drain();
      wait_->async_wait(again);  // from inside the completion, as the engine re-arms
    }
  };
  wait_->async_wait(again);
  for (int i = 0; i < 3; ++i) {
    outcome_.reset();
    produce(8);
    ASSERT_TRUE(run_until_done(std::chrono::seconds(5))) << "wait " << i;
  }
  EXPECT_EQ(completions, 3);
}

TEST_P(RingWaitLive, CancelCompletesThePendingWaitWithOperationAborted) {
  start_wait();
  EXPECT_FALSE(run_until_done(std::chrono::milliseconds(10)));
  wait_->cancel();
  ASSERT_TRUE(run_until_done(std::chrono::seconds(1)));
  EXPECT_EQ(outcome_->ec, asio::error::operation_aborted);
}

TEST_P(RingWaitLive, DestroyingItAbortsThePendingWait) {
  start_wait();
  wait_.reset();
  ASSERT_TRUE(run_until_done(std::chrono::seconds(1)));
  EXPECT_EQ(outcome_->ec, asio::error::operation_aborted);
}

// The point of the reactor-level wait: Boost 1.74's descriptor wait makes an epoll_ctl per wait,
// the ring wait none. Counted by the kernel on this thread (sys_enter_epoll_ctl), over waits that
// each end in a kernel wakeup.
TEST_P(RingWaitLive, EpollCtlCallsPerWait) {
  auto fs = tracefs::Tracefs::open();
  ASSERT_TRUE(fs.has_value()) << fs.error().describe();
  auto id = fs->tracepoint_id({"syscalls", "sys_enter_epoll_ctl"});
  ASSERT_TRUE(id.has_value()) << id.error().describe();
  EventAttr ca;
  ca.type(PERF_TYPE_TRACEPOINT).config(*id);
  auto calls = perf::Event::open(ca, {.pid = 0, .cpu = -1});
  ASSERT_TRUE(calls.has_value()) << calls.error().describe();
  constexpr int kWaits = 20;
  const auto before = calls->read();
  ASSERT_TRUE(before.has_value());
  for (int i = 0; i < kWaits; ++i) {
    drain();
    start_wait();
    produce(8);
    ASSERT_TRUE(run_until_done(std::chrono::seconds(5))) << "wait " << i;
    ASSERT_FALSE(outcome_->ec) << outcome_->ec.message();
  }
  const auto after = calls->read();
  ASSERT_TRUE(after.has_value());
  const auto made = after->values.at(0).value - before->values.at(0).value;
  if (wait_->reactor_level()) {
    EXPECT_EQ(made, 0U) << "the reactor-level wait re-arms nothing";
  } else {
    EXPECT_GE(made, static_cast<std::uint64_t>(kWaits))
        << "Asio's descriptor wait: an EPOLL_CTL_MOD per wait";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes,
                         RingWaitLive,
                         ::testing::Values(WaitKind{RingWait::Mode::kBest, false},
                                           WaitKind{RingWait::Mode::kPortable, false},
                                           WaitKind{RingWait::Mode::kBest, true},
                                           WaitKind{RingWait::Mode::kPortable, true}),
                         [](const auto& p) {
                           return std::string(p.param.mode == RingWait::Mode::kBest ? "Best"
                                                                                    : "Portable") +
                                  (p.param.one_thread ? "OneThread" : "Strand");
                         });

TEST(SerialExecutor, AnIoContextForOneThreadIsUsedAsIs) {
  asio::io_context one(1);
  const auto ex = serial_executor(one.get_executor());
  EXPECT_NE(target_as<asio::io_context::executor_type>(ex), nullptr)
      << "Asio assumes one thread runs an io_context(1): no strand needed";
}

TEST(SerialExecutor, AnyOtherIoContextGetsAStrand) {
  asio::io_context many;  // any number of threads may run it
  const auto ex = serial_executor(many.get_executor());
  EXPECT_EQ(target_as<asio::io_context::executor_type>(ex), nullptr);
  EXPECT_NE(target_as<asio::strand<asio::any_io_executor>>(ex), nullptr);
}

TEST(SerialExecutor, AStrandGivenIsWrappedInAnother) {
  // Not an io_context's executor itself (a strand the embedder made): serialised again, which
  // is safe whatever runs it.
  asio::io_context one(1);
  const auto ex = serial_executor(asio::make_strand(one.get_executor()));
  EXPECT_EQ(target_as<asio::io_context::executor_type>(ex), nullptr);
  EXPECT_NE(target_as<asio::strand<asio::any_io_executor>>(ex), nullptr);
}

}  // namespace
}  // namespace tracer::core
