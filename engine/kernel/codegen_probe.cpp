// One probe's program: its target test, field reads as C expressions, the filter, the key,
// and the update of the aggregation or the latency pair.
#include "codegen_internal.hpp"
#include "kernel_code.hpp"

#include <map>
#include <set>

namespace tracer::kernel::gen {
namespace {
constexpr const char* kArgRegs[] = {"di", "si", "dx", "cx", "r8", "r9"};

// The generator of one probe's program: field reads as C expressions, locals declared once.
class ProbeGen {
 public:
  ProbeGen(const KernelPlan& plan,
           const Layout& layout,
           std::uint32_t index,
           Writer& w,
           std::span<const UsdtOperand> usdt)
      : plan_(plan), layout_(layout), p_(plan.probes[index]), index_(index), w_(w), usdt_(usdt) {}

  void emit(const std::string& fn, bool tgid_map) {
    const Role role = role_of(plan_, index_);
    const bool kp = is_kprobe_family(p_.kind);
    w_.line("SEC(\"{}\")", is_perf_event(p_.kind) ? "perf_event" : kp ? "kprobe" : "tracepoint");
    w_.line("int {}(void *ctx)", fn);
    w_.line("{{");
    w_.in();
    w_.line("__u64 tr_pid_tgid = bpf_get_current_pid_tgid();");
    w_.line("__u32 tr_tgid = tr_pid_tgid >> 32;");
    if (plan_.arm_on_exec && !plan_.tgids.empty()) {
      // The first target (a command) counts from its exec on; its children and the other
      // targets are in tr_tgids. This probe's event may be that exec: it arms the command
      // itself (the kernel may run it before kExecProgram).
      if (p_.arms_command) {
        w_.line("if (tr_tgid == tr_target) /* the command's exec */");
        w_.line("	tr_armed = 1;");
      }
      w_.line("if (tr_tgid == tr_target) {{ /* the command, once it exec'd */");
      w_.line("	if (!*(volatile __u32 *)&tr_armed)");
      w_.line("		{}", ret());
      if (tgid_map) {
        w_.line("}} else if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid)) {{");
      } else {
        w_.line("}} else {{");
      }
      w_.line("	{}", ret());
      w_.line("}}");
    } else if (tgid_map && !plan_.tgids.empty()) {
      // The first target (the command or pid) is a load-time constant: its events skip the map
      // lookup; its children and the other targets are in tr_tgids.
      w_.line("if (tr_tgid != tr_target && !bpf_map_lookup_elem(&tr_tgids, &tr_tgid))");
      w_.line("\t{}", ret());
    } else if (tgid_map) {
      w_.line("if (!bpf_map_lookup_elem(&tr_tgids, &tr_tgid))");
      w_.line("\t{}", ret());
    } else if (plan_.tgids.size() == 1) {
      w_.line("if (tr_tgid != tr_target) /* the target process */");
      w_.line("\t{}", ret());
    } else if (plan_.tgids.empty() && plan_.exclude_tgid != 0) {
      w_.line("if (tr_tgid == tr_self) /* tracer itself */");
      w_.line("\t{}", ret());
    }
    // The strings the filters and keys read, each copied once (at its largest size): those of
    // the first filters before them, the others after them (a rejected event does not pay for
    // them). Without a probe filter they are read after the hit is counted (fewer values live
    // across the stats lookup: a long string compare then fits the 512-byte BPF stack).
    const auto collect_all = [&] {
      collect_strings(p_.probe_filter, /*early=*/true);
      collect_strings(p_.filter, /*early=*/true);
      if (aggregates(role)) {
        collect_strings(p_.post_filter, false);
        for (const Field& k : p_.keys)
          use_string(k, plan_.aggregation.string_key_bytes, false);
      }
    };
    if (!p_.probe_filter.empty()) {
      collect_all();
      load_strings(/*early_only=*/true);
      emit_filter(p_.probe_filter);  // not one of the probe's events: not a hit either
    }
    w_.line("__u32 tr_slot = {};", index_);
    w_.line("struct tr_stats *tr_st = bpf_map_lookup_elem(&tr_stats, &tr_slot);");
    w_.line("if (!tr_st)");
    w_.line("\t{}", ret());
    w_.line("TR_INC{}(&tr_st->hits);", atomic_suffix());
    // A `char *` string read before the stats (by the probe filter) that failed: counted now.
    stats_ready_ = true;
    for (const auto& [off, b] : data_loc_) {
      if (b.pointer && b.loaded)
        count_fault(off);
    }
    if (role != Role::kAggregate) {
      w_.line("__u64 tr_now = bpf_ktime_get_ns();");
    }
    if (aggregates(role)) {
      w_.line(
          "/* Read once: every update of this event goes to one generation (the flip's grace "
          "period, engine/kernel/reader.cpp). */");
      w_.line("__u32 tr_g = *(volatile __u32 *)&tr_gen;");
    }
    if (p_.probe_filter.empty()) {
      collect_all();
      load_strings(/*early_only=*/true);
    }
    emit_filter(p_.filter);
    load_strings(false);
    if (role == Role::kLatencyEntry) {
      emit_entry();
      w_.line("{}", ret());
      w_.out();
      w_.line("}}");
      w_.blank();
      return;
    }
    if (role == Role::kLatencyExit)
      emit_exit();
    emit_filter(p_.post_filter);
    emit_aggregate();
    w_.line("{}", ret());
    w_.out();
    w_.line("}}");
    w_.blank();
  }

