// Symbols (tracer/symbols/symbols.hpp): kernel and user addresses to function names (the `symbols`
// layer).
//
//   KernelSymbols   /proc/kallsyms once, sorted, binary search; module names; kptr_restrict.
//   ElfSymbols      one ELF file's function symbols (.symtab, else .dynsym, or those of its
//                   separate debuginfo found by build-id / .gnu_debuglink), its PT_LOAD segments
//                   (file offset -> link-time address) and build-id; optional source lines and
//                   inlined frames from DWARF (libdw). Cached per build-id in a Symbolizer.
//   Symbolizer      per-process maps (MMAP/MMAP2 records, or /proc/PID/maps read once while the
//                   process lives, through /proc/PID/root for other mount namespaces), JIT maps
//                   (/tmp/perf-PID.map), and frames for callchains.
//
// Usage:
//   symbols::Symbolizer sym({});                       // kallsyms is loaded on first use
//   sym.on_mmap({.pid = 42, .start = ..., .len = ..., .pgoff = ..., .path = "/usr/bin/x"});
//   sym.note_process(42);                              // reads /proc/42/maps if no map is known
//   auto frames = sym.symbolize(42, ips);              // PERF_CONTEXT_* markers split the chain
//   fmt::print("{}\n", frames[0].symbol);              // "tracer_busy_spin"
//
// Nothing here is on the hot path of a run: a stage calls note_process() for a new key (once per
// process) and symbolizes rows when it renders a table.
#pragma once

#include <sys/types.h>
#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

#include <array>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::symbols {

/// One frame of a symbolized stack.
struct Frame {
  std::uint64_t addr = 0;    // the ip as sampled (a return address for all but the leaf)
  std::uint64_t rel = 0;     // the address in its module: link-time address in an ELF file
                             // (what perf script prints), the ip itself for the kernel
  std::string symbol{};      // function name; "" when unknown
  std::uint64_t offset = 0;  // addr - the symbol's start (when symbol is set)
  std::string module{};  // "[kernel.kallsyms]", a module name ("[ext4]"), a file path, "[unknown]"
  std::string file{};    // source file (with source lines enabled and DWARF present)
  std::uint32_t line = 0;
  bool inlined = false;  // an inlined call site inside the next (outer) frame of the same addr
  bool kernel = false;

  friend bool operator==(const Frame&, const Frame&) = default;
};

/// "symbol+0xoff" ("symbol" without the offset, and for inlined frames); "0xaddr" when the
/// symbol is unknown ("[unknown]" for address 0). The module is not part of the label.
[[nodiscard]] std::string frame_label(const Frame& f, bool with_offset = true);

// ---------------------------------------------------------------------------------------------
// Kernel

/// Views into the KernelSymbols they came from (valid while it, or a copy of it, lives).
struct KernelSymbol {
  std::uint64_t start = 0;
  std::string_view name{};
  std::string_view module{};  // "" for the kernel image, else the module ("ext4")
};

class KernelSymbols {
 public:
  /// Reads `path` (text lines "ADDR TYPE NAME [MODULE]"); function symbols (t/T/w/W) only.
  /// @return the table, or the errno of the open. A file whose addresses are all zero is not an
  /// error: restricted() says so.
  [[nodiscard]] static Result<KernelSymbols> load(
      const std::filesystem::path& path = "/proc/kallsyms");
  /// The symbol containing `addr` (the last one starting at or below it; nullptr below the
  /// first, or above _etext/the last module symbol by more than 1 MiB).
  [[nodiscard]] const KernelSymbol* find(std::uint64_t addr) const noexcept;
  /// Every address read as 0: kptr_restrict (or no CAP_SYSLOG) hides them.
  [[nodiscard]] bool restricted() const noexcept { return restricted_; }
  /// What to do when restricted(): names /proc/sys/kernel/kptr_restrict's value and the fix.
  [[nodiscard]] std::string restricted_hint() const;
  [[nodiscard]] std::size_t size() const noexcept { return syms_.size(); }
  /// The running kernel's build-id as hex, from its ELF notes (`notes`: /sys/kernel/notes, the
  /// GNU build-id note); empty when unreadable or absent.
  [[nodiscard]] static std::string build_id(
      const std::filesystem::path& notes = "/sys/kernel/notes");

