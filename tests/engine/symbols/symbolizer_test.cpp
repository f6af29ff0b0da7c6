// Symbolizer: live processes (maps from /proc, a shared library, maps kept after exit),
// callchains with PERF_CONTEXT_* markers, synthetic MMAP/FORK/EXEC records, JIT maps.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "engine/symbols/target_process.hpp"
#include "support/temp_dir.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;
using tracer::testing::TargetProcess;
using tracer::testing::TempDir;

constexpr std::uint64_t kContextKernel = static_cast<std::uint64_t>(-128);
constexpr std::uint64_t kContextUser = static_cast<std::uint64_t>(-512);

symbols::FunctionSymbol expected_symbol(const char* binary, const char* name) {
  auto sym = symbols::find_function(binary, name);
  EXPECT_TRUE(sym.has_value()) << binary << ": " << (sym ? "" : sym.error().describe());
  return sym ? *sym : symbols::FunctionSymbol{};
}

/// Where `binary`'s file offset `offset` is mapped in `pid`, and the path as maps writes it,
/// read from /proc/PID/maps here (independently of the Symbolizer's parser).
struct Placed {
  std::uint64_t addr = 0;
  std::string path;
};

std::optional<Placed> runtime_address(pid_t pid, const fs::path& binary, std::uint64_t offset) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  const fs::path want = fs::canonical(binary);
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, off, dev, inode, path;
    in >> range >> perms >> off >> dev >> inode >> path;
    if (path.empty() || fs::path(path) != want)
      continue;
    const std::uint64_t start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
    const std::uint64_t end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
    const std::uint64_t pgoff = std::stoull(off, nullptr, 16);
    if (offset >= pgoff && offset - pgoff < end - start)
      return Placed{start + (offset - pgoff), path};
  }
  return std::nullopt;
}

/// A text symbol's start from /proc/kallsyms (0 when absent or hidden).
std::uint64_t kallsyms_start(const std::string& name) {
  std::ifstream in("/proc/kallsyms");
  std::string addr, type, sym;
  while (in >> addr >> type >> sym) {
    std::string rest;
    std::getline(in, rest);
    if (sym == name && (type == "T" || type == "t"))
      return std::stoull(addr, nullptr, 16);
  }
  return 0;
}

TEST(SymbolsSymbolizer, LiveProcessSharedLibrary) {
  TargetProcess target(true);
  ASSERT_GT(target.pid(), 0);
  const auto lib_fn = expected_symbol(TRACER_TARGET_LIB, "tracer_lib_fn");
  const auto placed = runtime_address(target.pid(), TRACER_TARGET_LIB, lib_fn.file_offset);
  ASSERT_TRUE(placed.has_value()) << "libtracer_target.so is not mapped by the target";
  EXPECT_EQ(placed->addr, target.lib) << "the program's own &tracer_lib_fn";

  Symbolizer sym;
  sym.note_process(static_cast<std::uint32_t>(target.pid()));
  const auto frames =
      sym.symbolize_user(static_cast<std::uint32_t>(target.pid()), placed->addr + 2);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "tracer_lib_fn");
  EXPECT_EQ(frames[0].offset, 2u);
  EXPECT_EQ(frames[0].module, placed->path);
  EXPECT_EQ(frames[0].addr, placed->addr + 2);
  EXPECT_FALSE(frames[0].kernel);
  EXPECT_EQ(frame_label(frames[0]), "tracer_lib_fn+0x2");
  EXPECT_EQ(frame_label(frames[0], false), "tracer_lib_fn");

  // The PIE executable itself (loaded at a bias the process chose).
  const auto outer = expected_symbol(TRACER_SYMBOLS_TARGET, "tracer_sym_outer");
  const auto exe = runtime_address(target.pid(), TRACER_SYMBOLS_TARGET, outer.file_offset);
  ASSERT_TRUE(exe.has_value());
  EXPECT_EQ(exe->addr, target.outer);
  const auto in_exe = sym.symbolize_user(static_cast<std::uint32_t>(target.pid()), exe->addr + 4);
  ASSERT_EQ(in_exe.size(), 1u);
  EXPECT_EQ(in_exe[0].symbol, "tracer_sym_outer");
  EXPECT_EQ(in_exe[0].offset, 4u);
  EXPECT_EQ(in_exe[0].module, exe->path);
  EXPECT_EQ(sym.stats().files_opened, 2u);
  EXPECT_EQ(sym.stats().lookups, 2u);

  // Again: from the cache, no new file.
  const auto again = sym.symbolize_user(static_cast<std::uint32_t>(target.pid()), exe->addr + 4);
  EXPECT_EQ(again, in_exe);
  EXPECT_EQ(sym.stats().cache_hits, 1u);
  EXPECT_EQ(sym.stats().files_opened, 2u);
  EXPECT_TRUE(sym.take_warnings().empty());
}

