#include "core/ring_wait.hpp"

#include <boost/asio/execution/context.hpp>
#include <boost/asio/query.hpp>
#include <system_error>

#include "tracer/error.hpp"

namespace tracer::core {

RingWait::RingWait(Strand strand,
                   int fd,
                   const perf_event_mmap_page& meta,
                   std::uint64_t watermark,
                   Mode mode)
    : strand_(std::move(strand)), fd_(fd), meta_(&meta), watermark_(watermark) {
#if TRACER_RING_WAIT_REACTOR
  if (mode == Mode::kBest) {
    auto& ctx = boost::asio::query(strand_.get_inner_executor(), boost::asio::execution::context);
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
  portable_.emplace(strand_, fd_);
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
