// Schema: field names to accessors, per probe, once per run.
#include "tracer/schema.hpp"

#include "event_fields.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <ranges>
#include <system_error>
#include <type_traits>

#include "tracer/common/edit_distance.hpp"
#include "tracer/perf/abi.hpp"

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

using detail::pid_of;

namespace abi = perf::abi;

// Schema

namespace {

using Source = FieldRef::Source;

struct SampleFieldDef {
  std::string_view name;
  Source source;
  FieldType type;
  std::uint64_t needs;  // sample_type bit the probe must sample, or 0
};
constexpr SampleFieldDef kSampleFields[] = {
    {"pid", Source::kPid, FieldType::kInt, 0},
    {"tid", Source::kTid, FieldType::kInt, 0},
    {"comm", Source::kComm, FieldType::kString, 0},
    {"cpu", Source::kCpu, FieldType::kInt, 0},
    {"time", Source::kTime, FieldType::kUint, 0},
    {"ip", Source::kIp, FieldType::kUint, PERF_SAMPLE_IP},
    {"addr", Source::kAddr, FieldType::kUint, PERF_SAMPLE_ADDR},
    {"period", Source::kPeriod, FieldType::kUint, PERF_SAMPLE_PERIOD},
    {"callchain", Source::kCallchain, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"kstack", Source::kKernelStack, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"ustack", Source::kUserStack, FieldType::kIps, PERF_SAMPLE_CALLCHAIN},
    {"probe", Source::kProbe, FieldType::kString, 0},
    {"kind", Source::kKind, FieldType::kString, 0},
    {"lost", Source::kLost, FieldType::kUint, 0},
    {"aux_size", Source::kAuxSize, FieldType::kUint, 0},
};

struct RegDef {
  std::string_view name;
  int reg;
  FieldType type;
};
#if defined(__x86_64__)
// x86-64 SysV argument registers, and rax for the return value (arch/x86/include/uapi/asm/
// perf_regs.h order, which is the order the kernel writes sample_regs_user in).
constexpr RegDef kRegs[] = {
    {"arg0", PERF_REG_X86_DI, FieldType::kUint},  {"arg1", PERF_REG_X86_SI, FieldType::kUint},
    {"arg2", PERF_REG_X86_DX, FieldType::kUint},  {"arg3", PERF_REG_X86_CX, FieldType::kUint},
    {"arg4", PERF_REG_X86_R8, FieldType::kUint},  {"arg5", PERF_REG_X86_R9, FieldType::kUint},
    {"retval", PERF_REG_X86_AX, FieldType::kInt},
};
#else
// TODO(stages): argument registers of other architectures.
constexpr RegDef kRegs[] = {{"", -1, FieldType::kNone}};
#endif

FieldType tracefs_type(const tracefs::Field& f) noexcept {
  if (f.is_string)
    return FieldType::kString;
  const bool array = f.array_len.has_value() || f.is_data_loc || f.is_rel_loc;
  if (array)
    return f.element_size == 8 ? FieldType::kIps : FieldType::kNone;
  return f.is_signed ? FieldType::kInt : FieldType::kUint;
}

/// Whether a probe's samples carry what a DWARF unwind of the user stack needs: every register
/// the CFI may name and a copy of the stack.
bool dwarf_unwinds(const ProbeInfo& info) noexcept {
  return info.layout.has(PERF_SAMPLE_REGS_USER) && info.layout.has(PERF_SAMPLE_STACK_USER) &&
         symbols::UserRegs::unwindable(info.sample_regs_user);
}

/// The candidate nearest to `name`, when near enough to be a typo; empty if none.
std::string closest(std::string_view name, const std::vector<std::string>& candidates) {
  auto near = detail::nearest(name, candidates, {.max_distance = 2, .related_only = false});
  return near.empty() ? std::string() : std::move(near.front());
}

}  // namespace

