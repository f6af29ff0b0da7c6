// What every generated program has besides its probes: the prelude, the maps, the helper
// functions the probes call, and the program that follows forks.
#include "codegen_internal.hpp"
#include "kernel_code.hpp"

#include <algorithm>

namespace tracer::kernel::gen {
const std::string_view kPrelude =
    R"C(/* Types and constants of the kernel ABI this program uses (linux/bpf.h, the x86-64
 * pt_regs layout): spelled out so that clang does not parse vmlinux.h or system headers. */
typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;
enum {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_HASH = 5,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_ARRAY_OF_MAPS = 12,
};
enum { BPF_ANY = 0, BPF_NOEXIST = 1 };
enum { BPF_F_NO_PREALLOC = 1 };
#define TR_EEXIST 17
#define TR_EFAULT 14
#define TR_F_USER_STACK (1ULL << 8) /* BPF_F_USER_STACK */
#include <bpf/bpf_helpers.h>

#if !defined(__TARGET_ARCH_x86)
#error "generated for x86-64 (pt_regs layout)"
#endif
/* arch/x86/include/uapi/asm/ptrace.h struct pt_regs (x86-64): PT_REGS_PARM1..6 are di si dx cx
 * r8 r9, PT_REGS_RC is ax. */
struct tr_pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8, ax, cx, dx, si, di, orig_ax, ip,
		cs, flags, sp, ss;
};

char LICENSE[] SEC("license") = "GPL";

)C";

namespace {

/// The key struct of a hash-keyed aggregation.
void emit_key(const Layout& l, Writer& w) {
  std::uint32_t align = 1;
  for (const auto& c : l.columns)
    align = std::max(align, c.type == KeyColumn::Type::kString && !c.probe_name ? 1U
                            : c.type == KeyColumn::Type::kStack                 ? 8U
                                                                                : c.size);
  w.line("/* The key: packed, every integer at a multiple of its size, strings after them. */");
  w.line("struct tr_key {{");
  w.in();
  std::vector<std::size_t> order(l.columns.size());
  for (std::size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return l.columns[a].offset < l.columns[b].offset;
  });
  for (const std::size_t i : order) {
    const KeyColumn& c = l.columns[i];
    if (c.type == KeyColumn::Type::kStack)
      w.line("struct {{ __u64 kernel, user; __u32 tgid, pad; }} k{}; /* {}: hashes in tr_stacks */",
             i, c.name);
    else if (c.type == KeyColumn::Type::kString && !c.probe_name)
      w.line("char k{}[{}]; /* {} */", i, c.size, c.name);
    else
      w.line("{} k{}; /* {} */", c_int_type(c.size, c.is_signed), i, c.name);
  }
  if (l.missing_offset != 0 || std::any_of(l.columns.begin(), l.columns.end(),
                                           [](const KeyColumn& c) { return c.missing_bit >= 0; }))
    w.line("__u8 missing; /* bit per key column the probe lacks */");
  w.out();
  w.line("}} __attribute__((packed, aligned({})));", align);
  w.line("_Static_assert(sizeof(struct tr_key) == {}, \"key layout\");", l.key_size);
  for (std::size_t i = 0; i < l.columns.size(); ++i)
    w.line("_Static_assert(__builtin_offsetof(struct tr_key, k{}) == {}, \"key layout\");", i,
           l.columns[i].offset);
  w.blank();
}

/// The value struct, and what a new key starts from.
void emit_value(const Aggregation& agg, const Layout& l, Writer& w) {
  CodeWriter code(w);
  w.line("struct tr_val {{");
  w.in();
  kernel_agg(agg).emit_value(code);
  w.out();
  w.line("}};");
  w.line("_Static_assert(sizeof(struct tr_val) == {}, \"value layout\");", l.value_size);
  w.blank();
  // What a new key starts from: zeros (a read-only global the helper copies into the map).
  // Arrays start zeroed too, so zero must mean "nothing yet" for every kind: min and max keep
  // an encoding of the value under which the largest wins and no value is 0.
  w.line("const struct tr_val tr_init SEC(\".rodata\");");
  kernel_agg(agg).emit_defines(code);
  w.blank();
}

