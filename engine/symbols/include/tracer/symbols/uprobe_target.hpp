// ELF symbols to uprobe file offsets, and binary/library names to paths.
//
// A uprobe is placed at a *file offset* of an inode (kernel/events/uprobes.c, uprobe_register()
// takes an inode and a loff_t), not at a virtual address: the kernel finds every mapping of that
// file page and patches it. These helpers turn "binary:symbol+off" into that (path, offset).
//
// Usage:
//   TRACER_ASSIGN_OR_RETURN(auto target, symbols::parse_uprobe_spec("libc:malloc", pid));
//   auto attr = core::uprobe_attr(backend, target.path.string(), target.offset, false);
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"

namespace tracer::symbols {

/// "sym", "sym+0x10" or "sym+16" split into its parts.
struct SymbolSpec {
  std::string name;
  std::uint64_t offset = 0;  // bytes past the symbol's start
};

/// Parses a symbol with an optional "+offset" (decimal or 0x-prefixed hex).
/// @return the parts, or EINVAL naming the spec when the name is empty or the offset malformed.
[[nodiscard]] Result<SymbolSpec> parse_symbol_spec(std::string_view spec);

/// One resolved function symbol.
struct FunctionSymbol {
  std::string name;
  std::uint64_t value = 0;        // st_value: the link-time virtual address
  std::uint64_t size = 0;         // st_size (0 when the producer did not say)
  std::uint64_t file_offset = 0;  // where the symbol's first byte lies in the file
  unsigned char type = 0;         // STT_FUNC, STT_GNU_IFUNC or STT_NOTYPE
  unsigned char bind = 0;         // STB_GLOBAL, STB_WEAK or STB_LOCAL
  bool from_dynsym = false;       // found in .dynsym (no .symtab entry, e.g. a stripped binary)
};

/// Looks a function up in .symtab, then .dynsym (what a stripped binary still has). Functions
/// (STT_FUNC, STT_GNU_IFUNC) win over untyped labels in executable sections (STT_NOTYPE); among
/// duplicates GLOBAL wins over WEAK over LOCAL. st_value is converted to a file offset through
/// the PT_LOAD segment that contains it (st_value - p_vaddr + p_offset), which is right for
/// ET_EXEC, PIE and shared objects alike.
/// @return the symbol, or: ENOENT/EACCES/... naming the file when it cannot be opened; ENOEXEC
/// when it is not an ELF file; ENOENT when no such function exists, with up to 5 nearest
/// function names in the hint; ENOTUNIQ when several LOCAL definitions with different
/// addresses share the name (hint: use path:0xOFFSET); EINVAL when the symbol lies in no
/// PT_LOAD segment.
[[nodiscard]] Result<FunctionSymbol> find_function(const std::filesystem::path& binary,
                                                   std::string_view name);

/// The file offset of "sym", "sym+0x10" or "sym+16" in `binary` (see find_function()).
/// @return the offset, or the errors of parse_symbol_spec() and find_function(), or EINVAL when
/// the "+offset" points past the end of a symbol whose size is known.
[[nodiscard]] Result<std::uint64_t> symbol_file_offset(const std::filesystem::path& binary,
                                                       std::string_view symbol);

/// A symbol's address in a process.
struct SymbolAddress {
  std::uint64_t address = 0;  // run-time virtual address (the "+offset" included)
  std::uint64_t size = 0;     // bytes from there to the symbol's end (0: unknown)
  bool function = false;      // code (else a variable)
};

/// The run-time address of a function or variable "sym[+off]" of the executable `binary`:
/// st_value for a non-PIE (ET_EXEC); for a PIE, st_value plus the load bias read from
/// /proc/PID/maps of `pid` (the mapping of the file at offset 0).
/// @return the address, or the errors of parse_symbol_spec() and find_function() (which also
/// searches variables here); EINVAL for a PIE without a pid; ENOENT when the process does not
/// map the binary.
[[nodiscard]] Result<SymbolAddress> symbol_address(const std::filesystem::path& binary,
                                                   std::string_view symbol,
                                                   std::optional<pid_t> pid);

/// Finds the file a probe spec names:
///  - a path containing '/' is used as is (made absolute against the cwd) and must exist;
///  - a bare name is looked up (a) when `pid` is given, among the files mapped in
///    /proc/PID/maps whose basename is the name or starts with "<name>.so" or "<name>-" (so
///    "libc" finds /usr/lib/x86_64-linux-gnu/libc.so.6); (b) in $PATH as an executable;
///    (c) for "lib*" names, in /lib/x86_64-linux-gnu, /usr/lib/x86_64-linux-gnu, /lib64 and
///    /usr/lib (as name, name.so.N, name.so or name-*.so*; non-ELF files such as linker scripts
///    are skipped).
/// @return the path, or ENOENT saying where it looked; EINVAL for an empty spec.
[[nodiscard]] Result<std::filesystem::path> resolve_binary(std::string_view spec,
                                                           std::optional<pid_t> pid);

/// A function matched by its demangled name.
struct FunctionMatch {
  std::string demangled;  // "ns::Cache::get(int) const" (a C name as it is)
  std::string mangled;    // "_ZNK2ns5Cache3getEi"
  std::uint64_t file_offset = 0;
  std::uint64_t size = 0;
};

/// A demangled name without its parameters or a template function's return type:
/// "ns::Cache::get(int) const" -> "ns::Cache::get", "int ns::f<int>(int)" -> "ns::f<int>",
/// "S::operator()(int)" -> "S::operator()".
[[nodiscard]] std::string_view cxx_function_name(std::string_view demangled);

/// Whether a uprobe's symbol is a C++ name or a pattern (holds "::", '(', '*' or '?') rather
/// than a symbol as the symbol table spells it.
[[nodiscard]] bool is_cxx_pattern(std::string_view name);

/// The functions (.symtab, else .dynsym) whose demangled name matches `pattern`: with a '(' the
/// whole demangled text ("Cache::get(int)"), else the name without its parameters (every
/// overload of "Cache::get"); '*' and '?' are wildcards. One per file offset (aliases such as
/// a constructor's C1 and C2 probe once), sorted by demangled name.
/// @return the matches, or ENOENT with up to 5 near demangled names in the hint, or the errors
/// of opening the file.
[[nodiscard]] Result<std::vector<FunctionMatch>> match_functions(
    const std::filesystem::path& binary,
    std::string_view pattern);

/// Where a uprobe goes: one or more places of one file.
struct UprobeSite {
  std::uint64_t offset = 0;  // file offset of the probed instruction
  std::string symbol;        // as written ("malloc+0x4") or as matched ("Cache::get(int)")
};
struct UprobeTarget {
  std::filesystem::path path;  // absolute path of the binary or library
  std::vector<UprobeSite> sites;
};

/// The most places one uprobe spec may name (each is a probe of the kernel's on every CPU).
inline constexpr std::size_t kMaxUprobeSites = 256;

/// Parses "path:symbol", "path:symbol+off", "path:0xoffset", "lib:symbol", and C++ names and
/// patterns "path:ns::Class::method", "path:Class::get(int)", "path:ns::*" (also written
/// "path:cpp:NAME", as bpftrace does). The file is what comes before the last ':' outside a
/// "::" (through resolve_binary()); a symbol the symbol table has is one site
/// (symbol_file_offset()), a C++ name or pattern every function match_functions() finds.
/// @return the target, or EINVAL when there is no ':' or an empty side or more than
/// kMaxUprobeSites matches, or the errors of resolve_binary(), symbol_file_offset() and
/// match_functions().
[[nodiscard]] Result<UprobeTarget> parse_uprobe_spec(std::string_view spec,
                                                     std::optional<pid_t> pid);

}  // namespace tracer::symbols