PayloadSchema payload_from_btf(const bpf::StructSchema& s) {
  // The BPF output channel's struct, as its BTF describes it: integers by signedness, char
  // arrays as strings, arrays of integers element by element ("args[0]", ...).
  PayloadSchema out;
  for (const auto& f : s.fields) {
    using K = bpf::FieldKind;
    const bool scalar_size = f.size == 1 || f.size == 2 || f.size == 4 || f.size == 8;
    switch (f.kind) {
      case K::kSigned:
      case K::kUnsigned:
        if (scalar_size && f.bit_size == 0) {
          out.push_back({.name = f.name,
                         .offset = f.offset,
                         .size = f.size,
                         .kind = f.kind == K::kSigned ? PayloadField::Kind::kInt
                                                      : PayloadField::Kind::kUint});
        }
        break;
      case K::kPointer:
        out.push_back(
            {.name = f.name, .offset = f.offset, .size = 8, .kind = PayloadField::Kind::kUint});
        break;
      case K::kString:
        out.push_back({.name = f.name,
                       .offset = f.offset,
                       .size = f.size,
                       .kind = PayloadField::Kind::kString});
        break;
      case K::kArray: {
        const std::uint32_t es = f.element_size;
        if (es != 1 && es != 2 && es != 4 && es != 8)
          break;
        for (std::uint32_t i = 0; i < f.count; ++i) {
          out.push_back({.name = fmt::format("{}[{}]", f.name, i),
                         .offset = f.offset + i * es,
                         .size = es,
                         .kind = PayloadField::Kind::kUint});
        }
        break;
      }
      case K::kOther:
        if (f.size == 8 && f.type_name == "double")
          out.push_back(
              {.name = f.name, .offset = f.offset, .size = 8, .kind = PayloadField::Kind::kDouble});
        break;
      case K::kStruct:
        break;
    }
  }
  return out;
}

Schema::Schema(std::span<const ProbeInfo> probes,
               std::span<const PayloadSchema> payloads,
               CommCache& comm)
    : probes_(probes.begin(), probes.end()),
      payloads_(payloads.begin(), payloads.end()),
      comm_(&comm) {
  payloads_.resize(probes_.size());
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (const auto& pl = probes_[i].payload; payloads_[i].empty() && pl.has_value())
      payloads_[i] = payload_from_btf(*pl);
  }
}

std::optional<std::uint32_t> Schema::probe_index(std::string_view name) const noexcept {
  for (std::size_t i = 0; i < probes_.size(); ++i) {
    if (probes_[i].name == name)
      return static_cast<std::uint32_t>(i);
  }
  return std::nullopt;
}

