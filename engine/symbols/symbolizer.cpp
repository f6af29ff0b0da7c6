// Symbolizer: per-process maps, ELF files cached by build-id or inode, JIT maps, callchains.
#include <fmt/format.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "symbols_internal.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/symbols/symbols.hpp"
#include "unwind.hpp"

namespace tracer::symbols {

namespace fs = std::filesystem;

namespace {

// Callchain context markers (include/uapi/linux/perf_event.h, enum perf_callchain_context):
// the kernel writes one before the ips of each context; anything at or above
// PERF_CONTEXT_MAX is a marker, never an address.
constexpr std::uint64_t kContextHv = static_cast<std::uint64_t>(-32);
constexpr std::uint64_t kContextKernel = static_cast<std::uint64_t>(-128);
constexpr std::uint64_t kContextUser = static_cast<std::uint64_t>(-512);
constexpr std::uint64_t kContextGuest = static_cast<std::uint64_t>(-2048);
constexpr std::uint64_t kContextGuestKernel = static_cast<std::uint64_t>(-2176);
constexpr std::uint64_t kContextGuestUser = static_cast<std::uint64_t>(-2560);
constexpr std::uint64_t kContextMax = static_cast<std::uint64_t>(-4095);
// x86_64's kernel half of the address space (4- and 5-level paging both start above it).
constexpr std::uint64_t kKernelHalf = 0xffff800000000000ULL;
using detail::kMaxMapsBytes;
// A perf map (/tmp/perf-PID.map) of a JIT can be large; the cap guards a runaway file.
constexpr std::size_t kMaxPerfMapBytes = std::size_t{256} << 20;
// Results kept per (file, address): a table of a few thousand rows revisits the same return
// addresses; the cache is dropped whole when it grows past this.
constexpr std::size_t kMaxCachedResults = std::size_t{1} << 18;
// ELF files held open by the caches (each its symbol table): past this many, the caches start
// again (the files the processes' maps hold stay; others are opened again when needed).
constexpr std::size_t kMaxCachedFiles = 4096;

constexpr std::string_view kKernelModule = "[kernel.kallsyms]";
constexpr std::string_view kUnknownModule = "[unknown]";

/// Whether a mapping's path names a file that can be opened (not "//anon", "[vdso]", a memfd or
/// shared anonymous memory).
bool is_file_path(std::string_view path) {
  return path.starts_with('/') && !path.starts_with("//anon") && !path.starts_with("/memfd:") &&
         !path.starts_with("/dev/zero") && !path.starts_with("/SYSV");
}

/// Anonymous memory, where JITs put code: no path, "//anon", "[anon:...]", memfd, heap, stack.
bool is_anon_path(std::string_view path) {
  return path.empty() || path.starts_with("//anon") || path.starts_with("[anon") ||
         path.starts_with("/memfd:") || path == "[heap]" || path == "[stack]";
}

std::string_view without_deleted(std::string_view path) {
  constexpr std::string_view kDeleted = " (deleted)";
  if (path.ends_with(kDeleted))
    path.remove_suffix(kDeleted.size());
  return path;
}

struct MapEntry {
  std::uint64_t end = 0;  // exclusive
  std::uint64_t pgoff = 0;
  std::string path{};
  std::string build_id{};
  // The file's symbols, looked up on the first address in the mapping (nullptr: unresolvable).
  std::shared_ptr<ElfSymbols> elf{};
  bool resolved = false;
};

using Maps = std::map<std::uint64_t, MapEntry>;  // by start; entries never overlap

/// Removes [start, end) from `maps`: entries inside go, entries across an edge are trimmed (a
/// tail keeps its file position: pgoff advances by what was cut).
void cut(Maps& maps, std::uint64_t start, std::uint64_t end) {
  auto it = maps.lower_bound(start);
  if (it != maps.begin()) {
    auto prev = std::prev(it);
    if (prev->second.end > start)
      it = prev;
  }
  while (it != maps.end() && it->first < end) {
    const std::uint64_t old_start = it->first;
    MapEntry old = std::move(it->second);
    it = maps.erase(it);
    if (old_start < start) {
      MapEntry head = old;
      head.end = start;
      maps.emplace(old_start, std::move(head));
    }
    if (old.end > end) {
      old.pgoff += end - old_start;
      maps.emplace(end, std::move(old));
    }
  }
}

struct ResultKey {
  const ElfSymbols* elf = nullptr;
  std::uint64_t addr = 0;
  bool return_address = false;
  friend bool operator==(const ResultKey&, const ResultKey&) = default;
};

struct ResultKeyHash {
  std::size_t operator()(const ResultKey& k) const noexcept {
    const std::size_t h = std::hash<const void*>()(k.elf);
    return h ^ (std::hash<std::uint64_t>()(k.addr * 2 + (k.return_address ? 1 : 0)) +
                0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2));
  }
};

}  // namespace

