/* syscall_output: the record syscall_output.bpf.c emits through the BPF output
 * channel. Shared by the BPF program and C++ (tests compare offsetof with the
 * object's BTF); fixed-width types only, laid out without implicit padding. */
#ifndef TRACER_BPF_SYSCALL_OUTPUT_H
#define TRACER_BPF_SYSCALL_OUTPUT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Macros: the BPF C side sizes arrays and maps with them. */
/* NOLINTBEGIN(modernize-macro-to-enum) */
#define SYSCALL_OUTPUT_MAX_ARGS 6
#define SYSCALL_OUTPUT_COMM_LEN 16
/* Entries in the `tgids` map: processes whose syscalls are emitted. */
#define SYSCALL_OUTPUT_MAX_TGIDS 1024
/* NOLINTEND(modernize-macro-to-enum) */

struct syscall_output_event {
	__u64 ts;  /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 pid; /* tgid (user-space pid) */
	__u32 tid; /* thread id */
	__s64 nr;  /* syscall number */
	__u64 args[SYSCALL_OUTPUT_MAX_ARGS];
	char comm[SYSCALL_OUTPUT_COMM_LEN];
};

#endif /* TRACER_BPF_SYSCALL_OUTPUT_H */
