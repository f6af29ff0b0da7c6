// KernelSymbols: the live /proc/kallsyms and fake files (modules, restricted addresses).
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "support/temp_dir.hpp"
#include "tracer/symbols/symbols.hpp"

namespace tracer::symbols {
namespace {

using tracer::testing::TempDir;

/// The start of text symbol `name` in /proc/kallsyms, read line by line here (independently of
/// the parser under test), and every text symbol's name at that address.
struct KallsymsEntry {
  std::uint64_t start = 0;
  std::set<std::string> names_at_start;
};

KallsymsEntry read_kallsyms_entry(const std::string& name) {
  KallsymsEntry out;
  std::ifstream in("/proc/kallsyms");
  std::string line;
  std::multimap<std::uint64_t, std::string> text;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string addr, type, sym;
    fields >> addr >> type >> sym;
    if (type != "t" && type != "T" && type != "w" && type != "W")
      continue;
    const std::uint64_t a = std::stoull(addr, nullptr, 16);
    text.emplace(a, sym);
    if (sym == name)
      out.start = a;
  }
  const auto [first, last] = text.equal_range(out.start);
  for (auto it = first; it != last; ++it)
    out.names_at_start.insert(it->second);
  return out;
}

TEST(SymbolsKernel, LiveKallsymsFindsASystemCall) {
  auto syms = KernelSymbols::load();
  ASSERT_TRUE(syms.has_value()) << syms.error().describe();
  if (syms->restricted())
    GTEST_SKIP() << "/proc/kallsyms hides addresses: " << syms->restricted_hint();
  EXPECT_GT(syms->size(), 1000u);
  const auto entry = read_kallsyms_entry("__x64_sys_getppid");
  ASSERT_NE(entry.start, 0u) << "no __x64_sys_getppid in /proc/kallsyms";
  const KernelSymbol* s = syms->find(entry.start + 3);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->start, entry.start);
  EXPECT_TRUE(entry.names_at_start.contains(std::string(s->name))) << s->name;
  EXPECT_EQ(s->module, "");
  EXPECT_EQ(syms->find(0x1000), nullptr) << "below the first symbol";

  Symbolizer sym;
  const Frame f = sym.symbolize_kernel(entry.start + 3);
  EXPECT_TRUE(entry.names_at_start.contains(f.symbol)) << f.symbol;
  EXPECT_EQ(f.offset, 3u);
  EXPECT_EQ(f.module, "[kernel.kallsyms]");
  EXPECT_TRUE(f.kernel);
  EXPECT_EQ(f.addr, entry.start + 3);
  EXPECT_EQ(frame_label(f), f.symbol + "+0x3");
  EXPECT_TRUE(sym.take_warnings().empty());
}

TEST(SymbolsKernel, FakeFileWithModulesAndDataSymbols) {
  TempDir dir;
  dir.write("kallsyms",
            "ffffffffc0a00000 t ext4_fake_fn\t[ext4]\n"
            "ffffffff81000100 T fake_start\n"
            "ffffffff81000100 t fake_alias\n"
            "ffffffff81000200 t fake_second\n"
            "ffffffff81000300 D fake_data\n"
            "ffffffff81000400 W fake_weak\n");
  auto syms = KernelSymbols::load(dir.path() / "kallsyms");
  ASSERT_TRUE(syms.has_value()) << syms.error().describe();
  EXPECT_FALSE(syms->restricted());
  EXPECT_EQ(syms->size(), 4u) << "text symbols, one per address";
  ASSERT_NE(syms->find(0xffffffff81000150), nullptr);
  EXPECT_EQ(syms->find(0xffffffff81000150)->name, "fake_alias")
      << "the last alias in the file wins, as in perf (only it has a size there)";
  ASSERT_NE(syms->find(0xffffffff81000350), nullptr);
  EXPECT_EQ(syms->find(0xffffffff81000350)->name, "fake_second") << "data symbols are skipped";
  EXPECT_EQ(syms->find(0xffffffff81000400)->name, "fake_weak");
  EXPECT_EQ(syms->find(0xffffffff810000ff), nullptr);
  const KernelSymbol* mod = syms->find(0xffffffffc0a00010);
  ASSERT_NE(mod, nullptr);
  EXPECT_EQ(mod->name, "ext4_fake_fn");
  EXPECT_EQ(mod->module, "ext4");
  EXPECT_EQ(syms->find(0xffffffffc0a00000 + (2 << 20)), nullptr) << "2 MiB past the last symbol";

  Symbolizer sym({.kallsyms = dir.path() / "kallsyms"});
  const Frame f = sym.symbolize_kernel(0xffffffffc0a00010);
  EXPECT_EQ(f.symbol, "ext4_fake_fn");
  EXPECT_EQ(f.module, "[ext4]");
  EXPECT_EQ(f.offset, 0x10u);
  const Frame unknown = sym.symbolize_kernel(0xffffffff80000000);
  EXPECT_EQ(unknown.symbol, "");
  EXPECT_EQ(unknown.module, "[kernel.kallsyms]");
  EXPECT_EQ(frame_label(unknown), "0xffffffff80000000");
  EXPECT_EQ(sym.stats().unknown, 1u);
}

TEST(SymbolsKernel, AllZeroAddressesAreRestricted) {
  TempDir dir;
  dir.write("kallsyms",
            "0000000000000000 T _stext\n"
            "0000000000000000 t do_one_initcall\n"
            "0000000000000000 t ext4_fake_fn\t[ext4]\n");
  auto syms = KernelSymbols::load(dir.path() / "kallsyms");
  ASSERT_TRUE(syms.has_value()) << syms.error().describe();
  EXPECT_TRUE(syms->restricted());
  EXPECT_EQ(syms->size(), 3u);
  EXPECT_EQ(syms->find(0xffffffff81000000), nullptr);
  const std::string hint = syms->restricted_hint();
  EXPECT_NE(hint.find("sysctl"), std::string::npos) << hint;

  Symbolizer sym({.kallsyms = dir.path() / "kallsyms"});
  EXPECT_EQ(sym.symbolize_kernel(0xffffffff81000010).symbol, "");
  const auto warnings = sym.take_warnings();
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find(hint), std::string::npos) << warnings[0];
  (void)sym.symbolize_kernel(0xffffffff81000020);
  EXPECT_TRUE(sym.take_warnings().empty()) << "warned once";
}

TEST(SymbolsKernel, MissingOrMalformedFile) {
  TempDir dir;
  auto missing = KernelSymbols::load(dir.path() / "nope");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
  EXPECT_NE(missing.error().message.find("nope"), std::string::npos) << missing.error().message;
  dir.write("garbage", "this is not\nkallsyms at all\n");
  auto garbage = KernelSymbols::load(dir.path() / "garbage");
  ASSERT_FALSE(garbage.has_value());
  EXPECT_EQ(garbage.error().errno_value(), EINVAL);
}

}  // namespace
}  // namespace tracer::symbols