/// The aggregation maps (two generations), the target's own slots, the generation.
void emit_aggregation_maps(const KernelPlan& plan, const Layout& l, Writer& w) {
  const Aggregation& agg = plan.aggregation;
  const bool array = l.keyless || l.by_probe;
  const std::string key_type = array ? "__u32" : "struct tr_key";
  std::string type;
  if (array) {
    type = l.percpu ? "BPF_MAP_TYPE_PERCPU_ARRAY" : "BPF_MAP_TYPE_ARRAY";
  } else {
    type = l.percpu ? "BPF_MAP_TYPE_PERCPU_HASH" : "BPF_MAP_TYPE_HASH";
  }
  w.line("/* Two generations: programs update tr_agg<tr_gen & 1>; user space flips tr_gen, waits");
  w.line(" * a grace period, then reads and clears the other one. */");
  for (const char* name : kAggMaps) {
    w.line("struct {{");
    w.line("\t__uint(type, {});", type);
    w.line("\t__uint(max_entries, {});", l.keyless ? 1 : l.by_probe ? l.probes : agg.max_keys);
    w.line("\t__type(key, {});", key_type);
    w.line("\t__type(value, struct tr_val);");
    if (!array && kernel_agg(agg).no_prealloc())
      w.line("\t__uint(map_flags, BPF_F_NO_PREALLOC);");
    w.line("}} {} SEC(\".maps\");", name);
  }
  if (l.own_slot) {
    w.line("/* The target's own events: a slot per probe, no hashing (Layout::own_slot). */");
    for (const char* name : kOwnMaps) {
      w.line("struct {{");
      w.line("\t__uint(type, {});", l.percpu ? "BPF_MAP_TYPE_PERCPU_ARRAY" : "BPF_MAP_TYPE_ARRAY");
      w.line("\t__uint(max_entries, {});", l.probes);
      w.line("\t__type(key, __u32);");
      w.line("\t__type(value, struct tr_val);");
      w.line("}} {} SEC(\".maps\");", name);
    }
  }
  w.line("__u32 tr_gen SEC(\".bss\");");
  // The processes a program compares are read-only data set at load (gen::load), not constants
  // of the text: the text, and so its compiled object, is the same for every run of a recipe
  // (a pid in the text made each run compile anew). The verifier knows their values.
  if (!plan.tgids.empty())
    w.line("const volatile __u32 {} = 0; /* the first target's tgid */", kTargetGlobal);
  else if (plan.exclude_tgid != 0)
    w.line("const volatile __u32 {} = 0; /* tracer's own tgid, left out */", kSelfGlobal);
  if (plan.arm_on_exec)
    w.line("__u32 tr_armed SEC(\".data.tr_armed\") = 0; /* the command exec'd (tr_exec) */");
  w.blank();
}

/// The counters, per probe then the pipeline's slot, and the grace period's map-in-map.
void emit_stats_and_sync(const KernelPlan& plan, Writer& w) {
  w.line("struct tr_stats {{");
  w.line(
      "\t__u64 hits, map_full, truncated, contended, paired, unmatched_exits, unmatched_entries,");
  w.line("\t\tout_of_order, entries_dropped, targets_dropped, stacks_lost, keys_added,");
  w.line("\t\tread_faults;");
  w.line("}};");
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);");
  w.line("\t__uint(max_entries, {});", plan.probes.size() + 1);
  w.line("\t__type(key, __u32);");
  w.line("\t__type(value, struct tr_stats);");
  w.line("}} {} SEC(\".maps\");", kStatsMap);
  w.blank();
  // The grace period: an update of a map-in-map waits for every running BPF program
  // (kernel/bpf/syscall.c maybe_wait_bpf_programs: synchronize_rcu).
  w.line("struct tr_sync_inner {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_ARRAY);");
  w.line("\t__uint(max_entries, 1);");
  w.line("\t__type(key, __u32);");
  w.line("\t__type(value, __u32);");
  w.line("}} {} SEC(\".maps\");", kSyncInnerMap);
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);");
  w.line("\t__uint(max_entries, 1);");
  w.line("\t__type(key, __u32);");
  w.line("\t__array(values, struct tr_sync_inner);");
  w.line("}} {} SEC(\".maps\") = {{ .values = {{ [0] = &{} }} }};", kSyncMap, kSyncInnerMap);
  w.blank();
}

