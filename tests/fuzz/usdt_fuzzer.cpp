// Fuzzes the USDT readers (engine/symbols/usdt.cpp): arbitrary bytes as an ELF file whose
// .note.stapsdt notes read_usdt() parses (a binary a recipe names is anyone's file), and as a
// note's argument text for parse_usdt_args(). Reading must end in sites or an error, never a
// crash, a read past a note or section, or a hang; every decoded operand must be one the
// programs and the tracefs fetch arguments can be built from.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tracer/symbols/usdt.hpp"

namespace {

void check_args(const std::vector<tracer::symbols::UsdtArg>& args) {
  using K = tracer::symbols::UsdtArg::Kind;
  for (const auto& a : args) {
    if (a.size != 1 && a.size != 2 && a.size != 4 && a.size != 8)
      std::abort();
    const bool has_reg = !a.reg.empty();
    if ((a.kind == K::kRegister || a.kind == K::kMemory) != has_reg)
      std::abort();
    // A register name is one tracefs and pt_regs know: letters and digits only.
    for (const char c : a.reg) {
      if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')))
        std::abort();
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto args = tracer::symbols::parse_usdt_args(text))
    check_args(*args);

  const int fd = ::memfd_create("usdt_fuzz", MFD_CLOEXEC);
  if (fd < 0)
    return 0;
  std::size_t done = 0;
  while (done < size) {
    const auto n = ::write(fd, data + done, size - done);
    if (n <= 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  if (auto sites = tracer::symbols::read_usdt("/proc/self/fd/" + std::to_string(fd))) {
    for (const auto& s : *sites) {
      check_args(s.arg_list);
      if (s.semaphore != 0 && s.semaphore_offset == 0)
        std::abort();
    }
  }
  ::close(fd);
  return 0;
}
