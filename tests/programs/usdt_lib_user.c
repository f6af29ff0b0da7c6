// Calls libtracer_usdt.so's tracer_usdt_lib_ping(i) for i = 0 .. N-1 (N = argv[1]). With a
// second argument, waits until that file exists first: a tracer attaches to the running process
// (-p) before its first call, with the library already mapped.
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

void tracer_usdt_lib_ping(long i);

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1;
  if (argc > 2) {
    const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
    while (access(argv[2], F_OK) != 0)
      nanosleep(&tick, NULL);
  }
  for (long i = 0; i < n; ++i)
    tracer_usdt_lib_ping(i);
  return 0;
}
