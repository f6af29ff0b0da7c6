// ELF symbol -> file offset, checked against an independent computation (section headers
// instead of program headers) and against the kernel: a uprobe at the offset fires exactly once
// per call (see probe_backend_test.cpp for the PMU, dynamic_probes_test.cpp for tracefs).
#include "tracer/symbols/uprobe_target.hpp"

#include <fcntl.h>
#include <gelf.h>
#include <gtest/gtest.h>
#include <libelf.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "support/temp_dir.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;

/// st_value - sh_addr + sh_offset of the symbol's own section, from .symtab or .dynsym: the
/// method TOOLCHAIN.md used, which does not look at PT_LOAD at all.
std::optional<std::uint64_t> section_based_offset(const fs::path& file, const std::string& name) {
  ::elf_version(EV_CURRENT);
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;
  Elf* elf = ::elf_begin(fd, ELF_C_READ, nullptr);
  std::optional<std::uint64_t> out;
  for (Elf_Scn* scn = ::elf_nextscn(elf, nullptr); scn != nullptr && !out;
       scn = ::elf_nextscn(elf, scn)) {
    GElf_Shdr shdr;
    ::gelf_getshdr(scn, &shdr);
    if (shdr.sh_type != SHT_SYMTAB && shdr.sh_type != SHT_DYNSYM)
      continue;
    Elf_Data* data = ::elf_getdata(scn, nullptr);
    for (std::size_t i = 0; i < shdr.sh_size / shdr.sh_entsize; ++i) {
      GElf_Sym sym;
      ::gelf_getsym(data, static_cast<int>(i), &sym);
      const char* n = ::elf_strptr(elf, shdr.sh_link, sym.st_name);
      if (n == nullptr || name != n || sym.st_shndx == SHN_UNDEF)
        continue;
      GElf_Shdr home;
      ::gelf_getshdr(::elf_getscn(elf, sym.st_shndx), &home);
      out = sym.st_value - home.sh_addr + home.sh_offset;
      break;
    }
  }
  ::elf_end(elf);
  ::close(fd);
  return out;
}

