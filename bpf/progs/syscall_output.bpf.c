// SPDX-License-Identifier: GPL-2.0
/* syscall_output: on a syscall tracepoint, emits one struct
 * syscall_output_event per call made by a process listed in `tgids`, through
 * the PERF_EVENT_ARRAY `events` (the BPF output channel). It always returns 1:
 * a tracepoint program's return value gates the samples of every perf consumer
 * on that tracepoint (TOOLCHAIN.md), and this one must not silence anybody. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "syscall_output.h"

char LICENSE[] SEC("license") = "GPL";

/* How many of args[] the tracepoint's record carries: 6 for
 * raw_syscalls:sys_enter, the syscall's own count for syscalls:sys_enter_<name>
 * (its format file lists them). Set before load. The verifier refuses to attach
 * a program that may read past the end of a tracepoint's record
 * (perf_event_set_bpf_prog: max_ctx_offset), and as this is a constant, the
 * reads of args that a record lacks are dead code it never visits. */
const volatile __u32 nr_args = SYSCALL_OUTPUT_MAX_ARGS;

/* Unused, but it puts struct syscall_output_event into the object's BTF (clang
 * emits BTF only for the types of globals and functions, not of locals): the
 * engine names payload fields from it (bpf::Object::struct_schema). */
const struct syscall_output_event *const syscall_output_event_type = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SYSCALL_OUTPUT_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} output_drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

static __always_inline void count(void *map)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(map, &zero);
	if (n)
		*n += 1; /* per-CPU slot: no other CPU writes it */
}

SEC("tracepoint")
int syscall_output(struct trace_event_raw_sys_enter *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tgid = pid_tgid >> 32;
	if (!bpf_map_lookup_elem(&tgids, &tgid))
		return 1;

	struct syscall_output_event e = {};
	e.ts = bpf_ktime_get_ns();
	e.pid = tgid;
	e.tid = (__u32)pid_tgid;
	/* raw_syscalls:sys_enter has `long id`; syscalls:sys_enter_* have `int
	 * __syscall_nr` in the same 8-byte slot with 4 bytes of padding after
	 * it: the low 32 bits are the number. */
	/* Read exactly those 4 bytes: a syscall without arguments
	 * (sys_enter_getppid) has a 12-byte record, and an 8-byte read of `id`
	 * would reach past it, which makes the kernel refuse the attach. */
	e.nr = *(volatile __s32 *)((void *)ctx +
				   __builtin_offsetof(
				       struct trace_event_raw_sys_enter, id));
	/* Constant indexes, one test each: a loop lets clang walk a pointer
	 * over ctx, and the verifier refuses loads through a modified ctx
	 * pointer. */
	if (nr_args > 0)
		e.args[0] = ctx->args[0];
	if (nr_args > 1)
		e.args[1] = ctx->args[1];
	if (nr_args > 2)
		e.args[2] = ctx->args[2];
	if (nr_args > 3)
		e.args[3] = ctx->args[3];
	if (nr_args > 4)
		e.args[4] = ctx->args[4];
	if (nr_args > 5)
		e.args[5] = ctx->args[5];
	bpf_get_current_comm(e.comm, sizeof(e.comm));

	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &e,
				  sizeof(e)) == 0)
		count(&hits);
	else
		count(&output_drops);
	return 1;
}
