// SPDX-License-Identifier: GPL-2.0
/* opens: the file name of every openat() (a user-space string the tracepoint
 * only has as a pointer), with pid, comm and flags. Returns 1: never gates
 * other perf consumers of syscalls:sys_enter_openat. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tracer_target.h" /* tracer_in_target(): -p, -- CMD, system-wide */

char LICENSE[] SEC("license") = "GPL";

struct open_event {
	__u64 ts;
	__u32 pid;
	__u32 tid;
	__s64 dfd;
	__u64 flags;
	char comm[16];
	char filename[256];
};
const struct open_event *const open_event_type = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct open_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} output_drops SEC(".maps");

SEC("tracepoint")
int opens(struct trace_event_raw_sys_enter *ctx)
{
	if (!tracer_in_target())
		return 1;
	__u32 zero = 0;
	struct open_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e)
		return 1;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->ts = bpf_ktime_get_ns();
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	/* openat(int dfd, const char *filename, int flags, umode_t mode) */
	e->dfd = (__s64)ctx->args[0];
	e->flags = ctx->args[2];
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_probe_read_user_str(e->filename, sizeof(e->filename),
				(const char *)ctx->args[1]);
	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, e,
				  sizeof(*e)) != 0) {
		__u64 *d = bpf_map_lookup_elem(&output_drops, &zero);
		if (d)
			*d += 1;
	}
	return 1;
}
