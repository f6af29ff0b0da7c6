/* tracer_target.h: "is this task in tracer's target?" for the BPF programs
 * tracer runs: shipped ones and a recipe's own [bpf] source, which includes it
 * as #include "tracer_target.h" (tracer puts it beside vmlinux.h when it
 * compiles the source).
 *
 * Usage, in a program that emits events:
 *     if (!tracer_in_target())
 *             return 1;
 *
 * tracer fills the `tgids` map with the pid or command target before the
 * programs run, and attaches tracer_follow_fork / tracer_follow_free /
 * tracer_follow_exec to sched:sched_process_fork / sched_process_free /
 * sched_process_exec so the target's children join it and dead processes
 * leave (any number of them over a run, at most TRACER_MAX_TARGETS alive or
 * unreaped at once; children that do not fit are counted in
 * tracer_targets_dropped and reported). A process leaves when its leader's
 * task is freed: after its last thread's last switch and its reaping, so
 * every event of every thread, up to the final sched_switch of the last one,
 * is the target's, also where the leader exits first (on every kernel: no
 * sched_process_exit.group_dead is needed). The one window: a thread that
 * outlives its leader and is held between its exit and its last switch for
 * longer than the RCU grace period that frees the reaped leader. A command
 * joins at its exec, as perf's enable_on_exec: until then its value is
 * TRACER_AT_EXEC and tracer_in_target() is false (what its process does between
 * tracer's fork and the exec is tracer's, not the command's); a program on
 * sched:sched_process_exec tests tracer_in_target_at_exec() instead, which
 * counts the command's own exec whatever order the kernel runs the programs
 * of that tracepoint in. System-wide, every process is the target but
 * tracer's own (unless `tracer run --trace-self`). */
#ifndef TRACER_TARGET_H
#define TRACER_TARGET_H

#ifndef TRACER_MAX_TARGETS
#define TRACER_MAX_TARGETS 65536
#endif

/* tgids values: in the target, or joining it at its next exec. */
#define TRACER_IN_TARGET 1
#define TRACER_AT_EXEC 2

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, TRACER_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} tracer_targets_dropped SEC(".maps");

/* Set by tracer before load: 1 when every process is the target
 * (system-wide), and the process left out then (tracer's own; 0: none). */
const volatile __u8 tracer_target_all = 1;
const volatile __u32 tracer_self_tgid = 0;
static __always_inline int tracer_tgid_in_target(__u32 tgid)
{
	if (tracer_target_all)
		return tgid != tracer_self_tgid || tracer_self_tgid == 0;
	__u8 *v = bpf_map_lookup_elem(&tgids, &tgid);
	return v && *v == TRACER_IN_TARGET;
}

static __always_inline int tracer_in_target(void)
{
	return tracer_tgid_in_target(bpf_get_current_pid_tgid() >> 32);
}

/* tracer_tgid_in_target() for a program on sched:sched_process_exec: the
 * command waiting for its exec is the target from this event on (it joins
 * here, also when this program runs before tracer_follow_exec). */
static __always_inline int tracer_tgid_in_target_at_exec(__u32 tgid)
{
	if (tracer_target_all)
		return tgid != tracer_self_tgid || tracer_self_tgid == 0;
	__u8 *v = bpf_map_lookup_elem(&tgids, &tgid);
	if (!v)
		return 0;
	if (*v == TRACER_AT_EXEC)
		*v = TRACER_IN_TARGET;
	return 1;
}

static __always_inline int tracer_in_target_at_exec(void)
{
	return tracer_tgid_in_target_at_exec(bpf_get_current_pid_tgid() >> 32);
}

SEC("tracepoint")
int tracer_follow_fork(struct trace_event_raw_sched_process_fork *ctx)
{
	if (tracer_target_all)
		return 1;
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	__u8 *in = bpf_map_lookup_elem(&tgids, &parent);
	if (!in || *in != TRACER_IN_TARGET)
		return 1;
	__u32 child = (__u32)ctx->child_pid;
	__u8 one = 1;
	if (bpf_map_update_elem(&tgids, &child, &one, BPF_ANY) != 0) {
		__u32 zero = 0;
		__u64 *d = bpf_map_lookup_elem(&tracer_targets_dropped, &zero);
		if (d)
			*d += 1;
	}
	return 1;
}

/* A task's last reference is gone (an RCU callback: the current task is
 * anyone's): it can run no more. A process leaves with its leader's task,
 * which is freed after the process's last thread exited and the process was
 * reaped; a thread the fork program took for a process (sched_process_fork
 * fires for threads too) leaves with its own. After an exec by another
 * thread, the old leader is freed under that thread's former id (the kernel
 * swaps them), never under the process's. */
SEC("tracepoint")
int tracer_follow_free(struct trace_event_raw_sched_process_template *ctx)
{
	if (tracer_target_all)
		return 1;
	__u32 pid = (__u32)ctx->pid;
	bpf_map_delete_elem(&tgids, &pid);
	return 1;
}

/* The command joins at its exec (its value was TRACER_AT_EXEC). */
SEC("tracepoint")
int tracer_follow_exec(void *ctx)
{
	if (tracer_target_all)
		return 1;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 *v = bpf_map_lookup_elem(&tgids, &tgid);
	if (v && *v == TRACER_AT_EXEC)
		*v = TRACER_IN_TARGET;
	return 1;
}

#endif /* TRACER_TARGET_H */
