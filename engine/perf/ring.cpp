#include "tracer/perf/ring.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "tracer/check.hpp"

namespace tracer::perf {
namespace {

// The largest record: header.size is a u16.
constexpr std::size_t kMaxRecord = 65535;

std::size_t page_size() noexcept {
  static const auto size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  return size;
}

std::uint64_t load_acquire(const __u64& v) noexcept {
  return std::atomic_ref<const __u64>(v).load(std::memory_order_acquire);
}

void store_release(__u64& v, std::uint64_t x) noexcept {
  std::atomic_ref<__u64>(v).store(x, std::memory_order_release);
}

}  // namespace

std::uint64_t unread_bytes(const perf_event_mmap_page& meta) noexcept {
  const std::uint64_t tail = load_acquire(meta.data_tail);
  return load_acquire(meta.data_head) - tail;
}

std::uint64_t TimeConv::to_perf_time(std::uint64_t cyc) const noexcept {
  // include/uapi/linux/perf_event.h, "If cap_usr_time_zero ...":
  if (cap_user_time_short)
    cyc = time_cycles + ((cyc - time_cycles) & time_mask);
  const std::uint64_t quot = cyc >> time_shift;
  const std::uint64_t rem = cyc & ((std::uint64_t{1} << time_shift) - 1);
  return time_zero + quot * time_mult + ((rem * time_mult) >> time_shift);
}

void AuxChunk::copy_to(std::vector<std::byte>& out) const {
  out.resize(first.size() + second.size());
  if (!first.empty())
    std::memcpy(out.data(), first.data(), first.size());
  if (!second.empty())
    std::memcpy(out.data() + first.size(), second.data(), second.size());
}

Ring::Ring(Ring&& o) noexcept
    : meta_(std::exchange(o.meta_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      data_size_(std::exchange(o.data_size_, 0)),
      map_len_(std::exchange(o.map_len_, 0)),
      aux_(std::exchange(o.aux_, nullptr)),
      aux_size_(std::exchange(o.aux_size_, 0)),
      aux_owned_(std::exchange(o.aux_owned_, false)),
      overwrite_(o.overwrite_),
      fd_(std::exchange(o.fd_, -1)),
      head_(o.head_),
      read_pos_(o.read_pos_),
      scratch_(std::move(o.scratch_)),
      aux_stats_(o.aux_stats_) {}

Ring& Ring::operator=(Ring&& o) noexcept {
  if (this != &o) {
    release();
    new (this) Ring(std::move(o));
  }
  return *this;
}

Ring::~Ring() {
  release();
}

void Ring::release() noexcept {
  if (aux_ != nullptr && aux_owned_)
    ::munmap(aux_, aux_size_);
  if (meta_ != nullptr && map_len_ != 0)
    ::munmap(meta_, map_len_);
  meta_ = nullptr;
  aux_ = nullptr;
  data_ = nullptr;
}

Result<Ring> Ring::map(int fd, const RingOptions& opts) {
  if (opts.data_pages == 0 || !std::has_single_bit(opts.data_pages)) {
    return fail(EINVAL, fmt::format("ring: {} data pages is not a power of two", opts.data_pages));
  }
  const std::size_t ps = page_size();
  const std::size_t len = (1 + static_cast<std::size_t>(opts.data_pages)) * ps;
  // Kernel counterpart: perf_mmap(). A writable mapping means we own data_tail and the kernel
  // never overwrites unread data; a read-only one is overwrite mode.
  const int prot = opts.overwrite ? PROT_READ : PROT_READ | PROT_WRITE;
  void* p = ::mmap(nullptr, len, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    return fail(err,
                fmt::format("ring: failed to mmap {} pages for perf event fd={}: {}",
                            1 + opts.data_pages, fd, std::strerror(err)),
                err == EPERM ? "the locked-memory budget is used up: lower the page count or raise "
                               "kernel.perf_event_mlock_kb / RLIMIT_MEMLOCK"
                             : "");
  }
  Ring r;
  r.meta_ = static_cast<perf_event_mmap_page*>(p);
  r.map_len_ = len;
  r.fd_ = fd;
  r.overwrite_ = opts.overwrite;
  // data_offset/data_size appeared in 4.1; before that data starts at page 1.
  const std::uint64_t expect = static_cast<std::uint64_t>(opts.data_pages) * ps;
  if (r.meta_->data_size != 0) {
    TRACER_CHECK_MSG(r.meta_->data_size == expect, "mmap page data_size differs from request");
    TRACER_CHECK(r.meta_->data_offset == ps);
  }
  r.data_ = static_cast<std::byte*>(p) + ps;
  r.data_size_ = expect;
  r.scratch_.resize(kMaxRecord + 1);
  r.read_pos_ = r.head_ = opts.overwrite ? 0 : load_acquire(r.meta_->data_tail);

  if (opts.aux_bytes != 0) {
    if (opts.aux_bytes % ps != 0 || !std::has_single_bit(opts.aux_bytes / ps)) {
      return fail(EINVAL, fmt::format("ring: AUX size {} is not a power-of-two number of pages",
                                      opts.aux_bytes));
    }
    // Kernel counterpart: perf_mmap() for vma->vm_pgoff != 0 reads aux_offset/aux_size from the
    // user page; they must be set before the second mmap.
    r.meta_->aux_offset = len;
    r.meta_->aux_size = opts.aux_bytes;
    const int aux_prot = opts.aux_overwrite ? PROT_READ : PROT_READ | PROT_WRITE;
    void* a = ::mmap(nullptr, opts.aux_bytes, aux_prot, MAP_SHARED, fd, static_cast<off_t>(len));
    if (a == MAP_FAILED) {
      const int err = errno;
      return fail(err,
                  fmt::format("ring: failed to mmap AUX area of {} bytes for perf event fd={}: {}",
                              opts.aux_bytes, fd, std::strerror(err)),
                  err == EINVAL ? "the event's PMU has no AUX support (needs e.g. intel_pt)" : "");
    }
    r.aux_ = static_cast<std::byte*>(a);
    r.aux_size_ = opts.aux_bytes;
    r.aux_owned_ = true;
  }
  return r;
}

Result<Ring> Ring::adopt(std::span<std::byte> meta_and_data,
                         std::span<std::byte> aux,
                         bool overwrite) {
  const std::size_t ps = page_size();
  if (meta_and_data.size() < 2 * ps || meta_and_data.size() % ps != 0 ||
      !std::has_single_bit(meta_and_data.size() / ps - 1)) {
    return fail(EINVAL, fmt::format("ring: {} bytes is not 1 + 2^n pages", meta_and_data.size()));
  }
  if (!aux.empty() && !std::has_single_bit(aux.size())) {
    return fail(EINVAL,
                fmt::format("ring: AUX area of {} bytes is not a power of two", aux.size()));
  }
  Ring r;
  r.meta_ = reinterpret_cast<perf_event_mmap_page*>(meta_and_data.data());
  r.data_ = meta_and_data.data() + ps;
  r.data_size_ = meta_and_data.size() - ps;
  r.overwrite_ = overwrite;
  r.scratch_.resize(kMaxRecord + 1);
  r.read_pos_ = r.head_ = overwrite ? 0 : load_acquire(r.meta_->data_tail);
  if (!aux.empty()) {
    r.aux_ = aux.data();
    r.aux_size_ = aux.size();
  }
  return r;
}

std::uint64_t Ring::load_head() noexcept {
  head_ = load_acquire(meta_->data_head);
  return head_;
}

PeekResult Ring::peek_wrapped(std::uint64_t off, std::uint16_t size) noexcept {
  // At most one record wraps per pass.
  const std::size_t first = data_size_ - off;
  std::memcpy(scratch_.data(), data_ + off, first);
  std::memcpy(scratch_.data() + first, data_, size - first);
  return {{scratch_.data(), size}, DecodeError::kOk};
}

void Ring::commit() noexcept {
  if (overwrite_)
    return;  // read-only mapping: the kernel ignores data_tail
  // Pairs with the kernel's READ_ONCE/smp_mb in perf_output_begin(): our reads of the records
  // happen before the space is handed back.
  store_release(meta_->data_tail, read_pos_);
}

Result<std::size_t> Ring::snapshot(std::vector<std::byte>& out) {
  if (!overwrite_)
    return fail(EINVAL, "ring: snapshot() is for overwrite (write_backward) rings");
  const bool paused = fd_ >= 0 && ::ioctl(fd_, PERF_EVENT_IOC_PAUSE_OUTPUT, 1) == 0;
  // write_backward: the kernel moves data_head down; the newest record starts at head and older
  // ones follow it. Kernel counterpart: perf_output_begin() with is_write_backward(); reader as
  // in tools/lib/perf mmap.c overwrite_rb_find_range().
  const std::uint64_t head = load_acquire(meta_->data_head);
  const std::uint64_t mask = data_size_ - 1;
  std::uint64_t pos = head;
  std::size_t count = 0;
  out.clear();
  while (pos - head + sizeof(perf_event_header) <= data_size_) {
    perf_event_header h;
    std::memcpy(&h, data_ + (pos & mask), sizeof(h));
    // An unwritten (zero) header ends the valid data; so does a record the next lap overwrote.
    if (h.size == 0 || h.size % 8 != 0 || pos - head + h.size > data_size_)
      break;
    const std::size_t at = out.size();
    out.resize(at + h.size);
    const std::uint64_t off = pos & mask;
    const std::size_t first = std::min<std::uint64_t>(h.size, data_size_ - off);
    std::memcpy(out.data() + at, data_ + off, first);
    if (first < h.size)
      std::memcpy(out.data() + at + first, data_, h.size - first);
    pos += h.size;
    ++count;
  }
  if (paused)
    ::ioctl(fd_, PERF_EVENT_IOC_PAUSE_OUTPUT, 0);
  return count;
}

std::uint64_t Ring::aux_head() const noexcept {
  return load_acquire(meta_->aux_head);
}

std::optional<AuxChunk> Ring::aux_chunk(const Aux& rec) noexcept {
  if (aux_ == nullptr || rec.aux_size > aux_size_) {
    ++aux_stats_.invalid;
    return std::nullopt;
  }
  AuxChunk c;
  c.offset = rec.aux_offset;
  c.size = rec.aux_size;
  c.flags = rec.flags;
  const std::uint64_t off = rec.aux_offset & (aux_size_ - 1);
  const std::uint64_t first = std::min(rec.aux_size, aux_size_ - off);
  c.first = {aux_ + off, static_cast<std::size_t>(first)};
  if (first < rec.aux_size)
    c.second = {aux_, static_cast<std::size_t>(rec.aux_size - first)};
  ++aux_stats_.chunks;
  aux_stats_.bytes += rec.aux_size;
  if ((rec.flags & abi::kAuxFlagTruncated) != 0U)
    ++aux_stats_.truncated;
  if ((rec.flags & abi::kAuxFlagOverwrite) != 0U)
    ++aux_stats_.overwrite;
  if ((rec.flags & abi::kAuxFlagPartial) != 0U)
    ++aux_stats_.partial;
  if ((rec.flags & abi::kAuxFlagCollision) != 0U)
    ++aux_stats_.collision;
  return c;
}

void Ring::aux_consume(std::uint64_t position) noexcept {
  // Pairs with the kernel's smp_load_acquire of aux_tail in perf_aux_output_begin().
  store_release(meta_->aux_tail, position);
}

TimeConv Ring::time_conv() const noexcept {
  TimeConv t;
  std::uint32_t seq = 0;
  // Kernel counterpart: the seqcount in perf_event_update_userpage(); retry while it changes.
  do {
    seq = std::atomic_ref<const std::uint32_t>(meta_->lock).load(std::memory_order_acquire);
    t.cap_user_time = meta_->cap_user_time != 0U;
    t.cap_user_time_zero = meta_->cap_user_time_zero != 0U;
    t.cap_user_time_short = meta_->cap_user_time_short != 0U;
    t.time_shift = meta_->time_shift;
    t.time_mult = meta_->time_mult;
    t.time_offset = meta_->time_offset;
    t.time_zero = meta_->time_zero;
    t.time_cycles = meta_->time_cycles;
    t.time_mask = meta_->time_mask;
    std::atomic_thread_fence(std::memory_order_acquire);
  } while (std::atomic_ref<const std::uint32_t>(meta_->lock).load(std::memory_order_relaxed) !=
           seq);
  return t;
}

}  // namespace tracer::perf
