// One ELF file's function symbols (libelf), its separate debuginfo, and source lines (libdw).
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "symbols_internal.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::symbols {

namespace fs = std::filesystem;

namespace {

using detail::DefinedSymbol;
using detail::elf_error_text;
using detail::executable_section;
using detail::for_each_defined_symbol;
using detail::is_regular;
using detail::OpenElf;

Result<OpenElf> open_elf(const fs::path& path) {
  return detail::open_elf(path, "symbols");
}

std::string build_id_of(Elf* elf) {
  const void* bytes = nullptr;
  const ssize_t n = ::dwelf_elf_gnu_build_id(elf, &bytes);
  std::string hex;
  if (n <= 0 || bytes == nullptr)
    return hex;
  hex.reserve(static_cast<std::size_t>(n) * 2);
  for (ssize_t i = 0; i < n; ++i)
    fmt::format_to(std::back_inserter(hex), "{:02x}", static_cast<const unsigned char*>(bytes)[i]);
  return hex;
}

/// The section named `name`, or nullptr.
Elf_Scn* find_named_section(Elf* elf, std::string_view name, GElf_Shdr& shdr) {
  std::size_t shstrndx = 0;
  if (::elf_getshdrstrndx(elf, &shstrndx) != 0)
    return nullptr;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    if (::gelf_getshdr(scn, &shdr) == nullptr)
      continue;
    const char* n = ::elf_strptr(elf, shstrndx, shdr.sh_name);
    if (n != nullptr && name == n)
      return scn;
  }
  return nullptr;
}

/// "name@plt" symbols for the PLT entries, as perf synthesizes them (symbol-elf.c
/// dso__synthesize_plt_symbols): the .rela.plt relocations in order, one entry each, in .plt.sec
/// when the file has it (IBT), else in .plt after its 16-byte header (x86-64).
/// @return the symbols added.
std::size_t add_plt_symbols(Elf* elf, std::vector<ElfSymbol>& out) {
  GElf_Shdr plt{}, rela{}, dynsym{};
  Elf_Scn* plt_scn = find_named_section(elf, ".plt.sec", plt);
  std::uint64_t header = 0;
  if (plt_scn == nullptr) {
    plt_scn = find_named_section(elf, ".plt", plt);
    header = 16;
  }
  Elf_Scn* rela_scn = find_named_section(elf, ".rela.plt", rela);
  if (plt_scn == nullptr || rela_scn == nullptr || rela.sh_entsize == 0 || rela.sh_type != SHT_RELA)
    return 0;
  const std::uint64_t entry = plt.sh_entsize != 0 ? plt.sh_entsize : 16;
  Elf_Scn* sym_scn = ::elf_getscn(elf, rela.sh_link);
  Elf_Data* rela_data = ::elf_getdata(rela_scn, nullptr);
  Elf_Data* sym_data = sym_scn != nullptr ? ::elf_getdata(sym_scn, nullptr) : nullptr;
  if (sym_data == nullptr || rela_data == nullptr || ::gelf_getshdr(sym_scn, &dynsym) == nullptr)
    return 0;
  const std::size_t n = rela.sh_size / rela.sh_entsize;
  const std::size_t before = out.size();
  for (std::size_t i = 0; i < n; ++i) {
    GElf_Rela r;
    GElf_Sym sym;
    if (::gelf_getrela(rela_data, static_cast<int>(i), &r) == nullptr ||
        ::gelf_getsym(sym_data, static_cast<int>(GELF_R_SYM(r.r_info)), &sym) == nullptr)
      continue;
    const char* name = ::elf_strptr(elf, dynsym.sh_link, sym.st_name);
    const std::uint64_t start = plt.sh_addr + header + i * entry;
    // An IRELATIVE slot has no symbol: perf names its entry "@plt" all the same.
    if (name == nullptr || start + entry > plt.sh_addr + plt.sh_size)
      continue;
    out.push_back({.start = start, .size = entry, .name = std::string(name) + "@plt"});
  }
  if (out.size() != before) {
    std::sort(out.begin(), out.end(),
              [](const ElfSymbol& a, const ElfSymbol& b) { return a.start < b.start; });
  }
  return out.size() - before;
}

/// Whether the file carries DWARF (.debug_info with bytes, plain or compressed).
bool has_dwarf(Elf* elf) {
  std::size_t shstrndx = 0;
  if (::elf_getshdrstrndx(elf, &shstrndx) != 0)
    return false;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (::gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type == SHT_NOBITS)
      continue;
    const char* name = ::elf_strptr(elf, shstrndx, shdr.sh_name);
    if (name != nullptr &&
        (std::strcmp(name, ".debug_info") == 0 || std::strcmp(name, ".zdebug_info") == 0))
      return true;
  }
  return false;
}

