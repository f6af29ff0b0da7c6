// Private helpers of the symbols layer: whole-file reads, demangling, maps and perf-map lines.
#include <cxxabi.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "symbols_internal.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::symbols::detail {

std::string elf_error_text() {
  const char* msg = ::elf_errmsg(-1);
  return msg != nullptr ? msg : "unknown libelf error";
}

Result<OpenElf> open_elf(const std::filesystem::path& path,
                         std::string_view subsystem,
                         std::string_view not_elf_hint) {
  // The version handshake libelf needs before anything else; idempotent and cheap.
  if (::elf_version(EV_CURRENT) == EV_NONE)
    return fail(ENOSYS,
                fmt::format("{}: libelf initialisation failed: {}", subsystem, elf_error_text()));
  OpenElf out;
  // Without blocking, and only a regular file: a FIFO named as a binary hung `check` in open().
  out.fd.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
  if (!out.fd) {
    const int err = errno;
    return fail(
        err, fmt::format("{}: cannot open {}: {}", subsystem, path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(out.fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(ENOEXEC, fmt::format("{}: {} is not a regular file", subsystem, path.string()),
                std::string(not_elf_hint));
  out.elf.reset(::elf_begin(out.fd.get(), ELF_C_READ_MMAP, nullptr));
  if (!out.elf || ::elf_kind(out.elf.get()) != ELF_K_ELF)
    return fail(ENOEXEC, fmt::format("{}: {} is not an ELF file", subsystem, path.string()),
                std::string(not_elf_hint));
  GElf_Ehdr ehdr;
  if (::gelf_getehdr(out.elf.get(), &ehdr) == nullptr)
    return fail(ENOEXEC, fmt::format("{}: {} has no readable ELF header: {}", subsystem,
                                     path.string(), elf_error_text()));
  return out;
}

Result<std::string> read_perf_map(const std::filesystem::path& path,
                                  const std::filesystem::path& proc_dir,
                                  std::size_t max_bytes) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(err, fmt::format("symbols: cannot open {}: {}", path.string(), std::strerror(err)));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    return fail(EPERM, fmt::format("symbols: {} is not a regular file: ignored", path.string()));
  struct stat proc {};
  const bool known = ::stat(proc_dir.c_str(), &proc) == 0;
  if (st.st_uid != 0 && (!known || st.st_uid != proc.st_uid)) {
    return fail(EPERM,
                fmt::format("symbols: {} is owned by uid {}, not by root or the process's user{}: "
                            "ignored (as perf does)",
                            path.string(), st.st_uid,
                            known ? fmt::format(" (uid {})", proc.st_uid) : std::string()));
  }
  return tracer::detail::read_text_fd(fd.get(), path, "symbols", max_bytes);
}

std::string demangle(std::string_view name) {
  if (!name.starts_with("_Z"))
    return std::string(name);
  const std::string raw(name);
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> out(
      abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status), &std::free);
  return status == 0 && out ? std::string(out.get()) : raw;
}

namespace {

/// Hex number at the front of `s` (an optional "0x" allowed); advances `s` past it.
bool take_hex(std::string_view& s, std::uint64_t& v) {
  if (s.starts_with("0x") || s.starts_with("0X"))
    s.remove_prefix(2);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
  if (ec != std::errc() || ptr == s.data())
    return false;
  s.remove_prefix(static_cast<std::size_t>(ptr - s.data()));
  return true;
}

std::string_view take_field(std::string_view& s) {
  const auto first = s.find_first_not_of(' ');
  if (first == std::string_view::npos) {
    s = {};
    return {};
  }
  s.remove_prefix(first);
  const auto end = s.find(' ');
  const std::string_view field = s.substr(0, end);
  s.remove_prefix(end == std::string_view::npos ? s.size() : end);
  return field;
}

}  // namespace

std::optional<Mapping> parse_maps_line(std::string_view line, std::uint32_t pid) {
  Mapping m;
  m.pid = pid;
  std::uint64_t start = 0, end = 0;
  if (!take_hex(line, start) || !line.starts_with('-'))
    return std::nullopt;
  line.remove_prefix(1);
  if (!take_hex(line, end) || end < start)
    return std::nullopt;
  const std::string_view perms = take_field(line);
  std::string_view offset = take_field(line);
  const std::string_view dev = take_field(line);
  const std::string_view inode = take_field(line);
  if (perms.size() < 3 || dev.empty() || inode.empty() || !take_hex(offset, m.pgoff))
    return std::nullopt;
  m.start = start;
  m.len = end - start;
  m.exec = perms[2] == 'x';
  const auto path_at = line.find_first_not_of(' ');
  if (path_at != std::string_view::npos)
    m.path = std::string(line.substr(path_at));
  return m;
}

std::vector<JitSymbol> parse_perf_map(std::string_view text) {
  std::vector<JitSymbol> out;
  for (std::string_view line : tracer::detail::lines(text)) {
    JitSymbol s;
    if (!take_hex(line, s.start) || !line.starts_with(' '))
      continue;
    line.remove_prefix(1);
    if (!take_hex(line, s.size) || !line.starts_with(' '))
      continue;
    s.name = std::string(tracer::detail::trim(line));
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const JitSymbol& a, const JitSymbol& b) {
    return a.start != b.start ? a.start < b.start : a.name < b.name;
  });
  return out;
}

bool wildcard_match(std::string_view pattern, std::string_view text) noexcept {
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p, ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*')
    ++p;
  return p == pattern.size();
}

std::optional<std::uint64_t> vaddr_to_offset(Elf* elf, std::uint64_t vaddr) {
  std::size_t count = 0;
  if (::elf_getphdrnum(elf, &count) != 0)
    return std::nullopt;
  for (std::size_t i = 0; i < count; ++i) {
    GElf_Phdr phdr;
    if (::gelf_getphdr(elf, static_cast<int>(i), &phdr) == nullptr || phdr.p_type != PT_LOAD)
      continue;
    if (vaddr >= phdr.p_vaddr && vaddr < phdr.p_vaddr + phdr.p_filesz)
      return vaddr - phdr.p_vaddr + phdr.p_offset;
  }
  return std::nullopt;
}

}  // namespace tracer::symbols::detail