namespace {

/// `syscall`: the system call's name, where the event's own fields only have its number.
constexpr std::string_view kSyscallField = "syscall";

/// raw_syscalls:sys_enter/sys_exit read `id` and name it; syscalls:sys_enter_X/sys_exit_X are
/// one system call each: X (the kernel's name, e.g. "newfstatat").
std::optional<FieldRef::Accessor> syscall_accessor(const ProbeInfo& info) {
  if (!info.format || info.format->field(kSyscallField) != nullptr)
    return std::nullopt;
  const auto& fmt = *info.format;
  if (fmt.system == "raw_syscalls") {
    const tracefs::Field* id = fmt.field("id");
    if (id == nullptr || id->is_string || id->array_len || id->is_data_loc || id->is_rel_loc)
      return std::nullopt;
    return FieldRef::Accessor{
        .source = Source::kSyscallName, .type = FieldType::kString, .field = id};
  }
  if (fmt.system == "syscalls") {
    for (std::string_view prefix : {"sys_enter_", "sys_exit_"}) {
      if (fmt.name.starts_with(prefix) && fmt.name.size() > prefix.size())
        return FieldRef::Accessor{.source = Source::kSyscallName,
                                  .type = FieldType::kString,
                                  .offset = static_cast<std::uint32_t>(prefix.size())};
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<FieldRef::Accessor> Schema::resolve(std::uint32_t probe,
                                                  std::string_view name) const {
  const ProbeInfo& info = probes_[probe];
  // The event's own fields (tracepoint format, BPF payload) come first: in sched_wakeup `pid`
  // is the woken task, while the sample's pid is the waker. "sample.pid" names the sample's.
  const auto sample_field = [&](std::string_view n) -> std::optional<FieldRef::Accessor> {
    for (const auto& d : kSampleFields) {
      if (d.name != n)
        continue;
      if (d.needs != 0 && !info.layout.has(d.needs))
        return std::nullopt;
      if ((d.source == Source::kUserStack || d.source == Source::kCallchain) && dwarf_unwinds(info))
        return FieldRef::Accessor{.source = d.source == Source::kUserStack
                                                ? Source::kUserStackDwarf
                                                : Source::kCallchainDwarf,
                                  .type = d.type};
      return FieldRef::Accessor{.source = d.source, .type = d.type};
    }
    return std::nullopt;
  };
  if (name.starts_with("sample."))
    return sample_field(name.substr(7));
  if (info.format) {
    std::string_view base = name;
    std::optional<std::uint32_t> index;
    if (const auto open = name.find('['); open != std::string_view::npos && name.back() == ']') {
      base = name.substr(0, open);
      const auto digits = name.substr(open + 1, name.size() - open - 2);
      std::uint32_t i = 0;
      const auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), i);
      if (ec != std::errc{} || p != digits.data() + digits.size())
        return std::nullopt;
      index = i;
    }
    if (const tracefs::Field* f = info.format->field(base)) {
      if (!index) {
        const FieldType t = tracefs_type(*f);
        if (t == FieldType::kNone)
          return std::nullopt;
        return FieldRef::Accessor{.source = Source::kTracefs, .type = t, .field = f};
      }
      const bool array = f->array_len.has_value() || f->is_data_loc || f->is_rel_loc;
      const std::uint32_t es = f->element_size;
      if (!array || f->is_string || (es != 1 && es != 2 && es != 4 && es != 8) ||
          (f->array_len && *index >= *f->array_len))
        return std::nullopt;
      return FieldRef::Accessor{.source = Source::kTracefsElement,
                                .type = f->is_signed ? FieldType::kInt : FieldType::kUint,
                                .size = es,
                                .index = *index,
                                .is_signed = f->is_signed,
                                .field = f};
    }
  }
  if (name == kSyscallField) {
    if (auto a = syscall_accessor(info))
      return a;
  }
  for (const auto& pf : payloads_[probe]) {
    if (pf.name != name)
      continue;
    FieldRef::Accessor a{.source = Source::kPayload, .offset = pf.offset, .size = pf.size};
    switch (pf.kind) {
      case PayloadField::Kind::kInt:
        a.type = FieldType::kInt;
        a.is_signed = true;
        break;
      case PayloadField::Kind::kUint:
        a.type = FieldType::kUint;
        break;
      case PayloadField::Kind::kDouble:
        a.type = FieldType::kDouble;
        break;
      case PayloadField::Kind::kString:
        a.type = FieldType::kString;
        break;
    }
    return a;
  }
  if (auto s = sample_field(name))
    return s;
  // A USDT probe's arguments are its note's operands, not the function ABI's registers: no
  // argN or retval until they are decoded (an unknown field, never another register's value).
  for (const auto& r : kRegs) {
    if (r.name != name || r.reg < 0 || info.kind == ProbeKind::kUsdt)
      continue;
    const int slot = perf::reg_slot(info.sample_regs_user, r.reg);
    if (slot < 0 || !info.layout.has(PERF_SAMPLE_REGS_USER))
      return std::nullopt;
    return FieldRef::Accessor{.source = Source::kReg, .type = r.type, .slot = slot};
  }
  return std::nullopt;
}

IpList Schema::unwound_stack(const Event& e, bool with_kernel) const noexcept {
  constexpr std::size_t kMaxFrames = 127;  // perf's default kernel.perf_event_max_stack
  const perf::Sample& s = *e.sample;
  unwound_.resize(kMaxFrames + 2);
  std::size_t n = 0;
  if (with_kernel) {  // the kernel's part as the kernel wrote it, markers included
    for (std::uint64_t i = 0; i < s.callchain.size && n < kMaxFrames; ++i) {
      if (s.callchain[i] == perf::abi::kContextUser)
        break;
      unwound_[n++] = s.callchain[i];
    }
  }
  const std::uint32_t pid = pid_of(e);
#if defined(__x86_64__)
  if (s.regs_user.abi != 0 && pid != 0) {
    const auto regs =
        symbols::UserRegs::from_perf(s.regs_user.regs, probes_[e.probe()].sample_regs_user);
    const auto stack =
        s.stack_user.first(std::min<std::size_t>(s.stack_user.size(), s.stack_user_dyn_size));
    if (with_kernel)
      unwound_[n++] = perf::abi::kContextUser;
    try {
      n += symbolizer().unwind_user(pid, regs, stack,
                                    std::span(unwound_).subspan(n, kMaxFrames + 2 - n));
    } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): out of memory: no frames
    }
  }
#endif
  return {.ips = {.data = reinterpret_cast<const std::byte*>(unwound_.data()), .size = n},
          .pid = pid};
}

