/* tp_deliver: tracepoint records delivered through a BPF output channel (shared
 * with C++). Fixed-width types only, laid out without implicit padding. */
#ifndef TRACER_BPF_TP_DELIVER_H
#define TRACER_BPF_TP_DELIVER_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* NOLINTBEGIN(modernize-macro-to-enum) */
/* Probes one engine delivers at most (slot = the engine's probe index). */
#define TP_DELIVER_MAX_SLOTS 4096
/* __data_loc / __rel_loc fields whose bytes follow the fixed part. */
#define TP_DELIVER_MAX_LOC 8
/* Bytes copied of a record at most, plus one (a power of two: the program masks
 * with it); the rest of a longer record is cut, its size says so. */
#define TP_DELIVER_MAX_RECORD 4096
/* loc[] entries: this bit marks a __rel_loc (offset from the field's end). */
#define TP_DELIVER_REL_LOC 0x80000000u
/* A record's fixed part, when it has no dynamic fields, is read with direct
 * context loads (no helper call) by the program for its size in 4-byte words,
 * tp_deliver_q<N> for N from 2 up to this: the kernel refuses to attach a
 * program that reads past the tracepoint's record, so each size has its own
 * (TP_DELIVER_PROGRAMS in tp_deliver_body.h). */
#define TP_DELIVER_DIRECT_QUADS 16
/* NOLINTEND(modernize-macro-to-enum) */

/* What the engine tells the program about a slot's tracepoint. */
struct tp_deliver_cfg {
	__u32 id; /* the tracepoint's id: the copied record's common_type */
	__u32 fixed_size; /* bytes of the fixed part of the record */
	__u32 nloc;	  /* entries of loc[] in use */
	/* BPF ring buffer channel: below this many bytes waiting in the ring
	 * an output wakes no one (the engine's flush timer bounds the
	 * latency); at or above it, the output forces a wakeup. */
	__u32 wakeup_bytes;
	/* offsets of the dynamic fields (| TP_DELIVER_REL_LOC) */
	__u32 loc[TP_DELIVER_MAX_LOC];
	__u32 flags; /* TP_DELIVER_CFG_EXEC */
	__u32 pad;
};
/* cfg.flags: the tracepoint is sched:sched_process_exec, where a command
 * waiting for its exec joins the target (tracer_in_target_at_exec). */
/* NOLINTNEXTLINE(modernize-macro-to-enum) */
#define TP_DELIVER_CFG_EXEC 1u

/* Each output record: this header, then `size` bytes of the record. */
struct tp_deliver_hdr {
	__u64 time; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC, as the engine's
		       events */
	__u32 slot;
	__u32 size;
	__u32 pid; /* tgid */
	__u32 tid;
	__u32 cpu;   /* bpf_get_smp_processor_id(): one ring buffer serves
			every CPU */
	__u32 flags; /* TP_DELIVER_F_COMM: comm holds the task's name */
	/* bpf_get_current_comm() at the hit, when the engine asked for it
	 * (tp_deliver_with_comm): the name at the event's time, in the record,
	 * so that a count by comm needs no time order across rings. */
	char comm[16];
};
/* NOLINTNEXTLINE(modernize-macro-to-enum) */
#define TP_DELIVER_F_COMM 1u

#endif /* TRACER_BPF_TP_DELIVER_H */