TEST(SymbolsSymbolizer, MapsSurviveTheProcessExit) {
  TargetProcess target(true);
  ASSERT_GT(target.pid(), 0);
  const auto pid = static_cast<std::uint32_t>(target.pid());
  Symbolizer sym;
  sym.note_process(pid);
  target.finish();  // exited and reaped: /proc/PID is gone
  ASSERT_FALSE(fs::exists("/proc/" + std::to_string(pid) + "/maps"));
  const auto frames = sym.symbolize_user(pid, target.outer + 1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "tracer_sym_outer");
  const auto lib = sym.symbolize_user(pid, target.lib);
  ASSERT_EQ(lib.size(), 1u);
  EXPECT_EQ(lib[0].symbol, "tracer_lib_fn");
}

TEST(SymbolsSymbolizer, CallchainWithContextMarkers) {
  TargetProcess target(true);
  ASSERT_GT(target.pid(), 0);
  const auto pid = static_cast<std::uint32_t>(target.pid());
  Symbolizer sym;
  const KernelSymbols* kernel = sym.kernel();
  ASSERT_NE(kernel, nullptr);
  const std::uint64_t kstart = kernel->restricted() ? 0 : kallsyms_start("__x64_sys_getppid");
  const std::uint64_t kaddr = kstart != 0 ? kstart + 3 : 0xffffffff81000003ULL;
  // The leaf frame (sample ip) is exact; the user frame after the marker is the interrupted ip.
  const std::array<std::uint64_t, 4> chain = {kContextKernel, kaddr, kContextUser,
                                              target.outer + 5};
  const auto frames = sym.symbolize(pid, chain);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_TRUE(frames[0].kernel);
  EXPECT_EQ(frames[0].addr, kaddr);
  EXPECT_EQ(frames[0].module, "[kernel.kallsyms]");
  if (kstart != 0) {
    EXPECT_EQ(frames[0].offset, 3u);
    EXPECT_EQ(kernel->find(kaddr)->name, frames[0].symbol);
  }
  EXPECT_FALSE(frames[1].kernel);
  EXPECT_EQ(frames[1].symbol, "tracer_sym_outer");
  EXPECT_EQ(frames[1].offset, 5u);
  EXPECT_EQ(frames[1].addr, target.outer + 5);

  // Without markers: the address decides; a return address after the first user frame is
  // looked up at ip - 1 but keeps its own offset.
  const std::array<std::uint64_t, 3> bare = {kaddr, target.outer + 5, target.ret};
  const auto unmarked = sym.symbolize(pid, bare);
  ASSERT_EQ(unmarked.size(), 3u);
  EXPECT_TRUE(unmarked[0].kernel);
  EXPECT_FALSE(unmarked[1].kernel);
  EXPECT_EQ(unmarked[1].symbol, "tracer_sym_outer");
  EXPECT_EQ(unmarked[2].symbol, "tracer_sym_outer");
  EXPECT_EQ(unmarked[2].offset, target.ret - target.outer);
}

