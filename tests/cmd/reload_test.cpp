// `tracer run` and SIGHUP: the recipe file is read again and applied while the run goes on. A
// probe is added, then the first one removed; each counts exactly the calls made while it
// existed (processes with known numbers of calls, told apart by pid), in the kernel and in user
// space, and a recipe that cannot be applied leaves the run as it was.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/cli.hpp"
#include "support/test_paths.hpp"

namespace tracer {
namespace {

using testing::exited_ok;
using testing::shell;
using testing::slurp;

using tracer::testing::kSyscaller;

std::string recipe_text(const std::string& placement, bool getppid, bool lseek, bool broken) {
  std::string text = "[recipe]\nname = \"reload\"\nplacement = \"" + placement + "\"\n";
  if (getppid)
    text += "[[probe]]\nname = \"getppid\"\ntracepoint = \"syscalls:sys_enter_getppid\"\n";
  if (lseek) {  // and a uprobe beside it (a probe-PMU event, system-wide)
    text += "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n";
    text += std::string("[[probe]]\nname = \"fn\"\nuprobe = \"") + TRACER_UPROBE_TARGET +
            ":tracer_test_fn\"\n";
  }
  if (broken)
    text += "[[probe]]\nname = \"typo\"\ntracepoint = \"syscalls:sys_enter_lseekk\"\n";
  return text + "[[stage]]\nuse = \"count\"\nby = [\"probe\", \"pid\"]\n";
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

/// Waits until `file` holds `what` `n` times (at most 60 s).
bool wait_for(const std::filesystem::path& file, const std::string& what, std::size_t n) {
  for (int i = 0; i < 6000; ++i) {
    if (occurrences(slurp(file), what) >= n)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

/// Runs the syscaller with `args`; its pid.
std::string calls(const std::string& args) {
  std::string pid = testing::run_syscaller(args);
  EXPECT_FALSE(pid.empty()) << "syscaller " << args;
  return pid;
}

std::string row(const std::string& probe, const std::string& pid, int count) {
  return R"("keys":{"probe":")" + probe + R"(","pid":)" + pid + R"(},"count":)" +
         std::to_string(count) + "}";
}

TEST(CliReload, SighupAppliesTheChangedRecipeAndEachProbeCountsWhileItExists) {
  for (const std::string placement : {"kernel", "user"}) {
    SCOPED_TRACE(placement);
    const auto recipe = testing::write_temp("reload_" + placement + ".toml",
                                            recipe_text(placement, true, false, false));
    const auto out = testing::write_temp("reload_" + placement + ".out", "");
    const auto err = testing::write_temp("reload_" + placement + ".err", "");
    const pid_t t =
        testing::spawn_tracer_ready({"run", recipe.string(), "--json", "-d", "60s"}, out, err);
    ASSERT_GT(t, 0) << slurp(err);
    const std::string a = calls("getppid 3000");
    // lseek added.
    std::ofstream(recipe) << recipe_text(placement, true, true, false);
    ::kill(t, SIGHUP);
    ASSERT_TRUE(wait_for(err, "tracer: reloaded", 1)) << slurp(err);
    const std::string b = calls("getppid 2000");
    const std::string c = calls("lseek 1500");
    const auto fn = shell(std::string(TRACER_UPROBE_TARGET) + " 500 & echo $!; wait");
    ASSERT_EQ(fn.exit_code, 0) << fn.err;
    const std::string g = fn.out.substr(0, fn.out.find('\n'));
    // A recipe with a typo: the run goes on as it was.
    std::ofstream(recipe) << recipe_text(placement, true, true, true);
    ::kill(t, SIGHUP);
    ASSERT_TRUE(wait_for(err, "the run goes on with the recipe it had", 1)) << slurp(err);
    const std::string d = calls("getppid 1200");
    // getppid removed.
    std::ofstream(recipe) << recipe_text(placement, false, true, false);
    ::kill(t, SIGHUP);
    ASSERT_TRUE(wait_for(err, "tracer: reloaded", 2)) << slurp(err);
    const std::string e = calls("getppid 1000");
    const std::string f = calls("lseek 700");
    ::kill(t, SIGINT);
    ASSERT_TRUE(exited_ok(t)) << slurp(err);

    const std::string text = slurp(out);
    const std::string log = slurp(err);
    EXPECT_NE(log.find("reloaded " + recipe.string() +
                       ": probes added: lseek, fn; kept: 1 probe, 1 pipeline"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("probes removed: getppid; kept: 2 probes, 1 pipeline"), std::string::npos)
        << log;
    EXPECT_NE(log.find("sys_enter_lseekk"), std::string::npos) << log;
    EXPECT_NE(text.find(row("getppid", a, 3000)), std::string::npos) << text;
    EXPECT_NE(text.find(row("getppid", b, 2000)), std::string::npos) << text;
    EXPECT_NE(text.find(row("getppid", d, 1200)), std::string::npos) << text;
    EXPECT_EQ(text.find(R"("pid":)" + e + "}"), std::string::npos) << text;  // after its removal
    EXPECT_NE(text.find(row("lseek", c, 1500)), std::string::npos) << text;
    EXPECT_NE(text.find(row("lseek", f, 700)), std::string::npos) << text;
    EXPECT_NE(text.find(row("fn", g, 500)), std::string::npos) << text;
    EXPECT_NE(text.find(R"("lost":0,)"), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tracer
