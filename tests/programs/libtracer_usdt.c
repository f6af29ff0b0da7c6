// A shared library with a USDT probe (<sys/sdt.h>): tracer_lib:ping, guarded by its semaphore
// (it fires only while a tracer that set the semaphore is attached), arguments (i, 2i). The
// semaphore lives in the library's own .probes section: the kernel sets it in each process that
// maps the library (ref_ctr_offset is a file offset of the library).
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short tracer_lib_ping_semaphore __attribute__((unused))
__attribute__((section(".probes"))) __attribute__((visibility("hidden")));

void tracer_usdt_lib_ping(long i);

__attribute__((noinline)) void tracer_usdt_lib_ping(long i) {
  if (tracer_lib_ping_semaphore)
    STAP_PROBE2(tracer_lib, ping, i, 2 * i);
}
