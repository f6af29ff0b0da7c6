// SPDX-License-Identifier: GPL-2.0
/* tp_deliver_rb: tp_deliver (see tp_deliver.bpf.c) writing into one BPF ring
 * buffer shared by every CPU (BPF_MAP_TYPE_RINGBUF, kernel 5.8+) instead of a
 * perf event array. Wakeups are batched: an output below the slot's
 * wakeup_bytes of waiting data wakes no one (BPF_RB_NO_WAKEUP), one at or above
 * it forces a wakeup; the engine's flush timer bounds the latency of the
 * quiet ones. The engine sizes the ring before load (rb's max_entries). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tp_deliver.h"

char LICENSE[] SEC("license") = "GPL";

#include "tp_deliver_body.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 22); /* set by the engine before load */
} rb SEC(".maps");

static __always_inline int tp_deliver_emit(void *ctx,
					   const struct tp_deliver_cfg *c,
					   struct tp_deliver_buf *b,
					   __u64 bytes)
{
	__u64 waiting = bpf_ringbuf_query(&rb, BPF_RB_AVAIL_DATA);
	__u64 flags =
	    waiting >= c->wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	return bpf_ringbuf_output(&rb, b, bytes, flags);
}

SEC("tracepoint")
int tp_deliver(void *ctx) { return tp_deliver_run(ctx); }