std::string frame_label(const Frame& f, bool with_offset) {
  if (f.symbol.empty())
    return f.addr != 0 ? fmt::format("0x{:x}", f.addr) : std::string(kUnknownModule);
  if (!with_offset || f.inlined)
    return f.symbol;
  return fmt::format("{}+0x{:x}", f.symbol, f.offset);
}

struct Symbolizer::Impl {
  struct Process {
    Maps maps;
    bool known = false;  // maps came from records, a fork or /proc (read at most once)
    std::optional<std::vector<detail::JitSymbol>> jit;  // perf-PID.map, read on first need
    std::optional<fs::path> root;  // PROC/PID/root when the process has another root
    std::uint64_t used = 0;        // the tick of its last use (the least recently used goes)
  };

  SymbolizeOptions options;
  Stats* stats = nullptr;
  std::unordered_map<std::uint32_t, Process> procs;
  std::uint64_t tick = 0;
  // ELF files by "dev:ino:size:mtime" of what was opened (nullptr: could not be read), and the
  // same objects by build-id (an MMAP2 record's build-id needs no open at all).
  std::unordered_map<std::string, std::shared_ptr<ElfSymbols>> files;
  std::unordered_map<std::string, std::shared_ptr<ElfSymbols>> files_by_path;  // replay
  std::unordered_map<std::string, std::shared_ptr<ElfSymbols>> by_build_id;
  std::unordered_map<ResultKey, std::vector<Frame>, ResultKeyHash> results;
  std::optional<KernelSymbols> kernel;
  bool kernel_tried = false;
  /// DWARF unwinders by process, made on its first unwind, dropped when its maps change.
  std::unordered_map<std::uint32_t, std::unique_ptr<detail::Unwinder>> unwinders;
  std::future<Result<KernelSymbols>> preload;  // preload_kernel()
  std::shared_ptr<ElfSymbols> vdso_elf;
  bool vdso_tried = false;
  /// Where the kernel's text began when the records were made (a recorded file's
  /// "[kernel.kallsyms]_text" MMAP, pgoff = _text): kallsyms names its addresses only if this
  /// machine's kernel text begins there too (the same kernel, the same boot's KASLR slide).
  std::optional<std::uint64_t> recorded_text;
  /// The recorded kernel map's range [start, end) (that MMAP's start and length): a kernel
  /// address with no symbol is the kernel's only inside it, as perf's kernel map decides.
  std::optional<std::pair<std::uint64_t, std::uint64_t>> recorded_kernel_map;
  std::vector<std::string> warnings;
  std::unordered_set<std::string> warned;
  /// Kernel text of PERF_RECORD_KSYMBOL records by start: its end and name (on_ksymbol).
  struct Ksym {
    std::uint64_t end = 0;
    std::string name;
  };
  std::map<std::uint64_t, Ksym> ksyms;

  void warn_once(const std::string& key, std::string text) {
    if (warned.insert(key).second)
      warnings.push_back(std::move(text));
  }

