// ElfSymbols on the fixture programs (tests/programs): .symtab, .dynsym only, shared library,
// separate debuginfo by build-id and by .gnu_debuglink, source lines and inlined frames.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>

#include "engine/symbols/target_process.hpp"
#include "support/temp_dir.hpp"
#include "tracer/symbols/symbols.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;
using tracer::testing::source_line_of;
using tracer::testing::TempDir;

/// The symbol as the core layer's uprobe lookup (a separate libelf reader) sees it.
symbols::FunctionSymbol expected(const char* binary, const char* name) {
  auto sym = symbols::find_function(binary, name);
  EXPECT_TRUE(sym.has_value()) << binary << ": " << (sym ? "" : sym.error().describe());
  return sym ? *sym : symbols::FunctionSymbol{};
}

std::shared_ptr<ElfSymbols> open_or_fail(const fs::path& path, const SymbolizeOptions& options) {
  auto elf = ElfSymbols::open(path, options);
  EXPECT_TRUE(elf.has_value()) << path << ": " << (elf ? "" : elf.error().describe());
  return elf ? *elf : nullptr;
}

/// find(start + 1) names the function; its start and size are the symbol table's.
void expect_resolves(const ElfSymbols& elf, const symbols::FunctionSymbol& want) {
  const ElfSymbol* s = elf.find(want.value + 1);
  ASSERT_NE(s, nullptr) << want.name << " in " << elf.path();
  EXPECT_EQ(s->name, want.name);
  EXPECT_EQ(s->start, want.value);
  if (want.size != 0) {
    EXPECT_EQ(s->size, want.size);
    const ElfSymbol* last = elf.find(want.value + want.size - 1);
    EXPECT_TRUE(last != nullptr && last->name == want.name);
  }
  const auto frames = elf.frames(want.value + 1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].symbol, want.name);
  EXPECT_EQ(frames[0].offset, 1u);
}

TEST(SymbolsElf, PieExecutable) {
  const auto want = expected(TRACER_UPROBE_TARGET, "tracer_test_fn");
  auto elf = open_or_fail(TRACER_UPROBE_TARGET, {});
  ASSERT_NE(elf, nullptr);
  EXPECT_FALSE(elf->dynsym_only());
  EXPECT_EQ(elf->symbols_path(), fs::path(TRACER_UPROBE_TARGET));
  EXPECT_EQ(elf->build_id().size(), 40u) << "a 20-byte GNU build-id as hex: " << elf->build_id();
  expect_resolves(*elf, want);
  // File offset -> link-time address through the PT_LOAD segments (core computed the other way).
  EXPECT_EQ(elf->address_of_offset(want.file_offset), want.value);
  EXPECT_EQ(elf->address_of_offset(want.file_offset + 5), want.value + 5);
  EXPECT_FALSE(elf->address_of_offset(std::uint64_t{1} << 40).has_value());
  EXPECT_EQ(elf->find(0), nullptr);
}

TEST(SymbolsElf, NonPieExecutable) {
  const auto want = expected(TRACER_UPROBE_TARGET_NOPIE, "tracer_test_fn");
  auto elf = open_or_fail(TRACER_UPROBE_TARGET_NOPIE, {});
  ASSERT_NE(elf, nullptr);
  ASSERT_NE(want.value, want.file_offset) << "ET_EXEC: addresses differ from file offsets";
  expect_resolves(*elf, want);
  EXPECT_EQ(elf->address_of_offset(want.file_offset), want.value);
}

TEST(SymbolsElf, StrippedUsesDynsym) {
  // The symbol's address comes from the unstripped original (the stripped copy's is the same).
  const auto want = expected(TRACER_UPROBE_TARGET, "tracer_test_fn");
  auto elf = open_or_fail(TRACER_UPROBE_TARGET_STRIPPED, {.debug_roots = {}});
  ASSERT_NE(elf, nullptr);
  EXPECT_TRUE(elf->dynsym_only());
  expect_resolves(*elf, want);
  // A static function is in .symtab only: the stripped copy must not name it.
  const auto local = expected(TRACER_UPROBE_TARGET, "frame_dummy");
  const ElfSymbol* s = elf->find(local.value + 1);
  EXPECT_TRUE(s == nullptr || s->name != "frame_dummy");
}

TEST(SymbolsElf, SharedLibraryAndOtherFixtures) {
  auto lib = open_or_fail(TRACER_TARGET_LIB, {});
  ASSERT_NE(lib, nullptr);
  expect_resolves(*lib, expected(TRACER_TARGET_LIB, "tracer_lib_fn"));
  const auto lib_fn = expected(TRACER_TARGET_LIB, "tracer_lib_fn");
  EXPECT_EQ(lib->address_of_offset(lib_fn.file_offset), lib_fn.value);
  auto busy = open_or_fail(TRACER_BUSY_LOOP, {});
  ASSERT_NE(busy, nullptr);
  expect_resolves(*busy, expected(TRACER_BUSY_LOOP, "tracer_busy_spin"));
  expect_resolves(*busy, expected(TRACER_BUSY_LOOP, "tracer_busy_outer"));
}

TEST(SymbolsElf, NotElfOrMissing) {
  TempDir dir;
  dir.write("text", "hello\n");
  auto text = ElfSymbols::open(dir.path() / "text", {});
  ASSERT_FALSE(text.has_value());
  EXPECT_EQ(text.error().errno_value(), ENOEXEC);
  auto missing = ElfSymbols::open(dir.path() / "missing", {});
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
  EXPECT_NE(missing.error().message.find("missing"), std::string::npos);
}

