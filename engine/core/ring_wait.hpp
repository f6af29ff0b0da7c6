// RingWait: waits, on the engine's strand, until a perf ring is worth draining.
//
// posix::stream_descriptor::async_wait costs a syscall per wait with Boost 1.74's epoll reactor:
// a wait is never "speculative" there, so every one re-arms the descriptor with
// epoll_ctl(EPOLL_CTL_MOD), ~1.2 us on this machine, once per wakeup of every ring. With that
// reactor, RingWait gives the reactor a wait operation of its own that it may perform
// speculatively. The operation looks at the ring's shared page instead of the descriptor:
//   - started (speculatively): it completes at once, with no syscall, when the ring already
//     holds a wakeup's worth of data (the watermark the kernel wakes at); otherwise it is
//     queued on the descriptor, which stays registered edge-triggered as Asio registers every
//     descriptor, with no re-arm;
//   - woken by the kernel: it completes if the ring holds anything; a wakeup for data a drain
//     already took, or a hangup (the traced task exited) with nothing to read, keeps it queued
//     instead of running an empty drain (a level-triggered hangup would otherwise make every
//     re-armed wait complete at once, for ever).
// With any other reactor (or Boost version) it is the stream_descriptor wait, which completes
// on every readiness of the descriptor.
//
// Usage (one wait at a time, all calls on the strand):
//   RingWait w(strand, event.fd(), *ring.meta(), watermark_bytes);
//   w.async_wait([](const boost::system::error_code& ec, bool kernel_wakeup) { drain...; });
//   w.cancel();  // a pending wait completes with operation_aborted
#pragma once

#include <linux/perf_event.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/strand.hpp>
#include <boost/system/error_code.hpp>
#include <boost/version.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <typeinfo>
#include <utility>

#include "tracer/perf/ring.hpp"

// The reactor-level wait is written against Boost 1.74's epoll_reactor interface (start_op with
// allow_speculative, reactor_op's perform/complete functions); other versions use the portable
// wait.
#if defined(__linux__) && BOOST_VERSION >= 107400 && BOOST_VERSION < 107800
#include <boost/asio/detail/reactor.hpp>
#if defined(BOOST_ASIO_HAS_EPOLL)
#define TRACER_RING_WAIT_REACTOR 1
#endif
#endif
#ifndef TRACER_RING_WAIT_REACTOR
#define TRACER_RING_WAIT_REACTOR 0
#endif

namespace tracer::core {

/// `ex`'s target when it is a T, else nullptr. (Boost 1.74's any_executor::target<T>() casts
/// without looking at the type.)
template <typename T>
const T* target_as(const boost::asio::any_io_executor& ex) noexcept {
  return ex && ex.target_type() == typeid(T) ? ex.target<T>() : nullptr;
}

/// The executor an engine's handlers run on: `ex` itself when it is an io_context's executor
/// and that io_context was made for one thread (concurrency hint 1, as tracer's CLI makes it:
/// Asio then assumes one thread runs it), else a new strand of `ex`. A strand costs every
/// completion a mutex and a queued operation; a single-threaded loop needs neither.
boost::asio::any_io_executor serial_executor(const boost::asio::any_io_executor& ex);

class RingWait {
 public:
  enum class Mode {
    kBest,      // the reactor-level wait where available, else the portable one
    kPortable,  // always the stream_descriptor wait
  };

  /// Watches `fd` (a ring's event; it must stay open while this lives, and is not closed here)
  /// for the ring whose shared page is `meta`; handlers run on `executor` (a strand, or an
  /// io_context executor that one thread runs: see serial_executor). `watermark` is the fill level
  /// in bytes the kernel wakes at (0: it wakes by sample count, and a wait never completes without
  /// a wakeup).
  /// @throws tracer::Error (runtime) if the reactor refuses the descriptor.
  RingWait(boost::asio::any_io_executor executor,
           int fd,
           const perf_event_mmap_page& meta,
           std::uint64_t watermark,
           Mode mode = Mode::kBest);
  RingWait(const RingWait&) = delete;
  RingWait& operator=(const RingWait&) = delete;
  /// Cancels a pending wait and stops watching the descriptor.
  ~RingWait();

  /// True when waits avoid the per-wait epoll_ctl (the reactor-level wait is in use).
  [[nodiscard]] bool reactor_level() const noexcept { return !portable_; }

