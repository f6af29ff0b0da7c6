// LOCAL functions whose names clash with functions in uprobe_target.c (see there).
extern volatile int tracer_last_arg;

__attribute__((noinline, noclone, used)) static int tracer_dup_fn(int arg) {
  tracer_last_arg = arg;
  return arg - 1;
}

__attribute__((noinline, noclone, used)) static int tracer_local_twin(int arg) {
  tracer_last_arg = arg;
  return arg - 2;
}

int tracer_call_locals(int arg) {
  return tracer_dup_fn(arg) + tracer_local_twin(arg);
}
