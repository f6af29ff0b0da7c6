/* Makes an exact number of system calls, for tests that trace a command started by tracer.
 * Usage: syscaller lseek|getppid N [CPU]
 *   lseek:   N calls of lseek(12345, i, SEEK_CUR) (EBADF: harmless)
 *   getppid: N calls of getppid()
 * pinned to CPU when given. Exits 0. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char** argv) {
  const int getppid_mode = argc >= 3 && strcmp(argv[1], "getppid") == 0;
  if (argc < 3 || (strcmp(argv[1], "lseek") != 0 && !getppid_mode)) {
    fprintf(stderr, "usage: %s lseek|getppid N [CPU]\n", argv[0]);
    return 2;
  }
  long n = strtol(argv[2], NULL, 10);
  if (argc > 3) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[3]), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      return 3;
  }
  for (long i = 0; i < n; ++i) {
    if (getppid_mode) {
      syscall(SYS_getppid);
    } else {
      syscall(SYS_lseek, 12345, i, SEEK_CUR);
    }
  }
  return 0;
}
