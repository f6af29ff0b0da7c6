// Invariant checks. TRACER_CHECK is always on and guards kernel-ABI assumptions;
// TRACER_DCHECK is debug-only and guards internal invariants.
#pragma once

namespace tracer::detail {
[[noreturn]] void check_failed(const char* expr,
                               const char* file,
                               int line,
                               const char* msg) noexcept;
}  // namespace tracer::detail

#define TRACER_CHECK_MSG(cond, msg)                                     \
  do {                                                                  \
    if (!(cond)) [[unlikely]]                                           \
      ::tracer::detail::check_failed(#cond, __FILE__, __LINE__, (msg)); \
  } while (0)
#define TRACER_CHECK(cond) TRACER_CHECK_MSG(cond, nullptr)

#ifdef NDEBUG
#define TRACER_DCHECK(cond) \
  do {                      \
    (void)sizeof(cond);     \
  } while (0)
#else
#define TRACER_DCHECK(cond) TRACER_CHECK(cond)
#endif
