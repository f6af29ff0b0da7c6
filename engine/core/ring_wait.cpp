#include "ring_wait.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <boost/asio/strand.hpp>
#include <system_error>

#if BOOST_VERSION >= 107400 && BOOST_VERSION < 107800
#include <boost/asio/detail/concurrency_hint.hpp>
#include <boost/asio/detail/scheduler.hpp>
#define TRACER_HAS_SCHEDULER_HINT 1
#else
#define TRACER_HAS_SCHEDULER_HINT 0
#endif

#include "tracer/error.hpp"

namespace tracer::core {

namespace {

/// True when `ex` is an io_context's executor and that io_context was made for one thread.
bool one_thread_io_context(const boost::asio::any_io_executor& ex) {
#if TRACER_HAS_SCHEDULER_HINT
  const auto* io = target_as<boost::asio::io_context::executor_type>(ex);
  if (io == nullptr)
    return false;
  // io_context(hint) hands its hint to its scheduler, the service that is its implementation.
  const int hint =
      boost::asio::use_service<boost::asio::detail::scheduler>(io->context()).concurrency_hint();
  return hint == 1 || !BOOST_ASIO_CONCURRENCY_HINT_IS_LOCKING(SCHEDULER, hint);
#else
  (void)ex;
  return false;  // no portable way to ask: a strand is always safe
#endif
}

}  // namespace

boost::asio::any_io_executor serial_executor(const boost::asio::any_io_executor& ex) {
  if (one_thread_io_context(ex))
    return ex;
  return boost::asio::make_strand(ex);
}

RingWait::RingWait(boost::asio::any_io_executor executor,
                   int fd,
                   const perf_event_mmap_page& meta,
                   std::uint64_t watermark,
                   Mode mode)
    : executor_(std::move(executor)),
      direct_(target_as<boost::asio::io_context::executor_type>(executor_) != nullptr),
      fd_(fd),
      meta_(&meta),
      watermark_(watermark) {
#if TRACER_RING_WAIT_REACTOR
  if (mode == Mode::kBest) {
    auto& ctx = boost::asio::query(executor_, boost::asio::execution::context);
    reactor_ = &boost::asio::use_service<Reactor>(ctx);
    // Puts the reactor's task on the scheduler, as Asio's own descriptor and timer services do
    // when they are created: without it an io_context with no other I/O object never waits on
    // epoll at all.
    reactor_->init_task();
    // EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLPRI | EPOLLET, once: what every Asio descriptor gets.
    if (const int err = reactor_->register_descriptor(fd_, data_); err != 0) {
      reactor_->cleanup_descriptor_data(data_);
      throw Error(ErrorCategory::kRuntime, {err, std::generic_category()},
                  "engine: the reactor refused a ring's fd (epoll_ctl ADD)");
    }
    return;
  }
#else
  (void)mode;
#endif
  // Not owned: release()d, never closed, in the destructor.
  portable_.emplace(executor_, fd_);
}

RingWait::~RingWait() {
  if (portable_) {
    [[maybe_unused]] const int fd = portable_->release();  // cancels a pending wait
    return;
  }
#if TRACER_RING_WAIT_REACTOR
  // As a descriptor that may be a dup: EPOLL_CTL_DEL now (the fd stays open), queued waits
  // complete with operation_aborted, then the reactor's state for it is freed.
  reactor_->deregister_descriptor(fd_, data_, false);
  reactor_->cleanup_descriptor_data(data_);
#endif
}

void RingWait::cancel() noexcept {
  if (portable_) {
    boost::system::error_code ignored;
    [[maybe_unused]] const auto& r = portable_->cancel(ignored);
    return;
  }
#if TRACER_RING_WAIT_REACTOR
  reactor_->cancel_ops(fd_, data_);
#endif
}

}  // namespace tracer::core