struct RawSymbol {
  std::uint64_t start = 0, size = 0;
  const char* name = nullptr;
  unsigned char bind = STB_LOCAL;
  std::size_t index = 0;  // in the table
};

std::size_t leading_underscores(const char* name) {
  std::size_t n = 0;
  while (name[n] == '_')
    ++n;
  return n;
}

/// Among aliases at one address, whether `a` is the one to keep rather than `b`: perf's choice
/// (tools/perf/util/symbol.c choose_best_symbol), so frames carry the names perf script prints:
/// a sized symbol, then not WEAK, then GLOBAL, then fewer leading underscores, then the longer
/// name, then the first in the table.
bool better_alias(const RawSymbol& a, const RawSymbol& b) {
  if ((a.size == 0) != (b.size == 0))
    return a.size != 0;
  if ((a.bind == STB_WEAK) != (b.bind == STB_WEAK))
    return b.bind == STB_WEAK;
  if ((a.bind == STB_GLOBAL) != (b.bind == STB_GLOBAL))
    return a.bind == STB_GLOBAL;
  const std::size_t ua = leading_underscores(a.name), ub = leading_underscores(b.name);
  if (ua != ub)
    return ua < ub;
  const std::size_t la = std::strlen(a.name), lb = std::strlen(b.name);
  if (la != lb)
    return la > lb;
  return a.index < b.index;
}

/// The function symbols (STT_FUNC, STT_GNU_IFUNC; defined) of the first table of `type`.
/// @return false when the file has no such table.
bool read_functions(Elf* elf, Elf64_Word type, std::vector<ElfSymbol>& out) {
  std::vector<RawSymbol> raw;
  const bool has_table = for_each_defined_symbol(elf, type, [&](const DefinedSymbol& s) {
    // Functions, and untyped labels in code (perf's elf_sym__is_label: assembly entry points
    // such as ld.so's _start and _dl_start_user).
    if (s.sym.st_value == 0 || (s.type != STT_FUNC && s.type != STT_GNU_IFUNC &&
                                !(s.type == STT_NOTYPE && executable_section(elf, s.sym.st_shndx))))
      return;
    raw.push_back({.start = s.sym.st_value,
                   .size = s.sym.st_size,
                   .name = s.name,
                   .bind = s.bind,
                   .index = s.index});
  });
  if (!has_table)
    return false;
  std::sort(raw.begin(), raw.end(), [](const RawSymbol& a, const RawSymbol& b) {
    if (a.start != b.start)
      return a.start < b.start;
    return better_alias(a, b);
  });
  out.clear();
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (i != 0 && raw[i].start == raw[i - 1].start)
      continue;  // an alias of the symbol just kept
    out.push_back(
        {.start = raw[i].start, .size = raw[i].size, .name = detail::demangle(raw[i].name)});
  }
  return true;
}

