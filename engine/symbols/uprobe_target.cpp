// ELF function symbols to file offsets (libelf/gelf), and binary names to paths.
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "symbols_internal.hpp"
#include "tracer/common/edit_distance.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxNearMatches = 5;
// The directories a "libX" name is searched in when no process maps it (Debian multiarch first,
// as ld.so's default search path has it on x86_64).
constexpr std::array<std::string_view, 4> kLibraryDirs = {
    "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib"};

using symbols::detail::DefinedSymbol;
using symbols::detail::elf_error_text;
using symbols::detail::executable_section;
using symbols::detail::for_each_defined_symbol;
using symbols::detail::is_regular;
using symbols::detail::kMaxMapsBytes;
using symbols::detail::OpenElf;

Result<OpenElf> open_elf(const fs::path& binary) {
  return symbols::detail::open_elf(
      binary, "elf", "uprobes need an executable or shared library, e.g. /usr/bin/bash:readline");
}

struct Candidate {
  FunctionSymbol sym;
  int rank = 0;  // lower is better: (type rank, bind rank)
};

int bind_rank(unsigned char bind) {
  switch (bind) {
    case STB_GLOBAL:
      return 0;
    case STB_WEAK:
      return 1;
    default:
      return 2;
  }
}

bool is_function_type(unsigned char type) {
  return type == STT_FUNC || type == STT_GNU_IFUNC;
}

/// Walks one symbol table (SHT_SYMTAB or SHT_DYNSYM): collects definitions of `name` and every
/// defined function name (for suggestions).
void scan_table(Elf* elf,
                Elf64_Word table_type,
                std::string_view name,
                std::vector<Candidate>& found,
                std::set<std::string>& functions,
                bool with_data = false) {
  for_each_defined_symbol(elf, table_type, [&](const DefinedSymbol& s) {
    // With `data`, variables count as much as functions (breakpoints watch either).
    const bool func = is_function_type(s.type) || (with_data && s.type == STT_OBJECT);
    if (!func && s.type != STT_NOTYPE)
      return;
    if (func)
      functions.emplace(s.name);
    if (name != s.name || (!func && !executable_section(elf, s.sym.st_shndx)))
      return;
    Candidate c;
    c.sym.name = s.name;
    c.sym.value = s.sym.st_value;
    c.sym.size = s.sym.st_size;
    c.sym.type = s.type;
    c.sym.bind = s.bind;
    c.sym.from_dynsym = table_type == SHT_DYNSYM;
    c.rank = (func ? 0 : 10) + bind_rank(c.sym.bind);
    found.push_back(std::move(c));
  });
}

/// Whether `vaddr` lies in the zero-filled tail of a PT_LOAD segment (p_filesz..p_memsz: .bss).
bool in_bss(Elf* elf, std::uint64_t vaddr) {
  std::size_t count = 0;
  if (::elf_getphdrnum(elf, &count) != 0)
    return false;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (::gelf_getphdr(elf, static_cast<int>(i), &phdr) != nullptr && phdr.p_type == PT_LOAD &&
        vaddr >= phdr.p_vaddr + phdr.p_filesz && vaddr < phdr.p_vaddr + phdr.p_memsz)
      return true;
  }
  return false;
}

template <typename T>
std::optional<T> parse_number(std::string_view s) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    base = 16;
    s.remove_prefix(2);
  }
  return tracer::detail::parse_uint<T>(s, base);
}