  // Whether counters and values of this program need atomic adds: a uprobe's program runs
  // preemptibly (migrate_disable only: bpf_prog_run_array_uprobe), so two tasks on one CPU can
  // interleave in it; tracepoint and kprobe programs run with preemption off and
  // bpf_prog_active keeps them from nesting on a CPU.
  [[nodiscard]] std::string_view atomic_suffix() const {
    return is_uprobe(p_.kind) ? "_ATOMIC" : "";
  }

  // What the program returns: 1 keeps the event's own perf sample (a tracepoint's or a probe's
  // other perf events, other tools' too, still get it); a perf event's program returns 0, so
  // that its samples, aggregated here, are not also written to the event's ring.
  [[nodiscard]] std::string_view ret() const {
    return is_perf_event(p_.kind) && !p_.keep_samples ? "return 0;" : "return 1;";
  }

 private:
  std::string ctx_at(std::uint32_t off) const { return fmt::format("((char *)ctx + {})", off); }

  /// usdt argument `n` of this program's call sites, as a C expression of type __s64 or __u64:
  /// a register's low `size` bytes, a constant, or `size` bytes of user memory (a read that
  /// fails reads 0, as bpftrace's).
  std::string usdt_value(std::uint32_t n, std::uint32_t size, bool is_signed) const {
    if (n >= usdt_.size() || usdt_[n].kind == UsdtOperand::Kind::kNone)
      return "0";
    const UsdtOperand& o = usdt_[n];
    const std::string t = c_int_type(size, is_signed);
    const std::string_view wide = is_signed ? "__s64" : "__u64";
    switch (o.kind) {
      case UsdtOperand::Kind::kRegister:
        return fmt::format("({})({})((struct tr_pt_regs *)ctx)->{}", wide, t, o.reg);
      case UsdtOperand::Kind::kConstant:
        return fmt::format("({})({})({}LL)", wide, t, o.value);
      case UsdtOperand::Kind::kMemory:
        return fmt::format(
            "({{ {} tr_v = 0; bpf_probe_read_user(&tr_v, sizeof(tr_v), (const void *)(((struct "
            "tr_pt_regs *)ctx)->{} + ({}LL))); ({})tr_v; }})",
            t, o.reg, o.value, wide);
      case UsdtOperand::Kind::kNone:
        break;
    }
    return "0";
  }

