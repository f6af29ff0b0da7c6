// SPDX-License-Identifier: GPL-2.0
/* execsnoop: every execve() with its file name and first arguments (user-space
 * strings, read here because the tracepoint only has pointers), with pid, ppid
 * and comm. Returns 1: never gates other perf consumers of the tracepoint. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>

#include "tracer_target.h" /* tracer_in_target(): -p, -- CMD, system-wide */

char LICENSE[] SEC("license") = "GPL";

#define ARG_LEN 48

struct exec_event {
	__u64 ts;
	__u32 pid;
	__u32 ppid;
	__u32 argc; /* arguments read (at most 6; more were not shown) */
	__u32 pad;
	char comm[16];
	char filename[128];
	char arg1[ARG_LEN];
	char arg2[ARG_LEN];
	char arg3[ARG_LEN];
	char arg4[ARG_LEN];
	char arg5[ARG_LEN];
	char arg6[ARG_LEN];
};
const struct exec_event *const exec_event_type = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct exec_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} output_drops SEC(".maps");

/* argv[i] (i >= 1) into dst; returns 1 when there was an argument. */
static __always_inline int read_arg(const char *const *argv, int i, char *dst)
{
	const char *p = 0;
	dst[0] = 0;
	if (bpf_probe_read_user(&p, sizeof(p), &argv[i]) != 0 || !p)
		return 0;
	bpf_probe_read_user_str(dst, ARG_LEN, p);
	return 1;
}

SEC("tracepoint")
int execs(struct trace_event_raw_sys_enter *ctx)
{
	if (!tracer_in_target())
		return 1;
	__u32 zero = 0;
	struct exec_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 1;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	e->ts = bpf_ktime_get_ns();
	e->pid = bpf_get_current_pid_tgid() >> 32;
	e->ppid = BPF_CORE_READ(task, real_parent, tgid);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	/* execve(const char *filename, const char *const argv[], ...) */
	bpf_probe_read_user_str(e->filename, sizeof(e->filename),
				(const char *)ctx->args[0]);
	const char *const *argv = (const char *const *)ctx->args[1];
	e->argc = 0;
	if (read_arg(argv, 1, e->arg1)) {
		e->argc = 1;
		if (read_arg(argv, 2, e->arg2)) {
			e->argc = 2;
			if (read_arg(argv, 3, e->arg3)) {
				e->argc = 3;
				if (read_arg(argv, 4, e->arg4)) {
					e->argc = 4;
					if (read_arg(argv, 5, e->arg5)) {
						e->argc = 5;
						if (read_arg(argv, 6, e->arg6))
							e->argc = 6;
					}
				}
			}
		}
	}
	if (e->argc < 6)
		e->arg6[0] = 0;
	if (e->argc < 5)
		e->arg5[0] = 0;
	if (e->argc < 4)
		e->arg4[0] = 0;
	if (e->argc < 3)
		e->arg3[0] = 0;
	if (e->argc < 2)
		e->arg2[0] = 0;
	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, e,
				  sizeof(*e)) != 0) {
		__u64 *d = bpf_map_lookup_elem(&output_drops, &zero);
		if (d)
			*d += 1;
	}
	return 1;
}