bool is_elf_file(const fs::path& p) {
  UniqueFd fd(::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return false;
  std::array<char, 4> magic{};
  return ::read(fd.get(), magic.data(), magic.size()) == 4 &&
         std::memcmp(magic.data(), ELFMAG, SELFMAG) == 0;
}

/// "libc" matches "libc.so.6", "libc.so" and "libc-2.31.so"; any name matches itself.
bool library_name_matches(std::string_view base, std::string_view name) {
  if (base == name)
    return true;
  const std::string so = std::string(name) + ".so";
  const std::string dash = std::string(name) + "-";
  return base.starts_with(so) || base.starts_with(dash);
}

/// The first file mapped by `pid` (/proc/PID/maps, 6th column) whose basename matches `name`.
/// @return the path, or a failure whose message says where we looked (for resolve_binary()).
Result<fs::path> find_in_maps(pid_t pid, std::string_view name) {
  auto maps = tracer::detail::read_text_file(fs::path("/proc") / std::to_string(pid) / "maps",
                                             "probe", kMaxMapsBytes);
  if (!maps)
    return fail(maps.error().code.value(),
                fmt::format("pid {}'s maps ({})", pid, maps.error().message));
  for (const std::string_view line : tracer::detail::lines(*maps)) {
    // "start-end perms offset dev inode    /path"; anonymous mappings have no path, and
    // "[heap]"-style pseudo paths do not start with '/'.
    const auto slash = line.find('/');
    if (slash == std::string_view::npos)
      continue;
    const std::string_view path = line.substr(slash);
    if (path.ends_with(" (deleted)"))
      continue;  // the inode is gone from the namespace; a new probe could not name it
    const auto base_at = path.rfind('/');
    if (library_name_matches(path.substr(base_at + 1), name))
      return fs::path(std::string(path));
  }
  return fail(ENOENT, fmt::format("the files mapped by pid {}", pid));
}

std::optional<fs::path> find_in_path(std::string_view name) {
  const char* env = std::getenv("PATH");
  std::string_view dirs = env != nullptr && *env != '\0' ? env : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const auto colon = dirs.find(':');
    const std::string_view dir = dirs.substr(0, colon);
    if (!dir.empty()) {
      fs::path p = fs::path(std::string(dir)) / std::string(name);
      if (is_regular(p) && ::access(p.c_str(), X_OK) == 0)
        return p.is_absolute() ? p : fs::absolute(p);
    }
    if (colon == std::string_view::npos)
      break;
    dirs.remove_prefix(colon + 1);
  }
  return std::nullopt;
}

std::optional<fs::path> find_library(std::string_view name) {
  for (const auto dir_name : kLibraryDirs) {
    const fs::path dir(dir_name);
    // Preference order: the exact name, then the runtime soname "name.so.N", then "name.so"
    // (often a linker script in -dev packages, skipped unless it is ELF), then "name-X.so".
    std::vector<std::pair<int, fs::path>> hits;
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string base = it->path().filename().string();
      int rank = -1;
      if (base == name) {
        rank = 0;
      } else if (base.starts_with(std::string(name) + ".so.")) {
        rank = 1;
      } else if (base == std::string(name) + ".so") {
        rank = 2;
      } else if (base.starts_with(std::string(name) + "-") &&
                 base.find(".so") != std::string::npos) {
        rank = 3;
      }
      if (rank >= 0 && is_regular(it->path()) && is_elf_file(it->path()))
        hits.emplace_back(rank, it->path());
    }
    if (!hits.empty())
      return std::min_element(hits.begin(), hits.end())->second;
  }
  return std::nullopt;
}

}  // namespace

Result<SymbolSpec> parse_symbol_spec(std::string_view spec) {
  const auto plus = spec.find('+');
  SymbolSpec out;
  out.name = std::string(spec.substr(0, plus));
  if (out.name.empty())
    return fail(EINVAL, fmt::format("probe: '{}' names no symbol", spec),
                "write symbol, symbol+0x10 or symbol+16");
  if (plus != std::string_view::npos) {
    const auto off = parse_number<std::uint64_t>(spec.substr(plus + 1));
    if (!off)
      return fail(EINVAL, fmt::format("probe: bad offset in '{}'", spec),
                  "the offset is decimal or 0x-prefixed hex: symbol+0x10 or symbol+16");
    out.offset = *off;
  }
  return out;
}

