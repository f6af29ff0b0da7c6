/* tp_deliver_body.h: the maps and the body both tp_deliver programs share
 * (the perf event array one, tp_deliver.bpf.c, and the BPF ring buffer one,
 * tp_deliver_rb.bpf.c): configuration per slot, hits and failed outputs per
 * slot and CPU, the per-CPU scratch record. The includer defines its channel
 * and tp_deliver_emit(ctx, cfg, buf, bytes), which returns 0 when the record
 * was stored. */
#ifndef TRACER_BPF_TP_DELIVER_BODY_H
#define TRACER_BPF_TP_DELIVER_BODY_H

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

static __always_inline int tp_deliver_emit(void *ctx,
					   const struct tp_deliver_cfg *c,
					   struct tp_deliver_buf *b,
					   __u64 bytes);

static __always_inline int tp_deliver_run(void *ctx)
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
	b->hdr.cpu = bpf_get_smp_processor_id();
	b->hdr.pad = 0;
	if (tp_deliver_emit(ctx, c, b, sizeof(b->hdr) + size) != 0) {
		__u64 *d = bpf_map_lookup_elem(&drops, &slot);
		if (d)
			*d += 1;
	}
	return 1;
}

#endif /* TRACER_BPF_TP_DELIVER_BODY_H */
