// USDT notes (tracer/symbols/usdt.hpp), read with libelf as libbpf's usdt.c reads them.
#include "tracer/symbols/usdt.hpp"

#include <fmt/core.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>

#include "symbols_internal.hpp"
#include "tracer/common/edit_distance.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kNtStapsdt = 3;  // <sys/sdt.h>: _SDT_NOTE_TYPE
constexpr std::string_view kStapsdtOwner = "stapsdt";

struct Section {
  std::uint64_t addr = 0, offset = 0, size = 0;
  bool nobits = false;
};

std::optional<Section> section_named(Elf* elf, std::string_view want) {
  std::size_t shstrndx = 0;
  if (::elf_getshdrstrndx(elf, &shstrndx) != 0)
    return std::nullopt;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (::gelf_getshdr(scn, &shdr) == nullptr)
      continue;
    const char* name = ::elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name != nullptr && want == name)
      return Section{shdr.sh_addr, shdr.sh_offset, shdr.sh_size, shdr.sh_type == SHT_NOBITS};
  }
  return std::nullopt;
}

/// The file offset of link-time address `vaddr` through the section that holds it (a
/// semaphore is data: libbpf takes its offset this way), nullopt outside every section.
std::optional<std::uint64_t> section_offset(Elf* elf, std::uint64_t vaddr) {
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (::gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_addr == 0 || shdr.sh_type == SHT_NOBITS)
      continue;
    if (vaddr >= shdr.sh_addr && vaddr < shdr.sh_addr + shdr.sh_size)
      return vaddr - shdr.sh_addr + shdr.sh_offset;
  }
  return std::nullopt;
}

/// A NUL-terminated string at `at` of `desc`, advancing `at`; nullopt past the end.
std::optional<std::string> take_string(std::string_view desc, std::size_t& at) {
  const auto end = desc.find('\0', at);
  if (end == std::string_view::npos)
    return std::nullopt;
  std::string s(desc.substr(at, end - at));
  at = end + 1;
  return s;
}

/// A signed decimal or 0x-hex integer, the whole of `text`.
std::optional<std::int64_t> parse_int(std::string_view text) {
  const bool neg = text.starts_with('-');
  if (neg || text.starts_with('+'))
    text.remove_prefix(1);
  int base = 10;
  if (text.starts_with("0x") || text.starts_with("0X")) {
    base = 16;
    text.remove_prefix(2);
  }
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (text.empty() || ec != std::errc{} || ptr != text.data() + text.size())
    return std::nullopt;
  return neg ? static_cast<std::int64_t>(0 - v) : static_cast<std::int64_t>(v);
}

/// Decodes an operand (AT&T syntax, as GCC and clang write <sys/sdt.h>'s): "%reg", "$imm",
/// "disp(%reg)", "(%reg)"; other forms stay kUnsupported.
void decode_operand(UsdtArg& a) {
  std::string_view op = a.operand;
  if (op.starts_with('%')) {
    a.reg = usdt_register(op.substr(1));
    a.kind = a.reg.empty() ? UsdtArg::Kind::kUnsupported : UsdtArg::Kind::kRegister;
    return;
  }
  if (op.starts_with('$')) {
    if (const auto v = parse_int(op.substr(1))) {
      a.kind = UsdtArg::Kind::kConstant;
      a.value = *v;
    }
    return;
  }
  const auto open = op.find('(');
  if (open == std::string_view::npos || !op.ends_with(')') || op[open + 1] != '%')
    return;
  const std::string_view base = op.substr(open + 2, op.size() - open - 3);
  if (base.find(',') != std::string_view::npos)
    return;  // an index register
  const auto disp = open == 0 ? std::optional<std::int64_t>(0) : parse_int(op.substr(0, open));
  std::string reg = usdt_register(base);
  if (!disp || reg.empty())
    return;  // left kUnsupported, with no register
  a.kind = UsdtArg::Kind::kMemory;
  a.reg = std::move(reg);
  a.value = *disp;
}

}  // namespace