/// Stack keys: the scratch buffer and the stacks by hash.
void emit_stack_maps(const Aggregation& agg, Writer& w) {
  w.line("/* Stack keys: a stack is stored under its hash, never removed during the run. The map");
  w.line(" * is preallocated: a perf event's program runs in interrupt context, where allocating");
  w.line(" * a new element can fail. */");
  w.line("#define TR_STACK_DEPTH {}", agg.stack_depth);
  w.line("struct tr_stack {{");
  w.line("\t__u64 seq; /* the scratch buffer's writes (a uprobe's program is preemptible) */");
  w.line("\t__u64 ips[TR_STACK_DEPTH];");
  w.line("}};");
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);");
  w.line("\t__uint(max_entries, 1);");
  w.line("\t__type(key, __u32);");
  w.line("\t__type(value, struct tr_stack);");
  w.line("}} tr_scratch SEC(\".maps\");");
  w.line("struct {{");
  w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
  w.line("\t__uint(max_entries, {});", agg.max_stacks);
  w.line("\t__type(key, __u64);");
  w.line("\t__uint(value_size, {});", agg.stack_depth * 8);
  w.line("}} {} SEC(\".maps\");", kStacksMap);
  w.blank();
}

}  // namespace

void emit_maps(const KernelPlan& plan, const Layout& l, bool tgid_map, Writer& w) {
  if (!l.keyless && !l.by_probe)
    emit_key(l, w);
  emit_value(plan.aggregation, l, w);
  emit_aggregation_maps(plan, l, w);
  emit_stats_and_sync(plan, w);
  if (l.stacks)
    emit_stack_maps(plan.aggregation, w);
  if (tgid_map) {
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
    w.line("\t__uint(max_entries, {});", plan.max_tgids);
    w.line("\t__type(key, __u32);");
    w.line("\t__type(value, __u8);");
    w.line("}} {} SEC(\".maps\");", kTgidsMap);
    w.blank();
  }
  if (plan.latency) {
    w.line("struct {{");
    w.line("\t__uint(type, BPF_MAP_TYPE_HASH);");
    w.line("\t__uint(max_entries, {});", plan.latency->max_pending);
    w.line("\t__type(key, __u64);");
    w.line("\t__type(value, __u64);");
    w.line("}} {} SEC(\".maps\");", kStartMap);
    w.blank();
  }
}

