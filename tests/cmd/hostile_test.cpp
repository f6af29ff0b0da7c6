// Hostile input (#27): what a root tool must never do whatever a recipe says. First: `tracer
// check` writes nothing, whatever output paths the recipe names.
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "tracer/symbols/symbols.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using testing::slurp;

// check resolves a recipe and attaches nothing: its jsonl, csv, folded and flamegraph stages'
// paths are neither truncated, written, nor created (it used to open them for writing, the CSV
// header included: an untrusted recipe checked as root could clobber any file).
TEST(Hostile, CheckOpensNoOutputPath) {
  testing::TempDir dir;
  const auto keep = dir.path() / "precious";
  std::ofstream(keep) << "do not touch\n";
  struct stat before {};
  ASSERT_EQ(::stat(keep.c_str(), &before), 0);
  const auto fresh = dir.path() / "never-created.csv";
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << "[recipe]\nname = \"outputs\"\n[[probe]]\nname = \"p\"\n"
                           "tracepoint = \"syscalls:sys_enter_lseek\"\n"
                           "[[pipeline]]\nname = \"a\"\n[[pipeline.stage]]\nuse = \"jsonl\"\n"
                           "path = \"" +
                               keep.string() +
                               "\"\n[[pipeline]]\nname = \"b\"\n[[pipeline.stage]]\nuse = \"csv\"\n"
                               "path = \"" +
                               fresh.string() + "\"\n";
  const auto r = testing::run_tracer("check " + recipe.string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(slurp(keep), "do not touch\n");
  struct stat after {};
  ASSERT_EQ(::stat(keep.c_str(), &after), 0);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_FALSE(fs::exists(fresh));
  EXPECT_EQ(r.out.find("p,"), std::string::npos) << r.out;  // no CSV header on stdout either
  const auto plan = testing::run_tracer("check --plan " + recipe.string());
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(slurp(keep), "do not touch\n");
  EXPECT_FALSE(fs::exists(fresh));
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

// A [vdso] frame is named from a copy of the vDSO in an anonymous memory file: nothing is written
// at a predictable /tmp name (a symlink planted at the old tracer-vdso-<pid>.so is not followed:
// its target keeps its content).
TEST(Hostile, VdsoFramesWriteNoTemporaryFile) {
  testing::TempDir dir;
  const auto target = dir.path() / "victim";
  std::ofstream(target) << "victim\n";
  const auto planted =
      fs::temp_directory_path() / ("tracer-vdso-" + std::to_string(::getpid()) + ".so");
  std::error_code ec;
  fs::remove(planted, ec);
  fs::create_symlink(target, planted, ec);
  ASSERT_FALSE(ec) << ec.message();
  const auto base = ::getauxval(AT_SYSINFO_EHDR);
  ASSERT_NE(base, 0u);
  symbols::Symbolizer sym;
  sym.on_mmap({.pid = 4242, .start = base, .len = 0x2000, .path = "[vdso]"});
  const auto frames = sym.symbolize_user(4242, base + 0x10);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].module, "[vdso]");
  EXPECT_EQ(slurp(target), "victim\n");
  EXPECT_TRUE(fs::is_symlink(planted));
  fs::remove(planted, ec);
}

}  // namespace
}  // namespace tracer
