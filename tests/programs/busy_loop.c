/* A CPU-bound target for profile tests: spins in tracer_busy_spin() for MS milliseconds
 * (default 500), called from main through tracer_busy_outer() so callchains have depth.
 * Usage: busy_loop [MS]. Exits 0. */
#include <stdlib.h>
#include <time.h>

volatile unsigned long tracer_busy_sink;

static long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

__attribute__((noinline, noclone, used)) void tracer_busy_spin(long ms) {
  const long end = now_ms() + ms;
  while (now_ms() < end) {
    for (int i = 0; i < 100000; ++i)
      tracer_busy_sink += (unsigned long)i * 7u;
  }
}

__attribute__((noinline, noclone, used)) void tracer_busy_outer(long ms) {
  tracer_busy_spin(ms);
  __asm__ volatile("" ::: "memory");
}

int main(int argc, char** argv) {
  tracer_busy_outer(argc > 1 ? atol(argv[1]) : 500);
  return 0;
}
