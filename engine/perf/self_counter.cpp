// Self-monitoring through the counter's user page (see self_counter.hpp).
#include "tracer/perf/self_counter.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace tracer::perf {

std::uint64_t SelfReading::scaled() const noexcept {
  if (time_running == 0 || time_running >= time_enabled)
    return value;
  // value * enabled / running without overflowing: quot and rem, as perf_event.h does.
  const std::uint64_t quot = value / time_running;
  const std::uint64_t rem = value % time_running;
  return quot * time_enabled + static_cast<std::uint64_t>(static_cast<unsigned __int128>(rem) *
                                                          time_enabled / time_running);
}

std::optional<SelfReading> reading_from(const UserPageValues& page,
                                        std::uint64_t pmc,
                                        std::uint64_t cycles) noexcept {
  if (!page.cap_user_rdpmc || page.index == 0 || page.pmc_width == 0 || page.pmc_width > 64)
    return std::nullopt;
  // The PMU counter is pmc_width bits wide: sign-extended, then added to the kernel's offset.
  const unsigned shift = 64U - page.pmc_width;
  const auto delta_pmc = static_cast<std::int64_t>(pmc << shift) >> shift;
  SelfReading r;
  r.value = static_cast<std::uint64_t>(page.offset + delta_pmc);
  r.time_enabled = page.time_enabled;
  r.time_running = page.time_running;
  r.user_space = true;
  if (page.cap_user_time && page.time_shift < 64) {
    std::uint64_t cyc = cycles;
    if (page.cap_user_time_short)  // a clock narrower than 64 bits: cycles since time_cycles
      cyc = page.time_cycles + ((cyc - page.time_cycles) & page.time_mask);
    const std::uint64_t quot = cyc >> page.time_shift;
    const std::uint64_t rem = cyc & ((std::uint64_t{1} << page.time_shift) - 1);
    const std::uint64_t delta =
        page.time_offset + quot * page.time_mult + ((rem * page.time_mult) >> page.time_shift);
    r.time_enabled += delta;
    r.time_running += delta;  // index != 0: it runs now
  }
  return r;
}

std::optional<SelfReading> read_user_page(const perf_event_mmap_page& page,
                                          ReadPmc rdpmc,
                                          ReadTsc rdtsc,
                                          int max_tries) noexcept {
  // The kernel updates the page under `lock` (a sequence count): a pass whose lock changed
  // meanwhile read a half-updated page and is made again.
  const auto* lock = reinterpret_cast<const volatile std::uint32_t*>(&page.lock);
  for (int attempt = 0; attempt < max_tries; ++attempt) {
    const std::uint32_t seq = *lock;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // barrier(): no load before the lock
    const volatile perf_event_mmap_page& p = page;
    UserPageValues v;
    v.time_enabled = p.time_enabled;
    v.time_running = p.time_running;
    v.cap_user_rdpmc = p.cap_user_rdpmc != 0;
    v.cap_user_time = p.cap_user_time != 0;
    v.cap_user_time_short = p.cap_user_time_short != 0;
    std::uint64_t cycles = 0;
    if (v.cap_user_time) {
      cycles = rdtsc();
      v.time_offset = p.time_offset;
      v.time_mult = p.time_mult;
      v.time_shift = p.time_shift;
      if (v.cap_user_time_short) {
        v.time_cycles = p.time_cycles;
        v.time_mask = p.time_mask;
      }
    }
    v.index = p.index;
    v.offset = p.offset;
    std::uint64_t pmc = 0;
    if (v.cap_user_rdpmc && v.index != 0) {
      v.pmc_width = p.pmc_width;
      pmc = rdpmc(v.index - 1);
    }
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (*lock == seq)
      return reading_from(v, pmc, cycles);
  }
  return std::nullopt;
}

std::uint64_t machine_rdpmc(std::uint32_t counter) noexcept {
#if defined(__x86_64__)
  return __rdpmc(static_cast<int>(counter));
#else
  (void)counter;
  return 0;
#endif
}

std::uint64_t machine_rdtsc() noexcept {
#if defined(__x86_64__)
  return __rdtsc();
#else
  return 0;
#endif
}

Result<SelfCounter> SelfCounter::open(EventAttr attr) {
  attr.read_format(PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING)
      .flag(Flag::kDisabled, false)
      .flag(Flag::kInherit, false);
  auto ev = Event::open(attr, {.pid = 0, .cpu = -1});
  if (!ev)
    return fail(std::move(ev).error());
  const long size = ::sysconf(_SC_PAGESIZE);
  void* page = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ, MAP_SHARED, ev->fd(), 0);
  if (page == MAP_FAILED) {
    const int err = errno;
    return fail(err, std::string("mmap of the counter's user page: ") + std::strerror(err));
  }
  return SelfCounter(std::move(*ev), page);
}

SelfCounter::SelfCounter(SelfCounter&& other) noexcept
    : event_(std::move(other.event_)), page_(std::exchange(other.page_, nullptr)) {}

SelfCounter& SelfCounter::operator=(SelfCounter&& other) noexcept {
  if (this != &other) {
    if (page_ != nullptr)
      ::munmap(page_, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
    event_ = std::move(other.event_);
    page_ = std::exchange(other.page_, nullptr);
  }
  return *this;
}

SelfCounter::~SelfCounter() {
  if (page_ != nullptr)
    ::munmap(page_, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
}

bool SelfCounter::user_readable() const noexcept {
  if (page_ == nullptr)
    return false;
  const auto& p = *static_cast<const volatile perf_event_mmap_page*>(page_);
  return p.cap_user_rdpmc != 0 && p.index != 0;
}

SelfReading SelfCounter::read() const noexcept {
  if (page_ != nullptr) {
    if (auto r = read_user_page(*static_cast<const perf_event_mmap_page*>(page_), &machine_rdpmc,
                                &machine_rdtsc))
      return *r;
  }
  return read_syscall();
}

SelfReading SelfCounter::read_syscall() const noexcept {
  std::uint64_t buf[3] = {};  // value, time_enabled, time_running
  SelfReading r;
  if (::read(event_.fd(), buf, sizeof buf) == static_cast<ssize_t>(sizeof buf)) {
    r.value = buf[0];
    r.time_enabled = buf[1];
    r.time_running = buf[2];
  }
  return r;
}

}  // namespace tracer::perf
