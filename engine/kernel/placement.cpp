// Placement: stage kernel forms + resolved probes -> a kernel::gen::KernelPlan per pipeline, or the
// reason a pipeline stays in user space.
#include "tracer/kernel/placement.hpp"

#include <fmt/format.h>

#include <linux/perf_event.h>

#include <algorithm>
#include <utility>

#include "tracer/common/text_file.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/filter_tree.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/symbols/usdt.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::kernel {
namespace {

using Source = FieldRef::Source;

/// A probe's tracefs filter as the kernel form of a filter stage, for a probe whose events an
/// in-kernel program reads: the tracefs filter gates only a perf event's samples, never what a
/// BPF program on the tracepoint sees. A filter that has no such form (the bitwise `&`, a syntax
/// the grammar does not read) gives kind kNone and the reason in why_not.
KernelForm tracefs_filter_kernel_form(std::string_view filter) {
  FilterError error;
  auto tree = parse_filter(filter, FilterGrammar::kTracefs, error);
  if (!tree) {
    return {.why_not = fmt::format("column {} of its filter \"{}\": {}", error.column, filter,
                                   error.message)};
  }
  KernelForm f{
      .kind = KernelForm::Kind::kFilter, .nodes = std::move(tree->nodes), .root = tree->root};
  // The kernel's names for the generic fields (trace_events_filter.c): tracer's cpu and comm.
  for (auto& n : f.nodes) {
    for (auto* o : {&n.a, &n.b}) {
      if (o->kind != KernelForm::Operand::Kind::kField)
        continue;
      if (o->text == "CPU" || o->text == "common_cpu")
        o->text = "cpu";
      else if (o->text == "COMM" || o->text == "common_comm")
        o->text = "comm";
    }
  }
  return f;
}

/// kernel.perf_event_max_stack: the deepest callchain the kernel takes (127 by default).
std::uint32_t max_stack_sysctl() {
  constexpr std::uint32_t kDefault = 127;
  const auto text = detail::read_text_file("/proc/sys/kernel/perf_event_max_stack", "placement");
  const auto n = text ? detail::parse_uint<std::uint32_t>(detail::trim(*text)) : std::nullopt;
  return n && *n != 0 ? *n : kDefault;
}

/// N of a usdt argument's field name "argN".
std::optional<std::uint32_t> usdt_arg_index(std::string_view name) {
  if (!name.starts_with("arg"))
    return std::nullopt;
  return detail::parse_uint<std::uint32_t>(name.substr(3));
}

/// A usdt probe's call sites with their arguments' operands, as its program reads them.
std::vector<std::vector<gen::UsdtOperand>> usdt_sites(const ProbeInfo& info) {
  std::vector<std::vector<gen::UsdtOperand>> out;
  for (const auto& text : info.usdt_args) {
    auto& site = out.emplace_back();
    for (const auto& a : symbols::parse_usdt_args(text).value_or(std::vector<symbols::UsdtArg>{})) {
      using K = symbols::UsdtArg::Kind;
      using O = gen::UsdtOperand::Kind;
      site.push_back({.kind = a.kind == K::kRegister   ? O::kRegister
                              : a.kind == K::kConstant ? O::kConstant
                              : a.kind == K::kMemory   ? O::kMemory
                                                       : O::kNone,
                      .reg = a.reg,
                      .value = a.value,
                      .size = static_cast<std::uint32_t>(a.size),
                      .is_signed = a.is_signed});
    }
  }
  return out;
}

/// Whether a probe's program reads any usdt argument.
bool reads_usdt_args(const gen::ProbePlan& pp) {
  const auto usdt = [](const gen::Field& f) { return f.source == gen::Source::kUsdtArg || f.usdt; };
  const auto in = [&](const gen::Filter& f) {
    return std::any_of(f.nodes.begin(), f.nodes.end(), [&](const gen::FilterNode& n) {
      return usdt(n.a.field) || usdt(n.b.field);
    });
  };
  return usdt(pp.value) || usdt(pp.latency_key) ||
         std::any_of(pp.keys.begin(), pp.keys.end(), usdt) || in(pp.probe_filter) ||
         in(pp.filter) || in(pp.post_filter);
}

std::uint32_t record_size(const tracefs::Format& f) {
  std::uint32_t end = 0;
  for (const auto& x : f.fields)
    end = std::max(end, x.offset + x.size);
  return end;
}

/// Resolves field names of one probe to what its BPF program reads; the first name that has no
/// kernel form is kept in `why`.
class FieldMap {
 public:
  FieldMap(const Schema& schema, std::uint32_t probe, std::string& why)
      : schema_(&schema), probe_(probe), why_(&why) {}

