// Calls tracer_lib_fn(1..K) from libtracer_target.so for K = argv[1] (default 1).
#include <stdlib.h>

int tracer_lib_fn(int arg);

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 1;
  int sum = 0;
  for (int i = 1; i <= calls; ++i)
    sum += tracer_lib_fn(i);
  return sum == 5 * calls * (calls + 1) / 2 ? 0 : 1;
}
