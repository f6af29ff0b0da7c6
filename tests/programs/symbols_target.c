/* Target of the symbols tests (tests/engine/symbols):
 *  - tracer_sym_static: a static function, in no .dynsym (a stripped copy names it only through
 *    its separate debuginfo);
 *  - tracer_sym_outer -> tracer_sym_inlined (always inlined) -> tracer_sym_leaf: the leaf stores
 *    its return address, which lies inside the inlined body (the tests look for the lines marked
 *    SYMBOLS_TEST_*);
 *  - a call of tracer_lib_fn in libtracer_target.so.
 * Prints "outer=0x... static=0x... ret=0x... lib=0x..." (run-time addresses); with any argument
 * it then blocks until its stdin closes, so a test can read its maps while it lives. */
#include <stdio.h>
#include <unistd.h>

int tracer_lib_fn(int arg);

void* volatile tracer_sym_ret;
volatile int tracer_sym_sink;

__attribute__((noinline, noclone, used)) static int tracer_sym_static(int x) {
  volatile int frame = x;  // a frame (push %rbp first): see libtracer_target.c
  tracer_sym_sink = frame;
  __asm__ volatile("" ::: "memory");
  return x * 7;
}

__attribute__((noinline, noclone)) int tracer_sym_leaf(int x) {
  tracer_sym_ret = __builtin_return_address(0);
  __asm__ volatile("" ::: "memory");
  return x + 1;
}

static inline __attribute__((always_inline)) int tracer_sym_inlined(int x) {
  int y = x * 3;
  y = tracer_sym_leaf(y); /* SYMBOLS_TEST_LEAF_CALL */
  tracer_sym_sink = y;
  return y - 1;
}

__attribute__((noinline, noclone)) int tracer_sym_outer(int x) {
  int r = tracer_sym_inlined(x); /* SYMBOLS_TEST_INLINED_CALL */
  tracer_sym_sink = r;
  return r * 2;
}

int main(int argc, char** argv) {
  (void)argv;
  const int r = tracer_sym_outer(argc) + tracer_sym_static(argc) + tracer_lib_fn(argc);
  printf("outer=%p static=%p ret=%p lib=%p\n", (void*)tracer_sym_outer, (void*)tracer_sym_static,
         tracer_sym_ret, (void*)tracer_lib_fn);
  fflush(stdout);
  if (argc > 1) {
    char c;
    while (read(0, &c, 1) > 0) {
    }
  }
  return r == 0;
}