  /// Calls handler(ec, kernel_wakeup) on the executor once the ring is worth draining.
  /// kernel_wakeup: the kernel's wakeup completed the wait (false: the ring held a watermark's
  /// worth when the wait started). ec: operation_aborted after cancel() or destruction.
  /// At most one wait at a time.
  template <typename Handler>
  void async_wait(Handler&& handler);

  /// A pending wait completes with operation_aborted.
  void cancel() noexcept;

 private:
#if TRACER_RING_WAIT_REACTOR
  using Reactor = boost::asio::detail::reactor;
  template <typename Handler>
  class Op;
  Reactor* reactor_ = nullptr;
  Reactor::per_descriptor_data data_{};
#endif
  boost::asio::any_io_executor executor_;
  // The executor is an io_context's own: a completion, which runs on a thread inside that
  // io_context's run(), calls the handler directly (what dispatch() would do, minus its cost).
  bool direct_ = false;
  int fd_;
  const perf_event_mmap_page* meta_;
  std::uint64_t watermark_;
  std::optional<boost::asio::posix::stream_descriptor> portable_;
};

#if TRACER_RING_WAIT_REACTOR
// One wait, owned by the reactor from start_op until its completion (or its destruction when
// the io_context shuts down with it pending, owner == nullptr).
template <typename Handler>
class RingWait::Op : public boost::asio::detail::reactor_op {
 public:
  Op(Handler h, const RingWait& w)
      : reactor_op(boost::system::error_code(), &Op::do_perform, &Op::do_complete),
        handler_(std::move(h)),
        executor_(w.direct_ ? boost::asio::any_io_executor() : w.executor_),
        meta_(w.meta_),
        watermark_(w.watermark_) {}

 private:
  // Under the descriptor's lock, on whichever thread runs the reactor: reads the shared page
  // only (the ring outlives the registration, and deregistering removes queued waits).
  static status do_perform(reactor_op* base) {
    auto* o = static_cast<Op*>(base);
    const std::uint64_t unread = perf::unread_bytes(*o->meta_);
    if (o->speculative_) {  // start_op's look, before any wakeup
      o->speculative_ = false;
      return o->watermark_ != 0 && unread >= o->watermark_ ? done : not_done;
    }
    o->kernel_wakeup_ = true;
    return unread != 0 ? done : not_done;
  }

  static void do_complete(void* owner,
                          boost::asio::detail::operation* base,
                          const boost::system::error_code& /*ec*/,
                          std::size_t /*bytes*/) {
    std::unique_ptr<Op> o(static_cast<Op*>(base));
    if (owner == nullptr)
      return;  // the io_context is shutting down: destroy the handler, do not call it
    if (!o->executor_) {
      // The wait's executor is this io_context's (one thread runs it): called here, with the
      // operation freed first so that the handler can start the next wait.
      Handler h = std::move(o->handler_);
      const boost::system::error_code ec = o->ec_;
      const bool kernel = o->kernel_wakeup_;
      o.reset();
      h(ec, kernel);
      return;
    }
    // On the strand, as the portable wait's handler would run (inline when the strand is free
    // and this thread runs the io_context).
    boost::asio::dispatch(o->executor_, [h = std::move(o->handler_), ec = o->ec_,
                                         kernel = o->kernel_wakeup_]() mutable { h(ec, kernel); });
  }

  Handler handler_;
  boost::asio::any_io_executor executor_;  // empty: call the handler directly
  const perf_event_mmap_page* meta_;
  std::uint64_t watermark_;
  bool speculative_ = true;
  bool kernel_wakeup_ = false;
};
#endif

template <typename Handler>
void RingWait::async_wait(Handler&& handler) {
  if (portable_) {
    portable_->async_wait(boost::asio::posix::stream_descriptor::wait_read,
                          [h = std::forward<Handler>(handler)](
                              const boost::system::error_code& ec) mutable { h(ec, true); });
    return;
  }
#if TRACER_RING_WAIT_REACTOR
  auto op = std::make_unique<Op<std::decay_t<Handler>>>(std::forward<Handler>(handler), *this);
  // allow_speculative: the operation is performed first, and queued without an epoll_ctl if
  // it is not done (the descriptor is registered for EPOLLIN | EPOLLET once, in the ctor).
  reactor_->start_op(Reactor::read_op, fd_, data_, op.release(), false, true);
#endif
}

}  // namespace tracer::core