  /// `pid`'s entry, made if new. Live, past options.max_processes, the least recently used
  /// eighth is forgotten first (not `pid`): a profile of a machine that starts processes all day
  /// keeps what it names now, in bounded memory. Records of another time keep every process:
  /// their maps exist nowhere else, and the file's size bounds them.
  Process& process(std::uint32_t pid) {
    if (options.read_proc && !procs.contains(pid) &&
        procs.size() >= std::max<std::size_t>(options.max_processes, 1))
      forget_least_recent();
    Process& p = procs[pid];
    p.used = ++tick;
    return p;
  }

  void forget_least_recent() {
    std::vector<std::pair<std::uint64_t, std::uint32_t>> by_use;
    by_use.reserve(procs.size());
    for (const auto& [pid, p] : procs)
      by_use.emplace_back(p.used, pid);
    const std::size_t n = std::max<std::size_t>(by_use.size() / 8, 1);
    std::ranges::nth_element(by_use, by_use.begin() + static_cast<std::ptrdiff_t>(n - 1));
    for (std::size_t i = 0; i < n; ++i) {
      procs.erase(by_use[i].second);
      unwinders.erase(by_use[i].second);
    }
    stats->processes_forgotten += n;
  }

  /// Files past kMaxCachedFiles: the caches start again. The results go with them (they are
  /// keyed by the file object's address, which a new file may take).
  void bound_file_caches() {
    if (files.size() + by_build_id.size() + files_by_path.size() < kMaxCachedFiles)
      return;
    files.clear();
    by_build_id.clear();
    files_by_path.clear();
    results.clear();
  }

  void read_proc_maps(std::uint32_t pid, Process& p) {
    p.known = true;
    if (!options.read_proc)
      return;  // a recorded file's processes: their MMAP records only
    const fs::path dir = options.proc_root / std::to_string(pid);
    auto text = tracer::detail::read_text_file(dir / "maps", "symbols", kMaxMapsBytes);
    if (!text) {
      const int err = text.error().errno_value();
      if (err != ENOENT && err != ESRCH)
        warn_once("maps:" + std::to_string(pid), text.error().message);
      return;
    }
    for (const std::string_view line : tracer::detail::lines(*text)) {
      auto m = detail::parse_maps_line(line, pid);
      if (!m || !m->exec || m->len == 0)
        continue;
      cut(p.maps, m->start, m->start + m->len);
      p.maps.emplace(
          m->start,
          MapEntry{.end = m->start + m->len, .pgoff = m->pgoff, .path = std::move(m->path)});
    }
    // Files are opened through the process's root when it differs from ours (a container):
    // readlink gives "/" for a process in our mount namespace's root.
    std::error_code ec;
    const fs::path root = fs::read_symlink(dir / "root", ec);
    if (!ec && root != "/")
      p.root = dir / "root";
  }

  std::shared_ptr<ElfSymbols> open_file(const Process& p, const MapEntry& e) {
    const std::string path(without_deleted(e.path));
    fs::path open_path = path;
    std::error_code ec;
    if (p.root && fs::exists(*p.root / fs::path(path).relative_path(), ec))
      open_path = *p.root / fs::path(path).relative_path();
    // A replay's files do not change while it runs: a path is looked at once (a recording of
    // short processes maps the same libraries thousands of times). Live, a path is looked at
    // for each new mapping: a library upgraded since is another file.
    if (!options.read_proc) {
      if (auto it = files_by_path.find(open_path.native()); it != files_by_path.end())
        return it->second;
    }
    auto elf = open_file_at(open_path, path);
    if (!options.read_proc) {
      bound_file_caches();
      files_by_path.emplace(open_path.native(), elf);
    }
    return elf;
  }

