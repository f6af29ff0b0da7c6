// Calls libtracer_usdt.so's tracer_usdt_lib_ping(i) for i = 0 .. N-1 (N = argv[1]). With a
// second argument, waits until that file exists first: a tracer attaches to the running process
// (-p) before its first call, with the library already mapped.
#include <stdlib.h>

#include "wait_for_file.h"

void tracer_usdt_lib_ping(long i);

int main(int argc, char** argv) {
  const long n = argc > 1 ? atol(argv[1]) : 1;
  if (argc > 2)
    wait_for_file(argv[2]);
  for (long i = 0; i < n; ++i)
    tracer_usdt_lib_ping(i);
  return 0;
}
