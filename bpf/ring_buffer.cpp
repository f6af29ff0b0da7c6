#include "tracer/bpf/ring_buffer.hpp"

#include <bpf/bpf.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cstring>
#include <string>
#include <utility>

#include "tracer/bpf/object.hpp"

namespace tracer::bpf {

RingBuffer::RingBuffer(RingBuffer&& o) noexcept
    : fd_(std::move(o.fd_)),
      consumer_page_(std::exchange(o.consumer_page_, nullptr)),
      producer_area_(std::exchange(o.producer_area_, nullptr)),
      producer_len_(std::exchange(o.producer_len_, 0)),
      page_size_(o.page_size_),
      data_(std::exchange(o.data_, nullptr)),
      mask_(o.mask_) {}

RingBuffer& RingBuffer::operator=(RingBuffer&& o) noexcept {
  if (this != &o) {
    unmap();
    fd_ = std::move(o.fd_);
    consumer_page_ = std::exchange(o.consumer_page_, nullptr);
    producer_area_ = std::exchange(o.producer_area_, nullptr);
    producer_len_ = std::exchange(o.producer_len_, 0);
    page_size_ = o.page_size_;
    data_ = std::exchange(o.data_, nullptr);
    mask_ = o.mask_;
  }
  return *this;
}

RingBuffer::~RingBuffer() {
  unmap();
}

void RingBuffer::unmap() noexcept {
  if (consumer_page_ != nullptr)
    ::munmap(consumer_page_, page_size_);
  if (producer_area_ != nullptr)
    ::munmap(producer_area_, producer_len_);
  consumer_page_ = producer_area_ = nullptr;
  data_ = nullptr;
}

Result<RingBuffer> RingBuffer::open(const Object& obj, std::string_view map) {
  TRACER_ASSIGN_OR_RETURN(const auto type, obj.map_type(map));
  if (type != BPF_MAP_TYPE_RINGBUF)
    return fail(EINVAL, "ringbuf: map '" + std::string(map) + "' of '" + obj.name() +
                            "' is not a BPF_MAP_TYPE_RINGBUF");
  TRACER_ASSIGN_OR_RETURN(const int fd, obj.map_fd(map));
  return open_fd(fd);
}

Result<RingBuffer> RingBuffer::open_fd(int map_fd) {
  ::bpf_map_info info{};
  std::uint32_t len = sizeof(info);
  if (::bpf_obj_get_info_by_fd(map_fd, &info, &len) != 0)
    return fail(errno, "ringbuf: cannot read the map's info (fd=" + std::to_string(map_fd) + ")");
  if (info.type != BPF_MAP_TYPE_RINGBUF)
    return fail(EINVAL, "ringbuf: map fd=" + std::to_string(map_fd) + " is not a RINGBUF");
  // The kernel makes max_entries a power-of-two multiple of the page size (ringbuf_map_alloc).
  if (!std::has_single_bit(info.max_entries))
    return fail(EINVAL, "ringbuf: the map's size is not a power of two");
  RingBuffer rb;
  rb.fd_ = UniqueFd(::fcntl(map_fd, F_DUPFD_CLOEXEC, 0));
  if (!rb.fd_)
    return fail(errno, "ringbuf: cannot duplicate the map's fd");
  rb.page_size_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  rb.mask_ = info.max_entries - 1;
  void* c = ::mmap(nullptr, rb.page_size_, PROT_READ | PROT_WRITE, MAP_SHARED, rb.fd_.get(), 0);
  if (c == MAP_FAILED)
    return fail(errno,
                "ringbuf: failed to mmap the consumer page of map fd=" + std::to_string(map_fd));
  rb.consumer_page_ = c;
  // The producer page, then the data area twice (ringbuf_map_mmap_kern): a record that wraps
  // the end reads on contiguously.
  rb.producer_len_ = rb.page_size_ + 2 * std::size_t{info.max_entries};
  void* p = ::mmap(nullptr, rb.producer_len_, PROT_READ, MAP_SHARED, rb.fd_.get(),
                   static_cast<off_t>(rb.page_size_));
  if (p == MAP_FAILED)
    return fail(errno, "ringbuf: failed to mmap the data area of map fd=" + std::to_string(map_fd));
  rb.producer_area_ = p;
  rb.data_ = static_cast<const std::byte*>(p) + rb.page_size_;
  return rb;
}

// Synchronizes with the kernel's smp_store_release() of producer_pos in
// bpf_ringbuf_reserve()/__bpf_ringbuf_reserve().
std::uint64_t RingBuffer::producer_pos() const noexcept {
  return std::atomic_ref<const std::uint64_t>(*static_cast<const std::uint64_t*>(producer_area_))
      .load(std::memory_order_acquire);
}

std::uint64_t RingBuffer::consumer_pos() const noexcept {
  // Only this reader writes it.
  return std::atomic_ref<const std::uint64_t>(*static_cast<const std::uint64_t*>(consumer_page_))
      .load(std::memory_order_relaxed);
}

void RingBuffer::publish(std::uint64_t cons) noexcept {
  // Pairs with the kernel's smp_load_acquire(&rb->consumer_pos) in __bpf_ringbuf_reserve(): the
  // space before `cons` is read and may be written again.
  std::atomic_ref<std::uint64_t>(*static_cast<std::uint64_t*>(consumer_page_))
      .store(cons, std::memory_order_release);
}

std::uint64_t RingBuffer::waiting() const noexcept {
  return producer_pos() - consumer_pos();
}

}  // namespace tracer::bpf