namespace {

/// tr_stack_key (non-preemptible programs) and tr_stack_key_ATOMIC (uprobes, which may be
/// preempted by another task's run of them on the same CPU), as `want` says: the stack of this
/// event stored in tr_stacks under its 64-bit hash.
void emit_stack_helpers(const std::array<bool, 2>& want, Writer& w) {
  for (const bool guarded : {false, true}) {
    if (!want[guarded ? 1 : 0])
      continue;
    w.raw(
        guarded
            ? R"C(/* The same, for a preemptible program: the scratch buffer is per CPU, so another task's run
 * may write it between this one's writes and reads. Its counter is bumped before and after each
 * write; a run that sees another's bump in between lets its stack go (counted as lost), and
 * takes back the stack it stored from the buffer. */
static __always_inline int tr_stack_key_ATOMIC(void *ctx, __u64 flags, __u64 *key)
)C"
            : R"C(/* *key = the hash of this event's stack (bpf_get_stack: kernel, or user with
 * TR_F_USER_STACK), the stack stored under it; 0 for no stack. Nonzero: it could not be
 * stored (the map is full). */
static __always_inline int tr_stack_key(void *ctx, __u64 flags, __u64 *key)
)C");
    w.raw(R"C({
	__u32 zero = 0;
	struct tr_stack *buf = bpf_map_lookup_elem(&tr_scratch, &zero);
	if (!buf)
		return 1;
)C");
    if (guarded)
      w.raw("\t__u64 seq = __sync_fetch_and_add(&buf->seq, 1) + 2;\n");
    w.raw("\tlong n = bpf_get_stack(ctx, buf->ips, sizeof(buf->ips), flags);\n");
    if (guarded)
      w.raw(R"C(	if (__sync_fetch_and_add(&buf->seq, 1) + 1 != seq)
		return 1;
)C");
    w.raw(R"C(	if (n <= 0) {
		*key = 0;
		return n == 0 || n == -TR_EFAULT ? 0 : 1;
	}
	__u32 nr = n / 8;
	__u64 h = 0x9e3779b97f4a7c15ULL ^ nr;
	for (__u32 i = 0; i < TR_STACK_DEPTH; i++) {
		if (i >= nr)
			break;
		h = (h ^ buf->ips[i]) * 0xff51afd7ed558ccdULL;
		h ^= h >> 32;
	}
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	if (h == 0)
		h = 1;
	long err = -TR_EEXIST; /* -EEXIST: stored before; 0: stored by this run */
	if (!bpf_map_lookup_elem(&tr_stacks, &h)) {
		err = bpf_map_update_elem(&tr_stacks, &h, buf->ips, BPF_NOEXIST);
		if (err != 0 && err != -TR_EEXIST)
			return 1;
	}
)C");
    if (guarded) {
      w.raw(R"C(	if (*(volatile __u64 *)&buf->seq != seq) {
		if (err == 0)
			bpf_map_delete_elem(&tr_stacks, &h);
		return 1;
	}
)C");
    }
    w.raw(R"C(	*key = h;
	return 0;
}

)C");
  }
}

}  // namespace

void emit_helpers(const KernelPlan& plan, const Layout& l, Writer& w) {
  const Aggregation& agg = plan.aggregation;
  w.raw(R"C(#define TR_INC(p) (*(p) += 1)
#define TR_INC_ATOMIC(p) __sync_fetch_and_add((p), 1)

/* A char array as the user-space stages read it: up to its first NUL (the bytes after it are
 * zeroed so that equal strings are equal keys). */
static __always_inline void tr_zero_after_nul(char *s, int n)
{
	int z = 0;
#pragma unroll
	for (int i = 0; i < n; i++) {
		if (s[i] == 0)
			z = 1;
		if (z)
			s[i] = 0;
	}
}

)C");
  if (l.stacks) {
    std::array<bool, 2> want{};  // plain, guarded (uprobes)
    for (const auto& p : plan.probes)
      want[is_uprobe(p.kind) ? 1 : 0] = true;
    emit_stack_helpers(want, w);
  }
  bool misaligned = false;
  for (const auto& p : plan.probes) {
    const auto visit = [&](const Field& f) {
      misaligned = misaligned || (f.source == Source::kTpInt && f.offset % f.size != 0);
    };
    for (const auto& k : p.keys)
      visit(k);
    visit(p.value);
    visit(p.latency_key);
    for (const auto* filt : {&p.probe_filter, &p.filter, &p.post_filter})
      for (const auto& n : filt->nodes) {
        visit(n.a.field);
        visit(n.b.field);
      }
  }
  if (misaligned) {
    for (const int bits : {16, 32, 64})
      for (const char s : {'s', 'u'})
        w.line(
            "static __always_inline __{0}{1} tr_read___{0}{1}(const void *p) {{ __{0}{1} v = 0; "
            "bpf_probe_read_kernel(&v, sizeof(v), p); return v; }}",
            s, bits);
    w.blank();
  }
  {
    CodeWriter code(w);
    kernel_agg(agg).emit_helpers(code);
  }
  // The update, plain (per-CPU values of non-preemptible programs) and atomic (uprobes), as
  // the probes need them.
  bool want[2] = {false, false};
  for (std::uint32_t i = 0; i < plan.probes.size(); ++i) {
    if (aggregates(role_of(plan, i)))
      want[is_uprobe(plan.probes[i].kind) ? 1 : 0] = true;
  }
  for (const bool atomic : {false, true}) {
    if (!want[atomic ? 1 : 0])
      continue;
    const std::string_view inc = atomic ? "TR_INC_ATOMIC" : "TR_INC";
    const bool cas = atomic || !l.percpu;
    const std::string_view vinc = cas ? "TR_INC_ATOMIC" : "TR_INC";
    w.line(
        "static __always_inline void tr_update{}(void *map, void *key, __s64 v, struct tr_stats "
        "*st)",
        atomic ? "_ATOMIC" : "");
    w.line("{{");
    w.in();
    w.line("struct tr_val *p = bpf_map_lookup_elem(map, key);");
    w.line("if (!p) {{");
    w.line("\t/* A new key. Full (E2BIG) or out of memory: the event is counted, not lost. */");
    w.line("\tlong err = bpf_map_update_elem(map, key, &tr_init, BPF_NOEXIST);");
    w.line("\tif (err != 0 && err != -TR_EEXIST) {{");
    w.line("\t\t{}(&st->map_full);", inc);
    w.line("\t\treturn;");
    w.line("\t}}");
    w.line("\tif (err == 0) /* the generation's fill, so the reader drains before it is full */");
    w.line("\t\t{}(&st->keys_added);", inc);
    w.line("\tp = bpf_map_lookup_elem(map, key);");
    w.line("\tif (!p) {{");
    w.line("\t\t{}(&st->map_full);", inc);
    w.line("\t\treturn;");
    w.line("\t}}");
    w.line("}}");
    CodeWriter code(w, {.cas = cas, .inc = inc, .vinc = vinc});
    kernel_agg(agg).emit_update(code);
    w.out();
    w.line("}}");
    w.blank();
  }
}