std::string usdt_register(std::string_view name) {
  // The legacy registers in their 64-, 32-, 16- and low 8-bit names.
  static constexpr std::array<std::array<std::string_view, 5>, 8> kLegacy{{
      {"ax", "rax", "eax", "ax", "al"},
      {"bx", "rbx", "ebx", "bx", "bl"},
      {"cx", "rcx", "ecx", "cx", "cl"},
      {"dx", "rdx", "edx", "dx", "dl"},
      {"si", "rsi", "esi", "si", "sil"},
      {"di", "rdi", "edi", "di", "dil"},
      {"bp", "rbp", "ebp", "bp", "bpl"},
      {"sp", "rsp", "esp", "sp", "spl"},
  }};
  for (const auto& r : kLegacy) {
    if (std::find(r.begin() + 1, r.end(), name) != r.end())
      return std::string(r[0]);
  }
  // r8..r15 with their d, w and b suffixes.
  if (name.size() >= 2 && name[0] == 'r') {
    std::string_view n = name.substr(1);
    if (n.ends_with('d') || n.ends_with('w') || n.ends_with('b'))
      n.remove_suffix(1);
    int v = 0;
    const auto [ptr, ec] = std::from_chars(n.data(), n.data() + n.size(), v);
    if (ec == std::errc{} && ptr == n.data() + n.size() && v >= 8 && v <= 15 && n[0] != '0')
      return fmt::format("r{}", v);
  }
  return {};
}

std::optional<std::vector<UsdtArg>> parse_usdt_args(std::string_view text) {
  std::vector<UsdtArg> out;
  std::size_t i = 0;
  while (true) {
    while (i < text.size() && text[i] == ' ')
      ++i;
    if (i >= text.size())
      return out;
    // SIZE@OPERAND; the operand runs to the next space outside parentheses.
    const auto at = text.find('@', i);
    if (at == std::string_view::npos)
      return std::nullopt;
    int size = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + at, size);
    if (ec != std::errc{} || ptr != text.data() + at)
      return std::nullopt;
    std::size_t end = at + 1;
    int depth = 0;
    while (end < text.size() && (text[end] != ' ' || depth > 0)) {
      depth += text[end] == '(' ? 1 : text[end] == ')' ? -1 : 0;
      ++end;
    }
    const int bytes = size < 0 ? -size : size;
    if ((bytes != 1 && bytes != 2 && bytes != 4 && bytes != 8) || end == at + 1)
      return std::nullopt;
    out.push_back({.size = bytes,
                   .is_signed = size < 0,
                   .operand = std::string(text.substr(at + 1, end - at - 1))});
    decode_operand(out.back());
    i = end;
  }
}