bool same_file(const fs::path& a, const fs::path& b) {
  struct stat sa {};
  struct stat sb {};
  return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

/// `candidate` opened as the debuginfo of a file whose build-id is `build_id` (when both have
/// one, they must match: a stale debug file would name the wrong functions).
std::optional<OpenElf> open_debug_candidate(const fs::path& candidate,
                                            const fs::path& file,
                                            const std::string& build_id) {
  if (!is_regular(candidate) || same_file(candidate, file))
    return std::nullopt;
  auto elf = open_elf(candidate);
  if (!elf)
    return std::nullopt;
  const std::string id = build_id_of(elf->elf.get());
  if (!build_id.empty() && !id.empty() && id != build_id)
    return std::nullopt;
  return std::move(*elf);
}

struct DebugFile {
  fs::path path;
  OpenElf elf;
};

/// Separate debuginfo of `file` (gdb's order): ROOT/.build-id/ab/cdef....debug for each root,
/// then the .gnu_debuglink name in the file's directory, its .debug/, and ROOT/DIR/.
std::optional<DebugFile> find_debug_file(const fs::path& file,
                                         Elf* elf,
                                         const std::string& build_id,
                                         const std::vector<fs::path>& roots) {
  if (build_id.size() > 2) {
    for (const auto& root : roots) {
      fs::path candidate = root / ".build-id" / build_id.substr(0, 2);
      candidate /= build_id.substr(2) + ".debug";
      if (auto found = open_debug_candidate(candidate, file, build_id))
        return DebugFile{std::move(candidate), std::move(*found)};
    }
  }
  GElf_Word crc = 0;
  const char* link = ::dwelf_elf_gnu_debuglink(elf, &crc);
  if (link == nullptr || *link == '\0' || std::strchr(link, '/') != nullptr)
    return std::nullopt;
  std::error_code ec;
  fs::path dir = fs::absolute(file, ec).parent_path();
  std::vector<fs::path> candidates = {dir / link, dir / ".debug" / link};
  for (const auto& root : roots)
    candidates.push_back(root / dir.relative_path() / link);
  for (auto& candidate : candidates) {
    if (auto found = open_debug_candidate(candidate, file, build_id))
      return DebugFile{std::move(candidate), std::move(*found)};
  }
  return std::nullopt;
}

/// A DIE's function name: the demangled linkage name when there is one (C++), else DW_AT_name
/// (both followed through DW_AT_abstract_origin/specification).
std::string die_name(Dwarf_Die* die) {
  Dwarf_Attribute attr;
  const char* linkage = ::dwarf_formstring(::dwarf_attr_integrate(die, DW_AT_linkage_name, &attr));
  if (linkage == nullptr)
    linkage = ::dwarf_formstring(::dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr));
  if (linkage != nullptr)
    return detail::demangle(linkage);
  const char* name = ::dwarf_diename(die);
  return name != nullptr ? name : "";
}

}  // namespace

/// libdw state for source lines: the file with DWARF (the binary or its debug file), opened on
/// the first frames() call.
struct ElfSymbols::DwarfLines {
  fs::path path;
  bool tried = false;
  OpenElf elf;
  ::Dwarf* dw = nullptr;

  ~DwarfLines() {
    if (dw != nullptr)
      ::dwarf_end(dw);
  }

  ::Dwarf* get() {
    if (tried)
      return dw;
    tried = true;
    auto opened = open_elf(path);
    if (!opened)
      return nullptr;
    elf = std::move(*opened);
    dw = ::dwarf_begin_elf(elf.elf.get(), DWARF_C_READ, nullptr);
    return dw;
  }

  /// The compilation unit containing `addr` (.debug_aranges, else each CU's ranges).
  bool cu_of(std::uint64_t addr, Dwarf_Die* cu) const {
    if (::dwarf_addrdie(dw, addr, cu) != nullptr)
      return true;
    Dwarf_Off off = 0, next = 0;
    std::size_t header = 0;
    while (::dwarf_nextcu(dw, off, &next, &header, nullptr, nullptr, nullptr) == 0) {
      if (::dwarf_offdie(dw, off + header, cu) != nullptr && ::dwarf_haspc(cu, addr) > 0)
        return true;
      off = next;
    }
    return false;
  }
};

ElfSymbols::~ElfSymbols() = default;

Result<std::shared_ptr<ElfSymbols>> ElfSymbols::open(const fs::path& path,
                                                     const SymbolizeOptions& options) {
  TRACER_ASSIGN_OR_RETURN(OpenElf file, open_elf(path));
  Elf* elf = file.elf.get();
  std::shared_ptr<ElfSymbols> out(new ElfSymbols());
  out->path_ = path;
  out->sym_path_ = path;
  out->build_id_ = build_id_of(elf);
  out->source_lines_ = options.source_lines;

  std::size_t phnum = 0;
  if (::elf_getphdrnum(elf, &phnum) == 0) {
    for (std::size_t i = 0; i < phnum; ++i) {
      GElf_Phdr phdr;
      if (::gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_LOAD)
        out->segments_.push_back(
            {.offset = phdr.p_offset, .vaddr = phdr.p_vaddr, .filesz = phdr.p_filesz});
    }
  }

  const bool has_symtab = read_functions(elf, SHT_SYMTAB, out->syms_);
  const bool file_dwarf = options.source_lines && has_dwarf(elf);
  std::optional<DebugFile> debug;
  if (!has_symtab || (options.source_lines && !file_dwarf))
    debug = find_debug_file(path, elf, out->build_id_, options.debug_roots);
  if (!has_symtab && debug && read_functions(debug->elf.elf.get(), SHT_SYMTAB, out->syms_))
    out->sym_path_ = debug->path;
  else if (!has_symtab)
    out->dynsym_only_ = read_functions(elf, SHT_DYNSYM, out->syms_);
  out->plt_symbols_ = add_plt_symbols(elf, out->syms_);

  if (options.source_lines) {
    out->dwarf_ = std::make_unique<DwarfLines>();
    if (file_dwarf)
      out->dwarf_->path = path;
    else if (debug && has_dwarf(debug->elf.elf.get()))
      out->dwarf_->path = debug->path;
    else
      out->dwarf_->tried = true;  // nothing to open
  }
  return out;
}