  std::shared_ptr<ElfSymbols> open_file_at(const fs::path& open_path, const std::string& path) {
    struct stat st {};
    const std::string key = ::stat(open_path.c_str(), &st) == 0
                                ? fmt::format("{}:{}:{}:{}.{}", st.st_dev, st.st_ino, st.st_size,
                                              st.st_mtim.tv_sec, st.st_mtim.tv_nsec)
                                : "path:" + open_path.string();
    if (auto it = files.find(key); it != files.end())
      return it->second;
    bound_file_caches();
    auto opened = ElfSymbols::open(open_path, options);
    if (!opened) {
      warn_once("open:" + path, opened.error().describe());
      files.emplace(key, nullptr);
      return nullptr;
    }
    ++stats->files_opened;
    std::shared_ptr<ElfSymbols> elf = std::move(*opened);
    if (!elf->build_id().empty()) {
      // One object per build-id: the same library reached through two paths shares its table.
      auto [it, inserted] = by_build_id.try_emplace(elf->build_id(), elf);
      if (!inserted)
        elf = it->second;
    }
    if (elf->size() == 0)
      warn_once("nosyms:" + path,
                fmt::format("symbols: {} has no function symbols (stripped, without .dynsym "
                            "functions or separate debuginfo): its frames show as addresses",
                            path) +
                    "\n  hint: install its debug symbols (a -dbgsym/-debuginfo package puts them "
                    "under /usr/lib/debug/.build-id), or add their root to debug_roots");
    files.emplace(key, elf);
    return elf;
  }

  std::shared_ptr<ElfSymbols> resolve(const Process& p, MapEntry& e) {
    if (e.resolved)
      return e.elf;
    e.resolved = true;
    if (!e.build_id.empty()) {
      if (auto it = by_build_id.find(e.build_id); it != by_build_id.end()) {
        e.elf = it->second;
        return e.elf;
      }
    }
    if (e.path == "[vdso]") {
      e.elf = vdso();
      return e.elf;
    }
    if (!is_file_path(e.path))
      return nullptr;
    e.elf = open_file(p, e);
    if (e.elf && !e.build_id.empty() && !e.elf->build_id().empty() &&
        e.elf->build_id() != e.build_id) {
      warn_once("buildid:" + e.path,
                fmt::format("symbols: {} on disk has build-id {}, the process mapped {}: the "
                            "file changed since; its frames show as addresses",
                            e.path, e.elf->build_id(), e.build_id));
      e.elf = nullptr;
    }
    return e.elf;
  }

  /// The vDSO's symbols: the kernel maps one image into every process, ours included, so its
  /// bytes are copied once from this process (AT_SYSINFO_EHDR, its size from /proc/self/maps)
  /// into a file libelf reads (perf keeps a copy in its build-id cache the same way).
  std::shared_ptr<ElfSymbols> vdso() {
    if (vdso_tried)
      return vdso_elf;
    vdso_tried = true;
    const auto base = ::getauxval(AT_SYSINFO_EHDR);
    auto maps = tracer::detail::read_text_file("/proc/self/maps", "symbols", kMaxMapsBytes);
    if (base == 0 || !maps)
      return nullptr;
    std::uint64_t size = 0;
    for (const std::string_view line : tracer::detail::lines(*maps)) {
      auto m = detail::parse_maps_line(line, 0);
      if (m && m->start == base && line.ends_with("[vdso]"))
        size = m->len;
    }
    if (size == 0)
      return nullptr;
    // An anonymous memory file, never a name in /tmp: a predictable path there could be a
    // planted symlink that a root process would write through.
    const int fd = ::memfd_create("tracer-vdso", MFD_CLOEXEC);
    if (fd < 0)
      return nullptr;
    const auto* bytes = reinterpret_cast<const char*>(base);
    std::uint64_t done = 0;
    while (done < size) {
      const ssize_t n = ::write(fd, bytes + done, size - done);
      if (n <= 0)
        break;
      done += static_cast<std::uint64_t>(n);
    }
    if (done == size) {
      if (auto elf = ElfSymbols::open(fmt::format("/proc/self/fd/{}", fd), options))
        vdso_elf = std::move(*elf);
    }
    ::close(fd);
    return vdso_elf;
  }

