// tracer_test:tick of usdt_target.c: two call sites, no semaphore.
#include <sys/sdt.h>

void tracer_usdt_ticks(long i);

__attribute__((noinline)) void tracer_usdt_ticks(long i) {
  STAP_PROBE1(tracer_test, tick, i);
  for (long j = 0; j < 2; ++j)
    STAP_PROBE1(tracer_test, tick, i + j);
}
