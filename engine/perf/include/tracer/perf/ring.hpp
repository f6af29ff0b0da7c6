// Ring: the perf mmap ring buffer of one event (1 metadata page + 2^n data pages), optionally
// with an AUX area, read without copying.
//
// Usage (forward mode):
//   auto ring = Ring::map(event.fd(), {.data_pages = 64});
//   ring->load_head();                              // acquire: what the kernel published
//   for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
//     use(p.record);                                // valid until commit()
//     ring->consume(p.record.size());
//   }
//   ring->commit();                                 // release: hand the space back, once per batch
//
// Overwrite mode (write_backward events): the mapping is read-only, the kernel never waits for
// us, and snapshot() copies out the newest records.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "tracer/perf/abi.hpp"
#include "tracer/perf/aux_chunk.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/result.hpp"

namespace tracer::perf {

struct RingOptions {
  std::uint32_t data_pages = 8;  // power of two (the kernel insists)
  bool overwrite = false;        // the event has write_backward: map PROT_READ, use snapshot()
  std::uint64_t aux_bytes = 0;   // 0: no AUX area; else a power-of-two number of pages
  bool aux_overwrite = false;    // AUX snapshot mode: map the AUX area read-only
};

/// The user page's clock parameters (perf_event_mmap_page time_*), for TSC -> perf time.
struct TimeConv {
  std::uint16_t time_shift = 0;
  std::uint32_t time_mult = 0;
  std::uint64_t time_offset = 0;
  std::uint64_t time_zero = 0;
  std::uint64_t time_cycles = 0;
  std::uint64_t time_mask = 0;
  bool cap_user_time = false;
  bool cap_user_time_zero = false;
  bool cap_user_time_short = false;
  /// perf clock time of a raw cycle counter value (perf_event.h "time_zero" recipe).
  [[nodiscard]] std::uint64_t to_perf_time(std::uint64_t cyc) const noexcept;
};

struct AuxStats {
  std::uint64_t chunks = 0, bytes = 0;
  std::uint64_t truncated = 0, overwrite = 0, partial = 0, collision = 0;
  std::uint64_t invalid = 0;  // AUX records pointing outside what the area can hold
};

struct PeekResult {
  std::span<const std::byte> record;  // empty: nothing (more) to read, or error
  DecodeError error = DecodeError::kOk;
};

class Ring {
 public:
  Ring(const Ring&) = delete;
  Ring& operator=(const Ring&) = delete;
  Ring(Ring&& other) noexcept;
  Ring& operator=(Ring&& other) noexcept;
  ~Ring();

  /// mmaps the ring of `fd` (and its AUX area when aux_bytes > 0).
  /// @return the ring, or a Failure: EINVAL for a page count that is not a power of two, the
  /// mmap errno otherwise (EPERM: the locked-memory limit, kernel.perf_event_mlock_kb).
  [[nodiscard]] static Result<Ring> map(int fd, const RingOptions& opts);

  /// A ring over memory someone else laid out as the kernel would (synthetic tests, replay):
  /// `meta_and_data` is the metadata page followed by 2^n data pages; `aux` may be empty.
  /// The memory must outlive the Ring. No fd: pause_output is a no-op.
  [[nodiscard]] static Result<Ring> adopt(std::span<std::byte> meta_and_data,
                                          std::span<std::byte> aux,
                                          bool overwrite);

  [[nodiscard]] std::uint64_t data_size() const noexcept { return data_size_; }
  [[nodiscard]] bool overwrite() const noexcept { return overwrite_; }
  [[nodiscard]] int fd() const noexcept { return fd_; }

  // Forward reading -------------------------------------------------------------------------
  /// Acquire-loads data_head (pairs with the kernel's smp_store_release in perf_output_put_handle).
  std::uint64_t load_head() noexcept;
  /// The next record between our read position and the loaded head. A record that wraps the end
  /// of the data area is copied once into a per-ring scratch buffer; views stay valid until
  /// commit(). Empty record with kOk: nothing left; with an error: the ring content is corrupt
  /// (only possible with synthetic input) and reading must stop.
  /// Inline: the drain loop calls it per record.
  [[nodiscard]] PeekResult peek() noexcept {
    const std::uint64_t avail = head_ - read_pos_;
    if (avail == 0)
      return {};
    if (avail < sizeof(perf_event_header))
      return {{}, DecodeError::kTruncatedHeader};
    const std::uint64_t off = read_pos_ & (data_size_ - 1);
    // Records are 8-byte aligned and data_size is a multiple of 8, so a header never wraps.
    const auto h = load<perf_event_header>(data_ + off);
    if (h.size == 0)
      return {{}, DecodeError::kZeroSize};
    if (h.size % 8 != 0)
      return {{}, DecodeError::kMisaligned};
    if (h.size > avail)
      return {{}, DecodeError::kSizePastData};
    if (off + h.size <= data_size_) [[likely]]
      return {{data_ + off, h.size}, DecodeError::kOk};
    return peek_wrapped(off, h.size);
  }
  /// Advances our read position past `bytes` (a record peek() returned).
  void consume(std::size_t bytes) noexcept { read_pos_ += bytes; }