symbols::Symbolizer& Schema::symbolizer() const {
  if (!symbolizer_)
    symbolizer_ = std::make_unique<symbols::Symbolizer>(symbolize_options_);
  return *symbolizer_;
}

std::optional<FieldRef> Schema::bind(std::string_view name,
                                     const SourceRegion& where,
                                     Diagnostics& diags) const {
  FieldRef ref;
  ref.name_ = std::string(name);
  ref.schema_ = this;
  for (std::size_t i = 0; i < derived_.size(); ++i) {
    if (derived_[i].first == name) {
      ref.derived_ = {
          .source = Source::kDerived, .type = derived_[i].second, .slot = static_cast<int>(i)};
      ref.type_ = derived_[i].second;
      return ref;
    }
  }
  bool any = false;
  ref.by_probe_.resize(probes_.size());
  for (std::uint32_t p = 0; p < probes_.size(); ++p) {
    if (auto a = resolve(p, name)) {
      if (a->source == Source::kComm)
        comm_bound_ = true;
      if (a->source == Source::kCallchain || a->source == Source::kKernelStack ||
          a->source == Source::kUserStack || a->source == Source::kUserStackDwarf ||
          a->source == Source::kCallchainDwarf)
        stacks_bound_ = true;
      ref.by_probe_[p] = *a;
      if (!any)
        ref.type_ = a->type;
      any = true;
    }
  }
  if (any) {
    // The in-place readers once (read(InPlaceSample) of pid, tid, cpu, time, comm uses them).
    ref.in_place_readers_.resize(probes_.size());
    for (std::uint32_t p = 0; p < probes_.size(); ++p)
      ref.in_place_readers_[p] = ref.compute_int_reader(p);
    return ref;
  }

  std::string listing;
  std::vector<std::string> all;
  for (std::uint32_t p = 0; p < probes_.size(); ++p) {
    auto names = field_names(p);
    listing += fmt::format("{}probe '{}' ({}) has: {}", listing.empty() ? "" : "; ",
                           probes_[p].name, probes_[p].spec, fmt::join(names, ", "));
    all.insert(all.end(), names.begin(), names.end());
  }
  if (probes_.empty())
    listing = "the pipeline has no probes";
  std::string hint = listing;
  if (auto c = closest(name, all); !c.empty())
    hint = fmt::format("did you mean '{}'? {}", c, listing);
  diags.add(where, fmt::format("unknown field '{}'", name), std::move(hint));
  return std::nullopt;
}

std::vector<std::string> Schema::field_names(std::uint32_t probe) const {
  std::vector<std::string> out;
  if (probe >= probes_.size())
    return out;
  const ProbeInfo& info = probes_[probe];
  for (const auto& d : kSampleFields) {
    if (d.needs == 0 || info.layout.has(d.needs))
      out.emplace_back(d.name);
  }
  auto payload = payload_field_names(probe);
  out.insert(out.end(), payload.begin(), payload.end());
  if (syscall_accessor(info))
    out.emplace_back(kSyscallField);
  for (const auto& r : kRegs) {
    if (r.reg >= 0 && info.kind != ProbeKind::kUsdt && info.layout.has(PERF_SAMPLE_REGS_USER) &&
        perf::reg_slot(info.sample_regs_user, r.reg) >= 0)
      out.emplace_back(r.name);
  }
  for (const auto& d : derived_)
    out.push_back(d.first);
  return out;
}

std::vector<std::string> Schema::payload_field_names(std::uint32_t probe) const {
  std::vector<std::string> out;
  if (probe >= probes_.size())
    return out;
  if (const auto& fmt = probes_[probe].format) {
    for (const auto& f : fmt->fields) {
      if (!f.is_common && tracefs_type(f) != FieldType::kNone)
        out.push_back(f.name);
    }
  }
  for (const auto& pf : payloads_[probe])
    out.push_back(pf.name);
  return out;
}

std::optional<std::uint32_t> Schema::add_derived(std::string name, FieldType type) {
  if (derived_.size() >= kMaxDerived)
    return std::nullopt;
  for (const auto& d : derived_) {
    if (d.first == name)
      return std::nullopt;
  }
  derived_.emplace_back(std::move(name), type);
  return static_cast<std::uint32_t>(derived_.size() - 1);
}

}  // namespace tracer
