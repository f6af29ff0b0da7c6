// Kernel symbols from /proc/kallsyms.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>

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

bool is_text_type(char type) {
  return type == 't' || type == 'T' || type == 'w' || type == 'W';
}

}  // namespace

Result<KernelSymbols> KernelSymbols::load(const std::filesystem::path& path) {
  TRACER_ASSIGN_OR_RETURN(std::string read,
                          tracer::detail::read_text_file(path, "symbols", kMaxKallsymsBytes));
  // The names stay in the file's text (no string per symbol: ~200,000 of them).
  auto shared = std::make_shared<const std::string>(std::move(read));
  const std::string& text = *shared;
  struct Row {
    std::uint64_t start;
    std::uint32_t index;
  };
  KernelSymbols out;
  std::vector<Row> rows;
  std::vector<KernelSymbol> syms;
  syms.reserve(text.size() / 40);
  rows.reserve(text.size() / 40);
  bool all_zero = true;
  std::size_t lines = 0;
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const char* eol = static_cast<const char*>(std::memchr(p, '\n', end - p));
    if (eol == nullptr)
      eol = end;
    // "ffffffff81000000 T _stext" or "ffffffffc0201000 t ftrace_trampoline\t[__builtin__ftrace]"
    std::uint64_t addr = 0;
    const auto [after, ec] = std::from_chars(p, eol, addr, 16);
    p = eol + 1;
    if (ec != std::errc() || eol - after < 4 || after[0] != ' ' || after[2] != ' ')
      continue;
    ++lines;
    const char type = after[1];
    if (!is_text_type(type))
      continue;
    all_zero = all_zero && addr == 0;
    std::string_view rest(after + 3, static_cast<std::size_t>(eol - after - 3));
    std::string_view module;
    if (const auto tab = rest.find('\t'); tab != std::string_view::npos) {
      module = rest.substr(tab + 1);
      rest = rest.substr(0, tab);
      if (module.size() >= 2 && module.front() == '[' && module.back() == ']')
        module = module.substr(1, module.size() - 2);
    }
    rows.push_back({addr, static_cast<std::uint32_t>(syms.size())});
    syms.push_back({.start = addr, .name = rest, .module = module});
  }
  if (lines == 0 && !text.empty())
    return fail(EINVAL, fmt::format("symbols: {} is not in kallsyms format", path.string()),
                "expected lines \"ADDRESS TYPE NAME [MODULE]\"");
  out.restricted_ = !syms.empty() && all_zero;
  out.text_ = std::move(shared);
  // std::sort with the file order as the last key: stable_sort's temporary buffer is deprecated
  // under clang's C++23 (engine/kernel/codegen*.cpp).
  const auto before = [](const Row& a, const Row& b) {
    if (a.start != b.start)
      return a.start < b.start;
    return a.index < b.index;
  };
  if (!std::is_sorted(rows.begin(), rows.end(), before))  // the kernel image's part is in order
    std::sort(rows.begin(), rows.end(), before);
  // One symbol per address (aliases such as __ia32_sys_getppid/__x64_sys_getppid): the last
  // in the file, the one perf names (its kallsyms symbols end where the next starts, so only the
  // last alias at an address has a size and a lookup finds it).
  out.syms_.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i + 1 < rows.size() && rows[i].start == rows[i + 1].start && !out.restricted_)
      continue;
    out.syms_.push_back(syms[rows[i].index]);
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
