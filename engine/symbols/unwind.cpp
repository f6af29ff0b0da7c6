#include "unwind.hpp"

#include <elfutils/libdwfl.h>

#include <cstring>
#include <vector>

namespace tracer::symbols::detail {

namespace {
constexpr int kDwarfRegs = 17;  // x86-64: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip
constexpr int kDwarfSp = 7;
constexpr int kDwarfIp = 16;
}  // namespace

/// The Dwfl of the process and what its callbacks read during one unwind(): the sample's
/// registers and stack copy (the stack starts at the sample's rsp).
struct Unwinder::State {
  std::uint32_t pid = 0;
  Dwfl* dwfl = nullptr;
  bool attached = false;
  const UserRegs* regs = nullptr;
  std::span<const std::byte> stack;
  std::span<std::uint64_t> out;
  std::size_t n = 0;

  static pid_t next_thread(Dwfl* /*dwfl*/, void* arg, void** thread_argp) {
    auto* s = static_cast<State*>(arg);
    if (*thread_argp != nullptr)
      return 0;  // one thread: the sampled one
    *thread_argp = s;
    return static_cast<pid_t>(s->pid);
  }
  static bool get_thread(Dwfl* /*dwfl*/, pid_t /*tid*/, void* arg, void** thread_argp) {
    *thread_argp = arg;
    return true;
  }
  static bool memory_read(Dwfl* /*dwfl*/, Dwarf_Addr addr, Dwarf_Word* result, void* arg) {
    // Only the stack copy: CFI comes from the files themselves.
    auto* s = static_cast<State*>(arg);
    const std::uint64_t sp = s->regs->dwarf[kDwarfSp];
    if (addr < sp || addr - sp + sizeof(Dwarf_Word) > s->stack.size())
      return false;
    std::memcpy(result, s->stack.data() + (addr - sp), sizeof(Dwarf_Word));
    return true;
  }
  static bool set_initial_registers(Dwfl_Thread* thread, void* thread_arg) {
    auto* s = static_cast<State*>(thread_arg);
    std::array<Dwarf_Word, kDwarfRegs> regs{};
    for (int i = 0; i < kDwarfRegs; ++i)
      regs[static_cast<std::size_t>(i)] = s->regs->dwarf[static_cast<std::size_t>(i)];
    return dwfl_thread_state_registers(thread, 0, kDwarfRegs, regs.data());
  }
  static int frame(Dwfl_Frame* state, void* arg) {
    auto* s = static_cast<State*>(arg);
    Dwarf_Addr pc = 0;
    bool activation = false;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0)
      return DWARF_CB_ABORT;
    s->out[s->n++] = pc;
    return s->n < s->out.size() ? DWARF_CB_OK : DWARF_CB_ABORT;
  }
};

namespace {
const Dwfl_Thread_Callbacks kThreadCallbacks = {
    .next_thread = &Unwinder::State::next_thread,
    .get_thread = &Unwinder::State::get_thread,
    .memory_read = &Unwinder::State::memory_read,
    .set_initial_registers = &Unwinder::State::set_initial_registers,
    .detach = nullptr,
    .thread_detach = nullptr,
};

char* no_debuginfo_path = nullptr;
const Dwfl_Callbacks kCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &no_debuginfo_path,
};
}  // namespace

Unwinder::Unwinder(std::uint32_t pid, std::vector<UnwindModule> modules)
    : state_(std::make_unique<State>()) {
  state_->pid = pid;
  state_->dwfl = dwfl_begin(&kCallbacks);
  if (state_->dwfl == nullptr)
    return;
  dwfl_report_begin(state_->dwfl);
  for (const auto& m : modules)
    (void)dwfl_report_elf(state_->dwfl, m.path.c_str(), m.path.c_str(), -1, m.bias, false);
  dwfl_report_end(state_->dwfl, nullptr, nullptr);
  state_->attached = dwfl_attach_state(state_->dwfl, nullptr, static_cast<pid_t>(pid),
                                       &kThreadCallbacks, state_.get());
}

Unwinder::~Unwinder() {
  if (state_->dwfl != nullptr)
    dwfl_end(state_->dwfl);
}

std::size_t Unwinder::unwind(const UserRegs& regs,
                             std::span<const std::byte> stack,
                             std::span<std::uint64_t> out) {
  if (!state_->attached || out.empty())
    return 0;
  state_->regs = &regs;
  state_->stack = stack;
  state_->out = out;
  state_->n = 0;
  // A walk ends with an error at the outermost frame (no CFI, or a read outside the copy): the
  // frames found until then are the stack.
  (void)dwfl_getthread_frames(state_->dwfl, static_cast<pid_t>(state_->pid), &State::frame,
                              state_.get());
  if (state_->n == 0) {
    out[0] = regs.dwarf[kDwarfIp];
    state_->n = 1;
  }
  return state_->n;
}

}  // namespace tracer::symbols::detail