std::optional<std::uint64_t> ElfSymbols::address_of_offset(std::uint64_t offset) const noexcept {
  // The loader maps [p_offset, p_offset + p_filesz) at p_vaddr + load bias.
  for (const auto& s : segments_) {
    if (offset >= s.offset && offset - s.offset < s.filesz)
      return s.vaddr + (offset - s.offset);
  }
  return std::nullopt;
}

const ElfSymbol* ElfSymbols::find(std::uint64_t addr) const noexcept {
  auto it = std::upper_bound(syms_.begin(), syms_.end(), addr,
                             [](std::uint64_t a, const ElfSymbol& s) { return a < s.start; });
  if (it == syms_.begin())
    return nullptr;
  const bool last = it == syms_.end();
  --it;
  if (it->size != 0)
    return addr - it->start < it->size ? &*it : nullptr;
  if (!last)
    return &*it;  // unsized: up to the next symbol
  // The last symbol, unsized: up to the end of the segment that holds it.
  for (const auto& s : segments_) {
    if (it->start >= s.vaddr && it->start - s.vaddr < s.filesz)
      return addr - s.vaddr < s.filesz ? &*it : nullptr;
  }
  return nullptr;
}

std::vector<Frame> ElfSymbols::frames(std::uint64_t addr) const {
  std::vector<Frame> out;
  Frame outer;
  if (const ElfSymbol* sym = find(addr)) {
    outer.symbol = sym->name;
    outer.offset = addr - sym->start;
  }
  ::Dwarf* dw = source_lines_ && dwarf_ ? dwarf_->get() : nullptr;
  Dwarf_Die cu;
  if (dw == nullptr || !dwarf_->cu_of(addr, &cu)) {
    out.push_back(std::move(outer));
    return out;
  }
  // The line of `addr` belongs to the innermost scope; each inlined subroutine's call site
  // (DW_AT_call_file/line) is the line in the scope around it.
  std::string file;
  int line = 0;
  if (Dwarf_Line* l = ::dwarf_getsrc_die(&cu, addr)) {
    const char* src = ::dwarf_linesrc(l, nullptr, nullptr);
    file = src != nullptr ? src : "";
    ::dwarf_lineno(l, &line);
  }
  Dwarf_Files* files = nullptr;
  std::size_t nfiles = 0;
  const bool have_files = ::dwarf_getsrcfiles(&cu, &files, &nfiles) == 0;
  Dwarf_Die* scopes = nullptr;
  const int nscopes = ::dwarf_getscopes(&cu, addr, &scopes);
  for (int i = 0; i < nscopes; ++i) {
    Dwarf_Die* scope = &scopes[i];
    const int tag = ::dwarf_tag(scope);
    if (tag == DW_TAG_subprogram) {
      if (outer.symbol.empty()) {  // no ELF symbol (stripped, no debug .symtab): DWARF's name
        outer.symbol = die_name(scope);
        Dwarf_Addr low = 0;
        if (::dwarf_lowpc(scope, &low) == 0 && low <= addr)
          outer.offset = addr - low;
      }
      break;
    }
    if (tag != DW_TAG_inlined_subroutine)
      continue;
    out.push_back({.symbol = die_name(scope),
                   .file = file,
                   .line = static_cast<std::uint32_t>(std::max(line, 0)),
                   .inlined = true});
    Dwarf_Attribute attr;
    Dwarf_Word value = 0;
    file.clear();
    line = 0;
    if (have_files && ::dwarf_formudata(::dwarf_attr(scope, DW_AT_call_file, &attr), &value) == 0) {
      const char* src = ::dwarf_filesrc(files, value, nullptr, nullptr);
      file = src != nullptr ? src : "";
    }
    if (::dwarf_formudata(::dwarf_attr(scope, DW_AT_call_line, &attr), &value) == 0)
      line = static_cast<int>(value);
  }
  std::free(scopes);  // NOLINT(cppcoreguidelines-no-malloc): libdw allocates it with malloc
  outer.file = std::move(file);
  outer.line = static_cast<std::uint32_t>(std::max(line, 0));
  out.push_back(std::move(outer));
  return out;
}

}  // namespace tracer::symbols