TEST(SymbolsSymbolizer, InlinedFramesInCallchains) {
  TargetProcess target(true);
  ASSERT_GT(target.pid(), 0);
  const auto pid = static_cast<std::uint32_t>(target.pid());
  Symbolizer sym({.source_lines = true});
  // A leaf in the library (no inlining there), then the return address in the inlined body.
  const std::array<std::uint64_t, 3> chain = {kContextUser, target.lib + 1, target.ret};
  const auto frames = sym.symbolize(pid, chain);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].symbol, "tracer_lib_fn");
  EXPECT_FALSE(frames[0].inlined);
  EXPECT_EQ(fs::path(frames[0].file).filename(), "libtracer_target.c");
  EXPECT_EQ(frames[1].symbol, "tracer_sym_inlined");
  EXPECT_TRUE(frames[1].inlined);
  EXPECT_EQ(frames[1].addr, target.ret);
  EXPECT_EQ(frames[1].line, tracer::testing::source_line_of("SYMBOLS_TEST_LEAF_CALL"));
  EXPECT_EQ(frame_label(frames[1]), "tracer_sym_inlined");
  EXPECT_EQ(frames[2].symbol, "tracer_sym_outer");
  EXPECT_FALSE(frames[2].inlined);
  EXPECT_EQ(frames[2].addr, target.ret);
  EXPECT_EQ(frames[2].offset, target.ret - target.outer);
  EXPECT_EQ(frames[2].line, tracer::testing::source_line_of("SYMBOLS_TEST_INLINED_CALL"));
}

/// Synthetic records for pid 100, with an empty fake /proc: tracer_uprobe_target_nopie's file
/// mapped at kBase with pgoff 0 (so an address is kBase + file offset).
class SymbolsSymbolizerRecords : public ::testing::Test {
 protected:
  static constexpr std::uint64_t kBase = 0x10000000;
  static constexpr std::uint64_t kLen = 0x100000;

  void SetUp() override {
    fn_ = expected_symbol(TRACER_UPROBE_TARGET_NOPIE, "tracer_test_fn");
    ASSERT_LT(fn_.file_offset, kLen);
    sym_.on_mmap(
        {.pid = 100, .start = kBase, .len = kLen, .pgoff = 0, .path = TRACER_UPROBE_TARGET_NOPIE});
  }

  std::vector<Frame> at(std::uint32_t pid, std::uint64_t file_offset) {
    return sym_.symbolize_user(pid, kBase + file_offset);
  }

  TempDir proc_;
  symbols::FunctionSymbol fn_;
  Symbolizer sym_{{.proc_root = proc_.path(), .jit_map_dir = proc_.path()}};
};

TEST_F(SymbolsSymbolizerRecords, MmapResolvesThroughTheFileOffset) {
  const auto frames = at(100, fn_.file_offset + 1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "tracer_test_fn");
  EXPECT_EQ(frames[0].offset, 1u);
  EXPECT_EQ(frames[0].module, TRACER_UPROBE_TARGET_NOPIE);
  // Another pid knows nothing (and the fake /proc has no maps for it).
  const auto other = at(101, fn_.file_offset + 1);
  ASSERT_EQ(other.size(), 1u);
  EXPECT_EQ(other[0].symbol, "");
  EXPECT_EQ(other[0].module, "[unknown]");
  EXPECT_EQ(frame_label(other[0]), fmt::format("0x{:x}", kBase + fn_.file_offset + 1));
}

TEST_F(SymbolsSymbolizerRecords, OverlappingMmapReplacesTheOldPart) {
  const std::uint64_t page = fn_.file_offset & ~std::uint64_t{0xfff};
  // A mapping of another file over the page before tracer_test_fn's: the old mapping's tail
  // keeps its file position, so the function still resolves.
  sym_.on_mmap({.pid = 100,
                .start = kBase + page - 0x1000,
                .len = 0x1000,
                .pgoff = 0,
                .path = TRACER_TARGET_LIB});
  auto frames = at(100, fn_.file_offset + 1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "tracer_test_fn");
  EXPECT_EQ(at(100, page - 0x800)[0].module, TRACER_TARGET_LIB);
  // Over the function's own page: the new file answers there, the old one around it.
  sym_.on_mmap(
      {.pid = 100, .start = kBase + page, .len = 0x1000, .pgoff = 0, .path = TRACER_TARGET_LIB});
  EXPECT_EQ(at(100, fn_.file_offset + 1)[0].module, TRACER_TARGET_LIB);
  EXPECT_EQ(at(100, page + 0x1000)[0].module, TRACER_UPROBE_TARGET_NOPIE);
  // A data (non-exec) mapping removes code there.
  sym_.on_mmap(
      {.pid = 100, .start = kBase + page, .len = 0x1000, .path = "/dev/shm/x", .exec = false});
  frames = at(100, fn_.file_offset + 1);
  EXPECT_EQ(frames[0].symbol, "");
  EXPECT_EQ(frames[0].module, "[unknown]");
}

