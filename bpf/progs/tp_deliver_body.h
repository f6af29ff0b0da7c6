/* tp_deliver_body.h: the maps and the body both tp_deliver programs share
 * (the perf event array one, tp_deliver.bpf.c, and the BPF ring buffer one,
 * tp_deliver_rb.bpf.c): configuration per slot, hits and failed outputs per
 * slot and CPU, the per-CPU scratch record, and the steps both take: copy
 * (slot, configuration, hit, the record behind its header) and dropped (a
 * failed output). */
#ifndef TRACER_BPF_TP_DELIVER_BODY_H
#define TRACER_BPF_TP_DELIVER_BODY_H

/* Set by the engine before load when it delivers one tracepoint only: that
 * slot, a constant, and no bpf_get_attach_cookie() per hit. */
const volatile __u32 only_slot = 0xffffffff;
/* Set by the engine before load when a stage keys by comm: each record's
 * header carries the task's name at the hit (tp_deliver_hdr.comm). */
const volatile __u32 tp_deliver_with_comm = 0;
/* The target (tracer_target.h), set by the engine before load: system-wide,
 * every process but tracer's own (tracer must not trace itself: each drain's
 * system calls would be records that wake it again); for a pid or command
 * target, the processes in `tgids`, which the engine's followers keep (the
 * target's children join, exited processes leave, a command joins at its
 * exec). A hit of another process is neither counted nor delivered. */
#include "tracer_target.h"

struct tp_deliver_buf {
	struct tp_deliver_hdr hdr;
	__u8 data[TP_DELIVER_MAX_RECORD];
};

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

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct tp_deliver_buf);
} scratch SEC(".maps");

/* The slot this hit is for (the link's cookie), its configuration (NULL: not
 * one of ours), with the hit counted, and the bytes of its record: the fixed
 * part, then what its dynamic fields point at (at most TP_DELIVER_MAX_RECORD -
 * 1). */
static __always_inline const struct tp_deliver_cfg *
tp_deliver_begin(void *ctx, __u32 *slot, __u32 *size, __u64 pid_tgid)
{
	*slot = only_slot != 0xffffffff ? only_slot
					: (__u32)bpf_get_attach_cookie(ctx);
	const struct tp_deliver_cfg *c = bpf_map_lookup_elem(&cfg, slot);
	if (!c)
		return NULL;
	__u32 tgid = (__u32)(pid_tgid >> 32);
	if (!(c->flags & TP_DELIVER_CFG_EXEC
		  ? tracer_tgid_in_target_at_exec(tgid)
		  : tracer_tgid_in_target(tgid)))
		return NULL;
	__u64 *h = bpf_map_lookup_elem(&hits, slot);
	if (h)
		*h += 1;
	/* The context pointer as a number: its fields are read with the helper.
	 */
	unsigned long base = (unsigned long)ctx;
	__u32 n = c->fixed_size;
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
		if (end > n)
			n = end;
	}
	if (n > TP_DELIVER_MAX_RECORD - 1)
		n = TP_DELIVER_MAX_RECORD - 1;
	*size = n;
	return c;
}

/* The hit's record, copied into this CPU's scratch buffer behind its header:
 * NULL when the hit is not one of ours. The first 8 bytes of a tracepoint
 * program's context hold the kernel's pt_regs pointer, not the common fields:
 * those are written back. `bytes` is what to output: the header and the
 * record, bounded for the verifier. */
static __always_inline struct tp_deliver_buf *
tp_deliver_copy(void *ctx, __u32 *slot, const struct tp_deliver_cfg **cfg,
		__u64 *bytes, const int quads)
{
	__u32 size;
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	const struct tp_deliver_cfg *c =
	    tp_deliver_begin(ctx, slot, &size, pid_tgid);
	if (!c)
		return NULL;
	__u32 zero = 0;
	struct tp_deliver_buf *b = bpf_map_lookup_elem(&scratch, &zero);
	if (!b)
		return NULL;
	/* The bound the verifier needs, in the register the helpers get
	 * (clang would drop a C mask after the clamp, and pass an unclamped
	 * copy). */
	asm volatile("%0 &= 4095" : "+r"(size));
	if (quads > 0) {
		/* The fixed part (at most quads * 4 bytes, the record's size
		 * rounded up to its 4-byte alignment), word by word, with
		 * loads at constant offsets of the context, from 8: the first
		 * 8 bytes are the kernel's pt_regs pointer, written over
		 * below. */
		__u32 *to = (__u32 *)b->data;
#pragma unroll
		for (int i = 2; i < TP_DELIVER_DIRECT_QUADS; i++) {
			if (i >= quads)
				break;
			to[i] = *(const __u32 *)((const char *)ctx + i * 4);
		}
	} else {
		bpf_probe_read_kernel(b->data, size, ctx);
	}
	*(__u16 *)&b->data[0] = (__u16)c->id;
	b->data[2] = 0;
	b->data[3] = 0;
	*(__u32 *)&b->data[4] = (__u32)pid_tgid;
	b->hdr.time = bpf_ktime_get_ns();
	b->hdr.slot = *slot;
	b->hdr.size = size;
	b->hdr.pid = pid_tgid >> 32;
	b->hdr.tid = (__u32)pid_tgid;
	b->hdr.cpu = bpf_get_smp_processor_id();
	b->hdr.flags = 0;
	b->hdr.comm[0] = 0; /* empty unless the name is read below */
	if (tp_deliver_with_comm &&
	    bpf_get_current_comm(b->hdr.comm, sizeof(b->hdr.comm)) == 0)
		b->hdr.flags = TP_DELIVER_F_COMM;
	*cfg = c;
	*bytes = sizeof(b->hdr) + size;
	return b;
}

static __always_inline void tp_deliver_dropped(__u32 slot)
{
	__u64 *d = bpf_map_lookup_elem(&drops, &slot);
	if (d)
		*d += 1;
}

/* The programs of a channel's tp_deliver_run(ctx, quads): tp_deliver for any
 * record (bpf_probe_read_kernel), tp_deliver_q<N> for a fixed part of N 4-byte
 * words (direct loads). */
#define TP_DELIVER_PROGRAM(n)                                                  \
	SEC("tracepoint") int tp_deliver_q##n(void *ctx)                       \
	{                                                                      \
		return tp_deliver_run(ctx, n);                                 \
	}
#define TP_DELIVER_PROGRAMS                                                    \
	SEC("tracepoint") int tp_deliver(void *ctx)                            \
	{                                                                      \
		return tp_deliver_run(ctx, 0);                                 \
	}                                                                      \
	TP_DELIVER_PROGRAM(2)                                                  \
	TP_DELIVER_PROGRAM(3)                                                  \
	TP_DELIVER_PROGRAM(4)                                                  \
	TP_DELIVER_PROGRAM(5)                                                  \
	TP_DELIVER_PROGRAM(6)                                                  \
	TP_DELIVER_PROGRAM(7)                                                  \
	TP_DELIVER_PROGRAM(8)                                                  \
	TP_DELIVER_PROGRAM(9)                                                  \
	TP_DELIVER_PROGRAM(10)                                                 \
	TP_DELIVER_PROGRAM(11)                                                 \
	TP_DELIVER_PROGRAM(12)                                                 \
	TP_DELIVER_PROGRAM(13)                                                 \
	TP_DELIVER_PROGRAM(14)                                                 \
	TP_DELIVER_PROGRAM(15)                                                 \
	TP_DELIVER_PROGRAM(16)

#endif /* TRACER_BPF_TP_DELIVER_BODY_H */
