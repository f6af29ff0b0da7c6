/* The oracle suite's workload (tests/oracle/oracle_test.cpp): a process tree whose system calls,
 * opened files and touched pages are known before it runs, so that every path of tracer (and
 * strace, perf, bpftrace) must give the same numbers on it.
 *
 * Usage:
 *   oracle_workload tree W N [DIR]  W children at once, child k pinned to CPU k % ncpus; each
 *                                   makes N calls of lseek(12345, i, SEEK_CUR), i = 0..N-1
 *                                   (EBADF: harmless), and with DIR opens DIR/oracle-a once
 *                                   and DIR/oracle-b twice per 100 lseek calls. The parent
 *                                   makes none of them.
 *   oracle_workload storm C N       C children one after another, each forked to make N lseek
 *                                   calls and exit: C * N calls by C short-lived processes.
 *   oracle_workload leaf N          N lseek calls.
 *   oracle_workload pages K [MOVE]  touches K fresh anonymous pages (K page faults); with
 *                                   MOVE, moves itself to the other CPU every 1000 pages.
 *   oracle_workload gate ARGS...    waits for SIGUSR1 (for a tracer attaching with -p), then
 *                                   runs as `oracle_workload ARGS...`.
 * ORACLE_FD in the environment replaces 12345 as the lseek calls' fd: a system-wide test then
 * counts its own workload's calls, not those of another copy running beside it.
 * Exits 0 when everything it was asked to do was done. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set);
}

static long oracle_fd(void) {
  const char* e = getenv("ORACLE_FD");
  return e != NULL && *e != '\0' ? strtol(e, NULL, 10) : 12345;
}

static void lseeks(long n) {
  const long fd = oracle_fd();
  for (long i = 0; i < n; ++i)
    syscall(SYS_lseek, fd, i, SEEK_CUR);
}

static int open_close(const char* dir, const char* name) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  close(fd);
  return 0;
}

static int wait_all(void) {
  int status = 0, failed = 0;
  while (wait(&status) > 0)
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  return failed ? 5 : 0;
}

static int tree(long w, long n, const char* dir) {
  const long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long k = 0; k < w; ++k) {
    const pid_t child = fork();
    if (child < 0)
      return 4;
    if (child > 0)
      continue;
    if (ncpus > 1 && pin((int)(k % ncpus)) != 0)
      _exit(3);
    const long fd = oracle_fd();
    for (long i = 0; i < n; i += 100) {
      const long chunk = n - i < 100 ? n - i : 100;
      for (long j = 0; j < chunk; ++j)
        syscall(SYS_lseek, fd, i + j, SEEK_CUR);
      if (dir && (open_close(dir, "oracle-a") != 0 || open_close(dir, "oracle-b") != 0 ||
                  open_close(dir, "oracle-b") != 0))
        _exit(6);
    }
    _exit(0);
  }
  return wait_all();
}

/* Forked, not exec'd: a fork and an exec took 3 ms on a 2-core CI machine, 10,500 of them more
 * than a run's limit (60 s) once it was loaded; exec'd descendants are the `leaf` loops' tests. */
static int storm(long c, long n) {
  for (long k = 0; k < c; ++k) {
    const pid_t child = fork();
    if (child < 0)
      return 4;
    if (child == 0) {
      lseeks(n);
      _exit(0);
    }
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return 5;
  }
  return 0;
}

static int pages(long k, int move) {
  const long page = sysconf(_SC_PAGESIZE);
  const long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
  char* p =
      mmap(NULL, (size_t)(k * page), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return 4;
  /* One fault a page whatever the machine's transparent huge pages (Debian's default is
   * "always": 2 MiB faults would make 25,000 pages ~50 faults). */
  (void)madvise(p, (size_t)(k * page), MADV_NOHUGEPAGE);
  for (long i = 0; i < k; ++i) {
    if (move && ncpus > 1 && i % 1000 == 0)
      pin((int)((i / 1000) % ncpus));
    p[i * page] = 1;
  }
  return 0;
}

static void spin_ms(long ms) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  volatile unsigned long sink = 0;
  for (;;) {
    for (int i = 0; i < 100000; ++i)
      sink += (unsigned long)i;
    clock_gettime(CLOCK_MONOTONIC, &now);
    if ((now.tv_sec - start.tv_sec) * 1000L + (now.tv_nsec - start.tv_nsec) / 1000000L >= ms)
      return;
  }
}

/* Ends the process with no library code after the last sample (a first call of exit()'s code
 * would take page faults no sample follows). */
static void raw_exit(void) {
#if defined(__x86_64__)
  __asm__ volatile("syscall" : : "a"(231), "D"(0) : "rcx", "r11", "memory");
#endif
  _exit(0);
}

/* Spins MS ms on each CPU in turn: a per-CPU counter of this task gets a sample on every CPU
 * after everything it counted there. */
static void spin_everywhere(long ms) {
  const long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long cpu = 0; cpu < ncpus; ++cpu) {
    pin((int)cpu);
    spin_ms(ms);
  }
}

/* C processes (this one and C-1 children), process i on CPU i % ncpus, each touching K fresh
 * pages and then spinning MS ms on every CPU; this one waits for its children before its
 * spins. Every page fault comes before CPU time on the CPU it was counted on: a sampling clock
 * samples after the last one of every counter. */
static int sampled(long c, long k, long ms) {
  const long ncpus = sysconf(_SC_NPROCESSORS_ONLN);
  for (long i = 1; i < c; ++i) {
    const pid_t pid = fork();
    if (pid < 0)
      return 4;
    if (pid == 0) {
      pin((int)(i % ncpus));
      if (pages(k, 0) != 0)
        _exit(4);
      spin_everywhere(ms);
      raw_exit();
    }
  }
  if (pages(k, 0) != 0)
    return 4;
  while (wait(NULL) > 0) {
  }
  spin_everywhere(ms);
  raw_exit();
  return 0;
}

int main(int argc, char** argv) {
  if (argc >= 2 && strcmp(argv[1], "gate") == 0) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int sig = 0;
    if (sigwait(&set, &sig) != 0)
      return 4;
    argv += 1;
    argc -= 1;
  }
  if (argc >= 4 && strcmp(argv[1], "tree") == 0)
    return tree(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10), argc > 4 ? argv[4] : NULL);
  if (argc >= 4 && strcmp(argv[1], "storm") == 0)
    return storm(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10));
  if (argc >= 3 && strcmp(argv[1], "leaf") == 0) {
    lseeks(strtol(argv[2], NULL, 10));
    return 0;
  }
  if (argc >= 3 && strcmp(argv[1], "pages") == 0)
    return pages(strtol(argv[2], NULL, 10), argc > 3);
  if (argc >= 5 && strcmp(argv[1], "sampled") == 0)
    return sampled(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10), strtol(argv[4], NULL, 10));
  fprintf(stderr,
          "usage: %s tree W N [DIR] | storm C N | leaf N | pages K [MOVE] | sampled C K MS | "
          "gate ARGS...\n",
          argv[0]);
  return 2;
}