  // An integer expression (and whether it is signed); nullopt for strings and missing fields.
  struct IntExpr {
    std::string text;
    bool is_signed = false;
  };
  std::optional<IntExpr> int_expr(const Field& f) const {
    switch (f.source) {
      case Source::kPid:
        return IntExpr{"(__s64)tr_tgid", true};
      case Source::kTid:
        return IntExpr{"(__s64)(__u32)tr_pid_tgid", true};
      case Source::kCpu:
        return IntExpr{"(__s64)bpf_get_smp_processor_id()", true};
      case Source::kUid:
        return IntExpr{"(__u64)(__u32)bpf_get_current_uid_gid()", false};
      case Source::kGid:
        return IntExpr{"(__u64)(bpf_get_current_uid_gid() >> 32)", false};
      case Source::kCgroup:
        return IntExpr{"(__u64)bpf_get_current_cgroup_id()", false};
      case Source::kArg:
        return IntExpr{fmt::format("(__u64)((struct tr_pt_regs *)ctx)->{}", kArgRegs[f.index]),
                       false};
      case Source::kRetval:
        return IntExpr{"(__s64)((struct tr_pt_regs *)ctx)->ax", true};
      case Source::kUsdtArg:
        return IntExpr{usdt_value(f.index, f.size, f.is_signed), f.is_signed};
      case Source::kDuration:
        return IntExpr{"tr_duration", false};
      case Source::kTpInt: {
        const std::string t = c_int_type(f.size, f.is_signed);
        // tp_prog_is_valid_access: constant offsets >= 8, aligned to the access size. A
        // misaligned field (packed records) is copied out with the helper.
        if (f.offset % f.size == 0)
          return IntExpr{fmt::format("({})*(volatile {} *){}", f.is_signed ? "__s64" : "__u64", t,
                                     ctx_at(f.offset)),
                         f.is_signed};
        return IntExpr{
            fmt::format("({})tr_read_{}({})", f.is_signed ? "__s64" : "__u64", t, ctx_at(f.offset)),
            f.is_signed};
      }
      default:
        return std::nullopt;
    }
  }

  // Strings: comm and __data_loc fields are copied to the stack once; char arrays are read in
  // place.
  void use_string(const Field& f, std::uint32_t bytes, bool early) {
    if (f.source == Source::kComm) {
      comm_ = true;
      comm_early_ = comm_early_ || early;
    } else if (f.source == Source::kTpDataLoc) {
      auto& b = data_loc_[f.offset];
      b.bytes = std::min(kMaxStringKey, std::max(b.bytes, bytes));
      b.rel = f.rel_loc;
      b.pointer = f.pointer;
      b.user = f.user;
      b.usdt = f.usdt;
      b.index = f.index;
      b.early = b.early || early;
    }
  }
  void collect_strings(const Filter& f, bool early) {
    for (const FilterNode& n : f.nodes) {
      for (const Operand* o : {&n.a, &n.b}) {
        if (o->kind != Operand::Kind::kField)
          continue;
        const Operand& other = o == &n.a ? n.b : n.a;
        // Equality needs the literal, the NUL after it, and one byte more (string_eq).
        const auto need = static_cast<std::uint32_t>(
            other.kind == Operand::Kind::kString ? other.text.size() + 2 : 2);
        use_string(o->field, need, early);
      }
    }
  }
  void load_strings(bool early_only) {
    if (comm_ && !comm_loaded_ && (comm_early_ || !early_only)) {
      w_.line("char tr_comm[16] = {{}};");
      w_.line("bpf_get_current_comm(tr_comm, sizeof(tr_comm));");
      w_.line("if ((__u32)tr_pid_tgid == 0) /* the idle tasks, named as perf and user space do */");
      w_.line("\t__builtin_memcpy(tr_comm, \"swapper\\0\\0\\0\\0\\0\\0\\0\\0\", 16);");
      comm_loaded_ = true;
    }
    for (auto& [off, b] : data_loc_) {
      if (b.loaded || (early_only && !b.early))
        continue;
      b.loaded = true;
      if (b.pointer) {
        // A `char *` field: the string it points to, with its length (NUL included) as
        // __data_loc's; a string longer than the copy reads as the copy's size (cut).
        // One byte more than the string's room: a string that fills it is longer (cut).
        w_.line("char tr_s{}[{}] = {{}};", off, b.bytes + 1);
        const std::string where = b.usdt ? usdt_value(b.index, 8, false)
                                         : fmt::format("*(volatile __u64 *){}", ctx_at(off));
        w_.line("long tr_r{} = bpf_probe_read_{}_str(tr_s{}, sizeof(tr_s{}), (const void *){});",
                off, b.user ? "user" : "kernel", off, off, where);
        w_.line("__u32 tr_len{} = tr_r{} > 0 ? (__u32)tr_r{} : 0;", off, off, off);
        if (stats_ready_)
          count_fault(off);
        continue;
      }
      // __data_loc: u32 (len << 16 | offset from the record's start); __rel_loc: the offset
      // counts from the end of the field.
      w_.line("char tr_s{}[{}] = {{}};", off, b.bytes);
      w_.line("__u32 tr_loc{} = *(volatile __u32 *){};", off, ctx_at(off));
      w_.line("__u32 tr_len{} = tr_loc{} >> 16;", off, off);
      w_.line(
          "bpf_probe_read_kernel_str(tr_s{}, sizeof(tr_s{}), (char *)ctx + {}(tr_loc{} & 0xffff));",
          off, off, b.rel ? fmt::format("{} + ", off + 4) : "", off);
    }
  }