  const detail::JitSymbol* find_jit(std::uint32_t pid, Process& p, std::uint64_t ip) {
    if (!p.jit) {
      auto text = detail::read_perf_map(options.jit_map_dir / fmt::format("perf-{}.map", pid),
                                        options.proc_root / std::to_string(pid), kMaxPerfMapBytes);
      if (!text && (text.error().errno_value() == EPERM || text.error().errno_value() == ELOOP))
        warn_once("perf-map " + std::to_string(pid), text.error().message);
      p.jit = text ? detail::parse_perf_map(*text) : std::vector<detail::JitSymbol>{};
    }
    auto it =
        std::upper_bound(p.jit->begin(), p.jit->end(), ip,
                         [](std::uint64_t a, const detail::JitSymbol& s) { return a < s.start; });
    if (it == p.jit->begin())
      return nullptr;
    --it;
    return ip - it->start < it->size ? &*it : nullptr;
  }

  Frame unknown(std::uint64_t ip, std::string module, bool is_kernel) {
    ++stats->unknown;
    return {.addr = ip, .rel = ip, .module = std::move(module), .kernel = is_kernel};
  }

  /// `return_address`: `ip` is where a call returns to, so the call itself (ip - 1) is looked
  /// up: a call as the last instruction of a function (noreturn callee) returns past its end.
  std::vector<Frame> user(std::uint32_t pid, std::uint64_t ip, bool return_address) {
    ++stats->lookups;
    Process& p = process(pid);
    if (!p.known)
      read_proc_maps(pid, p);
    MapEntry* entry = nullptr;
    std::uint64_t start = 0;
    if (auto it = p.maps.upper_bound(ip); it != p.maps.begin()) {
      --it;
      if (ip < it->second.end) {
        entry = &it->second;
        start = it->first;
      }
    }
    // A JIT's perf map names code in anonymous memory; live, also code mapped after the maps
    // were read. A recording's maps are complete: perf reads the map only for anonymous maps,
    // and a file of short processes would otherwise open a missing map for each.
    const bool jit_here = entry != nullptr ? is_anon_path(entry->path) : options.read_proc;
    if (entry == nullptr || jit_here) {
      if (const auto* jit = jit_here ? find_jit(pid, p, ip) : nullptr) {
        return {Frame{.addr = ip,
                      .rel = ip,
                      .symbol = jit->name,
                      .offset = ip - jit->start,
                      .module = fmt::format("[JIT] tid {}", pid)}};
      }
      Frame f = unknown(
          ip, entry != nullptr && !entry->path.empty() ? entry->path : std::string(kUnknownModule),
          false);
      if (entry != nullptr)
        f.rel = ip - start + entry->pgoff;  // perf's map_ip: the address in the mapped object
      return {f};
    }
    auto elf = resolve(p, *entry);
    const auto link = elf ? elf->address_of_offset(ip - start + entry->pgoff) : std::nullopt;
    if (!link) {
      Frame f = unknown(ip, entry->path, false);
      f.rel = ip - start + entry->pgoff;
      return {f};
    }
    const std::uint64_t lookup = return_address && *link != 0 ? *link - 1 : *link;
    const ResultKey key{elf.get(), *link, return_address};
    std::vector<Frame> out;
    if (auto it = results.find(key); it != results.end()) {
      ++stats->cache_hits;
      out = it->second;
    } else {
      // Names as perf gives them: the function containing the ip itself (a signal frame's
      // return address is __restore_rt's first byte). Source lines and inlined callers come from
      // the call (ip - 1) while it lies in the same function.
      const std::uint64_t at =
          lookup != *link && elf->find(lookup) != elf->find(*link) ? *link : lookup;
      out = elf->frames(at);
      for (auto& f : out) {
        if (!f.inlined && !f.symbol.empty())
          f.offset += *link - at;  // the offset of the sampled address, not of the call
      }
      if (results.size() >= kMaxCachedResults)
        results.clear();
      results.emplace(key, out);
    }
    for (auto& f : out) {
      f.addr = ip;
      f.rel = *link;
      f.module = entry->path;
      if (f.symbol.empty())
        ++stats->unknown;
    }
    return out;
  }