 private:
  std::vector<KernelSymbol> syms_;    // sorted by start
  std::shared_ptr<const void> text_;  // the names: the symbols' views point into them
  bool restricted_ = false;
};

// ---------------------------------------------------------------------------------------------
// ELF files

struct SymbolizeOptions {
  bool source_lines = false;  // file:line (and inlined frames) from DWARF: slower on first use
  /// Roots searched for separate debuginfo: ROOT/.build-id/ab/cdef....debug, and for
  /// .gnu_debuglink: DIR/NAME, DIR/.debug/NAME, ROOT/DIR/NAME.
  std::vector<std::filesystem::path> debug_roots{"/usr/lib/debug"};
  std::filesystem::path proc_root = "/proc";
  std::filesystem::path kallsyms = "/proc/kallsyms";
  /// Records of another time (read_proc off): a copy of kallsyms made when they were recorded
  /// (perfdata::cached_kallsyms). Used instead of `kallsyms` when its kernel text begins where
  /// the records' did; empty: none.
  std::filesystem::path recorded_kallsyms{};
  /// Records of another time: their kernel's build-id (hex, HEADER_BUILD_ID's
  /// "[kernel.kallsyms]"). Without the copy above, `kallsyms` names their kernel frames only
  /// when this kernel's build-id (read from `kernel_notes`) is the same; empty: not known.
  std::string recorded_kernel_build_id{};
  std::filesystem::path kernel_notes = "/sys/kernel/notes";
  std::filesystem::path jit_map_dir = "/tmp";  // perf-PID.map
  /// Read /proc (PID/maps, PID/root): off for a recorded file, whose processes are not this
  /// machine's (maps come from its MMAP records only, files from this machine's paths).
  bool read_proc = true;
  /// With read_proc, the processes whose maps are kept at most: past it, the least recently
  /// used ones are forgotten (counted in Stats::processes_forgotten; a live one is read from
  /// /proc again when next named, an exited one's frames show as addresses), so a long profile
  /// of a machine that starts processes all day stays in bounded memory. Without read_proc
  /// (records of another time, whose maps exist nowhere else), every process is kept.
  std::size_t max_processes = 8192;
};

struct ElfSymbol {
  std::uint64_t start = 0;  // link-time address (st_value)
  std::uint64_t size = 0;
  std::string name{};
};

class ElfSymbols {
 public:
  /// Opens `path` (libelf), reads its build-id, PT_LOAD segments and function symbols; when the
  /// file has no .symtab (stripped: .dynsym is the fallback), or options ask for source lines and
  /// it has no DWARF, it also looks for separate debuginfo (build-id first, then .gnu_debuglink)
  /// and takes the .symtab and DWARF from there. C++ names are demangled.
  /// @return the table, or the errno naming the file; ENOEXEC for a non-ELF file.
  [[nodiscard]] static Result<std::shared_ptr<ElfSymbols>> open(const std::filesystem::path& path,
                                                                const SymbolizeOptions& options);
  ~ElfSymbols();
  ElfSymbols(const ElfSymbols&) = delete;
  ElfSymbols& operator=(const ElfSymbols&) = delete;

  /// The link-time address of file offset `offset` (through the PT_LOAD segment holding it).
  [[nodiscard]] std::optional<std::uint64_t> address_of_offset(std::uint64_t offset) const noexcept;
  /// The function containing link-time address `addr` ([start, start + size), or up to the next
  /// symbol for an unsized one), or nullptr.
  [[nodiscard]] const ElfSymbol* find(std::uint64_t addr) const noexcept;
  /// Frames for `addr`: the function (and, with source lines, the file:line and inlined callers,
  /// innermost first). Empty symbol when unknown. `module` and `addr` are left to the caller.
  [[nodiscard]] std::vector<Frame> frames(std::uint64_t addr) const;

