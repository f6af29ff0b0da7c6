// Test shared library for uprobes on a library function: tracer_lib_fn(arg) returns arg * 5.
// The volatile local gives it a stack frame, so with frame pointers it starts with push %rbp: a
// uprobe's callchain at its entry then names its caller (the kernel reads the return address at
// such an entry); a frameless leaf would lose the caller without DWARF unwinding.
__attribute__((noinline, noclone, used, visibility("default"))) int tracer_lib_fn(int arg) {
  volatile int frame = arg;
  __asm__ volatile("" ::: "memory");
  return frame * 5;
}
