// Test target for uprobes: calls tracer_test_fn(1..K) for K = argv[1] (default 1).
// Built as PIE (-rdynamic so a stripped copy keeps the symbol in .dynsym) and as non-PIE.
#include <stdlib.h>

int tracer_dup_fn(int arg);
int tracer_call_locals(int arg);

volatile int tracer_last_arg;

// noinline/noclone keep exactly one out-of-line copy whose entry every call goes through; the
// store keeps the body longer than a few bytes (the tests probe at +4). The return value
// (arg * 3) is what the uretprobe tests read from AX.
// The volatile local gives it a frame (push %rbp first): see libtracer_target.c.
__attribute__((noinline, noclone, used)) int tracer_test_fn(int arg) {
  volatile int frame = arg;
  tracer_last_arg = frame;
  __asm__ volatile("" ::: "memory");
  return arg * 3;
}

// A GLOBAL definition whose name a LOCAL function in dup_local.c also has: lookups must pick
// this one.
__attribute__((noinline, noclone, used)) int tracer_dup_fn(int arg) {
  tracer_last_arg = arg;
  return arg + 1;
}

// One of two LOCAL functions of the same name (the other is in dup_local.c): ambiguous.
__attribute__((noinline, noclone, used)) static int tracer_local_twin(int arg) {
  tracer_last_arg = arg;
  return arg + 2;
}

int main(int argc, char** argv) {
  const int calls = argc > 1 ? atoi(argv[1]) : 1;
  int sum = 0;
  for (int i = 1; i <= calls; ++i)
    sum += tracer_test_fn(i);
  if (calls < 0)  // never: keeps the duplicates referenced
    sum += tracer_dup_fn(calls) + tracer_local_twin(calls) + tracer_call_locals(calls);
  return sum == 3 * calls * (calls + 1) / 2 ? 0 : 1;
}