  [[nodiscard]] const std::string& build_id() const noexcept { return build_id_; }  // hex
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }
  /// Where the symbols came from ("/usr/lib/debug/.build-id/..." for separate debuginfo).
  [[nodiscard]] const std::filesystem::path& symbols_path() const noexcept { return sym_path_; }
  /// Function symbols of the file (the "name@plt" entries synthesized for its PLT not counted).
  [[nodiscard]] std::size_t size() const noexcept { return syms_.size() - plt_symbols_; }
  [[nodiscard]] bool dynsym_only() const noexcept { return dynsym_only_; }

  struct Segment {
    std::uint64_t offset = 0, vaddr = 0, filesz = 0;
  };

 private:
  ElfSymbols() = default;
  struct DwarfLines;  // libdw state for source lines (opened lazily)
  std::filesystem::path path_, sym_path_;
  std::string build_id_;
  std::vector<Segment> segments_;
  std::vector<ElfSymbol> syms_;  // sorted by start
  std::size_t plt_symbols_ = 0;
  bool dynsym_only_ = false;
  bool source_lines_ = false;
  mutable std::unique_ptr<DwarfLines> dwarf_;
};

// ---------------------------------------------------------------------------------------------
// Processes

/// A file mapping of a process (an MMAP/MMAP2 record, or a line of /proc/PID/maps).
struct Mapping {
  std::uint32_t pid = 0;  // the process (tgid)
  std::uint64_t start = 0, len = 0, pgoff = 0;
  std::string path{};      // "//anon", "[vdso]", "[heap]", ... kept as written
  std::string build_id{};  // hex, from an MMAP2 record with PERF_RECORD_MISC_MMAP_BUILD_ID
  bool exec = true;        // PROT_EXEC (non-exec mappings are ignored for code addresses)
};

/// Not thread-safe: one per thread that symbolizes (a stage renders tables on one thread).
/// x86-64 user registers in DWARF numbering (rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip), what
/// a DWARF unwind starts from.
struct UserRegs {
  std::array<std::uint64_t, 17> dwarf{};

#if defined(__x86_64__)
  /// The perf_regs.h register (a sample_regs_user bit) of each DWARF register.
  static constexpr std::array<int, 17> kPerfOfDwarf = {
      PERF_REG_X86_AX,  PERF_REG_X86_DX,  PERF_REG_X86_CX,  PERF_REG_X86_BX,  PERF_REG_X86_SI,
      PERF_REG_X86_DI,  PERF_REG_X86_BP,  PERF_REG_X86_SP,  PERF_REG_X86_R8,  PERF_REG_X86_R9,
      PERF_REG_X86_R10, PERF_REG_X86_R11, PERF_REG_X86_R12, PERF_REG_X86_R13, PERF_REG_X86_R14,
      PERF_REG_X86_R15, PERF_REG_X86_IP};
#endif
  /// Whether samples with this sample_regs_user carry every register the CFI may name.
  [[nodiscard]] static constexpr bool unwindable(std::uint64_t mask) noexcept {
#if defined(__x86_64__)
    for (const int r : kPerfOfDwarf) {
      if ((mask & (std::uint64_t{1} << r)) == 0)
        return false;
    }
    return true;
#else
    (void)mask;
    return false;
#endif
  }
  /// From a sample's PERF_SAMPLE_REGS_USER values: `regs[i]` (i < regs.size) is the i-th
  /// register of `mask` in bit order, as the kernel writes them; missing ones are 0.
  template <typename Values>
  [[nodiscard]] static UserRegs from_perf(const Values& regs, std::uint64_t mask) noexcept {
    UserRegs out;
#if defined(__x86_64__)
    for (std::size_t d = 0; d < kPerfOfDwarf.size(); ++d) {
      const auto bit = std::uint64_t{1} << kPerfOfDwarf[d];
      const auto slot = static_cast<std::uint64_t>(std::popcount(mask & (bit - 1)));
      out.dwarf[d] = (mask & bit) != 0 && slot < regs.size ? regs[slot] : 0;
    }
#else
    (void)regs, (void)mask;
#endif
    return out;
  }
};

class Symbolizer {
 public:
  explicit Symbolizer(SymbolizeOptions options = {});
  ~Symbolizer();
  Symbolizer(const Symbolizer&) = delete;
  Symbolizer& operator=(const Symbolizer&) = delete;

