// SPDX-License-Identifier: GPL-2.0
/* tp_deliver_rb: tp_deliver (see tp_deliver.bpf.c) writing into one BPF ring
 * buffer shared by every CPU (BPF_MAP_TYPE_RINGBUF, kernel 5.8+) instead of a
 * perf event array. Wakeups are batched: only the output that takes the
 * waiting data across the slot's wakeup_bytes forces a wakeup, every other one
 * wakes no one (BPF_RB_NO_WAKEUP); the engine's flush timer bounds the latency
 * of what stays below. The engine sizes the ring before load (rb's
 * max_entries). Records go out at their exact size from the scratch copy:
 * reading straight into power-of-two bpf_ringbuf_reserve classes measured the
 * same (240 ns a run, bpf_stats) and pads the ring. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tp_deliver.h"

char LICENSE[] SEC("license") = "GPL";

#include "tp_deliver_body.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* set by the engine before load */
} rb SEC(".maps");

/* Wake the reader once, when this output takes the waiting bytes across the
 * threshold. A forced wakeup on every output past it would queue the ring's
 * irq_work (a self-IPI: an APIC MSR write) for each event until the reader has
 * run: measured, 13% of the traced task's time. */
static __always_inline __u64 tp_rb_flags(const struct tp_deliver_cfg *c,
					 __u64 bytes)
{
	__u64 waiting = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);
	return waiting < c->wakeup_bytes &&
		       waiting + bytes + 8 >= c->wakeup_bytes
		   ? BPF_RB_FORCE_WAKEUP
		   : BPF_RB_NO_WAKEUP;
}

static __always_inline int tp_deliver_run(void *ctx, const int quads)
{
	__u32 slot;
	const struct tp_deliver_cfg *c;
	__u64 bytes;
	struct tp_deliver_buf *b =
	    tp_deliver_copy(ctx, &slot, &c, &bytes, quads);
	if (!b)
		return 1;
	if (bpf_ringbuf_output(&rb, b, bytes, tp_rb_flags(c, bytes)) != 0)
		tp_deliver_dropped(slot);
	return 1;
}

TP_DELIVER_PROGRAMS
