// Kernel symbols from /proc/kallsyms.
#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <string>

#include "symbols_internal.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/symbols/symbols.hpp"

namespace tracer::symbols {

namespace {

// kallsyms is ~10 MB on a distribution kernel with every module loaded; the cap only guards
// against a runaway file under a fake path.
constexpr std::size_t kMaxKallsymsBytes = std::size_t{256} << 20;
// No kernel function is this long: beyond it an address past the last symbol of the image or
// of a module (vmalloc, a BPF JIT image without a symbol) is not that symbol's.
constexpr std::uint64_t kMaxKernelSymbolSpan = std::uint64_t{1} << 20;

/// Names one after another in one reservation of address space (PROT_NONE: no memory is
/// committed), made writable a megabyte at a time as it fills: a name's place never moves, and
/// the arena's pages are only those its names fill.
class NameArena {
 public:
  NameArena() = default;
  NameArena(const NameArena&) = delete;
  NameArena& operator=(const NameArena&) = delete;
  ~NameArena() {
    if (base_ != nullptr)
      ::munmap(base_, reserved_);
  }

  Result<void> reserve(std::size_t bytes) {
    void* p = ::mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      return fail(err, fmt::format("symbols: cannot reserve {} bytes of address space: {}", bytes,
                                   std::strerror(err)));
    }
    base_ = static_cast<char*>(p);
    reserved_ = bytes;
    return {};
  }

  /// A copy of `s` in the arena; shorter than `s` (empty) when it is full.
  std::string_view add(std::string_view s) {
    if (s.size() > reserved_ - used_)
      return {};
    if (used_ + s.size() > writable_) {
      const std::size_t want = std::min(reserved_, (used_ + s.size() + kStep - 1) / kStep * kStep);
      if (::mprotect(base_ + writable_, want - writable_, PROT_READ | PROT_WRITE) != 0)
        return {};
      writable_ = want;
    }
    char* at = base_ + used_;
    std::memcpy(at, s.data(), s.size());
    used_ += s.size();
    return {at, s.size()};
  }

 private:
  static constexpr std::size_t kStep = std::size_t{1} << 20;
  char* base_ = nullptr;
  std::size_t reserved_ = 0;
  std::size_t writable_ = 0;
  std::size_t used_ = 0;
};

bool is_text_type(char type) {
  return type == 't' || type == 'T' || type == 'w' || type == 'W';
}

}  // namespace

Result<KernelSymbols> KernelSymbols::load(const std::filesystem::path& path) {
  // Streamed through a small buffer: only the names of function symbols are kept, in one
  // arena in file order (a name's address is its place in the file: the sort's last key), and
  // the table is built in place. The whole text (5 MB here) and a second table are never
  // made: on a machine where a page fault is dear, touching fresh memory was most of a replay.
  auto arena = std::make_shared<NameArena>();
  TRACER_TRY(arena->reserve(kMaxKallsymsBytes));
  KernelSymbols out;
  out.syms_.reserve(std::size_t{1} << 17);  // ~120,000 lines on a distribution kernel
  std::string_view last_module;             // a module's lines are together: one copy each
  bool all_zero = true;
  bool no_room = false;
  std::size_t lines = 0;
  TRACER_ASSIGN_OR_RETURN(
      const std::size_t bytes,
      tracer::detail::read_text_lines(
          path, "symbols", kMaxKallsymsBytes, [&](std::string_view line) {
            // "ffffffff81000000 T _stext" or "ffffffffc0201000 t ftrace_trampoline\t[mod]"
            std::uint64_t addr = 0;
            const char* const bol = line.data();
            const char* const eol = bol + line.size();
            const auto [after, ec] = std::from_chars(bol, eol, addr, 16);
            if (ec != std::errc() || eol - after < 4 || after[0] != ' ' || after[2] != ' ')
              return;
            ++lines;
            if (!is_text_type(after[1]))
              return;
            all_zero = all_zero && addr == 0;
            std::string_view rest(after + 3, static_cast<std::size_t>(eol - after - 3));
            std::string_view module;
            if (const auto tab = rest.find('\t'); tab != std::string_view::npos) {
              module = rest.substr(tab + 1);
              rest = rest.substr(0, tab);
              if (module.size() >= 2 && module.front() == '[' && module.back() == ']')
                module = module.substr(1, module.size() - 2);
              if (module != last_module)
                last_module = arena->add(module);
              no_room = no_room || last_module.size() != module.size();
              module = last_module;
            }
            const std::string_view name = arena->add(rest);
            no_room = no_room || name.size() != rest.size();
            out.syms_.push_back({.start = addr, .name = name, .module = module});
          }));
  if (no_room)
    return fail(ENOMEM, fmt::format("symbols: no memory for the names of {}", path.string()));
  if (lines == 0 && bytes != 0)
    return fail(EINVAL, fmt::format("symbols: {} is not in kallsyms format", path.string()),
                "expected lines \"ADDRESS TYPE NAME [MODULE]\"");
  auto& syms = out.syms_;
  out.restricted_ = !syms.empty() && all_zero;
  out.text_ = std::move(arena);
  // The file's order is the names' order in the arena: the last key, so the sort is stable.
  const auto before = [](const KernelSymbol& a, const KernelSymbol& b) {
    if (a.start != b.start)
      return a.start < b.start;
    return a.name.data() < b.name.data();
  };
  if (!std::is_sorted(syms.begin(), syms.end(), before))  // the kernel image's part is in order
    std::sort(syms.begin(), syms.end(), before);
  // One symbol per address (aliases such as __ia32_sys_getppid/__x64_sys_getppid): the last
  // in the file, the one perf names (its kallsyms symbols end where the next starts, so only the
  // last alias at an address has a size and a lookup finds it).
  if (!out.restricted_) {
    std::size_t kept = 0;
    for (std::size_t i = 0; i < syms.size(); ++i) {
      if (i + 1 < syms.size() && syms[i].start == syms[i + 1].start)
        continue;
      syms[kept++] = syms[i];
    }
    syms.resize(kept);
  }
  return out;
}