  /// `duration`: the latency pairing's, on the exit probe (elsewhere missing).
  std::optional<gen::Field> operator()(const std::string& name, bool duration_here = false) {
    if (name == "duration" && duration_here)
      return gen::Field::duration();
    const auto a = schema_->lookup(probe_, name);
    if (!a)
      return gen::Field::missing(name);  // as in user space: every comparison on it is false
    switch (a->source) {
      case Source::kPid:
        return gen::Field::pid();
      case Source::kTid:
        return gen::Field::tid();
      case Source::kComm:
        return gen::Field::comm();
      case Source::kCpu:
        return gen::Field::cpu();
      case Source::kProbe:
        return gen::Field::probe();
      case Source::kTracefs: {
        const tracefs::Field* f = a->field;
        if (f == nullptr)
          break;
        if (schema_->probes()[probe_].kind == ProbeKind::kUsdt) {
          // Its tracefs event's argN: the program reads the argument where each call site
          // keeps it (ProbePlan::usdt_sites), not from the event's record.
          const auto n = usdt_arg_index(f->name);
          if (!n)
            break;
          if (f->is_string)
            return gen::Field::usdt_string(*n);
          return gen::Field::usdt_arg(*n, f->size, f->is_signed);
        }
        if (f->is_data_loc || f->is_rel_loc) {
          if (!f->is_string)
            break;  // a dynamic array of integers
          return gen::Field::tp_data_loc(f->name, f->offset, f->is_rel_loc);
        }
        if (f->is_string)
          return gen::Field::tp_string(f->name, f->offset, f->size);
        if (tracefs::is_string_pointer(*f)) {  // the string it points to, read at the event
          const auto& spec = schema_->probes()[probe_].spec;
          return gen::Field::tp_string_pointer(f->name, f->offset, spec.starts_with("syscalls:"));
        }
        if (f->array_len)
          break;
        return gen::Field::tp_int(f->name, f->offset, f->size, f->is_signed);
      }
      case Source::kSyscallName:
        if (a->field != nullptr) {  // raw_syscalls' id, named by the reader
          auto f = gen::Field::tp_int(name, a->field->offset, a->field->size, a->field->is_signed);
          f.syscall_id = true;
          return f;
        }
        break;
      case Source::kCallchain:
      case Source::kKernelStack:
      case Source::kUserStack: {
        // bpf_get_stack, stored under its hash: the same frames as the sample's callchain
        // (a perf event's program takes them from it), without perf's exclude_callchain_*.
        const auto& attr = schema_->probes()[probe_].attr;
        if (attr.has(perf::Flag::kExcludeCallchainKernel) ||
            attr.has(perf::Flag::kExcludeCallchainUser)) {
          if (why_->empty()) {
            *why_ = fmt::format(
                "field '{}' of probe '{}' is a stack of a probe with exclude_callchain_kernel or "
                "exclude_callchain_user, which in-kernel stack ids do not follow",
                name, schema_->probes()[probe_].name);
          }
          return std::nullopt;
        }
        return a->source == Source::kCallchain     ? gen::Field::callchain()
               : a->source == Source::kKernelStack ? gen::Field::kstack()
                                                   : gen::Field::ustack();
      }
      case Source::kUserStackDwarf:
      case Source::kCallchainDwarf:
        if (why_->empty()) {
          *why_ = fmt::format(
              "field '{}' of probe '{}' is unwound with DWARF (unwind = \"dwarf\"): the user "
              "stack's bytes are unwound in user space",
              name, schema_->probes()[probe_].name);
        }
        return std::nullopt;
      case Source::kReg:
        if (name == "retval")
          return gen::Field::retval();
        if (name.size() == 4 && name.starts_with("arg") && name[3] >= '0' && name[3] <= '5')
          return gen::Field::arg(static_cast<std::uint32_t>(name[3] - '0'));
        break;
      default:
        break;
    }
    if (why_->empty()) {
      *why_ = fmt::format("field '{}' of probe '{}' is not readable in a BPF program", name,
                          schema_->probes()[probe_].name);
    }
    return std::nullopt;
  }