TEST(ElfSymbols, PieOffsetMatchesSectionComputation) {
  auto sym = symbols::find_function(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(sym.has_value()) << sym.error().describe();
  EXPECT_EQ(sym->type, STT_FUNC);
  EXPECT_EQ(sym->bind, STB_GLOBAL);
  EXPECT_FALSE(sym->from_dynsym);
  EXPECT_GT(sym->size, 0U);
  const auto expected = section_based_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(expected.has_value());
  EXPECT_EQ(sym->file_offset, *expected);
  auto off = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(off.has_value()) << off.error().describe();
  EXPECT_EQ(*off, *expected);
}

TEST(ElfSymbols, NonPieOffsetIsNotTheVirtualAddress) {
  auto sym = symbols::find_function(TRACER_UPROBE_TARGET_NOPIE, "tracer_test_fn");
  ASSERT_TRUE(sym.has_value()) << sym.error().describe();
  // ET_EXEC links at 0x400000: the address and the file offset differ by the load address.
  EXPECT_GE(sym->value, 0x400000U);
  EXPECT_LT(sym->file_offset, sym->value);
  EXPECT_EQ(sym->file_offset, section_based_offset(TRACER_UPROBE_TARGET_NOPIE, "tracer_test_fn"));
}

TEST(ElfSymbols, SharedLibraryOffset) {
  auto off = symbols::symbol_file_offset(TRACER_TARGET_LIB, "tracer_lib_fn");
  ASSERT_TRUE(off.has_value()) << off.error().describe();
  EXPECT_EQ(*off, section_based_offset(TRACER_TARGET_LIB, "tracer_lib_fn"));
}

TEST(ElfSymbols, StrippedBinaryFallsBackToDynsym) {
  auto stripped = symbols::find_function(TRACER_UPROBE_TARGET_STRIPPED, "tracer_test_fn");
  ASSERT_TRUE(stripped.has_value()) << stripped.error().describe();
  EXPECT_TRUE(stripped->from_dynsym);
  auto full = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(full.has_value());
  EXPECT_EQ(stripped->file_offset, *full) << "strip keeps code where it was";
  // LOCAL functions (crtstuff's frame_dummy) live only in .symtab, which strip removed.
  EXPECT_TRUE(symbols::find_function(TRACER_UPROBE_TARGET, "frame_dummy").has_value());
  auto local = symbols::find_function(TRACER_UPROBE_TARGET_STRIPPED, "frame_dummy");
  ASSERT_FALSE(local.has_value());
  EXPECT_EQ(local.error().errno_value(), ENOENT);
}

TEST(ElfSymbols, GlobalWinsOverLocalAndLocalTwinsAreAmbiguous) {
  auto dup = symbols::find_function(TRACER_UPROBE_TARGET, "tracer_dup_fn");
  ASSERT_TRUE(dup.has_value()) << dup.error().describe();
  EXPECT_EQ(dup->bind, STB_GLOBAL) << "dup_local.c's static tracer_dup_fn must lose";
  auto twin = symbols::find_function(TRACER_UPROBE_TARGET, "tracer_local_twin");
  ASSERT_FALSE(twin.has_value());
  EXPECT_EQ(twin.error().errno_value(), ENOTUNIQ);
  EXPECT_NE(twin.error().message.find("defined 2 times"), std::string::npos)
      << twin.error().message;
}

TEST(ElfSymbols, PlusOffsetForms) {
  auto base = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(base.has_value());
  EXPECT_EQ(symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn+4"), *base + 4);
  EXPECT_EQ(symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn+0x4"), *base + 4);
  EXPECT_EQ(symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn+0"), *base);
  auto past = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn+0x100000");
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().errno_value(), EINVAL);
  EXPECT_NE(past.error().message.find("past the end"), std::string::npos);
  auto bad = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn+zz");
  ASSERT_FALSE(bad.has_value());
  EXPECT_EQ(bad.error().errno_value(), EINVAL);
  EXPECT_FALSE(symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "+4").has_value());

  auto spec = symbols::parse_symbol_spec("f+0x10");
  ASSERT_TRUE(spec.has_value());
  EXPECT_EQ(spec->name, "f");
  EXPECT_EQ(spec->offset, 16U);
}

TEST(ElfSymbols, UnknownSymbolSuggestsNearNames) {
  auto r = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fm");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), ENOENT);
  EXPECT_NE(r.error().message.find("tracer_test_fm"), std::string::npos);
  EXPECT_NE(r.error().message.find(TRACER_UPROBE_TARGET), std::string::npos);
  EXPECT_NE(r.error().hint.find("did you mean tracer_test_fn"), std::string::npos)
      << r.error().hint;
  // In a library with thousands of functions the hint stays at 5 names.
  auto libc = symbols::resolve_binary("libc", ::getpid());
  ASSERT_TRUE(libc.has_value()) << libc.error().describe();
  auto m = symbols::symbol_file_offset(*libc, "mallocx");
  ASSERT_FALSE(m.has_value());
  const auto& hint = m.error().hint;
  EXPECT_NE(hint.find("malloc"), std::string::npos) << hint;
  EXPECT_EQ(std::count(hint.begin(), hint.end(), ','), 4) << hint;
}

TEST(ElfSymbols, NonElfAndMissingFilesAreNamed) {
  testing::TempDir dir;
  dir.write("notelf.txt", "#!/bin/sh\necho hello\n");
  const auto path = dir.path() / "notelf.txt";
  auto r = symbols::symbol_file_offset(path, "main");
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().errno_value(), ENOEXEC);
  EXPECT_EQ(r.error().message, "elf: " + path.string() + " is not an ELF file");

  auto missing = symbols::symbol_file_offset(dir.path() / "nope", "main");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
  EXPECT_NE(missing.error().message.find((dir.path() / "nope").string()), std::string::npos);
}

TEST(ResolveBinary, LibcFromTheMapsOfAProcess) {
  auto p = symbols::resolve_binary("libc", ::getpid());
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  EXPECT_EQ(p->filename(), "libc.so.6");
  EXPECT_TRUE(p->is_absolute());
  EXPECT_TRUE(fs::exists(*p));
  // Exact basenames work too.
  auto exact = symbols::resolve_binary("libc.so.6", ::getpid());
  ASSERT_TRUE(exact.has_value());
  EXPECT_EQ(*exact, *p);
}

TEST(ResolveBinary, LibraryDirsWithoutAPid) {
  auto p = symbols::resolve_binary("libc", std::nullopt);
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  EXPECT_EQ(p->filename(), "libc.so.6") << "not the libc.so linker script of libc6-dev";
  EXPECT_EQ(p->parent_path(), "/lib/x86_64-linux-gnu");
}

TEST(ResolveBinary, ExecutablesFromPath) {
  auto p = symbols::resolve_binary("ls", std::nullopt);
  ASSERT_TRUE(p.has_value()) << p.error().describe();
  EXPECT_TRUE(fs::equivalent(*p, "/usr/bin/ls")) << *p;
}

TEST(ResolveBinary, PathsAndFailures) {
  auto abs = symbols::resolve_binary(TRACER_UPROBE_TARGET, std::nullopt);
  ASSERT_TRUE(abs.has_value());
  EXPECT_EQ(*abs, fs::path(TRACER_UPROBE_TARGET));
  auto gone = symbols::resolve_binary("/no/such/binary", std::nullopt);
  ASSERT_FALSE(gone.has_value());
  EXPECT_EQ(gone.error().errno_value(), ENOENT);
  auto unknown = symbols::resolve_binary("tracer_no_such_program_xyz", ::getpid());
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().errno_value(), ENOENT);
  EXPECT_NE(unknown.error().message.find("$PATH"), std::string::npos) << unknown.error().message;
  EXPECT_EQ(symbols::resolve_binary("", std::nullopt).error().errno_value(), EINVAL);
}