  /// The recorded copy of kallsyms (SymbolizeOptions::recorded_kallsyms) when it names the
  /// records' kernel text, else `kallsyms`.
  [[nodiscard]] bool use_recorded_kallsyms() const {
    return !options.read_proc && !options.recorded_kallsyms.empty();
  }
  [[nodiscard]] bool names_recorded_text(const KernelSymbols& k) const {
    if (!recorded_text)
      return false;
    const KernelSymbol* text = k.find(*recorded_text);
    return text != nullptr && text->start == *recorded_text;
  }

  const KernelSymbols* kernel_symbols() {
    if (!kernel_tried) {
      kernel_tried = true;
      bool copy = use_recorded_kallsyms();
      auto loaded = preload.valid()
                        ? preload.get()
                        : KernelSymbols::load(copy ? options.recorded_kallsyms : options.kallsyms);
      if (copy && (!loaded || !names_recorded_text(*loaded))) {
        loaded = KernelSymbols::load(options.kallsyms);  // the copy is of another boot
        copy = false;
      }
      if (!options.read_proc && !copy && !options.recorded_kernel_build_id.empty()) {
        // This kernel's symbols name the records' frames only if it is their kernel (another
        // build may load its text at the same address).
        const std::string running = KernelSymbols::build_id(options.kernel_notes);
        if (!running.empty() && running != options.recorded_kernel_build_id) {
          warn_once("kernel-map",
                    fmt::format("symbols: the records are of kernel build-id {}, this kernel's "
                                "is {}, and no copy of their kallsyms is cached: kernel frames "
                                "are left unnamed",
                                options.recorded_kernel_build_id, running));
          return nullptr;
        }
      }
      if (!loaded) {
        warn_once("kallsyms", loaded.error().describe());
      } else {
        kernel = std::move(*loaded);
        if (kernel->restricted())
          warn_once("kallsyms", fmt::format("symbols: {} lists no kernel addresses\n  hint: {}",
                                            options.kallsyms.string(), kernel->restricted_hint()));
      }
    }
    if (kernel && !options.read_proc) {
      // Records of another time: their kernel addresses are this kernel's only when its text
      // starts where theirs did.
      const std::uint64_t at = recorded_text.value_or(0);
      if (!names_recorded_text(*kernel)) {
        warn_once("kernel-map",
                  recorded_text
                      ? fmt::format("symbols: the records' kernel text began at {:#x}, this "
                                    "kernel's does not: kernel frames are left unnamed (another "
                                    "kernel or boot)",
                                    at)
                      : std::string("symbols: the records have no kernel map "
                                    "([kernel.kallsyms]_text): kernel frames are left unnamed"));
        return nullptr;
      }
    }
    return kernel ? &*kernel : nullptr;
  }

  /// The kernel symbol containing `ip` itself (a return address too: kernel frames have no
  /// lines, and perf names the ip's own symbol).
  Frame kernel_frame(std::uint64_t ip) {
    ++stats->lookups;
    if (auto it = ksyms.upper_bound(ip); it != ksyms.begin()) {
      const auto& [start, sym] = *std::prev(it);
      if (ip < sym.end)
        return {.addr = ip,
                .rel = ip,
                .symbol = sym.name,
                .offset = ip - start,
                .module = sym.name,
                .kernel = true};
    }
    const KernelSymbols* k = kernel_symbols();
    const KernelSymbol* s = k != nullptr ? k->find(ip) : nullptr;
    if (s == nullptr) {
      // An address no kernel map holds has the module [unknown] in perf, not the kernel: a
      // user-space address in the kernel's part of a callchain (the kernel's walk went past its
      // stack), or, in records with a kernel map, an address outside it (a BPF program loaded
      // after the recording began, with no KSYMBOL record of it).
      const bool in_kernel_map =
          recorded_kernel_map ? ip >= recorded_kernel_map->first && ip < recorded_kernel_map->second
                              : (ip >> 63) != 0;
      return unknown(ip, in_kernel_map ? std::string(kKernelModule) : std::string("[unknown]"),
                     true);
    }
    return {
        .addr = ip,
        .rel = ip,
        .symbol = std::string(s->name),
        .offset = ip - s->start,
        .module = s->module.empty() ? std::string(kKernelModule) : fmt::format("[{}]", s->module),
        .kernel = true};
  }
};