 private:
  const Schema* schema_;
  std::uint32_t probe_;
  std::string* why_;
};

/// Appends filter `f` (field operands resolved for one probe) to `out`, ANDed with what is there.
bool append_filter(const KernelForm& f, FieldMap& fields, bool duration_here, gen::Filter& out) {
  const int base = static_cast<int>(out.nodes.size());
  for (const auto& n : f.nodes) {
    gen::FilterNode g{.kind = n.kind,
                      .lhs = n.lhs < 0 ? -1 : n.lhs + base,
                      .rhs = n.rhs < 0 ? -1 : n.rhs + base,
                      .op = n.op};
    for (auto [src, dst] : {std::pair{&n.a, &g.a}, std::pair{&n.b, &g.b}}) {
      *dst = src->rebound<gen::Field>();
      if (src->kind == OperandKind::kField) {
        auto field = fields(src->text, duration_here);
        if (!field)
          return false;
        dst->field = std::move(*field);
      }
    }
    out.nodes.push_back(std::move(g));
  }
  if (f.root < 0)
    return true;
  const int root = f.root + base;
  if (out.root < 0) {
    out.root = root;
  } else {
    out.nodes.push_back({.kind = gen::FilterNode::Kind::kAnd, .lhs = out.root, .rhs = root});
    out.root = static_cast<int>(out.nodes.size() - 1);
  }
  return true;
}

void all_user(PipelinePlace& out, const std::string& why) {
  for (auto& s : out.stages) {
    s.kernel = false;
    s.why = why;
  }
  out.plan.reset();
}

/// The kernel part of a pipeline: filters, at most one latency, filters, then one aggregation
/// (its index in `agg`), with only outputs of its tables after it. Empty, or why the pipeline
/// stays in user space (`out.blocking_stage` set where a stage decides it).
std::string kernel_forms(Pipeline& p,
                         PipelinePlace& out,
                         std::vector<KernelForm>& forms,
                         std::optional<std::size_t>& agg) {
  for (std::size_t i = 0; i < p.size() && !agg; ++i) {
    forms.push_back(kernel_form_of(p.stage(i)));
    const auto& f = forms.back();
    if (f.kind == KernelForm::Kind::kNone) {
      out.blocking_stage = i;
      return fmt::format("stage {} ('{}') stays in user space: {}", i + 1, p.stage_name(i),
                         f.why_not);
    }
    if (f.kind == KernelForm::Kind::kLatency) {
      if (out.latency)
        return "two latency stages in one pipeline";
      out.latency = i;
    }
    if (f.kind == KernelForm::Kind::kAggregate)
      agg = i;
  }
  if (!agg)
    return "no aggregation: every event goes to user space";
  // An aggregation passes its events on (configs/README.md, "Stages after an aggregation"): after
  // an in-kernel one, whose events stay in the kernel, only outputs of its tables can follow. A
  // stage that reads the events (a second aggregation, a filter, an output of each event or of
  // the records) keeps the pipeline in user space, where it sees them.
  for (std::size_t i = *agg + 1; i < p.size(); ++i) {
    Stage& st = p.stage(i);
    const Output* o = st.output();
    if (o != nullptr && !o->writes_events_after_aggregation())
      continue;
    const std::string what = st.aggregation() != nullptr
                                 ? fmt::format("aggregates the events of stage {} ('{}') again",
                                               *agg + 1, p.stage_name(*agg))
                             : o != nullptr ? std::string("writes each event after the aggregation")
                                            : std::string("reads each event after the aggregation");
    out.blocking_stage = i;
    return fmt::format(
        "stage {} ('{}') {}: an aggregation passes its events on, and an "
        "in-kernel one keeps them in the kernel",
        i + 1, p.stage_name(i), what);
  }
  return {};
}

/// Why a probe's events cannot reach an in-kernel program (empty: they can).
std::string probe_refusal(const ProbeInfo& info, bool task_target) {
  if (info.counts_to_stages) {
    return fmt::format(
        "probe '{}' counts (counting = true): its counts reach the stages in user "
        "space at each tick",
        info.name);
  }
  if (!gen::has_program(info.kind)) {
    return fmt::format(
        "probe '{}' is a {} event (in-kernel programs attach to tracepoints, "
        "kprobes, uprobes and sampling perf events)",
        info.name, to_string(info.kind));
  }
  if (gen::is_perf_event(info.kind) && info.attr.type() == PERF_TYPE_SOFTWARE &&
      info.attr.config() != PERF_COUNT_SW_CPU_CLOCK &&
      info.attr.config() != PERF_COUNT_SW_TASK_CLOCK) {
    // A software event counted where it happens (page-faults, context-switches...) does not
    // run a BPF program at each of its samples (on kernel 6.18 a page fault's never does:
    // bpftrace's software:page-faults:1 counts nothing either); the clocks do.
    return fmt::format(
        "probe '{}' is the software event '{}': of the software events only "
        "cpu-clock and task-clock run an in-kernel program at every sample",
        info.name, info.spec);
  }
  if (task_target && info.attr.type() != PERF_TYPE_TRACEPOINT) {
    return fmt::format(
        "probe '{}' is a {} of a process target: it stays in user space (its "
        "per-task events are inherited, and a child's exit would detach a "
        "program shared with them)",
        info.name, to_string(info.kind));
  }
  return {};
}

/// The probe's own filter, first in its program: on the user path it is the perf event's
/// tracefs filter, which a program attached to the tracepoint never sees. Empty, or why it
/// cannot run there.
std::string plan_probe_filter(const std::string& filter,
                              const ProbeInfo& info,
                              const Schema& schema,
                              std::uint32_t pi,
                              FieldMap& fields,
                              const std::string& why,
                              gen::ProbePlan& pp) {
  const KernelForm pf = tracefs_filter_kernel_form(filter);
  // A name the probe does not have would compare false in the program (every event dropped)
  // where the kernel's filter knows it: no kernel form then.
  std::string unknown;
  for (const auto& n : pf.nodes) {
    for (const auto* o : {&n.a, &n.b}) {
      if (o->kind == KernelForm::Operand::Kind::kField && unknown.empty() &&
          !schema.lookup(pi, o->text))
        unknown = o->text;
    }
  }
  if (!unknown.empty()) {
    return fmt::format(
        "the filter of probe '{}' names '{}', which its in-kernel program cannot "
        "read; in user space it is the tracepoint's tracefs filter",
        info.name, unknown);
  }
  if (pf.kind != KernelForm::Kind::kFilter) {
    return fmt::format(
        "the filter of probe '{}' has no in-kernel form ({}); in user space it is "
        "the tracepoint's tracefs filter",
        info.name, pf.why_not);
  }
  if (!append_filter(pf, fields, false, pp.probe_filter) || !why.empty())
    return fmt::format("the filter of probe '{}' cannot run in its program: {}", info.name, why);
  return {};
}

/// What the placement decides for each stage of a pipeline placed in the kernel.
void say_kernel_stages(PipelinePlace& out, const std::vector<KernelForm>& forms) {
  for (std::size_t i = 0; i < out.stages.size(); ++i) {
    auto& s = out.stages[i];
    if (i < forms.size()) {
      s.kernel = true;
      s.why = forms[i].kind == KernelForm::Kind::kFilter    ? "filter in the probe's program"
              : forms[i].kind == KernelForm::Kind::kLatency ? "pairs in a map of start times"
                                                            : "aggregates in BPF maps";
    } else {
      s.why = "reads the aggregation's tables";
    }
  }
}

/// One pipeline's probes planned into its programs: what each reads (keys, value, filters,
/// latency pairing).
class ProbePlanner {
 public:
  ProbePlanner(const Schema& schema,
               const std::vector<KernelForm>& forms,
               std::size_t agg,
               std::optional<std::size_t> latency)
      : schema_(schema), forms_(forms), agg_(agg), latency_(latency) {}

