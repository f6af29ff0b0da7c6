// Test programs that a tracer attaches to while they run (-p): wait_for_file(path) returns once
// `path` exists, which the test makes after the tracer said it was attached.
#pragma once

#include <time.h>
#include <unistd.h>

static inline void wait_for_file(const char* path) {
  const struct timespec tick = {.tv_sec = 0, .tv_nsec = 10 * 1000 * 1000};
  while (access(path, F_OK) != 0)
    nanosleep(&tick, NULL);
}
