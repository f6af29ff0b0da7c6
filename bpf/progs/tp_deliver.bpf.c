// SPDX-License-Identifier: GPL-2.0
/* tp_deliver: copies each hit of a tracepoint into the engine's BPF output
 * channel, with a small header, so that the engine receives every hit even
 * where the kernel's per-CPU perf tracepoint events miss some (measured on the
 * project machine: idle-context sched_switch/sched_wakeup on CPU 1). One link
 * per tracepoint, its BPF cookie the engine's probe slot. Counts hits and
 * output failures per slot and CPU. Always returns 1: it gates no other
 * consumer's samples (TOOLCHAIN.md). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tp_deliver.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, TP_DELIVER_MAX_SLOTS);
	__type(key, __u32);
	__type(value, struct tp_deliver_cfg);
} cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TP_DELIVER_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TP_DELIVER_MAX_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct tp_deliver_buf {
	struct tp_deliver_hdr hdr;
	__u8 data[TP_DELIVER_MAX_RECORD];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_deliver_buf);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

SEC("tracepoint")
int tp_deliver(void *ctx)
{
	__u32 slot = (__u32)bpf_get_attach_cookie(ctx);
	struct tp_deliver_cfg *c = bpf_map_lookup_elem(&cfg, &slot);
	if (!c)
		return 1;
	__u64 *h = bpf_map_lookup_elem(&hits, &slot);
	if (h)
		*h += 1;
	__u32 zero = 0;
	struct tp_deliver_buf *b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return 1;
	/* The record: its fixed part, then what its dynamic fields point at.
	 * The context pointer as a number: its fields are read with the helper.
	 */
	unsigned long base = (unsigned long)ctx;
	__u32 size = c->fixed_size;
	for (int i = 0; i < TP_DELIVER_MAX_LOC; i++) {
		if (i >= c->nloc)
			break;
		__u32 at = c->loc[i];
		__u32 off = at & ~TP_DELIVER_REL_LOC;
		__u32 loc = 0;
		if (off > TP_DELIVER_MAX_RECORD)
			break;
		bpf_probe_read_kernel(&loc, sizeof(loc), (void *)(base + off));
		__u32 end = (loc & 0xffff) + (loc >> 16);
		if (at & TP_DELIVER_REL_LOC)
			end += off + 4;
		if (end > size)
			size = end;
	}
	if (size > TP_DELIVER_MAX_RECORD - 1)
		size = TP_DELIVER_MAX_RECORD - 1;
	/* The bound the verifier needs, in the register the helper gets (clang
	 * would drop a C mask after the clamp, and pass an unclamped copy). */
	asm volatile("%0 &= 4095" : "+r"(size));
	bpf_probe_read_kernel(b->data, size, (void *)base);
	/* The first 8 bytes of a tracepoint program's context hold the kernel's
	 * pt_regs pointer, not the common fields: write those back. */
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	*(__u16 *)&b->data[0] = (__u16)c->id;
	b->data[2] = 0;
	b->data[3] = 0;
	*(__u32 *)&b->data[4] = (__u32)pid_tgid;
	b->hdr.time = bpf_ktime_get_ns();
	b->hdr.slot = slot;
	b->hdr.size = size;
	b->hdr.pid = pid_tgid >> 32;
	b->hdr.tid = (__u32)pid_tgid;
	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, b,
				  sizeof(b->hdr) + size) != 0) {
		__u64 *d = bpf_map_lookup_elem(&drops, &slot);
		if (d)
			*d += 1;
	}
	return 1;
}