Symbolizer::Symbolizer(SymbolizeOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->stats = &stats_;
}

Symbolizer::~Symbolizer() = default;

void Symbolizer::on_ksymbol(std::uint64_t addr,
                            std::uint32_t len,
                            std::string_view name,
                            bool unregister) {
  auto& k = impl_->ksyms;
  if (unregister) {
    k.erase(addr);
    return;
  }
  const std::uint64_t end = addr + std::max<std::uint32_t>(len, 1);
  // A new symbol replaces those it overlaps (text freed and reused without its unregister).
  auto it = k.lower_bound(addr);
  if (it != k.begin() && std::prev(it)->second.end > addr)
    --it;
  while (it != k.end() && it->first < end)
    it = k.erase(it);
  // Guards against a hostile file's records: a name is at most the kernel's KSYM_NAME_LEN
  // (512), and at most 65,536 symbols are held (32 MiB of names at worst).
  constexpr std::size_t kMaxKsyms = 1 << 16;
  constexpr std::size_t kKsymNameLen = 512;
  if (k.size() < kMaxKsyms)
    k.emplace(addr, Impl::Ksym{.end = end, .name = std::string(name.substr(0, kKsymNameLen))});
}

std::size_t Symbolizer::unwind_user(std::uint32_t pid,
                                    const UserRegs& regs,
                                    std::span<const std::byte> stack,
                                    std::span<std::uint64_t> out) {
  auto& u = impl_->unwinders[pid];
  if (!u) {
    Impl::Process& p = impl_->process(pid);
    if (!p.known)
      impl_->read_proc_maps(pid, p);
    std::vector<detail::UnwindModule> modules;
    for (auto& [start, e] : p.maps) {
      if (!is_file_path(e.path))
        continue;
      auto elf = impl_->resolve(p, e);
      const auto link = elf ? elf->address_of_offset(e.pgoff) : std::nullopt;
      if (!link)
        continue;
      modules.push_back(
          {.path = elf->path().string(), .start = start, .end = e.end, .bias = start - *link});
    }
    u = std::make_unique<detail::Unwinder>(pid, std::move(modules));
  }
  return u->unwind(regs, stack, out);
}

void Symbolizer::on_mmap(const Mapping& m) {
  impl_->unwinders.erase(m.pid);
  if (m.path.starts_with("[kernel.kallsyms]")) {
    impl_->recorded_text = m.pgoff;  // perf's "[kernel.kallsyms]_text": pgoff is _text
    const std::uint64_t end = m.start + m.len < m.start ? ~std::uint64_t{0} : m.start + m.len;
    impl_->recorded_kernel_map = std::pair{m.start, end};
    return;
  }
  auto& p = impl_->process(m.pid);
  p.known = true;
  if (m.len == 0)
    return;
  const std::uint64_t end = m.start + m.len < m.start ? ~std::uint64_t{0} : m.start + m.len;
  cut(p.maps, m.start, end);
  // A data mapping only removes what it covers: code addresses never fall in it.
  if (m.exec)
    p.maps.emplace(m.start,
                   MapEntry{.end = end, .pgoff = m.pgoff, .path = m.path, .build_id = m.build_id});
}

void Symbolizer::on_fork(std::uint32_t parent_pid, std::uint32_t child_pid) {
  if (parent_pid == child_pid)
    return;  // a new thread shares its process's maps
  // The child first: making its entry may forget others and moves the table's iterators.
  auto& child = impl_->process(child_pid);
  child = {};
  child.known = true;
  child.used = impl_->tick;
  auto parent = impl_->procs.find(parent_pid);
  if (parent != impl_->procs.end()) {
    child.maps = parent->second.maps;
    child.root = parent->second.root;
  }
}