TEST_F(SymbolsSymbolizerRecords, ForkCopiesExecKeepsUntilMappedOver) {
  sym_.on_fork(100, 200);
  EXPECT_EQ(at(200, fn_.file_offset + 1)[0].symbol, "tracer_test_fn");
  sym_.on_exec(200);
  // As perf: the old image's maps stay (a sample on the way out of execve is the old image's)
  // until the new image maps over them.
  EXPECT_EQ(at(200, fn_.file_offset + 1)[0].symbol, "tracer_test_fn");
  sym_.on_mmap({.pid = 200, .start = kBase, .len = kLen, .path = "/nonexistent/new-image"});
  EXPECT_EQ(at(200, fn_.file_offset + 1)[0].symbol, "");
  EXPECT_EQ(at(200, fn_.file_offset + 1)[0].module, "/nonexistent/new-image");
  EXPECT_EQ(at(100, fn_.file_offset + 1)[0].symbol, "tracer_test_fn") << "the parent keeps its";
  sym_.on_mmap({.pid = 200, .start = kBase, .len = kLen, .path = TRACER_UPROBE_TARGET_NOPIE});
  EXPECT_EQ(at(200, fn_.file_offset + 1)[0].symbol, "tracer_test_fn");
  EXPECT_EQ(sym_.stats().files_opened, 1u) << "one file, shared by both processes";
}

TEST_F(SymbolsSymbolizerRecords, UnreadableFilesAndPseudoMappings) {
  sym_.on_mmap({.pid = 100, .start = 0x20000000, .len = 0x1000, .path = "/nonexistent/libx.so"});
  sym_.on_mmap({.pid = 100, .start = 0x30000000, .len = 0x1000, .path = "[vdso]"});
  auto missing = sym_.symbolize_user(100, 0x20000010);
  ASSERT_EQ(missing.size(), 1u);
  EXPECT_EQ(missing[0].symbol, "");
  EXPECT_EQ(missing[0].module, "/nonexistent/libx.so");
  (void)sym_.symbolize_user(100, 0x20000020);
  const auto warnings = sym_.take_warnings();
  ASSERT_EQ(warnings.size(), 1u) << "one warning per file";
  EXPECT_NE(warnings[0].find("/nonexistent/libx.so"), std::string::npos) << warnings[0];
  const auto vdso = sym_.symbolize_user(100, 0x30000010);
  EXPECT_EQ(vdso[0].symbol, "");
  EXPECT_EQ(vdso[0].module, "[vdso]");
  EXPECT_EQ(sym_.stats().unknown, 3u);
}

TEST_F(SymbolsSymbolizerRecords, BinaryWithoutSymbolsWarnsOnce) {
  // The stripped copy of tracer_symbols_target away from its debuginfo: no .symtab, and its
  // .dynsym has only imports.
  fs::copy_file(TRACER_SYMBOLS_TARGET_SPLIT, proc_.path() / "bare");
  const std::string bare = (proc_.path() / "bare").string();
  sym_.on_mmap({.pid = 100, .start = 0x40000000, .len = 0x2000, .path = bare});
  const auto frames = sym_.symbolize_user(100, 0x40001000);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "");
  EXPECT_EQ(frames[0].module, bare);
  (void)sym_.symbolize_user(100, 0x40001010);
  const auto warnings = sym_.take_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("no function symbols"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[0].find(bare), std::string::npos) << warnings[0];
}