  // A byte of a string field at `i`, as a C expression.
  std::string byte_at(const Field& f, std::uint32_t i) const {
    switch (f.source) {
      case Source::kComm:
        return fmt::format("(__u8)tr_comm[{}]", i);
      case Source::kTpDataLoc:
        return fmt::format("(__u8)tr_s{}[{}]", f.offset, i);
      case Source::kTpString:
        return fmt::format("*(volatile __u8 *){}", ctx_at(f.offset + i));
      default:
        return "0";
    }
  }
  std::uint32_t string_bytes(const Field& f) const {
    switch (f.source) {
      case Source::kComm:
        return kCommLen;
      case Source::kTpDataLoc:
        return data_loc_.at(f.offset).bytes;
      case Source::kTpString:
        return f.size;
      default:
        return 0;
    }
  }

  // `field == literal` (a prefix when `prefix`), as the user-space filter reads the field: up
  // to its first NUL within its bytes.
  std::string string_eq(const Field& f, const std::string& lit, bool prefix) const {
    if (f.source == Source::kProbe) {
      const bool eq = prefix ? p_.name.starts_with(lit) : p_.name == lit;
      return eq ? "1" : "0";
    }
    const std::uint32_t n = string_bytes(f);
    const auto len = static_cast<std::uint32_t>(lit.size());
    // comm (at most 15 characters) ends with a NUL within its 16 bytes; a char array may fill
    // its bytes. A __data_loc copy holds at least len + 2 bytes (collect_strings), so a NUL at
    // [len] is the string's own, not the one bpf_probe_read_kernel_str ends a cut copy with.
    std::uint32_t room = n;
    if (f.source == Source::kComm)
      room = n - 1;
    else if (f.source == Source::kTpDataLoc)
      room = n >= 2 ? n - 2 : 0;
    if (len > room)
      return "0";
    std::string out = "(1";
    if (f.source == Source::kTpDataLoc)  // the field's own length (NUL included, if any)
      out += fmt::format(" && tr_len{} >= {}", f.offset, len);
    for (std::uint32_t i = 0; i < len; ++i)
      out += fmt::format(" && {} == {}", byte_at(f, i), static_cast<unsigned char>(lit[i]));
    if (!prefix && len < n) {
      if (f.source == Source::kTpDataLoc)
        out += fmt::format(" && (tr_len{} == {} || {} == 0)", f.offset, len, byte_at(f, len));
      else
        out += fmt::format(" && {} == 0", byte_at(f, len));
    }
    out += ")";
    return out;
  }

  std::string cond(const Filter& f, int idx, int depth = 0) const {
    const FilterNode& n = f.nodes[static_cast<std::size_t>(idx)];
    if (depth > 64)
      return "0";
    switch (n.kind) {
      case FilterNode::Kind::kOr:
        return fmt::format("({} || {})", cond(f, n.lhs, depth + 1), cond(f, n.rhs, depth + 1));
      case FilterNode::Kind::kAnd:
        return fmt::format("({} && {})", cond(f, n.lhs, depth + 1), cond(f, n.rhs, depth + 1));
      case FilterNode::Kind::kNot:
        return fmt::format("!{}", cond(f, n.lhs, depth + 1));
      case FilterNode::Kind::kTruth:
        return truth(n.a);
      case FilterNode::Kind::kCmp:
        return compare(n);
    }
    return "0";
  }

  std::string truth(const Operand& o) const {
    switch (o.kind) {
      case Operand::Kind::kInt:
        return o.ival != 0 ? "1" : "0";
      case Operand::Kind::kUint:
        return o.uval != 0 ? "1" : "0";
      case Operand::Kind::kString:
        return o.text.empty() ? "0" : "1";
      case Operand::Kind::kField:
        break;
    }
    if (auto e = int_expr(o.field))
      return fmt::format("({} != 0)", e->text);
    if (o.field.source == Source::kProbe)
      return p_.name.empty() ? "0" : "1";
    if (type_of(o.field) == VType::kString)
      return fmt::format("({} != 0)", byte_at(o.field, 0));
    return "0";  // missing
  }

