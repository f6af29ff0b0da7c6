#include "tracer/check.hpp"

#include <cstdio>
#include <cstdlib>

namespace tracer::detail {

void check_failed(const char* expr, const char* file, int line, const char* msg) noexcept {
  std::fprintf(stderr, "tracer: CHECK failed at %s:%d: %s%s%s\n", file, line, expr,
               msg != nullptr ? ": " : "", msg != nullptr ? msg : "");
  std::abort();
}

}  // namespace tracer::detail