TEST_F(SymbolsSymbolizerRecords, BuildIdOfARecordMustMatchTheFile) {
  sym_.on_mmap({.pid = 300,
                .start = kBase,
                .len = kLen,
                .path = TRACER_UPROBE_TARGET_NOPIE,
                .build_id = "0123456789abcdef0123456789abcdef01234567"});
  EXPECT_EQ(at(300, fn_.file_offset + 1)[0].symbol, "");
  const auto warnings = sym_.take_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("build-id"), std::string::npos) << warnings[0];
}

TEST(SymbolsSymbolizer, JitMapForAnonymousCode) {
  TempDir dir;
  dir.write("proc/4242/maps",
            "55d000000000-55d000001000 r--p 00000000 fd:01 1234   /usr/bin/fake\n"
            "7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n");
  dir.write("jit/perf-4242.map",
            "7f0000001000 100 LazyJitFn\n"
            "7f0000002000 40 Interp::loop(int) [jitted]\n"
            "500000 20 stub_outside_maps\n");
  Symbolizer sym({.proc_root = dir.path() / "proc", .jit_map_dir = dir.path() / "jit"});
  sym.note_process(4242);
  auto frames = sym.symbolize_user(4242, 0x7f0000001010);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, "LazyJitFn");
  EXPECT_EQ(frames[0].offset, 0x10u);
  EXPECT_EQ(frames[0].module, "[JIT] tid 4242");
  EXPECT_EQ(sym.symbolize_user(4242, 0x7f000000203f)[0].symbol, "Interp::loop(int) [jitted]");
  EXPECT_EQ(sym.symbolize_user(4242, 0x500004)[0].symbol, "stub_outside_maps");
  const auto gap = sym.symbolize_user(4242, 0x7f0000002040);
  EXPECT_EQ(gap[0].symbol, "") << "past the JIT symbol's size";
  EXPECT_EQ(gap[0].module, "[unknown]");
}

// A profile of a machine that starts processes all day: past max_processes, the least recently
// named processes are forgotten, so memory stays bounded; the recent ones keep their maps (and
// their exited ones still resolve). Without the cap the same run forgets nothing.
TEST(SymbolsSymbolizer, PastItsProcessCapTheLeastRecentlyUsedProcessesAreForgotten) {
  constexpr std::uint32_t kFirst = 1000, kCount = 200;
  constexpr std::size_t kCap = 16;
  TempDir dir;
  for (std::uint32_t pid = kFirst; pid < kFirst + kCount; ++pid) {
    dir.write(fmt::format("proc/{}/maps", pid),
              "7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n");
    dir.write(fmt::format("jit/perf-{}.map", pid), fmt::format("7f0000001000 100 fn_{}\n", pid));
  }
  Symbolizer capped(
      {.proc_root = dir.path() / "proc", .jit_map_dir = dir.path() / "jit", .max_processes = kCap});
  Symbolizer uncapped({.proc_root = dir.path() / "proc", .jit_map_dir = dir.path() / "jit"});
  for (std::uint32_t pid = kFirst; pid < kFirst + kCount; ++pid) {
    for (Symbolizer* sym : {&capped, &uncapped}) {
      const auto frames = sym->symbolize_user(pid, 0x7f0000001010);
      ASSERT_EQ(frames.size(), 1u);
      ASSERT_EQ(frames[0].symbol, fmt::format("fn_{}", pid));
    }
  }
  // Forgotten an eighth of the cap at a time: at most kCap are kept, at least kCap - kCap / 8.
  EXPECT_GE(capped.stats().processes_forgotten, kCount - kCap);
  EXPECT_LE(capped.stats().processes_forgotten, kCount - (kCap - kCap / 8));
  EXPECT_EQ(uncapped.stats().processes_forgotten, 0u);
  // Every process exits: /proc and the JIT maps are gone.
  fs::remove_all(dir.path() / "proc");
  fs::remove_all(dir.path() / "jit");
  for (std::uint32_t pid = kFirst + kCount - (kCap - kCap / 8); pid < kFirst + kCount; ++pid) {
    EXPECT_EQ(capped.symbolize_user(pid, 0x7f0000001010)[0].symbol, fmt::format("fn_{}", pid))
        << "a recent process keeps its maps after its exit";
  }
  EXPECT_EQ(capped.symbolize_user(kFirst, 0x7f0000001010)[0].symbol, "")
      << "the least recently used process was forgotten";
  EXPECT_EQ(uncapped.symbolize_user(kFirst, 0x7f0000001010)[0].symbol,
            fmt::format("fn_{}", kFirst));
}

