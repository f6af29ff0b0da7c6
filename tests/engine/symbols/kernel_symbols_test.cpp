// KernelSymbols: the live /proc/kallsyms and fake files (modules, restricted addresses).
#include <fmt/format.h>
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

// The whole live table against an independent parse: the file is read through a buffer far
// smaller than it (5 MB here), so lines cross every read's end. Symbols of the kernel image
// only: modules and BPF programs ([bpf]) come and go while the suite runs.
TEST(SymbolsKernel, EveryLiveSymbolOfTheImageIsTheLastAliasAtItsAddress) {
  auto syms = KernelSymbols::load();
  ASSERT_TRUE(syms.has_value()) << syms.error().describe();
  if (syms->restricted())
    GTEST_SKIP() << "/proc/kallsyms hides addresses: " << syms->restricted_hint();
  std::ifstream in("/proc/kallsyms");
  std::map<std::uint64_t, std::string> last;  // the last alias in the file at each address
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string addr, type, sym, module;
    fields >> addr >> type >> sym >> module;
    if (!module.empty() || (type != "t" && type != "T" && type != "w" && type != "W"))
      continue;
    last[std::stoull(addr, nullptr, 16)] = sym;
  }
  ASSERT_GT(last.size(), 10000u);
  std::size_t wrong = 0;
  for (const auto& [addr, name] : last) {
    const KernelSymbol* s = syms->find(addr);
    if (s == nullptr || s->start != addr || s->name != name || !s->module.empty()) {
      if (++wrong <= 3)
        ADD_FAILURE() << std::hex << addr << " " << name << ": "
                      << (s == nullptr ? std::string("none") : std::string(s->name));
    }
  }
  EXPECT_EQ(wrong, 0u) << "of " << last.size();
}

// A made-up file of 200,000 lines in no order (so the sort and the alias rule run on names
// read across many buffers), with modules, a line longer than the reader's 64 KiB buffer (taken
// cut: its name is its first part) and a last line without its end of line.
TEST(SymbolsKernel, ALargeFileInNoOrderKeepsTheLastAliasAndEveryModule) {
  TempDir dir;
  std::string text;
  constexpr int kSyms = 100000;
  // Each address twice, the alias "b_" after "a_"; addresses go down, so nothing is in order.
  for (int i = kSyms - 1; i >= 0; --i) {
    const std::uint64_t addr = 0xffffffff81000000 + static_cast<std::uint64_t>(i) * 0x40;
    const std::string module = i % 1000 == 7 ? "\t[mod" + std::to_string(i / 1000) + "]" : "";
    text += fmt::format("{:x} t a_{}{}\n{:x} T b_{}{}\n", addr, i, module, addr, i, module);
  }
  const std::string long_name(70000, 'x');
  text += "ffffffffa0000000 t " + long_name + "\n";
  text += "ffffffffa0001000 t the_last_line";  // no end of line
  dir.write("kallsyms", text);
  auto syms = KernelSymbols::load(dir.path() / "kallsyms");
  ASSERT_TRUE(syms.has_value()) << syms.error().describe();
  EXPECT_EQ(syms->size(), static_cast<std::size_t>(kSyms) + 2);
  for (const int i : {0, 1, 7, 4999, 50007, kSyms - 1}) {
    const std::uint64_t addr = 0xffffffff81000000 + static_cast<std::uint64_t>(i) * 0x40;
    const KernelSymbol* s = syms->find(addr + 1);
    ASSERT_NE(s, nullptr) << i;
    EXPECT_EQ(s->start, addr);
    EXPECT_EQ(s->name, "b_" + std::to_string(i)) << "the last alias in the file";
    EXPECT_EQ(s->module, i % 1000 == 7 ? "mod" + std::to_string(i / 1000) : "") << i;
  }
  const KernelSymbol* cut = syms->find(0xffffffffa0000001);
  ASSERT_NE(cut, nullptr);
  EXPECT_TRUE(cut->name.starts_with("xxxx")) << "a line over the buffer is taken cut";
  EXPECT_LT(cut->name.size(), long_name.size());
  const KernelSymbol* tail = syms->find(0xffffffffa0001004);
  ASSERT_NE(tail, nullptr);
  EXPECT_EQ(tail->name, "the_last_line");
  // The names outlive the load's buffers and a copy outlives the original.
  const KernelSymbols copy = *syms;
  syms = KernelSymbols::load(dir.path() / "missing");
  ASSERT_NE(copy.find(0xffffffff81000041), nullptr);
  EXPECT_EQ(copy.find(0xffffffff81000041)->name, "b_1");
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
