// bpf::RingBuffer: the reading end of a BPF_MAP_TYPE_RINGBUF map (kernel 5.8+), mapped and
// consumed by tracer itself rather than by libbpf's ring_buffer, for one reason: libbpf
// publishes the consumer position after every record, so a producer that wakes only when the
// consumer has caught up (bpf_ringbuf_commit's default) wakes it again and again during one
// drain. Here the position is published once per consume() call.
//
// Layout (kernel/bpf/ringbuf.c): page 0 of the map fd is the consumer page (read-write, its
// first u64 the consumer position); from page 1 the producer page (its first u64 the producer
// position), then the data area mapped twice in a row, so a record that wraps the end is
// contiguous. Each record: an 8-byte header (u32 length with BUSY and DISCARD bits, u32 page
// offset), the payload, padded to 8 bytes.
//
// Usage:
//   auto rb = bpf::RingBuffer::open(obj, "rb");
//   epoll/Asio on rb->fd() (readable when data waits; the program decides when to wake);
//   rb->consume([](std::span<const std::byte> rec) { ... }, max_records);  // one publish
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "tracer/result.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::bpf {

class Object;

class RingBuffer {
 public:
  RingBuffer(RingBuffer&& o) noexcept;
  RingBuffer& operator=(RingBuffer&& o) noexcept;
  RingBuffer(const RingBuffer&) = delete;
  RingBuffer& operator=(const RingBuffer&) = delete;
  ~RingBuffer();

  /// Maps the RINGBUF map `map` of the loaded `obj`.
  /// @return the ring, or EINVAL when `map` is not a RINGBUF, the mmap errno otherwise.
  [[nodiscard]] static Result<RingBuffer> open(const Object& obj, std::string_view map);
  /// Maps the RINGBUF map `map_fd` (duplicated: the caller keeps its fd).
  [[nodiscard]] static Result<RingBuffer> open_fd(int map_fd);

  /// The map's fd: poll/epoll it for readability.
  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  /// Bytes of the data area (the map's max_entries).
  [[nodiscard]] std::uint64_t size() const noexcept { return mask_ + 1; }
  /// Bytes written and not yet consumed (committed or still being written).
  [[nodiscard]] std::uint64_t waiting() const noexcept;
  /// Where the producers are (past the last record reserved) and where the consumer is (past
  /// the last record handed on), both counted from the ring's creation: every record reserved
  /// before a producer_pos() was read once consumer_pos() reaches it.
  [[nodiscard]] std::uint64_t producer_pos() const noexcept;
  [[nodiscard]] std::uint64_t consumer_pos() const noexcept;

  /// Hands every committed record (payload only; discarded ones skipped) to `on_record`, in
  /// order, until the ring is empty, a record is still being written, or `max_records` were
  /// handed on; then publishes the consumer position once.
  /// @return records handed on.
  template <typename F>
  std::size_t consume(F&& on_record, std::size_t max_records = SIZE_MAX) {
    std::uint64_t cons = consumer_pos();
    const std::uint64_t prod = producer_pos();
    std::size_t n = 0;
    while (cons < prod && n < max_records) {
      const std::byte* hdr = data_ + (cons & mask_);
      const std::uint32_t len = record_len(hdr);
      if ((len & kBusyBit) != 0)
        break;  // reserved, not yet committed: records after it wait for it
      const std::uint32_t payload = len & ~(kBusyBit | kDiscardBit);
      cons += (std::uint64_t{payload} + kHeaderSize + 7) & ~std::uint64_t{7};
      if ((len & kDiscardBit) != 0)
        continue;
      on_record(std::span<const std::byte>(hdr + kHeaderSize, payload));
      ++n;
    }
    publish(cons);
    return n;
  }

 private:
  // include/uapi/linux/bpf.h: BPF_RINGBUF_BUSY_BIT, BPF_RINGBUF_DISCARD_BIT, BPF_RINGBUF_HDR_SZ.
  static constexpr std::uint32_t kBusyBit = 1U << 31;
  static constexpr std::uint32_t kDiscardBit = 1U << 30;
  static constexpr std::uint64_t kHeaderSize = 8;

  RingBuffer() = default;
  /// A record header's length word. Synchronizes with the kernel's smp_store_release() of it in
  /// bpf_ringbuf_commit() (the BUSY bit cleared once the payload is written). Inline: it is read
  /// for every record.
  [[nodiscard]] static std::uint32_t record_len(const std::byte* hdr) noexcept {
    return std::atomic_ref<const std::uint32_t>(*reinterpret_cast<const std::uint32_t*>(hdr))
        .load(std::memory_order_acquire);
  }
  void publish(std::uint64_t cons) noexcept;
  void unmap() noexcept;

  UniqueFd fd_;
  void* consumer_page_ = nullptr;  // page 0, read-write
  void* producer_area_ = nullptr;  // producer page + data twice, read-only
  std::size_t producer_len_ = 0;
  std::size_t page_size_ = 0;
  const std::byte* data_ = nullptr;
  std::uint64_t mask_ = 0;
};

}  // namespace tracer::bpf