namespace {

/// find_function(), or with `data` also variables (STT_OBJECT).
Result<FunctionSymbol> find_symbol(const fs::path& binary, std::string_view name, bool data) {
  TRACER_ASSIGN_OR_RETURN(OpenElf file, open_elf(binary));
  Elf* elf = file.elf.get();
  std::vector<Candidate> found;
  std::set<std::string> functions;
  scan_table(elf, SHT_SYMTAB, name, found, functions, data);
  if (found.empty())  // stripped: .dynsym still has what the binary exports
    scan_table(elf, SHT_DYNSYM, name, found, functions, data);
  if (found.empty()) {
    // Beyond a third of the name (at least 3) a suggestion is noise rather than a likely typo; a
    // name that contains the query (or is contained in it) counts as close whatever its length.
    const auto near = tracer::detail::nearest(
        name, functions,
        {.max_distance = 3, .limit = kMaxNearMatches, .related_only = false, .substring = true});
    return fail(ENOENT,
                fmt::format("elf: no {} '{}' in {}", data ? "function or variable" : "function",
                            name, binary.string()),
                tracer::detail::did_you_mean(
                    near, fmt::format("{} has {} function symbols; `nm -D {}` lists the "
                                      "exported ones",
                                      binary.string(), functions.size(), binary.string())));
  }
  // The first of the best rank: .symtab order is the linker's, so ties stay deterministic.
  const Candidate& best =
      *std::min_element(found.begin(), found.end(),
                        [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
  // Aliases (e.g. a GLOBAL and a LOCAL name for one address) are harmless; two different
  // addresses at the best rank mean two static functions of the same name in different units.
  std::set<std::uint64_t> addresses;
  for (const auto& c : found)
    if (c.rank == best.rank)
      addresses.insert(c.sym.value);
  if (addresses.size() > 1) {
    std::string where;
    for (const auto a : addresses)
      where += fmt::format("{}{:#x}", where.empty() ? "" : ", ", a);
    return fail(ENOTUNIQ,
                fmt::format("elf: '{}' is defined {} times in {} (at {})", name, addresses.size(),
                            binary.string(), where),
                "probe one of them by file offset: path:0xOFFSET");
  }
  FunctionSymbol sym = best.sym;
  const auto offset = detail::vaddr_to_offset(elf, sym.value);
  if (!offset && data && sym.type == STT_OBJECT && in_bss(elf, sym.value))
    return sym;  // zero-initialized data has memory but no file bytes (file_offset 0)
  if (!offset)
    return fail(EINVAL,
                fmt::format("elf: '{}' at {:#x} lies in no PT_LOAD segment of {}", name, sym.value,
                            binary.string()),
                "is it a relocatable object (.o)? uprobes need a linked executable or library");
  sym.file_offset = *offset;
  return sym;
}

/// The load bias of `binary` in process `pid`: where its file offset 0 is mapped, minus the
/// page-aligned p_vaddr of its first PT_LOAD segment (0 for ET_EXEC, which loads at its vaddrs).
Result<std::uint64_t> load_bias(const fs::path& binary, pid_t pid) {
  TRACER_ASSIGN_OR_RETURN(OpenElf file, open_elf(binary));
  GElf_Ehdr ehdr;
  if (::gelf_getehdr(file.elf.get(), &ehdr) == nullptr)
    return fail(ENOEXEC, fmt::format("elf: {}: {}", binary.string(), elf_error_text()));
  if (ehdr.e_type == ET_EXEC)
    return std::uint64_t{0};
  std::uint64_t first_vaddr = ~std::uint64_t{0};
  std::size_t count = 0;
  if (::elf_getphdrnum(file.elf.get(), &count) == 0) {
    for (std::size_t i = 0; i < count; ++i) {
      GElf_Phdr phdr;
      if (::gelf_getphdr(file.elf.get(), static_cast<int>(i), &phdr) != nullptr &&
          phdr.p_type == PT_LOAD)
        first_vaddr = std::min<std::uint64_t>(first_vaddr, phdr.p_vaddr);
    }
  }
  if (first_vaddr == ~std::uint64_t{0})
    return fail(EINVAL, fmt::format("elf: {} has no PT_LOAD segment", binary.string()));
  TRACER_ASSIGN_OR_RETURN(
      const std::string maps,
      tracer::detail::read_text_file(fs::path("/proc") / std::to_string(pid) / "maps", "breakpoint",
                                     kMaxMapsBytes));
  std::error_code ec;
  const fs::path want = fs::canonical(binary, ec);
  for (const std::string_view line : tracer::detail::lines(maps)) {
    // start-end perms offset dev inode path
    const auto slash = line.find('/');
    if (slash == std::string_view::npos || fs::path(std::string(line.substr(slash))) != want)
      continue;
    const auto dash = line.find('-');
    const auto sp1 = line.find(' ');
    const auto sp2 = line.find(' ', sp1 + 1);
    const auto sp3 = line.find(' ', sp2 + 1);
    if (dash == std::string_view::npos || sp3 == std::string_view::npos)
      continue;
    std::uint64_t start = 0, offset = 0;
    const auto hex = [](std::string_view t, std::uint64_t& v) {
      return std::from_chars(t.data(), t.data() + t.size(), v, 16).ec == std::errc{};
    };
    if (!hex(line.substr(0, dash), start) || !hex(line.substr(sp2 + 1, sp3 - sp2 - 1), offset) ||
        offset != 0)
      continue;
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    return start - (first_vaddr & ~(page - 1));
  }
  return fail(ENOENT, fmt::format("elf: process {} does not map {}", pid, want.string()),
              "is the pid right? the symbol must be in the process's executable");
}

}  // namespace

Result<FunctionSymbol> find_function(const fs::path& binary, std::string_view name) {
  return find_symbol(binary, name, false);
}

Result<SymbolAddress> symbol_address(const fs::path& binary,
                                     std::string_view symbol,
                                     std::optional<pid_t> pid) {
  TRACER_ASSIGN_OR_RETURN(const SymbolSpec spec, parse_symbol_spec(symbol));
  TRACER_ASSIGN_OR_RETURN(const FunctionSymbol sym, find_symbol(binary, spec.name, true));
  if (sym.size != 0 && spec.offset >= sym.size)
    return fail(EINVAL, fmt::format("elf: offset {:#x} is past the end of '{}' ({} bytes) in {}",
                                    spec.offset, spec.name, sym.size, binary.string()));
  std::uint64_t bias = 0;
  {
    TRACER_ASSIGN_OR_RETURN(OpenElf file, open_elf(binary));
    GElf_Ehdr ehdr;
    if (::gelf_getehdr(file.elf.get(), &ehdr) == nullptr)
      return fail(ENOEXEC, fmt::format("elf: {}: {}", binary.string(), elf_error_text()));
    if (ehdr.e_type != ET_EXEC) {
      if (!pid)
        return fail(EINVAL,
                    fmt::format("elf: {} is position-independent: '{}' has no address until it "
                                "is loaded",
                                binary.string(), spec.name),
                    "trace a running process (-p PID), or build the program with -no-pie");
      TRACER_ASSIGN_OR_RETURN(bias, load_bias(binary, *pid));
    }
  }
  return SymbolAddress{.address = bias + sym.value + spec.offset,
                       .size = sym.size != 0 ? sym.size - spec.offset : 0,
                       .function = is_function_type(sym.type) || sym.type == STT_NOTYPE};
}

Result<std::uint64_t> symbol_file_offset(const fs::path& binary, std::string_view symbol) {
  TRACER_ASSIGN_OR_RETURN(const SymbolSpec spec, parse_symbol_spec(symbol));
  TRACER_ASSIGN_OR_RETURN(const FunctionSymbol sym, find_function(binary, spec.name));
  if (sym.size != 0 && spec.offset >= sym.size)
    return fail(EINVAL,
                fmt::format("elf: offset {:#x} is past the end of '{}' ({} bytes) in {}",
                            spec.offset, spec.name, sym.size, binary.string()),
                "the offset must point inside the function");
  return sym.file_offset + spec.offset;
}

Result<fs::path> resolve_binary(std::string_view spec, std::optional<pid_t> pid) {
  if (spec.empty())
    return fail(EINVAL, "probe: empty binary name", "write /path/to/binary:symbol or lib:symbol");
  if (spec.find('/') != std::string_view::npos) {
    std::error_code ec;
    fs::path p = fs::absolute(fs::path(std::string(spec)), ec);
    if (ec || !fs::exists(p, ec))
      return fail(ENOENT, fmt::format("probe: {} does not exist", spec));
    return p;
  }
  std::vector<std::string> looked;
  if (pid) {
    auto mapped = find_in_maps(*pid, spec);
    if (mapped)
      return *mapped;
    looked.push_back(std::move(mapped).error().message);
  }
  if (auto p = find_in_path(spec))
    return *p;
  looked.emplace_back("$PATH");
  if (spec.starts_with("lib")) {
    if (auto p = find_library(spec))
      return *p;
    looked.emplace_back(fmt::format("{}, {}, {}, {}", kLibraryDirs[0], kLibraryDirs[1],
                                    kLibraryDirs[2], kLibraryDirs[3]));
  }
  std::string where;
  for (const auto& l : looked)
    where += (where.empty() ? "" : "; ") + l;
  return fail(ENOENT, fmt::format("probe: cannot find '{}' (looked in {})", spec, where),
              pid ? "give the full path" : "give the full path, or a pid whose maps contain it");
}

namespace {

/// The ':' between the file and the symbol: the last one that is not half of a "::" (a path may
/// hold ':' too). npos when there is none.
std::size_t file_symbol_colon(std::string_view spec) {
  std::size_t at = std::string_view::npos;
  for (std::size_t i = 0; i < spec.size(); ++i) {
    if (spec[i] != ':')
      continue;
    if (i + 1 < spec.size() && spec[i + 1] == ':') {
      ++i;  // "::"
      continue;
    }
    at = i;
  }
  return at;
}

}  // namespace

Result<UprobeTarget> parse_uprobe_spec(std::string_view spec, std::optional<pid_t> pid) {
  const auto colon = file_symbol_colon(spec);
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == spec.size())
    return fail(EINVAL, fmt::format("probe: bad uprobe '{}'", spec),
                "write path:symbol, path:symbol+0x10, path:0xOFFSET, lib:symbol, or a C++ name "
                "path:ns::Class::method, path:Class::get(int) or path:ns::*");
  std::string_view file = spec.substr(0, colon);
  const std::string_view where = spec.substr(colon + 1);
  bool cpp = false;
  if (file.ends_with(":cpp") && file.size() > 4) {  // bpftrace's "path:cpp:NAME"
    file.remove_suffix(4);
    cpp = true;
  }
  UprobeTarget out;
  TRACER_ASSIGN_OR_RETURN(out.path, resolve_binary(file, pid));
  if (where.starts_with("0x") || where.starts_with("0X")) {
    const auto off = parse_number<std::uint64_t>(where);
    if (!off)
      return fail(EINVAL, fmt::format("probe: bad file offset '{}' in '{}'", where, spec),
                  "a raw offset is 0x-prefixed hex, e.g. /bin/bash:0x4a5b0");
    out.sites.push_back({.offset = *off, .symbol = {}});
    return out;
  }
  if (!cpp && !is_cxx_pattern(where)) {
    auto offset = symbol_file_offset(out.path, where);
    if (offset) {
      out.sites.push_back({.offset = *offset, .symbol = std::string(where)});
      return out;
    }
    if (offset.error().errno_value() != ENOENT || where.find('+') != std::string_view::npos)
      return std::unexpected(std::move(offset).error());
    // A plain name no symbol has may be a C++ function's ("get" of Cache::get is not).
    auto matched = match_functions(out.path, where);
    if (!matched)
      return std::unexpected(std::move(offset).error());
    for (auto& m : *matched)
      out.sites.push_back({.offset = m.file_offset, .symbol = std::move(m.demangled)});
  } else {
    TRACER_ASSIGN_OR_RETURN(auto matched, match_functions(out.path, where));
    for (auto& m : matched)
      out.sites.push_back({.offset = m.file_offset, .symbol = std::move(m.demangled)});
  }
  if (out.sites.size() > kMaxUprobeSites)
    return fail(EINVAL,
                fmt::format("probe: '{}' matches {} functions of {}: at most {} per probe", where,
                            out.sites.size(), out.path.string(), kMaxUprobeSites),
                fmt::format("narrow the pattern; `tracer list uprobes {} '{}'` lists them",
                            out.path.string(), where));
  return out;
}

}  // namespace tracer::symbols
