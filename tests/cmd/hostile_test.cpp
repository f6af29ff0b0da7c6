// Hostile input (#27): what a root tool must never do whatever a recipe says. First: `tracer
// check` writes nothing, whatever output paths the recipe names.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"

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