  /// Plans probe `pi` into `plan` (empty), or says why the pipeline stays in user space.
  std::string add(const ProbeInfo& info,
                  std::uint32_t pi,
                  const std::string& filter,
                  gen::KernelPlan& plan) {
    std::string why;
    FieldMap fields(schema_, pi, why);
    if (!gen::has_program(info.kind))  // probe_refusal said so first
      return fmt::format("probe '{}' cannot run an in-kernel program", info.name);
    gen::ProbePlan pp{.name = info.name, .kind = info.kind};
    // Stack keys keep as many frames as the probe's callchain would (max_stack, else the
    // kernel's perf_event_max_stack).
    const std::uint16_t max_stack = info.attr.raw()->sample_max_stack;
    stack_depth_ = std::max(stack_depth_, max_stack != 0 ? max_stack : max_stack_sysctl());
    if (info.format && info.kind != ProbeKind::kUsdt)
      pp.record_size = record_size(*info.format);
    if (info.kind == ProbeKind::kUsdt)
      pp.usdt_sites = usdt_sites(info);
    const auto plan_index = static_cast<std::uint32_t>(plan.probes.size());
    bool exit_here = false;
    if (latency_) {
      const KernelForm& l = forms_[*latency_];
      if (info.name == l.entry) {
        entry_probe_ = plan_index;
        if (auto k = fields(l.key))
          pp.latency_key = *k;
      } else if (info.name == l.exit) {
        exit_probe_ = plan_index;
        exit_here = true;
        if (auto k = fields(l.exit_key.empty() ? l.key : l.exit_key))
          pp.latency_key = *k;
      } else {
        return fmt::format("probe '{}' is neither the latency's entry nor its exit", info.name);
      }
    }
    if (!filter.empty()) {
      if (auto refused = plan_probe_filter(filter, info, schema_, pi, fields, why, pp);
          !refused.empty())
        return refused;
    }
    for (std::size_t i = 0; i < agg_; ++i) {
      if (forms_[i].kind != KernelForm::Kind::kFilter)
        continue;
      const bool after_latency = latency_ && i > *latency_;
      if (!append_filter(forms_[i], fields, exit_here, after_latency ? pp.post_filter : pp.filter))
        break;
    }
    const KernelForm& a = forms_[agg_];
    for (const auto& k : a.by) {
      if (auto f = fields(k, exit_here))
        pp.keys.push_back(std::move(*f));
    }
    if (!a.value.empty()) {
      if (auto f = fields(a.value, exit_here))
        pp.value = std::move(*f);
    }
    if (!why.empty())
      return why;
    if (!reads_usdt_args(pp))
      pp.usdt_sites.clear();  // one program for every call site
    plan.probes.push_back(std::move(pp));
    return {};
  }

