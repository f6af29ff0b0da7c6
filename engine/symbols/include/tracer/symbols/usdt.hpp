// USDT probes (SystemTap SDT, <sys/sdt.h>): the static probes a program's .note.stapsdt notes
// describe, which `usdt = "PATH:provider:name"` probes are placed on.
//
// Each note is one call site: its address, the probe's semaphore (a counter the program tests
// before it evaluates the probe's arguments; the kernel counts it up while a uprobe with that
// ref_ctr_offset is attached), and the arguments as the compiler wrote them ("-4@%edi 8@-8(%rbp)").
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"

namespace tracer::symbols {

/// One argument of a USDT probe, as its note's text gives it: "SIZE@OPERAND", the size negative
/// for a signed value ("-4@%edi", "8@-8(%rbp)", "4@$5", "8@foo(%rip)").
struct UsdtArg {
  int size = 0;  // bytes: 1, 2, 4 or 8
  bool is_signed = false;
  std::string operand{};  // "%edi", "-8(%rbp)", "$5"
  /// What the operand is, decoded (x86-64): a register's value, a constant, or the `size` bytes
  /// of user memory at a register plus a displacement. kUnsupported: another form (an index
  /// register, a symbol, %ah..%dh), listed but not readable.
  enum class Kind : std::uint8_t { kUnsupported, kRegister, kConstant, kMemory };
  Kind kind = Kind::kUnsupported;
  /// kRegister, kMemory (the base): the register as pt_regs and tracefs name it ("di", "r8";
  /// %rip-relative operands name a symbol and stay kUnsupported).
  std::string reg{};
  /// kConstant: the value; kMemory: the displacement.
  std::int64_t value = 0;
};

/// The pt_regs name of an x86-64 register of any width ("edi", "dil", "r8d" -> "di", "r8");
/// empty for one that is not a whole register's low part (%ah) or unknown.
[[nodiscard]] std::string usdt_register(std::string_view name);

/// One call site of a USDT probe.
struct UsdtSite {
  std::string provider{}, name{};
  std::uint64_t address = 0;           // link-time (adjusted for .stapsdt.base as libbpf does)
  std::uint64_t file_offset = 0;       // where the uprobe goes
  std::uint64_t semaphore = 0;         // link-time address of its semaphore (0: none)
  std::uint64_t semaphore_offset = 0;  // its file offset: the uprobe's ref_ctr_offset
  std::string args{};                  // the note's argument text
  std::vector<UsdtArg> arg_list{};     // parsed (empty when the text is not understood)
};

/// Every USDT call site of `binary`, in note order.
/// @return the sites (empty: the file has no .note.stapsdt), or the errors of opening it.
[[nodiscard]] Result<std::vector<UsdtSite>> read_usdt(const std::filesystem::path& binary);

/// Parses a note's argument text ("-4@%edi 8@-8(%rbp)").
/// @return the arguments, or nullopt for a text of another form.
[[nodiscard]] std::optional<std::vector<UsdtArg>> parse_usdt_args(std::string_view text);

/// Where a usdt probe goes: every call site of provider:name in one file (provider and name may
/// hold '*' and '?'), each with its probe's semaphore.
struct UsdtTarget {
  std::filesystem::path path;
  std::vector<UsdtSite> sites;
};

/// The most call sites one usdt spec may name.
inline constexpr std::size_t kMaxUsdtSites = 256;

/// Parses "PATH:provider:name" (a path, a name in $PATH, or a library name found through
/// `pid`'s maps, as a uprobe's) and finds its call sites.
/// @return the target, or EINVAL for a spec of another form, ENOENT for a probe the file does not
/// have (its probes named in the hint), EINVAL for more than kMaxUsdtSites.
[[nodiscard]] Result<UsdtTarget> parse_usdt_spec(std::string_view spec, std::optional<pid_t> pid);

}  // namespace tracer::symbols