// Records of another time (read_proc off) keep every process whatever the cap: their maps exist
// nowhere else, and a replay names the frames of every process in the file.
TEST(SymbolsSymbolizer, RecordsOfAnotherTimeKeepEveryProcessPastTheCap) {
  Symbolizer sym({.read_proc = false, .max_processes = 16});
  for (std::uint32_t pid = 1000; pid < 1200; ++pid) {
    sym.on_mmap({.pid = pid, .start = 0x400000, .len = 0x1000, .path = "/nonexistent/prog"});
    (void)sym.symbolize_user(pid, 0x400010);
  }
  EXPECT_EQ(sym.stats().processes_forgotten, 0u);
}

// /tmp is anyone's: a perf map is read only when it is a regular file owned by root or by the
// process's user (perf's rule), never through a link, and a FIFO planted there does not block.
TEST(SymbolsSymbolizer, PerfMapsOfAnotherUserOrNotRegularAreIgnored) {
  TempDir dir;
  const std::string maps = "7f0000000000-7f0000010000 r-xp 00000000 00:00 0 \n";
  for (const char* pid : {"4243", "4244", "4245", "4246"})
    dir.write(std::string("proc/") + pid + "/maps", maps);
  dir.write("jit/perf-4243.map", "7f0000001000 100 Planted\n");
  ASSERT_EQ(::chown((dir.path() / "jit/perf-4243.map").c_str(), 1234, 1234), 0);
  ASSERT_EQ(::mkfifo((dir.path() / "jit/perf-4244.map").c_str(), 0600), 0);
  dir.write("jit/real.map", "7f0000001000 100 ThroughALink\n");
  std::filesystem::create_symlink(dir.path() / "jit/real.map", dir.path() / "jit/perf-4245.map");
  // The process's own user owns its map: read.
  ASSERT_EQ(::chown((dir.path() / "proc/4246").c_str(), 1234, 1234), 0);
  dir.write("jit/perf-4246.map", "7f0000001000 100 OwnJit\n");
  ASSERT_EQ(::chown((dir.path() / "jit/perf-4246.map").c_str(), 1234, 1234), 0);
  Symbolizer sym({.proc_root = dir.path() / "proc", .jit_map_dir = dir.path() / "jit"});
  for (std::uint32_t pid : {4243U, 4244U, 4245U}) {
    sym.note_process(pid);
    EXPECT_EQ(sym.symbolize_user(pid, 0x7f0000001010)[0].symbol, "") << pid;
  }
  sym.note_process(4246);
  EXPECT_EQ(sym.symbolize_user(4246, 0x7f0000001010)[0].symbol, "OwnJit");
  const auto warnings = sym.take_warnings();
  ASSERT_EQ(warnings.size(), 3U);  // the other user's file, the FIFO, the link
  EXPECT_NE(warnings[0].find("owned by uid 1234"), std::string::npos) << warnings[0];
  EXPECT_NE(warnings[1].find("not a regular file"), std::string::npos) << warnings[1];
  EXPECT_NE(warnings[2].find("symbolic links"), std::string::npos) << warnings[2];
}

