// DWARF unwinding of a user stack from a sample's registers and stack copy (PERF_SAMPLE_REGS_USER
// + PERF_SAMPLE_STACK_USER), with libdwfl's frame API and the CFI (.eh_frame, .debug_frame) of
// the files the process maps: what a binary built without frame pointers needs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tracer/symbols/symbols.hpp"

namespace tracer::symbols::detail {

/// A file mapping an unwind may need: the module's path as this process opens it and its load
/// bias (run-time address - link-time address).
struct UnwindModule {
  std::string path;
  std::uint64_t start = 0, end = 0, bias = 0;
};

/// One process's unwinder: its modules reported to a Dwfl once, frames walked per sample.
class Unwinder {
 public:
  /// `modules`: every executable file mapping of the process.
  Unwinder(std::uint32_t pid, std::vector<UnwindModule> modules);
  ~Unwinder();
  Unwinder(const Unwinder&) = delete;
  Unwinder& operator=(const Unwinder&) = delete;

  /// The ips of the stack, leaf first (the first is regs.dwarf[16], rip), at most out.size().
  /// @return how many were written (0 when even the first frame cannot be made).
  std::size_t unwind(const UserRegs& regs,
                     std::span<const std::byte> stack,
                     std::span<std::uint64_t> out);

  struct State;  // the Dwfl and its callbacks (public for the callback table)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace tracer::symbols::detail