void Symbolizer::on_exec(std::uint32_t pid) {
  impl_->unwinders.erase(pid);
  // The old image's maps stay until the new image's MMAP records map over them, as perf keeps
  // them: a sample taken on the way out of execve still names the old image's frames. A JIT map
  // belongs to the old image: it is read again.
  auto it = impl_->procs.find(pid);
  if (it != impl_->procs.end())
    it->second.jit.reset();
}

void Symbolizer::forget_process(std::uint32_t pid) {
  impl_->unwinders.erase(pid);
  impl_->procs.erase(pid);
}

void Symbolizer::note_process(std::uint32_t pid) {
  auto& p = impl_->process(pid);
  if (!p.known)
    impl_->read_proc_maps(pid, p);
}

std::vector<Frame> Symbolizer::symbolize(std::uint32_t pid, std::span<const std::uint64_t> ips) {
  enum class Context { kNone, kKernel, kUser, kHv, kGuestKernel, kGuestUser };
  std::vector<Frame> out;
  out.reserve(ips.size());
  Context ctx = Context::kNone;
  // The first ip of a context is where it was interrupted (or the sample's ip); the ones after it
  // are return addresses.
  bool first = true;
  bool prev_kernel = false;
  for (const std::uint64_t ip : ips) {
    if (ip >= kContextMax) {
      switch (ip) {
        case kContextKernel:
          ctx = Context::kKernel;
          break;
        case kContextUser:
          ctx = Context::kUser;
          break;
        case kContextHv:
          ctx = Context::kHv;
          break;
        case kContextGuestKernel:
          ctx = Context::kGuestKernel;
          break;
        case kContextGuest:
        case kContextGuestUser:
          ctx = Context::kGuestUser;
          break;
        default:
          break;  // an unknown marker: keep the current context
      }
      first = true;
      continue;
    }
    switch (ctx) {
      case Context::kHv:
        out.push_back(impl_->unknown(ip, "[hypervisor]", true));
        break;
      case Context::kGuestKernel:
        out.push_back(impl_->unknown(ip, "[guest.kernel.kallsyms]", true));
        break;
      case Context::kGuestUser:
        out.push_back(impl_->unknown(ip, std::string(kUnknownModule), false));
        break;
      case Context::kNone:
      case Context::kKernel:
      case Context::kUser: {
        const bool is_kernel =
            ctx == Context::kKernel || (ctx == Context::kNone && ip >= kKernelHalf);
        const bool exact = first || is_kernel != prev_kernel;
        if (is_kernel) {
          out.push_back(impl_->kernel_frame(ip));
        } else {
          auto frames = impl_->user(pid, ip, !exact);
          std::move(frames.begin(), frames.end(), std::back_inserter(out));
        }
        prev_kernel = is_kernel;
        break;
      }
    }
    first = false;
  }
  return out;
}

Frame Symbolizer::symbolize_kernel(std::uint64_t ip) {
  return impl_->kernel_frame(ip);
}

std::vector<Frame> Symbolizer::symbolize_user(std::uint32_t pid, std::uint64_t ip) {
  return impl_->user(pid, ip, false);
}

void Symbolizer::preload_kernel() {
  if (!impl_->kernel_tried && !impl_->preload.valid()) {
    impl_->preload = std::async(std::launch::async, [path = impl_->use_recorded_kallsyms()
                                                                ? impl_->options.recorded_kallsyms
                                                                : impl_->options.kallsyms] {
      return KernelSymbols::load(path);
    });
  }
}

const KernelSymbols* Symbolizer::kernel() {
  return impl_->kernel_symbols();
}

std::vector<std::string> Symbolizer::take_warnings() {
  return std::exchange(impl_->warnings, {});
}

}  // namespace tracer::symbols
