// Test target for USDT probes (<sys/sdt.h>, Debian's systemtap-sdt-dev): for N = argv[1]
// (default 1), once the file argv[2] exists when it is given (a tracer attaches to the running
// process with -p first),
//   tracer_test:hit   N times, guarded by its semaphore (it fires only while a tracer that set
//                     the semaphore is attached), arguments (i, -7, "usdt")
//   tracer_test:tick  3N times from two call sites (N and 2N), no semaphore, argument i
//                     (usdt_tick.c: a unit without semaphores)
#define _SDT_HAS_SEMAPHORES 1
#include <stdlib.h>
#include <sys/sdt.h>

#include "wait_for_file.h"

__extension__ unsigned short tracer_test_hit_semaphore __attribute__((unused))
__attribute__((section(".probes")));

static const char kWord[] = "usdt";
volatile long tracer_usdt_sum;

__attribute__((noinline)) static void hit(long i) {
  if (tracer_test_hit_semaphore)
    STAP_PROBE3(tracer_test, hit, i, -7, kWord);
  tracer_usdt_sum += i;
}

void tracer_usdt_ticks(long i);

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1;
  if (argc > 2)
    wait_for_file(argv[2]);
  // The word's page is in memory before the first probe: an in-kernel program's string read
  // cannot fault it in (it would read as empty and count as a string fault).
  tracer_usdt_sum += *(const volatile char*)kWord;
  for (long i = 0; i < n; ++i) {
    hit(i);
    tracer_usdt_ticks(i);
  }
  return 0;
}
