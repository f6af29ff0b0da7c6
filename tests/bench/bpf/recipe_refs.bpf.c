// SPDX-License-Identifier: GPL-2.0
/* The reference programs of tracer_bench_recipes (compiled at run time):
 *   floor_prog   only increments a per-CPU array: the cost of running any
 *                program on the tracepoint
 *   handwritten  what the generated count-by-pid does, written by hand: a tgid
 *                filter and a per-CPU hash keyed by pid
 *   rb_ref       a per-event copy into a BPF ring buffer (header + the
 *                record's first 16 bytes, the size tp_deliver_rb copies of
 *                sys_enter_getppid), with the same batched wakeups, for a
 *                libbpf ring_buffer consumer
 * All return 1: they gate no other consumer. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile __u32 target_tgid = 0;
const volatile __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} floor_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 10240);
	__type(key, __u32);
	__type(value, __u64);
} pid_counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} rb SEC(".maps");

SEC("tracepoint")
int floor_prog(void *ctx)
{
	__u32 zero = 0;
	__u64 *v = bpf_map_lookup_elem(&floor_counts, &zero);
	if (v)
		*v += 1;
	return 1;
}

SEC("tracepoint")
int handwritten(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	if (pid != target_tgid)
		return 1;
	__u64 *v = bpf_map_lookup_elem(&pid_counts, &pid);
	if (v) {
		*v += 1;
		return 1;
	}
	__u64 one = 1;
	bpf_map_update_elem(&pid_counts, &pid, &one, BPF_NOEXIST);
	return 1;
}

struct rb_event {
	__u64 time;
	__u32 slot, size, pid, tid, cpu, pad;
	__u8 rec[16];
};

static __always_inline int rb_copy(void *ctx, __u64 id);

SEC("tracepoint")
int rb_ref(void *ctx) { return rb_copy(ctx, bpf_get_current_pid_tgid()); }

/* The same for one process only (the reference of per-event delivery to a
 * -p or command target). */
SEC("tracepoint")
int rb_ref_target(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((__u32)(id >> 32) != target_tgid)
		return 1;
	return rb_copy(ctx, id);
}

static __always_inline int rb_copy(void *ctx, __u64 id)
{
	struct rb_event e = {};
	e.time = bpf_ktime_get_ns();
	e.size = sizeof(e.rec);
	e.pid = id >> 32;
	e.tid = (__u32)id;
	e.cpu = bpf_get_smp_processor_id();
	bpf_probe_read_kernel(e.rec, sizeof(e.rec), ctx);
	__u64 waiting = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);
	/* tp_deliver_rb's policy: one forced wakeup when crossing the threshold
	 */
	bpf_ringbuf_output(&rb, &e, sizeof(e),
			   waiting < wakeup_bytes &&
				   waiting + sizeof(e) + 8 >= wakeup_bytes
			       ? BPF_RB_FORCE_WAKEUP
			       : BPF_RB_NO_WAKEUP);
	return 1;
}