Result<std::vector<UsdtSite>> read_usdt(const fs::path& binary) {
  TRACER_ASSIGN_OR_RETURN(
      detail::OpenElf file,
      detail::open_elf(binary, "usdt",
                       "USDT probes are in executables and shared libraries built with "
                       "<sys/sdt.h>"));
  Elf* elf = file.elf.get();
  GElf_Ehdr ehdr;
  if (::gelf_getehdr(elf, &ehdr) == nullptr || ehdr.e_ident[EI_CLASS] != ELFCLASS64)
    return fail(ENOEXEC, fmt::format("usdt: {} is not a 64-bit ELF file", binary.string()));
  const auto base = section_named(elf, ".stapsdt.base");
  std::vector<UsdtSite> out;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (::gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != SHT_NOTE)
      continue;
    Elf_Data* data = ::elf_getdata(scn, nullptr);
    if (data == nullptr || data->d_buf == nullptr)
      continue;
    GElf_Nhdr nhdr;
    std::size_t name_at = 0, desc_at = 0;
    for (std::size_t at_note = 0, next = 0;
         (next = ::gelf_getnote(data, at_note, &nhdr, &name_at, &desc_at)) != 0; at_note = next) {
      const auto* bytes = static_cast<const char*>(data->d_buf);
      if (nhdr.n_type != kNtStapsdt ||
          std::string_view(bytes + name_at, nhdr.n_namesz == 0 ? 0 : nhdr.n_namesz - 1) !=
              kStapsdtOwner ||
          nhdr.n_descsz < 3 * 8 + 3)
        continue;
      const std::string_view desc(bytes + desc_at, nhdr.n_descsz);
      std::uint64_t pc = 0, note_base = 0, sema = 0;
      std::memcpy(&pc, desc.data(), 8);
      std::memcpy(&note_base, desc.data() + 8, 8);
      std::memcpy(&sema, desc.data() + 16, 8);
      std::size_t at = 24;
      auto provider = take_string(desc, at);
      auto name = provider ? take_string(desc, at) : std::nullopt;
      auto args = name ? take_string(desc, at) : std::nullopt;
      if (!args)
        continue;  // a damaged note: its strings run past it
      // Prelink may have moved the file: the note's base against the section's address.
      if (base && note_base != 0) {
        pc += base->addr - note_base;
        if (sema != 0)
          sema += base->addr - note_base;
      }
      UsdtSite site{.provider = std::move(*provider),
                    .name = std::move(*name),
                    .address = pc,
                    .semaphore = sema,
                    .args = std::move(*args)};
      const auto off = detail::vaddr_to_offset(elf, pc);
      if (!off)
        continue;  // not in a loaded segment: no uprobe can go there
      site.file_offset = *off;
      if (sema != 0) {
        const auto sema_off = section_offset(elf, sema);
        if (!sema_off)
          continue;
        site.semaphore_offset = *sema_off;
      }
      if (auto parsed = parse_usdt_args(site.args))
        site.arg_list = std::move(*parsed);
      out.push_back(std::move(site));
    }
  }
  return out;
}

Result<UsdtTarget> parse_usdt_spec(std::string_view spec, std::optional<pid_t> pid) {
  const auto last = spec.rfind(':');
  const auto mid = last == std::string_view::npos || last == 0 ? std::string_view::npos
                                                               : spec.rfind(':', last - 1);
  if (mid == std::string_view::npos || mid == 0 || last == mid + 1 || last + 1 == spec.size())
    return fail(EINVAL, fmt::format("probe: bad usdt '{}'", spec),
                "write PATH:provider:name, e.g. /usr/bin/python3:python:function__entry "
                "(`tracer list usdt PATH` lists a file's probes)");
  const std::string_view provider = spec.substr(mid + 1, last - mid - 1);
  const std::string_view name = spec.substr(last + 1);
  UsdtTarget out;
  TRACER_ASSIGN_OR_RETURN(out.path, resolve_binary(spec.substr(0, mid), pid));
  TRACER_ASSIGN_OR_RETURN(auto sites, read_usdt(out.path));
  std::set<std::string> names;
  for (auto& s : sites) {
    names.insert(s.provider + ":" + s.name);
    if (detail::wildcard_match(provider, s.provider) && detail::wildcard_match(name, s.name))
      out.sites.push_back(std::move(s));
  }
  if (out.sites.empty()) {
    std::string hint;
    if (names.empty()) {
      hint = fmt::format("{} has no USDT probes (no .note.stapsdt)", out.path.string());
    } else {
      const auto near = tracer::detail::nearest(
          fmt::format("{}:{}", provider, name), names,
          {.max_distance = 4, .limit = 5, .related_only = false, .substring = true});
      hint = tracer::detail::did_you_mean(
          near, fmt::format("`tracer list usdt {}` lists its {} probes", out.path.string(),
                            names.size()));
    }
    return fail(ENOENT,
                fmt::format("usdt: no probe {}:{} in {}", provider, name, out.path.string()),
                std::move(hint));
  }
  if (out.sites.size() > kMaxUsdtSites)
    return fail(EINVAL,
                fmt::format("usdt: {}:{} has {} call sites in {}: at most {} per probe", provider,
                            name, out.sites.size(), out.path.string(), kMaxUsdtSites),
                "narrow the name");
  return out;
}

}  // namespace tracer::symbols
