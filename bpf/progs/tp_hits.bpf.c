// SPDX-License-Identifier: GPL-2.0
/* tp_hits: counts, per CPU, the hits of each tracepoint it is attached to,
 * in the slot its attachment's BPF cookie names (the engine's probe index: the
 * record's common fields are not readable here, the kernel keeps the pt_regs
 * pointer in their place). It always returns 1:
 * it gates no perf consumer's samples (TOOLCHAIN.md). The engine compares these
 * counts with the samples its perf events delivered, so events the kernel ran
 * the tracepoint for but no ring received (neither a sample nor a LOST record)
 * are reported instead of silently missing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tp_hits.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TP_HITS_MAX_TRACEPOINTS);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

/* Set before load: tracer's own process, left out as the tracefs filter of its
 * events leaves it out (0: none). */
const volatile __u32 self_tgid = 0;

SEC("tracepoint")
int tp_hits(void *ctx)
{
	if (self_tgid != 0 &&
	    (__u32)(bpf_get_current_pid_tgid() >> 32) == self_tgid)
		return 1;
	__u32 slot = (__u32)bpf_get_attach_cookie(ctx);
	__u64 *v = bpf_map_lookup_elem(&hits, &slot);
	if (v)
		*v += 1; /* this CPU's slot: no other CPU writes it */
	return 1;
}