  /// The latency's pairing and the stack depth, once every probe is planned.
  std::string finish(gen::KernelPlan& plan) const {
    plan.aggregation.stack_depth = stack_depth_;
    if (!latency_)
      return {};
    if (!entry_probe_ || !exit_probe_)
      return "the latency's entry or exit probe is missing";
    plan.latency = gen::Latency{.entry_probe = *entry_probe_,
                                .exit_probe = *exit_probe_,
                                .max_pending = forms_[*latency_].max_pending};
    return {};
  }

 private:
  const Schema& schema_;
  const std::vector<KernelForm>& forms_;
  std::size_t agg_;
  std::optional<std::size_t> latency_;
  std::uint32_t stack_depth_ = 0;
  std::optional<std::uint32_t> entry_probe_, exit_probe_;
};

PipelinePlace place_one(Pipeline& p,
                        const Schema& schema,
                        std::span<const ProbeInfo> probes,
                        const std::vector<bool>& sampling,
                        Placement mode,
                        bool task_target,
                        std::span<const std::string> filters) {
  PipelinePlace out;
  for (std::size_t i = 0; i < p.size(); ++i)
    out.stages.push_back({.use = p.stage_name(i), .kernel = false, .why = {}});
  if (mode == Placement::kUser) {
    all_user(out, "placement = \"user\"");
    return out;
  }
  std::vector<KernelForm> forms;
  std::optional<std::size_t> agg;
  if (auto why = kernel_forms(p, out, forms, agg); !why.empty()) {
    all_user(out, why);
    return out;
  }
  out.aggregation = *agg;
  const KernelForm& a = forms[*agg];
  gen::KernelPlan plan;
  plan.aggregation = {.agg = a.agg,
                      .key_names = a.by,
                      .value_name = a.value,
                      .max_keys = a.max_keys,
                      .max_stacks = a.max_stacks};
  ProbePlanner planner(schema, forms, *agg, out.latency);
  static const std::string kNoFilter;
  for (std::uint32_t pi = 0; pi < probes.size(); ++pi) {
    // A counting probe refuses even where it does not sample: its counts reach the stages.
    std::string why = probes[pi].counts_to_stages ? probe_refusal(probes[pi], task_target) : "";
    if (why.empty() && pi < sampling.size() && !sampling[pi])
      continue;
    if (why.empty())
      why = probe_refusal(probes[pi], task_target);
    if (why.empty())
      why = planner.add(probes[pi], pi, pi < filters.size() ? filters[pi] : kNoFilter, plan);
    if (!why.empty()) {
      all_user(out, why);
      return out;
    }
    out.probes.push_back(pi);
  }
  if (plan.probes.empty()) {
    all_user(out, "no probe delivers events");
    return out;
  }
  std::string why = planner.finish(plan);
  if (why.empty()) {
    if (auto reason = gen::check(plan))
      why = *reason;
  }
  if (!why.empty()) {
    all_user(out, why);
    return out;
  }
  say_kernel_stages(out, forms);
  out.plan = std::move(plan);
  return out;
}

}  // namespace

