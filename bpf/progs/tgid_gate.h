/* tgid_gate: keeps a tracepoint's samples only for the processes in its `tgids`
 * map. Shared by the BPF program and C++. */
#ifndef TRACER_BPF_TGID_GATE_H
#define TRACER_BPF_TGID_GATE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Entries in the `tgids` map (key: __u32 tgid, value: __u8, ignored). */
#define TGID_GATE_MAX_TGIDS 1024

#endif /* TRACER_BPF_TGID_GATE_H */