void emit_fork(const KernelPlan& plan, Writer& w) {
  if (!plan.follow_children)
    return;
  const ForkTracepoint& f = *plan.follow_children;
  w.line("/* sched:sched_process_fork: a child of a target process is a target. */");
  w.line("SEC(\"tracepoint\")");
  w.line("int {}(void *ctx)", kForkProgram);
  w.line("{{");
  w.in();
  w.line("__u32 tr_tgid = bpf_get_current_pid_tgid() >> 32;");
  w.line("if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid))");
  w.line("\treturn 1;");
  w.line("__u32 tr_child = (__u32)*(volatile {} *)((char *)ctx + {});",
         c_int_type(f.child_pid_size, true), f.child_pid_offset);
  w.line("__u8 tr_one = 1;");
  w.line("if (bpf_map_update_elem(&tr_tgids, &tr_child, &tr_one, BPF_ANY) != 0) {{");
  w.line("\t__u32 tr_pslot = {};", plan.probes.size());
  w.line("\tstruct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
  w.line("\tif (tr_ps)");
  w.line("\t\tTR_INC_ATOMIC(&tr_ps->targets_dropped);");
  w.line("}}");
  w.line("return 1;");
  w.out();
  w.line("}}");
  w.blank();
  // A dead process leaves the map (else the map fills with the dead and later children are
  // not followed) when its leader's task is freed: after the last switch of its last thread and
  // its reaping. A thread the fork program took for a process (sched_process_fork fires for
  // threads too, with the thread's id as child_pid) leaves with its own task; after an exec by
  // another thread the old leader is freed under that thread's former id (the kernel swaps them).
  w.line("/* sched:sched_process_free: a dead target leaves the target map. */");
  w.line("SEC(\"tracepoint\")");
  w.line("int {}(void *ctx)", kFreeProgram);
  w.line("{{");
  w.in();
  w.line("__u32 tr_pid = (__u32)*(volatile {} *)((char *)ctx + {});",
         c_int_type(f.free_pid_size, true), f.free_pid_offset);
  w.line("bpf_map_delete_elem(&tr_tgids, &tr_pid);");
  w.line("return 1;");
  w.out();
  w.line("}}");
  w.blank();
}

}  // namespace tracer::kernel::gen