  std::optional<IntExpr> int_operand(const Operand& o) const {
    switch (o.kind) {
      case Operand::Kind::kInt:
        return IntExpr{
            o.ival == INT64_MIN ? "(-0x7fffffffffffffffLL - 1)" : fmt::format("{}LL", o.ival),
            true};
      case Operand::Kind::kUint:
        return IntExpr{fmt::format("{}ULL", o.uval), false};
      case Operand::Kind::kString:
        return std::nullopt;
      case Operand::Kind::kField:
        return int_expr(o.field);
    }
    return std::nullopt;
  }

  std::string compare(const FilterNode& n) const {
    static constexpr std::string_view kOps[] = {"==", "!=", "<", "<=", ">", ">="};
    const std::string_view op = kOps[static_cast<std::size_t>(n.op)];
    const bool sa = n.a.kind == Operand::Kind::kString ||
                    (n.a.kind == Operand::Kind::kField && type_of(n.a.field) == VType::kString);
    const bool sb = n.b.kind == Operand::Kind::kString ||
                    (n.b.kind == Operand::Kind::kField && type_of(n.b.field) == VType::kString);
    if (sa && sb) {
      const bool lit_b = n.b.kind == Operand::Kind::kString;
      const Operand& field = lit_b ? n.a : n.b;
      const Operand& lit = lit_b ? n.b : n.a;
      const bool prefix = lit.glob;
      const std::string text = prefix ? lit.text.substr(0, lit.text.size() - 1) : lit.text;
      const std::string eq = string_eq(field.field, text, prefix);
      return n.op == Cmp::kEq ? eq : fmt::format("!{}", eq);
    }
    const auto a = int_operand(n.a), b = int_operand(n.b);
    if (!a || !b)
      return "0";  // a missing field, or a string against a number: false
    if (a->is_signed == b->is_signed) {
      const std::string_view t = a->is_signed ? "__s64" : "__u64";
      return fmt::format("(({}){} {} ({}){})", t, a->text, op, t, b->text);
    }
    // Mixed signedness compares by value (the user-space filter widens both to 128 bits): a
    // negative signed side is below every unsigned value.
    if (a->is_signed) {
      const bool below = n.op == Cmp::kNe || n.op == Cmp::kLt || n.op == Cmp::kLe;
      return fmt::format("(({}) < 0 ? {} : ((__u64)({}) {} {}))", a->text, below ? 1 : 0, a->text,
                         op, b->text);
    }
    const bool above = n.op == Cmp::kNe || n.op == Cmp::kGt || n.op == Cmp::kGe;
    return fmt::format("(({}) < 0 ? {} : ({} {} (__u64)({})))", b->text, above ? 1 : 0, a->text, op,
                       b->text);
  }

  void emit_filter(const Filter& f) {
    if (f.empty())
      return;
    w_.line("if (!{})", cond(f, f.root));
    w_.line("\t{}", ret());
  }

  std::string latency_key() const {
    const auto e = int_expr(p_.latency_key);
    return e ? fmt::format("(__u64){}", e->text) : "0";
  }