TEST(SymbolsSymbolizer, DemanglesCxxNames) {
  // This test program's own C++ function, through /proc/self/maps.
  Symbolizer sym;
  const auto pid = static_cast<std::uint32_t>(::getpid());
  const auto addr = reinterpret_cast<std::uint64_t>(&frame_label);
  const auto frames = sym.symbolize_user(pid, addr + 1);
  ASSERT_EQ(frames.size(), 1u);
  // std::string's ABI tag is part of the demangled name, as c++filt prints it.
  EXPECT_EQ(frames[0].symbol,
            "tracer::symbols::frame_label[abi:cxx11](tracer::symbols::Frame const&, bool)");
  EXPECT_EQ(frames[0].offset, 1u);
}

TEST(SymbolsSymbolizer, FrameLabel) {
  EXPECT_EQ(frame_label({.addr = 0x1234, .symbol = "main", .offset = 0x1a}), "main+0x1a");
  EXPECT_EQ(frame_label({.addr = 0x1234, .symbol = "main", .offset = 0x1a}, false), "main");
  EXPECT_EQ(frame_label({.addr = 0x1234, .module = "[unknown]"}), "0x1234");
  EXPECT_EQ(frame_label({}), "[unknown]");
}

}  // namespace
}  // namespace tracer::symbols

