// Test shared library for uprobes on a library function: tracer_lib_fn(arg) returns arg * 5.
__attribute__((noinline, noclone, used, visibility("default"))) int tracer_lib_fn(int arg) {
  __asm__ volatile("" ::: "memory");
  return arg * 5;
}