  /// Task records, in time order where the caller has it: a new mapping replaces the parts of
  /// older ones of the same process it overlaps; a fork copies the parent's maps; an exec
  /// (COMM with PERF_RECORD_MISC_COMM_EXEC) drops the process's maps (the MMAP2 records of the
  /// new image follow). An exited process keeps its maps: its stacks still resolve.
  void on_mmap(const Mapping& m);
  void on_fork(std::uint32_t parent_pid, std::uint32_t child_pid);
  void on_exec(std::uint32_t pid);
  /// Reads /proc/PID/maps once if nothing is known of `pid` (cheap when known: a hash lookup).
  void note_process(std::uint32_t pid);
  /// Drops what is known of `pid` (its maps, unwinder, JIT map), for a caller that names every
  /// frame as its records arrive and has seen the process's last thread exit: a recording of
  /// short processes would otherwise keep every one of them.
  void forget_process(std::uint32_t pid);
  /// A PERF_RECORD_KSYMBOL: kernel text [addr, addr + len) named `name` (a BPF program's
  /// "bpf_prog_<tag>_<name>", a trampoline), or no longer (`unregister`). Its frames are named
  /// as perf names them, the symbol in a module of its own name, before /proc/kallsyms.
  void on_ksymbol(std::uint64_t addr, std::uint32_t len, std::string_view name, bool unregister);

  /// The frames of a callchain as the kernel wrote it (leaf first, PERF_CONTEXT_KERNEL/USER
  /// markers switching between kernel and user addresses; ips without a marker before them are
  /// taken as user addresses when below the kernel's half of the address space). Inlined frames
  /// add entries with source lines on.
  /// Every frame is named by the function containing its ip, as perf names it (a signal frame's
  /// return address is the first byte of __restore_rt); the source lines and inlined callers of
  /// a return address (every ip of a context after its first) are those of its call (ip - 1)
  /// while that lies in the same function.
  [[nodiscard]] std::vector<Frame> symbolize(std::uint32_t pid, std::span<const std::uint64_t> ips);
  [[nodiscard]] Frame symbolize_kernel(std::uint64_t ip);
  /// The user stack of `pid` unwound with DWARF CFI (.eh_frame/.debug_frame of its files) from
  /// its registers and a copy of its stack from rsp up (PERF_SAMPLE_STACK_USER): ips leaf first,
  /// at most out.size(), for binaries without frame pointers. Reads the process's maps like
  /// symbolize().
  /// @return how many ips were written (at least the sampled rip when out is not empty).
  std::size_t unwind_user(std::uint32_t pid,
                          const UserRegs& regs,
                          std::span<const std::byte> stack,
                          std::span<std::uint64_t> out);
  /// One user address (exact, not a return address); note_process() first if nothing is known
  /// of `pid`. Code in anonymous memory, or in no mapping, is looked up in perf-PID.map.
  [[nodiscard]] std::vector<Frame> symbolize_user(std::uint32_t pid, std::uint64_t ip);

  /// Starts reading the kernel symbols on another thread now (the kernel takes tens of ms to
  /// write /proc/kallsyms); the first kernel frame waits for them. For a caller that will need
  /// them and has other work meanwhile (a replay reading its file).
  void preload_kernel();
  /// Kernel symbols, loaded on first use (nullptr if /proc/kallsyms could not be read).
  [[nodiscard]] const KernelSymbols* kernel();
  /// Warnings worth a user's eye, once each (kptr_restrict, files that could not be opened).
  [[nodiscard]] std::vector<std::string> take_warnings();

  struct Stats {
    std::uint64_t lookups = 0, cache_hits = 0, files_opened = 0, unknown = 0;
    std::uint64_t processes_forgotten = 0;  // past SymbolizeOptions::max_processes
  };
  [[nodiscard]] const Stats& stats() const noexcept { return stats_; }

 private:
  struct [[gnu::visibility("hidden")]] Impl;  // not exported: the API is its owner's
  std::unique_ptr<Impl> impl_;
  Stats stats_;
};

}  // namespace tracer::symbols

#pragma GCC visibility pop
