// Private helpers of the symbols layer: ELF files opened with libelf (also core's uprobe
// resolution), whole-file reads, demangling, /proc/PID/maps and perf-PID.map lines.
#pragma once

#include <gelf.h>
#include <libelf.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <memory>

#include "tracer/result.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::symbols::detail {

struct ElfCloser {
  void operator()(Elf* e) const noexcept { ::elf_end(e); }
};
using ElfPtr = std::unique_ptr<Elf, ElfCloser>;

/// libelf's last error as text.
[[nodiscard]] std::string elf_error_text();

/// /proc/PID/maps is read whole up to this (its lines are short: the cap only stops a runaway
/// read).
inline constexpr std::size_t kMaxMapsBytes = std::size_t{64} << 20;

/// A regular file at `p` (following links), false on any error.
[[nodiscard]] inline bool is_regular(const std::filesystem::path& p) {
  std::error_code ec;
  return std::filesystem::is_regular_file(p, ec);
}

/// An open ELF file: the fd outlives the Elf handle (libelf reads through it lazily).
struct OpenElf {
  UniqueFd fd;
  ElfPtr elf;
};

/// Opens `path` read-only with libelf (ELF_C_READ_MMAP) and checks it is an ELF file with a
/// readable header. Messages start with `subsystem` ("symbols", "elf").
/// @return the file, or the errno of open() naming the file; ENOEXEC ("PATH is not an ELF file",
/// with `not_elf_hint`) for another kind of file or an unreadable header; ENOSYS when libelf
/// cannot be initialised.
[[nodiscard]] Result<OpenElf> open_elf(const std::filesystem::path& path,
                                       std::string_view subsystem,
                                       std::string_view not_elf_hint = {});

/// A process's perf map (/tmp/perf-PID.map, written by its JIT), read as perf does and as a
/// root process must: a regular file (a FIFO there would block the read forever), not through
/// a symbolic link, read without blocking, and owned by root or by the process's own user
/// (the owner of `proc_dir`, /proc/PID): anyone may create files in /tmp, and a planted map
/// would name the process's code. @return the text, or why it was refused.
[[nodiscard]] Result<std::string> read_perf_map(const std::filesystem::path& path,
                                                const std::filesystem::path& proc_dir,
                                                std::size_t max_bytes);

/// `name` demangled when it is an Itanium C++ name ("_Z..."), else `name` itself.
[[nodiscard]] std::string demangle(std::string_view name);

/// A defined symbol of an ELF symbol table, as for_each_defined_symbol() hands it on.
struct DefinedSymbol {
  const GElf_Sym& sym;
  const char* name;    // not empty
  std::size_t index;   // in its table
  unsigned char type;  // GELF_ST_TYPE
  unsigned char bind;  // GELF_ST_BIND
};

/// Whether section `index` holds code (SHF_EXECINSTR): where an untyped label (STT_NOTYPE, an
/// assembly entry point such as _start) is a function.
[[nodiscard]] inline bool executable_section(Elf* elf, std::size_t index) {
  Elf_Scn* scn = ::elf_getscn(elf, index);
  GElf_Shdr shdr;
  return scn != nullptr && ::gelf_getshdr(scn, &shdr) != nullptr &&
         (shdr.sh_flags & SHF_EXECINSTR) != 0;
}

/// The one walk of the symbol tables that both readers use (the symbolizer's address table and
/// the uprobe lookup by name): visit(DefinedSymbol) for each symbol of every table of
/// `table_type` (SHT_SYMTAB or SHT_DYNSYM) that is defined here (not undefined, absolute or
/// common) and named. @return whether the file has such a table.
template <typename Visit>
bool for_each_defined_symbol(Elf* elf, Elf64_Word table_type, Visit&& visit) {
  bool found = false;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr; scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    if (::gelf_getshdr(scn, &shdr) == nullptr || shdr.sh_type != table_type || shdr.sh_entsize == 0)
      continue;
    Elf_Data* data = ::elf_getdata(scn, nullptr);
    if (data == nullptr)
      continue;
    found = true;
    const std::size_t count = shdr.sh_size / shdr.sh_entsize;
    for (std::size_t i = 0; i < count; ++i) {
      GElf_Sym sym;
      if (::gelf_getsym(data, static_cast<int>(i), &sym) == nullptr)
        continue;
      if (sym.st_shndx == SHN_UNDEF || sym.st_shndx >= SHN_LORESERVE)
        continue;
      const char* name = ::elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (name == nullptr || *name == '\0')
        continue;
      visit(DefinedSymbol{.sym = sym,
                          .name = name,
                          .index = i,
                          .type = static_cast<unsigned char>(GELF_ST_TYPE(sym.st_info)),
                          .bind = static_cast<unsigned char>(GELF_ST_BIND(sym.st_info))});
    }
  }
  return found;
}

/// One line of /proc/PID/maps ("start-end perms offset dev inode   path") as a Mapping of `pid`,
/// or std::nullopt for a malformed line.
[[nodiscard]] std::optional<Mapping> parse_maps_line(std::string_view line, std::uint32_t pid);

/// One symbol of a perf-PID.map file (written by JITs: "START SIZE name", hex).
struct JitSymbol {
  std::uint64_t start = 0, size = 0;
  std::string name;
};

/// The symbols of a perf-PID.map text, sorted by start; malformed lines are skipped.
[[nodiscard]] std::vector<JitSymbol> parse_perf_map(std::string_view text);

/// `text` matches `pattern` whole, '*' any run and '?' any one character (no classes: C++ names
/// hold '[' in operator[]).
[[nodiscard]] bool wildcard_match(std::string_view pattern, std::string_view text) noexcept;

/// The file offset of link-time address `vaddr` through the PT_LOAD segment that maps it
/// (vaddr - p_vaddr + p_offset: right for ET_EXEC, PIE and shared objects alike); nullopt
/// outside every segment's file bytes.
[[nodiscard]] std::optional<std::uint64_t> vaddr_to_offset(Elf* elf, std::uint64_t vaddr);

}  // namespace tracer::symbols::detail
