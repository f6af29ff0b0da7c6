// The guard of the kernel-free tests (tests/kernel_free.cmake): ctest runs those without the
// kernel_perf lock, beside the live tests, with TRACER_TEST_NO_KERNEL=1 in their environment.
// Before any test runs, this process then gets a seccomp filter that traps perf_event_open and
// bpf: a test of a kernel-free suite that opens a perf event or loads a BPF program (itself, or a
// tracer, perf or bpftrace it starts: the filter is inherited, their SIGSYS kills them) fails,
// naming the list it must leave, instead of racing the live tests for the machine's perf state.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <csignal>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void on_sigsys(int, siginfo_t* info, void*) {
  // Async-signal-safe: write(2) and _exit only.
  const char* what = info->si_syscall == __NR_bpf ? "bpf" : "perf_event_open";
  const char* lines[] = {"\ntracer tests: this test called ", what,
                         " with TRACER_TEST_NO_KERNEL set: its suite is in tests/kernel_free.cmake "
                         "(run without the kernel_perf lock) and must leave that list\n"};
  for (const char* l : lines) {
    if (::write(STDERR_FILENO, l, std::strlen(l)) < 0)
      break;
  }
  ::_exit(70);
}

bool install() {
  const char* on = std::getenv("TRACER_TEST_NO_KERNEL");
  if (on == nullptr || std::strcmp(on, "1") != 0)
    return false;
  struct sigaction sa {};
  sa.sa_sigaction = on_sigsys;
  sa.sa_flags = SA_SIGINFO;
  ::sigaction(SIGSYS, &sa, nullptr);
  // Classic BPF: the architecture, then the system call number.
  std::array<sock_filter, 8> code{{
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_perf_event_open, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_bpf, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRAP),
  }};
  sock_fprog prog{.len = static_cast<unsigned short>(code.size()), .filter = code.data()};
  // As root (CAP_SYS_ADMIN) no_new_privs is not needed, and not set: the tests' privilege drops
  // and the programs they start behave as under the lock.
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      std::perror("tracer tests: the kernel-free guard (seccomp)");
      std::abort();
    }
  }
  return true;
}

[[maybe_unused]] const bool installed = install();

}  // namespace
