// SPDX-License-Identifier: GPL-2.0
/* syscalls-in-kernel: counts system calls by process and number in a per-CPU
 * hash map; tracer's bpf-map stage reads the map (no event crosses to user
 * space, the way bpftrace's @[...] = count() works). Returns 1: never gates
 * other perf consumers of raw_syscalls:sys_enter. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

struct syscall_key {
	__u32 pid;
	__u32 nr;
	char comm[16];
};

struct syscall_count {
	__u64 calls;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct syscall_key);
	__type(value, struct syscall_count);
} counts SEC(".maps");

/* The process whose calls are counted (0: every process). */
const volatile __u32 only_tgid = 0;

SEC("tracepoint")
int count_syscalls(struct trace_event_raw_sys_enter *ctx)
{
	struct syscall_key key = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	key.pid = pid_tgid >> 32;
	if (only_tgid != 0 && key.pid != only_tgid)
		return 1;
	key.nr = (__u32)ctx->id;
	bpf_get_current_comm(key.comm, sizeof(key.comm));
	struct syscall_count *c = bpf_map_lookup_elem(&counts, &key);
	if (c) {
		c->calls += 1;
	} else {
		struct syscall_count one = {.calls = 1};
		bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);
	}
	return 1;
}