namespace tracer::symbols {
namespace {

// A recorded file's kernel frames: perf's copy of kallsyms from the recording (its build-id
// cache) names them when its kernel text begins where the records' did; a copy of another boot
// gives way to this machine's kallsyms, which must match too.
TEST(SymbolsSymbolizer, RecordedKallsymsCopyNamesTheFramesOfItsBoot) {
  testing::TempDir dir;
  const auto live = dir.path() / "kallsyms";
  const auto copy = dir.path() / "copy";
  std::ofstream(live) << "ffffffff81000000 T _text\nffffffff81001000 T live_fn\n";
  std::ofstream(copy) << "ffffffff82000000 T _text\nffffffff82001000 T copy_fn\n";
  const auto name = [&](std::uint64_t text, std::uint64_t ip) {
    Symbolizer sym({.kallsyms = live, .recorded_kallsyms = copy, .read_proc = false});
    sym.preload_kernel();
    sym.on_mmap({.pid = 0,
                 .start = text,
                 .len = 0x1000000,
                 .pgoff = text,
                 .path = "[kernel.kallsyms]_text"});
    return sym.symbolize_kernel(ip).symbol;
  };
  EXPECT_EQ(name(0xffffffff82000000, 0xffffffff82001010), "copy_fn");  // the copy's boot
  EXPECT_EQ(name(0xffffffff81000000, 0xffffffff81001010), "live_fn");  // this machine's boot
  EXPECT_EQ(name(0xffffffff83000000, 0xffffffff83001010), "");         // neither
}

// An address in the kernel's part of a callchain that no kernel symbol holds: a kernel address
// is the kernel's ([kernel.kallsyms]); a user address there (the kernel's walk went past its
// stack) is in no kernel map, [unknown] as perf script prints it.
TEST(SymbolsSymbolizer, UnknownKernelContextFramesNameTheirModuleAsPerfDoes) {
  testing::TempDir dir;
  const auto live = dir.path() / "kallsyms";
  std::ofstream(live) << "ffffffff81000000 T _text\nffffffff81001000 T live_fn\n";
  Symbolizer sym({.kallsyms = live});
  EXPECT_EQ(sym.symbolize_kernel(0xffffffff81001010).symbol, "live_fn");
  EXPECT_EQ(sym.symbolize_kernel(0xffffffff70000000).module, "[kernel.kallsyms]");
  const Frame user = sym.symbolize_kernel(0x555d8aab1be0);
  EXPECT_EQ(user.symbol, "");
  EXPECT_EQ(user.module, "[unknown]");
}

// In records with a kernel map (perf's "[kernel.kallsyms]_text" MMAP: _text and a length), a
// kernel address without a symbol is the kernel's inside that map and [unknown] outside it, as
// perf script prints a BPF program loaded after the recording began (no KSYMBOL record): met
// beside another tracer, where tracer printed "[unknown] ([kernel.kallsyms])" for its frames.
TEST(SymbolsSymbolizer, AKernelAddressOutsideTheRecordedKernelMapIsInNoModule) {
  testing::TempDir dir;
  const auto live = dir.path() / "kallsyms";
  std::ofstream(live) << "ffffffff81000000 T _text\nffffffff81001000 T live_fn\n";
  Symbolizer sym({.kallsyms = live, .read_proc = false});
  sym.on_mmap({.pid = 0,
               .start = 0xffffffff81000000,
               .len = 0x1276f48,
               .pgoff = 0xffffffff81000000,
               .path = "[kernel.kallsyms]_text"});
  EXPECT_EQ(sym.symbolize_kernel(0xffffffff81001010).symbol, "live_fn");
  const Frame past_text = sym.symbolize_kernel(0xffffffff82276f40);  // in the map, no symbol
  EXPECT_EQ(past_text.symbol, "");
  EXPECT_EQ(past_text.module, "[kernel.kallsyms]");
  for (const std::uint64_t ip :
       {std::uint64_t{0xffffffffc0025558}, std::uint64_t{0xffffffff82276f48},
        std::uint64_t{0xffffffff80000000}}) {
    const Frame outside = sym.symbolize_kernel(ip);
    EXPECT_EQ(outside.symbol, "") << std::hex << ip;
    EXPECT_EQ(outside.module, "[unknown]") << std::hex << ip;
  }
}

// The running kernel's build-id comes from its notes as perf reads it (perf buildid-list -k).
TEST(SymbolsSymbolizer, KernelBuildIdIsPerfs) {
  const std::string ours = KernelSymbols::build_id();
  ASSERT_FALSE(ours.empty()) << "/sys/kernel/notes has no GNU build-id note";
  EXPECT_EQ(ours.size(), 40U) << ours;
  if (::access("/usr/bin/perf", X_OK) == 0) {
    std::string theirs;
    if (FILE* p = ::popen("perf buildid-list -k 2>/dev/null", "r")) {
      char line[128] = {};
      if (std::fgets(line, sizeof(line), p) != nullptr)
        theirs = line;
      ::pclose(p);
    }
    while (!theirs.empty() && (theirs.back() == '\n' || theirs.back() == ' '))
      theirs.pop_back();
    EXPECT_EQ(ours, theirs);
  }
  EXPECT_EQ(KernelSymbols::build_id("/nonexistent/notes"), "");
}

// A recorded file's kernel frames without a cached kallsyms copy: this kernel's symbols name them
// only when the file's kernel build-id is this kernel's (a kernel of another build may put its
// text at the same address), as perf leaves them unknown; a file naming no build-id keeps the
// text-address check alone.
TEST(SymbolsSymbolizer, AnotherKernelsBuildIdLeavesKernelFramesUnnamed) {
  testing::TempDir dir;
  const auto live = dir.path() / "kallsyms";
  std::ofstream(live) << "ffffffff81000000 T _text\nffffffff81001000 T live_fn\n";
  const auto name = [&](const std::string& build_id) {
    Symbolizer sym({.kallsyms = live, .recorded_kernel_build_id = build_id, .read_proc = false});
    sym.on_mmap({.pid = 0,
                 .start = 0xffffffff81000000,
                 .len = 0x1000000,
                 .pgoff = 0xffffffff81000000,
                 .path = "[kernel.kallsyms]_text"});
    auto f = sym.symbolize_kernel(0xffffffff81001010).symbol;
    const auto warnings = sym.take_warnings();
    return std::make_pair(f, warnings.empty() ? std::string() : warnings.front());
  };
  const std::string running = KernelSymbols::build_id();
  ASSERT_FALSE(running.empty());
  EXPECT_EQ(name(running).first, "live_fn");
  EXPECT_EQ(name("").first, "live_fn");
  const auto [other, why] = name(std::string(40, '0'));
  EXPECT_EQ(other, "");
  EXPECT_NE(why.find("build-id " + std::string(40, '0')), std::string::npos) << why;
  EXPECT_NE(why.find(running), std::string::npos) << why;
}

}  // namespace
}  // namespace tracer::symbols
