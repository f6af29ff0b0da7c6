// SPDX-License-Identifier: GPL-2.0
/* bash-readline: emits every line typed into an interactive bash (the string
 * readline() returns), with the shell's pid and comm. Compiled at run time by
 * `tracer run configs/bash-readline.toml` and cached. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "tracer_target.h" /* tracer_in_target(): -p, -- CMD, system-wide */

char LICENSE[] SEC("license") = "GPL";

struct readline_event {
	__u64 ts;
	__u32 pid;
	__u32 tid;
	char comm[16];
	char line[200];
};

/* Puts the struct into BTF so the engine can name the payload's fields. */
const struct readline_event *const readline_event_type = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct readline_event);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} output_drops SEC(".maps");

SEC("uretprobe")
int BPF_KRETPROBE(readline_ret, const char *line)
{
	if (!tracer_in_target())
		return 0;
	__u32 zero = 0;
	/* 240 bytes do not fit the 512-byte stack comfortably beside the
	 * helpers' frames: build the record in a per-CPU slot. */
	struct readline_event *e = bpf_map_lookup_elem(&scratch, &zero);
	if (!e || !line)
		return 0;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	e->ts = bpf_ktime_get_ns();
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_probe_read_user_str(e->line, sizeof(e->line), line);
	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, e,
				  sizeof(*e)) != 0) {
		__u64 *d = bpf_map_lookup_elem(&output_drops, &zero);
		if (d)
			*d += 1;
	}
	return 0;
}
