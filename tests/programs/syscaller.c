/* Makes an exact number of system calls, for tests that trace a command started by tracer.
 * Usage: syscaller lseek N [CPU]   N calls of lseek(12345, i, SEEK_CUR) (EBADF: harmless),
 *                                  pinned to CPU when given. Exits 0. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3 || strcmp(argv[1], "lseek") != 0) {
    fprintf(stderr, "usage: %s lseek N [CPU]\n", argv[0]);
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
  for (long i = 0; i < n; ++i)
    syscall(SYS_lseek, 12345, i, SEEK_CUR);
  return 0;
}
