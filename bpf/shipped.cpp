// The BPF objects tracer ships, embedded through their bpftool skeletons (built by
// bpf/CMakeLists.txt), so an installed tracer needs no .bpf.o files beside it.
#include <cstddef>

#include "tracer/bpf/object.hpp"

// Generated C; their include directory is a SYSTEM one (no project warnings).
#include "syscall_output.skel.h"
#include "tgid_gate.skel.h"
#include "tp_deliver.skel.h"
#include "tp_deliver_rb.skel.h"
#include "tp_hits.skel.h"

namespace tracer::bpf {
namespace {

template <typename BytesFn>
std::span<const std::byte> elf(BytesFn fn) {
  std::size_t size = 0;
  const void* data = fn(&size);
  return {static_cast<const std::byte*>(data), size};
}

}  // namespace

std::span<const ShippedProgram> shipped_programs() noexcept {
  static const ShippedProgram kPrograms[] = {
      {"syscall_output", elf(&syscall_output__elf_bytes)},
      {"tgid_gate", elf(&tgid_gate__elf_bytes)},
      {"tp_hits", elf(&tp_hits__elf_bytes)},
      {"tp_deliver", elf(&tp_deliver__elf_bytes)},
      {"tp_deliver_rb", elf(&tp_deliver_rb__elf_bytes)},
  };
  return kPrograms;
}

}  // namespace tracer::bpf
