// SPDX-License-Identifier: GPL-2.0
/* tgid_gate: returns 1 (keep the sample) iff the current process is in `tgids`,
 * else 0. This is the explicit in-kernel raw-sample filter a recipe may ask
 * for. Beware: the return value gates the samples of EVERY perf consumer on the
 * tracepoint it is attached to, machine wide (TOOLCHAIN.md), so `tracer check`
 * must point it out. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "tgid_gate.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TGID_GATE_MAX_TGIDS);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

SEC("tracepoint")
int tgid_gate(void *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	return bpf_map_lookup_elem(&tgids, &tgid) ? 1 : 0;
}