const KernelSymbol* KernelSymbols::find(std::uint64_t addr) const noexcept {
  if (restricted_ || syms_.empty())
    return nullptr;
  auto it = std::upper_bound(syms_.begin(), syms_.end(), addr,
                             [](std::uint64_t a, const KernelSymbol& s) { return a < s.start; });
  if (it == syms_.begin())
    return nullptr;
  --it;
  if (addr - it->start > kMaxKernelSymbolSpan)
    return nullptr;
  return &*it;
}

std::string KernelSymbols::restricted_hint() const {
  const auto text = tracer::detail::read_text_file("/proc/sys/kernel/kptr_restrict", "symbols");
  const auto value =
      text ? tracer::detail::parse_uint<int>(tracer::detail::trim(*text)) : std::optional<int>();
  if (!value)
    return "kernel addresses are hidden (kernel.kptr_restrict is unreadable): run as root with "
           "CAP_SYSLOG, or `sysctl kernel.kptr_restrict=0`";
  if (*value == 0)
    return "kernel addresses are hidden from users without CAP_SYSLOG unless "
           "kernel.perf_event_paranoid <= 1: run `sysctl kernel.perf_event_paranoid=1`, or as "
           "root";
  if (*value == 1)
    return "kernel addresses are hidden (kernel.kptr_restrict = 1): run as root with CAP_SYSLOG, "
           "or `sysctl kernel.kptr_restrict=0`";
  return fmt::format(
      "kernel addresses are hidden (kernel.kptr_restrict = {}): run `sysctl "
      "kernel.kptr_restrict=0`, or as root with CAP_SYSLOG when it is 1",
      *value);
}

std::string KernelSymbols::build_id(const std::filesystem::path& notes) {
  // ELF notes: namesz, descsz, type (u32 each), the name and the descriptor, each padded to 4.
  const auto text = tracer::detail::read_text_file(notes, "symbols");
  if (!text)
    return {};
  const std::string& b = *text;
  constexpr std::uint32_t kGnuBuildId = 3;  // NT_GNU_BUILD_ID
  const auto pad4 = [](std::size_t n) { return (n + 3) & ~std::size_t{3}; };
  for (std::size_t at = 0; at + 12 <= b.size();) {
    std::uint32_t namesz = 0, descsz = 0, type = 0;
    std::memcpy(&namesz, b.data() + at, 4);
    std::memcpy(&descsz, b.data() + at + 4, 4);
    std::memcpy(&type, b.data() + at + 8, 4);
    const std::size_t name = at + 12, desc = name + pad4(namesz);
    if (namesz > b.size() || descsz > b.size() || desc + descsz > b.size())
      return {};
    if (type == kGnuBuildId && namesz == 4 && std::memcmp(b.data() + name, "GNU", 4) == 0) {
      std::string hex;
      for (std::size_t i = 0; i < descsz; ++i)
        hex += fmt::format("{:02x}", static_cast<unsigned char>(b[desc + i]));
      return hex;
    }
    at = desc + pad4(descsz);
  }
  return {};
}

}  // namespace tracer::symbols