  void emit_entry() {
    // plugins/stages/latency.cpp: an entry replaces a pending one (counted as an unmatched
    // entry); the pending map's exits take and delete.
    w_.line("__u32 tr_pslot = {};", plan_.probes.size());
    w_.line("struct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
    w_.line("if (!tr_ps)");
    w_.line("\t{}", ret());
    w_.line("__u64 tr_lk = {};", latency_key());
    w_.line("__u64 *tr_start_at = bpf_map_lookup_elem(&tr_start, &tr_lk);");
    w_.line("if (tr_start_at) {{");
    w_.line("\tTR_INC{}(&tr_ps->unmatched_entries);", atomic_suffix());
    w_.line("\t*tr_start_at = tr_now;");
    w_.line("}} else if (bpf_map_update_elem(&tr_start, &tr_lk, &tr_now, BPF_ANY) != 0) {{");
    w_.line("\tTR_INC{}(&tr_ps->entries_dropped);", atomic_suffix());
    w_.line("}}");
  }

  void emit_exit() {
    w_.line("__u32 tr_pslot = {};", plan_.probes.size());
    w_.line("struct tr_stats *tr_ps = bpf_map_lookup_elem(&tr_stats, &tr_pslot);");
    w_.line("if (!tr_ps)");
    w_.line("\t{}", ret());
    w_.line("__u64 tr_lk = {};", latency_key());
    w_.line("__u64 *tr_start_at = bpf_map_lookup_elem(&tr_start, &tr_lk);");
    w_.line("if (!tr_start_at) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->unmatched_exits);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("__u64 tr_begin = *tr_start_at;");
    w_.line("/* Whoever deletes the entry owns it (an exit racing on another CPU gets ENOENT). */");
    w_.line("if (bpf_map_delete_elem(&tr_start, &tr_lk) != 0) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->unmatched_exits);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("if (tr_now < tr_begin) {{");
    w_.line("\tTR_INC_ATOMIC(&tr_ps->out_of_order);");
    w_.line("\t{}", ret());
    w_.line("}}");
    w_.line("TR_INC_ATOMIC(&tr_ps->paired);");
    w_.line("__u64 tr_duration = tr_now - tr_begin;");
  }

  void emit_key() {
    const Aggregation& agg = plan_.aggregation;
    if (layout_.keyless) {
      w_.line("__u32 tr_k = 0;");
      return;
    }
    if (layout_.by_probe) {
      w_.line("__u32 tr_k = {}; /* the key is this probe's (Layout::by_probe) */", index_);
      return;
    }
    w_.line("struct tr_key tr_k;");
    w_.line("__builtin_memset(&tr_k, 0, sizeof(tr_k));");
    for (std::size_t c = 0; c < layout_.columns.size(); ++c) {
      const KeyColumn& col = layout_.columns[c];
      const Field& f = p_.keys[c];
      const std::string member = fmt::format("tr_k.k{}", c);
      if (type_of(f) == VType::kNone) {
        w_.line("tr_k.missing |= {}; /* {}: not on this probe */", 1U << col.missing_bit, col.name);
        continue;
      }
      if (f.source == Source::kProbe) {
        w_.line("{} = {};", member, index_);
        continue;
      }
      if (type_of(f) == VType::kStack) {
        emit_stack(member, f.source);
        continue;
      }
      if (auto e = int_expr(f)) {
        w_.line("{} = ({}){};", member, c_int_type(col.size, col.is_signed), e->text);
        continue;
      }
      switch (f.source) {
        case Source::kComm:
          // bpf_get_current_comm wrote a NUL-terminated name into zeroed bytes.
          w_.line("__builtin_memcpy({}, tr_comm, {});", member, std::min(col.size, kCommLen));
          break;
        case Source::kTpString: {
          const std::uint32_t n = std::min(col.size, f.size);
          w_.line("bpf_probe_read_kernel({}, {}, {});", member, n, ctx_at(f.offset));
          w_.line("tr_zero_after_nul({}, {});", member, n);
          break;
        }
        case Source::kTpDataLoc: {
          const std::uint32_t cap = std::min(col.size, agg.string_key_bytes);
          const std::uint32_t have = data_loc_.at(f.offset).bytes;
          w_.line("__builtin_memcpy({}, tr_s{}, {});", member, f.offset, std::min(cap, have));
          w_.line("{}[{}] = 0;", member, std::min(cap, have) - 1);
          w_.line("if (tr_len{} > {})", f.offset, std::min(cap, have));
          w_.line("\tTR_INC{}(&tr_st->truncated);", atomic_suffix());
          break;
        }
        default:
          break;
      }
    }
  }

  // A stack key: the stack's 64-bit hash, the stack stored under it in tr_stacks (tr_stack_key).
  // No stack (a kernel thread's user stack, a user-mode sample's kernel stack) is hash 0, an
  // empty stack; one that does not fit the map is counted, not aggregated.
  void emit_stack(const std::string& member, Source source) {
    const bool kernel = source != Source::kUserStack, user = source != Source::kKernelStack;
    const auto get = [&](std::string_view part, std::string_view flags) {
      w_.line("if (tr_stack_key{}(ctx, {}, &{}.{}) != 0) {{", atomic_suffix(), flags, member, part);
      w_.line("\tTR_INC{}(&tr_st->stacks_lost);", atomic_suffix());
      w_.line("\t{}", ret());
      w_.line("}}");
    };
    if (kernel)
      get("kernel", "0");
    if (user) {
      get("user", "TR_F_USER_STACK");
      w_.line("{}.tgid = tr_tgid;", member);
    }
  }

  void emit_aggregate() {
    const Aggregation& agg = plan_.aggregation;
    std::string value = "0";
    if (kernel_agg(agg).needs_value()) {
      const auto e = int_expr(p_.value);
      if (!e) {
        w_.line("/* '{}' is not on this probe: its events are not aggregated */", agg.value_name);
        w_.line("{}", ret());
        return;
      }
      w_.line("__s64 tr_v = (__s64){};", e->text);
      value = "tr_v";
    }
    const std::string fn = fmt::format("tr_update{}", atomic_suffix());
    if (layout_.own_slot) {
      w_.line("if (tr_tgid == tr_target) {{ /* the target itself: its slot (Layout::own_slot) */");
      w_.line("\t__u32 tr_o = {};", index_);
      w_.line("\tif (tr_g & 1)");
      w_.line("\t\t{}(&tr_own1, &tr_o, {}, tr_st);", fn, value);
      w_.line("\telse");
      w_.line("\t\t{}(&tr_own0, &tr_o, {}, tr_st);", fn, value);
      w_.line("\t{}", ret());
      w_.line("}}");
    }
    emit_key();
    w_.line("if (tr_g & 1)");
    w_.line("\t{}(&tr_agg1, &tr_k, {}, tr_st);", fn, value);
    w_.line("else");
    w_.line("\t{}(&tr_agg0, &tr_k, {}, tr_st);", fn, value);
  }

  /// A `char *` string whose page was not in memory (the read fails: a tracepoint program
  /// cannot fault it in) reads as empty: counted, per probe, in tr_stats.read_faults.
  void count_fault(std::uint32_t off) {
    w_.line("if (tr_r{} < 0)", off);
    w_.line("\tTR_INC{}(&tr_st->read_faults);", atomic_suffix());
  }

  struct Buffer {
    std::uint32_t bytes = 1;
    bool rel = false;
    bool pointer = false, user = false;  // Field::pointer, Field::user
    bool usdt = false;                   // Field::usdt: the pointer is usdt argument `index`
    std::uint32_t index = 0;
    bool early = false;  // read by the first filter: copied before it
    bool loaded = false;
  };
  const KernelPlan& plan_;
  const Layout& layout_;
  const ProbePlan& p_;
  std::uint32_t index_;
  Writer& w_;
  bool comm_ = false, comm_early_ = false, comm_loaded_ = false;
  bool stats_ready_ = false;  // tr_st is looked up
  std::map<std::uint32_t, Buffer> data_loc_;
  std::span<const UsdtOperand> usdt_;  // this program's call sites' argument operands
};

}  // namespace

/// `target = max(target, e)`: plainly (a per-CPU value of a program that does not nest) or by
/// a bounded compare-and-swap loop (a shared value), its give-ups counted as `contended`.
void emit_raise(Writer& w,
                std::string_view target,
                std::string_view e,
                bool cas,
                std::string_view inc) {
  if (cas) {
    w.line("__u64 old = {};", target);
    w.line("int i;");
    w.line("for (i = 0; i < 64 && {} > old; i++) {{", e);
    w.line("\t__u64 seen = __sync_val_compare_and_swap(&{}, old, {});", target, e);
    w.line("\tif (seen == old)");
    w.line("\t\tbreak;");
    w.line("\told = seen;");
    w.line("}}");
    w.line("if (i == 64)");
    w.line("\t{}(&st->contended);", inc);
  } else {
    w.line("if ({} > {})", e, target);
    w.line("\t{} = {};", target, e);
  }
}

void emit_probe(const KernelPlan& plan,
                const Layout& layout,
                std::uint32_t index,
                const std::string& fn,
                bool tgid_map,
                Writer& w,
                std::span<const UsdtOperand> usdt) {
  ProbeGen(plan, layout, index, w, usdt).emit(fn, tgid_map);
}

}  // namespace tracer::kernel::gen
