/* Makes an exact number of system calls, for tests that trace a command started by tracer.
 * Usage: syscaller lseek|getppid|readv|pingpong N [CPU]
 *   lseek:    N calls of lseek(12345, i, SEEK_CUR) (EBADF: harmless)
 *   getppid:  N calls of getppid()
 *   readv:    N calls of readv() of one byte from /dev/zero (the C runtime's start-up makes no
 *             readv call: a test counts exactly N)
 *   pingpong: a parent and a child pass a byte back and forth over two pipes N times: each
 *             pass wakes the other, blocked in read() (at least N wakeups in all)
 *   leaderexit: the main thread starts a thread and exits (pthread_exit): the thread, alone
 *             in the process, makes N getppid() calls once the leader is gone
 *   coldopen: N calls of openat() of a file name in a fresh page never touched before the call
 *             (the name is empty: ENOENT): a tracepoint program cannot read it (not paged in)
 * pinned to CPU when given. Exits 0.
 * SYSCALLER_FD in the environment replaces 12345 as lseek's fd: a system-wide test counts its
 * own calls, not those of another copy of the workload beside it (tests/support/cli.hpp,
 * own_fd()). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

static int pingpong(long n) {
  int there[2], back[2];
  if (pipe(there) != 0 || pipe(back) != 0)
    return 4;
  char c = 'x';
  const pid_t child = fork();
  if (child < 0)
    return 4;
  if (child == 0) {
    for (long i = 0; i < n; ++i) {
      if (read(there[0], &c, 1) != 1 || write(back[1], &c, 1) != 1)
        _exit(5);
    }
    _exit(0);
  }
  for (long i = 0; i < n; ++i) {
    if (write(there[1], &c, 1) != 1 || read(back[0], &c, 1) != 1)
      return 5;
  }
  int status = 0;
  waitpid(child, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 6;
}

static long leader_n;
static pid_t leader_tid;

static void* after_leader(void* arg) {
  (void)arg;
  /* The leader has exited when its task is a zombie ("TID (comm) Z ..."). */
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)leader_tid);
  for (int i = 0; i < 5000; ++i) {
    char stat[256] = {0};
    FILE* f = fopen(path, "r");
    if (f == NULL)
      break;
    const size_t got = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    const char* close = strrchr(stat, ')');
    if (got == 0 || (close != NULL && close[1] == ' ' && close[2] == 'Z'))
      break;
    usleep(1000);
  }
  for (long i = 0; i < leader_n; ++i)
    syscall(SYS_getppid);
  return NULL;
}

int main(int argc, char** argv) {
  const int getppid_mode = argc >= 3 && strcmp(argv[1], "getppid") == 0;
  const int readv_mode = argc >= 3 && strcmp(argv[1], "readv") == 0;
  const int pingpong_mode = argc >= 3 && strcmp(argv[1], "pingpong") == 0;
  const int coldopen_mode = argc >= 3 && strcmp(argv[1], "coldopen") == 0;
  const int leaderexit_mode = argc >= 3 && strcmp(argv[1], "leaderexit") == 0;
  if (argc < 3 || (strcmp(argv[1], "lseek") != 0 && !getppid_mode && !readv_mode &&
                   !pingpong_mode && !coldopen_mode && !leaderexit_mode)) {
    fprintf(stderr, "usage: %s lseek|getppid|readv|pingpong|coldopen|leaderexit N [CPU]\n",
            argv[0]);
    return 2;
  }
  long n = strtol(argv[2], NULL, 10);
  const char* fd_env = getenv("SYSCALLER_FD");
  const long lseek_fd = fd_env != NULL && *fd_env != '\0' ? strtol(fd_env, NULL, 10) : 12345;
  if (argc > 3) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[3]), &set);
    if (sched_setaffinity(0, sizeof(set), &set) != 0)
      return 3;
  }
  if (pingpong_mode)
    return pingpong(n);
  if (leaderexit_mode) {
    leader_n = n;
    leader_tid = (pid_t)syscall(SYS_gettid);
    pthread_t t;
    if (pthread_create(&t, NULL, after_leader, NULL) != 0)
      return 4;
    pthread_exit(NULL); /* the process lives on in the thread, and exits 0 after it */
  }
  const int zero = readv_mode ? open("/dev/zero", O_RDONLY | O_CLOEXEC) : -1;
  char byte = 0;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  for (long i = 0; i < n; ++i) {
    if (readv_mode) {
      if (readv(zero, &iov, 1) != 1)
        return 4;
    } else if (coldopen_mode) {
      void* page = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (page == MAP_FAILED)
        return 4;
      syscall(SYS_openat, AT_FDCWD, page, O_RDONLY);
      munmap(page, 4096);
    } else if (getppid_mode) {
      syscall(SYS_getppid);
    } else {
      syscall(SYS_lseek, lseek_fd, i, SEEK_CUR);
    }
  }
  return 0;
}