  // The same walk with the cursor in a caller's locals (a drain loop that stores into memory
  // per record would otherwise reload the ring's members after every store):
  //   const auto area = ring.data_area();  std::uint64_t pos = ring.read_position();
  //   const std::uint64_t head = ring.load_head();
  //   ... records at area[pos & (size - 1)], wrapped() for one that crosses the end ...
  //   ring.seek(pos);  ring.commit();
  [[nodiscard]] std::span<const std::byte> data_area() const noexcept {
    return {data_, data_size_};
  }
  [[nodiscard]] std::uint64_t read_position() const noexcept { return read_pos_; }
  /// Moves our read position to `pos` (between it and the loaded head).
  void seek(std::uint64_t pos) noexcept { read_pos_ = pos; }
  /// The record of `size` bytes at data offset `off` that wraps the end of the data area,
  /// copied once into scratch (valid until the next call).
  [[nodiscard]] std::span<const std::byte> wrapped(std::uint64_t off, std::uint16_t size) noexcept {
    return peek_wrapped(off, size).record;
  }
  /// Release-stores data_tail = read position, handing the space back to the kernel.
  void commit() noexcept;
  /// Bytes published but not yet consumed, as of the last load_head().
  [[nodiscard]] std::uint64_t pending() const noexcept { return head_ - read_pos_; }

  // Overwrite mode ----------------------------------------------------------------------------
  /// Copies the records currently in an overwrite (write_backward) ring into `out`, newest first,
  /// and returns how many. Pauses output around the copy when the ring has an fd.
  [[nodiscard]] Result<std::size_t> snapshot(std::vector<std::byte>& out);

  // AUX area ----------------------------------------------------------------------------------
  [[nodiscard]] bool has_aux() const noexcept { return aux_ != nullptr; }
  [[nodiscard]] std::uint64_t aux_size() const noexcept { return aux_size_; }
  /// Acquire-loads aux_head.
  [[nodiscard]] std::uint64_t aux_head() const noexcept;
  /// The data a PERF_RECORD_AUX announced, as views into the AUX area (counts flags in stats).
  /// std::nullopt if the record does not fit the area (counted as invalid).
  [[nodiscard]] std::optional<AuxChunk> aux_chunk(const Aux& rec) noexcept;
  /// Release-stores aux_tail: the kernel may reuse the AUX area up to `position`.
  void aux_consume(std::uint64_t position) noexcept;
  [[nodiscard]] const AuxStats& aux_stats() const noexcept { return aux_stats_; }

  // Metadata ----------------------------------------------------------------------------------
  [[nodiscard]] const perf_event_mmap_page* meta() const noexcept { return meta_; }
  /// Clock conversion parameters, read consistently under the page's seqlock.
  [[nodiscard]] TimeConv time_conv() const noexcept;

 private:
  Ring() = default;
  void release() noexcept;
  /// A record that wraps the end of the data area: copied once into scratch_.
  [[nodiscard]] PeekResult peek_wrapped(std::uint64_t off, std::uint16_t size) noexcept;

  perf_event_mmap_page* meta_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t data_size_ = 0;
  std::size_t map_len_ = 0;  // 0: not ours to unmap
  std::byte* aux_ = nullptr;
  std::uint64_t aux_size_ = 0;
  bool aux_owned_ = false;
  bool overwrite_ = false;
  int fd_ = -1;
  std::uint64_t head_ = 0;
  std::uint64_t read_pos_ = 0;
  std::vector<std::byte> scratch_;
  AuxStats aux_stats_;
};

/// Bytes the kernel has published in a forward ring that the reader has not handed back yet
/// (data_head - data_tail), read from the ring's shared page with acquire loads: callable from
/// any thread while the ring is mapped (the reactor looks at it to decide if a wait is over).
[[nodiscard]] std::uint64_t unread_bytes(const perf_event_mmap_page& meta) noexcept;

/// Walks records laid out back to back in `bytes` (a snapshot, a perf.data data section) and
/// calls fn(span) for each; stops at the first malformed header and returns its error.
template <typename Fn>
DecodeError for_each_record(std::span<const std::byte> bytes, Fn&& fn) {
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    if (bytes.size() - pos < sizeof(perf_event_header))
      return DecodeError::kTruncatedHeader;
    const auto h = load<perf_event_header>(bytes.data() + pos);
    if (h.size == 0)
      return DecodeError::kZeroSize;
    if (h.size > bytes.size() - pos)
      return DecodeError::kSizePastData;
    fn(bytes.subspan(pos, h.size));
    pos += h.size;
  }
  return DecodeError::kOk;
}

}  // namespace tracer::perf