std::vector<PipelinePlace> place(std::span<const std::unique_ptr<Pipeline>> pipelines,
                                 std::span<const ProbeInfo> probes,
                                 const std::vector<bool>& sampling,
                                 Placement mode,
                                 bool task_target,
                                 std::span<const std::string> filters) {
  CommCache comm;
  Schema schema(probes, {}, comm);
  std::vector<PipelinePlace> out;
  for (const auto& p : pipelines)
    out.push_back(place_one(*p, schema, probes, sampling, mode, task_target, filters));
  return out;
}

std::optional<UserFieldProblem> check_user_fields(
    std::span<const std::unique_ptr<Pipeline>> pipelines,
    std::span<const PipelinePlace> places,
    std::span<const ProbeInfo> probes) {
  CommCache comm;
  Schema schema(probes, {}, comm);
  for (std::size_t p = 0; p < pipelines.size(); ++p) {
    if (p < places.size() && places[p].plan)
      continue;
    Pipeline& pipe = *pipelines[p];
    for (std::size_t i = 0; i < pipe.size(); ++i) {
      const KernelForm f = kernel_form_of(pipe.stage(i));
      if (f.kind != KernelForm::Kind::kAggregate)
        continue;
      for (const auto& key : f.by) {
        for (std::uint32_t pi = 0; pi < probes.size(); ++pi) {
          const auto a = schema.lookup(pi, key);
          if (!a || a->source != Source::kTracefs || a->field == nullptr ||
              !tracefs::is_string_pointer(*a->field))
            continue;
          return UserFieldProblem{
              .pipeline = p,
              .stage = i,
              .message = fmt::format(
                  "key '{}' of probe '{}' is a '{}' field: in user space its value is the "
                  "pointer, not the string it points to",
                  key, probes[pi].name, a->field->type),
              .hint = fmt::format("the string is read where the event happens, by the pipeline's "
                                  "in-kernel program: let it run there (placement = \"auto\" "
                                  "or \"kernel\"); in user space it stays in user space because: "
                                  "{}",
                                  p < places.size() && !places[p].stages.empty()
                                      ? places[p].stages.front().why
                                      : "placement = \"user\"")};
        }
      }
    }
  }
  return std::nullopt;
}

std::string describe(std::span<const PipelinePlace> places) {
  std::string text;
  for (std::size_t p = 0; p < places.size(); ++p) {
    for (std::size_t i = 0; i < places[p].stages.size(); ++i) {
      const auto& s = places[p].stages[i];
      text += fmt::format("pipeline {} stage {} {:<10} {:<6}  {}\n", p + 1, i + 1, s.use,
                          s.kernel ? "kernel" : "user", s.why);
    }
  }
  return text;
}

}  // namespace tracer::kernel