TEST(ParseUprobeSpec, EveryForm) {
  auto base = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(base.has_value());
  const std::string path = TRACER_UPROBE_TARGET;

  auto plain = symbols::parse_uprobe_spec(path + ":tracer_test_fn", std::nullopt);
  ASSERT_TRUE(plain.has_value()) << plain.error().describe();
  EXPECT_EQ(plain->path, fs::path(path));
  ASSERT_EQ(plain->sites.size(), 1U);
  EXPECT_EQ(plain->sites[0].offset, *base);
  EXPECT_EQ(plain->sites[0].symbol, "tracer_test_fn");

  auto plus = symbols::parse_uprobe_spec(path + ":tracer_test_fn+4", std::nullopt);
  ASSERT_TRUE(plus.has_value());
  EXPECT_EQ(plus->sites.at(0).offset, *base + 4);

  auto raw = symbols::parse_uprobe_spec(path + ":0x1234", std::nullopt);
  ASSERT_TRUE(raw.has_value());
  EXPECT_EQ(raw->sites.at(0).offset, 0x1234U);
  EXPECT_TRUE(raw->sites.at(0).symbol.empty());

  auto lib = symbols::parse_uprobe_spec("libc:getpid", ::getpid());
  ASSERT_TRUE(lib.has_value()) << lib.error().describe();
  EXPECT_EQ(lib->path.filename(), "libc.so.6");
  EXPECT_EQ(lib->sites.at(0).offset, symbols::symbol_file_offset(lib->path, "getpid"));

  for (const char* bad : {"nocolon", ":sym", "/bin/ls:", "/bin/ls:0xzz"}) {
    auto r = symbols::parse_uprobe_spec(bad, std::nullopt);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().errno_value(), EINVAL) << bad;
  }
  auto nosym = symbols::parse_uprobe_spec(path + ":no_such_fn", std::nullopt);
  ASSERT_FALSE(nosym.has_value());
  EXPECT_EQ(nosym.error().errno_value(), ENOENT);
}

}  // namespace
}  // namespace tracer::symbols
