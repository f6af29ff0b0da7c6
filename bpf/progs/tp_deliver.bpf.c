// SPDX-License-Identifier: GPL-2.0
/* tp_deliver: copies each hit of a tracepoint into the engine's BPF output
 * channel, with a small header, so that the engine receives every hit even
 * where the kernel's per-CPU perf tracepoint events miss some (measured on the
 * project machine: idle-context sched_switch/sched_wakeup on CPU 1). One link
 * per tracepoint, its BPF cookie the engine's probe slot. Counts hits and
 * output failures per slot and CPU. Always returns 1: it gates no other
 * consumer's samples (TOOLCHAIN.md). This one writes into a perf event array
 * (one ring per CPU); tp_deliver_rb.bpf.c into a BPF ring buffer. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tp_deliver.h"

char LICENSE[] SEC("license") = "GPL";

#include "tp_deliver_body.h"

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

static __always_inline int tp_deliver_run(void *ctx, const int quads)
{
	__u32 slot;
	const struct tp_deliver_cfg *c;
	__u64 bytes;
	struct tp_deliver_buf *b =
	    tp_deliver_copy(ctx, &slot, &c, &bytes, quads);
	if (!b)
		return 1;
	if (bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, b, bytes) !=
	    0)
		tp_deliver_dropped(slot);
	return 1;
}

TP_DELIVER_PROGRAMS