/// The build-id debug file split_debuginfo.sh wrote (named from `readelf -n`, so this also
/// checks build_id()).
fs::path build_id_debug_file(const ElfSymbols& elf) {
  const std::string& id = elf.build_id();
  if (id.size() < 3)
    return {};
  return fs::path(TRACER_DEBUG_ROOT) / ".build-id" / id.substr(0, 2) / (id.substr(2) + ".debug");
}

TEST(SymbolsElf, SeparateDebuginfoByBuildId) {
  const auto want = expected(TRACER_SYMBOLS_TARGET, "tracer_sym_static");
  auto elf = open_or_fail(TRACER_SYMBOLS_TARGET_SPLIT, {.debug_roots = {TRACER_DEBUG_ROOT}});
  ASSERT_NE(elf, nullptr);
  const fs::path debug = build_id_debug_file(*elf);
  ASSERT_TRUE(fs::exists(debug)) << debug;
  EXPECT_EQ(elf->symbols_path(), debug);
  EXPECT_FALSE(elf->dynsym_only());
  expect_resolves(*elf, want);
  expect_resolves(*elf, expected(TRACER_SYMBOLS_TARGET, "tracer_sym_outer"));
}

TEST(SymbolsElf, SeparateDebuginfoByDebuglink) {
  const auto want = expected(TRACER_SYMBOLS_TARGET, "tracer_sym_static");
  auto with_root = open_or_fail(TRACER_SYMBOLS_TARGET_SPLIT, {.debug_roots = {TRACER_DEBUG_ROOT}});
  ASSERT_NE(with_root, nullptr);
  const fs::path debug = build_id_debug_file(*with_root);
  // A copy of the stripped program alone: no debuginfo anywhere, no static function.
  TempDir dir;
  fs::copy_file(TRACER_SYMBOLS_TARGET_SPLIT, dir.path() / "prog");
  auto bare = open_or_fail(dir.path() / "prog", {.debug_roots = {}});
  ASSERT_NE(bare, nullptr);
  EXPECT_EQ(bare->symbols_path(), dir.path() / "prog");
  EXPECT_EQ(bare->size(), 0u) << "its .dynsym has imports only";
  const ElfSymbol* none = bare->find(want.value + 1);
  EXPECT_TRUE(none == nullptr || none->name != "tracer_sym_static");
  // The .gnu_debuglink name (the debug file's basename) in DIR/.debug/.
  fs::create_directories(dir.path() / ".debug");
  fs::copy_file(debug, dir.path() / ".debug" / debug.filename());
  auto linked = open_or_fail(dir.path() / "prog", {.debug_roots = {}});
  ASSERT_NE(linked, nullptr);
  EXPECT_EQ(linked->symbols_path(), dir.path() / ".debug" / debug.filename());
  expect_resolves(*linked, want);
}

/// The return address tracer_sym_leaf() stored lies in tracer_sym_inlined()'s body, inlined
/// into tracer_sym_outer(): the call instruction before it is at the SYMBOLS_TEST_LEAF_CALL
/// line, called from the SYMBOLS_TEST_INLINED_CALL line.
void expect_inlined_chain(const fs::path& binary, const SymbolizeOptions& options) {
  const auto outer = expected(TRACER_SYMBOLS_TARGET, "tracer_sym_outer");
  tracer::testing::TargetProcess run(false);
  run.finish();
  ASSERT_NE(run.outer, 0u);
  const std::uint64_t ret = run.ret - (run.outer - outer.value);  // link-time
  ASSERT_GT(ret, outer.value);
  auto elf = open_or_fail(binary, options);
  ASSERT_NE(elf, nullptr);
  const auto frames = elf->frames(ret - 1);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].symbol, "tracer_sym_inlined");
  EXPECT_TRUE(frames[0].inlined);
  EXPECT_EQ(fs::path(frames[0].file).filename(), "symbols_target.c");
  EXPECT_EQ(frames[0].line, source_line_of("SYMBOLS_TEST_LEAF_CALL"));
  EXPECT_EQ(frames[1].symbol, "tracer_sym_outer");
  EXPECT_FALSE(frames[1].inlined);
  EXPECT_EQ(frames[1].offset, ret - 1 - outer.value);
  EXPECT_EQ(fs::path(frames[1].file).filename(), "symbols_target.c");
  EXPECT_EQ(frames[1].line, source_line_of("SYMBOLS_TEST_INLINED_CALL"));

  // Its last instruction (the ret) is the function's own: one frame, a line of its body.
  ASSERT_GT(outer.size, 1u);
  const auto last = elf->frames(outer.value + outer.size - 1);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].symbol, "tracer_sym_outer");
  EXPECT_FALSE(last[0].inlined);
  EXPECT_GT(last[0].line, source_line_of("SYMBOLS_TEST_INLINED_CALL"));
  EXPECT_LE(last[0].line, source_line_of("SYMBOLS_TEST_INLINED_CALL") + 3);
}

TEST(SymbolsElf, SourceLinesAndInlinedFrames) {
  expect_inlined_chain(TRACER_SYMBOLS_TARGET, {.source_lines = true});
}

TEST(SymbolsElf, SourceLinesFromSeparateDebuginfo) {
  expect_inlined_chain(TRACER_SYMBOLS_TARGET_SPLIT,
                       {.source_lines = true, .debug_roots = {TRACER_DEBUG_ROOT}});
}

TEST(SymbolsElf, NoSourceLinesUnlessAsked) {
  const auto outer = expected(TRACER_SYMBOLS_TARGET, "tracer_sym_outer");
  auto elf = open_or_fail(TRACER_SYMBOLS_TARGET, {});
  ASSERT_NE(elf, nullptr);
  const auto frames = elf->frames(outer.value + 1);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].file, "");
  EXPECT_EQ(frames[0].line, 0u);
}

}  // namespace
}  // namespace tracer::symbols
