// Hostile input (#27): what a root tool must never do whatever a recipe says. First: `tracer
// check` writes nothing, whatever output paths the recipe names.
#include <fcntl.h>
#include <sys/auxv.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

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

namespace tracer {
namespace {

std::string lseek_recipe(const std::string& extra_stage) {
  return "[recipe]\nname = \"hostile\"\n[[probe]]\nname = \"p\"\n"
         "tracepoint = \"syscalls:sys_enter_lseek\"\n" +
         extra_stage;
}

// Recipes that crashed the parser or the first event: a filter of 45,000 terms (a recursion as
// deep as the expression is long), a dotted key of 30,000 parts (toml++'s recursion), a recipe
// past 4 MiB (cut silently: a broken stage after 5 MB of comments passed with "0 pipelines").
// Each is an error at its position, exit 2, from check as from run.
TEST(Hostile, RecipesPastTheLimitsAreErrorsNotCrashes) {
  testing::TempDir dir;
  std::string terms = "fd == 1";
  for (int i = 0; i < 45000; ++i)
    terms += " || fd == 1";
  const auto long_filter = dir.path() / "long_filter.toml";
  std::ofstream(long_filter) << lseek_recipe("[[stage]]\nuse = \"filter\"\nexpr = \"" + terms +
                                             "\"\n[[stage]]\nuse = \"count\"\n");
  std::string key = "a";
  for (int i = 0; i < 30000; ++i)
    key += ".a";
  const auto dotted = dir.path() / "dotted.toml";
  std::ofstream(dotted) << lseek_recipe(key + " = 1\n");
  const auto big = dir.path() / "big.toml";
  {
    std::ofstream f(big);
    f << lseek_recipe("");
    const std::string comment = "# " + std::string(1000, 'x') + "\n";
    for (int i = 0; i < 5200; ++i)
      f << comment;
    f << "[[stage]]\nuse = \"nosuchstage\"\n";
  }
  for (const auto& [file, message] :
       {std::pair{long_filter, "an expression of more than 1024 terms"},
        std::pair{dotted, "a key of more than 65 dotted parts"},
        std::pair{big, "the recipe is larger than 4 MiB"}}) {
    SCOPED_TRACE(file.filename().string());
    const auto r = testing::run_tracer("check " + file.string());
    EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 500);
    EXPECT_NE(r.err.find(file.string() + ":"), std::string::npos) << r.err.substr(0, 500);
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err.substr(0, 500);
  }
}

// Command-line values that did nothing or ran something else: -p 0 and -p -5 traced the whole
// machine, -d 0s ran until Ctrl-C, a command that cannot run exited 0.
TEST(Hostile, ImpossibleTargetsAndDurationsFail) {
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << lseek_recipe("[[stage]]\nuse = \"count\"\n");
  for (const std::string args : {"-p 0", "-p -5", "-d 0s"}) {
    SCOPED_TRACE(args);
    const auto r = testing::run_tracer("run " + recipe.string() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
  }
  const auto missing = testing::run_tracer("run " + recipe.string() + " -- /nonexistent/cmd");
  EXPECT_NE(missing.exit_code, 0) << missing.err;
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

// Output that cannot be written is a failure (exit 1 with the reason), never exit 0: -o to a
// full device, --json to a full stdout, replay to a full stdout.
TEST(Hostile, WriteFailuresFailTheRun) {
  if (!fs::exists("/dev/full"))
    GTEST_SKIP() << "no /dev/full on this machine";
  testing::TempDir dir;
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << lseek_recipe("[[stage]]\nuse = \"count\"\n");
  const std::string work = std::string(TRACER_SYSCALLER_PATH) + " lseek 100";
  const auto to_file = testing::run_tracer("run " + recipe.string() + " -o /dev/full -- " + work);
  EXPECT_EQ(to_file.exit_code, 1) << to_file.err;
  EXPECT_NE(to_file.err.find("No space left on device"), std::string::npos) << to_file.err;
  const auto json = testing::shell(std::string(TRACER_CLI_PATH) + " run " + recipe.string() +
                                   " --json -- " + work + " > /dev/full");
  EXPECT_EQ(json.exit_code, 1) << json.err;
  const auto replay =
      testing::shell(std::string(TRACER_CLI_PATH) + " replay " + std::string(TRACER_TEST_DATA_DIR) +
                     "/golden/shelf.data > /dev/full");
  EXPECT_EQ(replay.exit_code, 1) << replay.err;
}

}  // namespace
}  // namespace tracer

namespace tracer {
namespace {

// The limit scanner follows TOML's strings: a multi-line string that ends with quotes of its own
// (""""x"""") does not make it lose track and miss a hostile dotted key after it; valid strings
// with dots, brackets and escapes are not taken for structure.
TEST(Hostile, TheLimitScannerFollowsTomlStrings) {
  testing::TempDir dir;
  std::string key = "k";
  for (int i = 0; i < 20000; ++i)
    key += ".k";
  const auto hidden = dir.path() / "hidden.toml";
  std::ofstream(hidden) << "a = \"\"\"x\"\"\"\"\n" << key << " = 1  # \"\n";
  const auto r = testing::run_tracer("check " + hidden.string());
  EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 300);
  EXPECT_NE(r.err.find("a key of more than 65 dotted parts"), std::string::npos)
      << r.err.substr(0, 300);
  std::string dots(200, '.');
  const auto valid = dir.path() / "valid.toml";
  std::ofstream(valid) << "[recipe]\nname = \"quoted\"\ndescription = \"\"\"" << dots
                       << " [[[[ {{{{ \\\"\"\"\"\n[[probe]]\nname = \"p\"\n"
                          "tracepoint = \"syscalls:sys_enter_lseek\"\nfilter = 'fd == 1'\n"
                          "[[stage]]\nuse = \"count\"\n";
  const auto ok = testing::run_tracer("check " + valid.string());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// A symbolic link planted at any path tracer writes (-o text, -o perf.data, replay -o, a
// stage's own `path`) is never followed: the run fails naming the link, and the file it points
// to is untouched. A file that exists is overwritten with mode 0600, whatever its old mode.
TEST(Hostile, OutputPathsNeverFollowALinkAndAre0600) {
  testing::TempDir dir;
  const auto victim = dir.path() / "victim";
  std::ofstream(victim) << "precious";
  const std::string work = std::string(TRACER_SYSCALLER_PATH) + " lseek 100";
  const auto plant = [&](const std::string& name) {
    const auto link = dir.path() / name;
    fs::create_symlink(victim, link);
    return link.string();
  };
  const auto recipe = dir.path() / "r.toml";
  std::ofstream(recipe) << lseek_recipe("[[stage]]\nuse = \"count\"\n");
  const auto text =
      testing::run_tracer("run " + recipe.string() + " -o " + plant("out.txt") + " -- " + work);
  EXPECT_EQ(text.exit_code, 2) << text.err;
  EXPECT_NE(text.err.find("symbolic link"), std::string::npos) << text.err;
  const auto data =
      testing::run_tracer("run " + recipe.string() + " -o " + plant("out.data") + " -- " + work);
  EXPECT_NE(data.exit_code, 0) << data.err;
  EXPECT_NE(data.err.find("symbolic link"), std::string::npos) << data.err;
  const auto replay = testing::run_tracer("replay " + std::string(TRACER_TEST_DATA_DIR) +
                                          "/golden/shelf.data -o " + plant("replay.txt"));
  EXPECT_EQ(replay.exit_code, 2) << replay.err;
  EXPECT_NE(replay.err.find("symbolic link"), std::string::npos) << replay.err;
  const auto staged = dir.path() / "staged.toml";
  std::ofstream(staged) << lseek_recipe("[[stage]]\nuse = \"jsonl\"\npath = \"" +
                                        plant("events.jsonl") + "\"\n");
  const auto stage = testing::run_tracer("run " + staged.string() + " -- " + work);
  EXPECT_NE(stage.exit_code, 0) << stage.err;
  EXPECT_NE(stage.err.find("symbolic link"), std::string::npos) << stage.err;
  EXPECT_EQ(testing::slurp(victim), "precious");
  // An existing world-readable file: overwritten, and 0600 afterwards.
  const auto old = dir.path() / "old.txt";
  std::ofstream(old) << std::string(10000, 'x');
  fs::permissions(old, fs::perms(0644));
  const auto ok =
      testing::run_tracer("run " + recipe.string() + " -o " + old.string() + " -- " + work);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  struct stat st {};
  ASSERT_EQ(::stat(old.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600U);
  EXPECT_EQ(testing::slurp(old).find("xxxx"), std::string::npos) << "the old content is gone";
}

// `check` refuses what `run` would refuse of the recipe itself, at the recipe's position: a
// sampling frequency above the kernel's limit, a uprobe offset past its file, a filter the
// kernel does not parse (check opens each probe's event once, disabled, and closes it).
TEST(Hostile, CheckRefusesWhatRunRefuses) {
  testing::TempDir dir;
  struct Case {
    const char* name;
    std::string probe;
    std::string position;  // line:column
    std::string message;
  };
  const std::vector<Case> cases = {
      {"freq", "software = \"cpu-clock\"\nfreq = 100000000\n",
       ":6:8:", "above this kernel's limit"},
      {"offset", "uprobe = \"/bin/true:0x7fffffffffff\"\n", ":5:10:", "past the end of /bin/true"},
      {"filter", "tracepoint = \"syscalls:sys_enter_lseek\"\nfilter = \"fd == 3 & offset\"\n",
       ":6:10:", "rejected"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const auto recipe = dir.path() / (std::string(c.name) + ".toml");
    std::ofstream(recipe) << "[recipe]\nname = \"x\"\n[[probe]]\nname = \"p\"\n"
                          << c.probe << "[[stage]]\nuse = \"count\"\n";
    const auto check = testing::run_tracer("check " + recipe.string());
    EXPECT_EQ(check.exit_code, 2) << check.err;
    EXPECT_NE(check.err.find(recipe.string() + c.position), std::string::npos) << check.err;
    EXPECT_NE(check.err.find(c.message), std::string::npos) << check.err;
    const auto run = testing::run_tracer("run " + recipe.string() + " -d 1s");
    EXPECT_NE(run.exit_code, 0) << run.err;
  }
}

// A stop is honoured on time when the stages are slower than the events: a 500-term filter over
// every system call while dd makes millions of them. The stages' queue is held to what they run
// in a quarter second (the rings wait in the kernel meanwhile, which counts their drops as
// lost), so SIGINT ends the run once that quarter second has run (the held rings are given up,
// counted) instead of running a 32 MiB
// forced flush through the filter (4.8 s after 3 s of running; SIGINT and SIGTERM ignored for
// minutes before the drains yielded). Nothing is silent: the held passes and what the stop gave
// up are reported.
TEST(Hostile, AStopIsHonouredWhenTheStagesAreSlowerThanTheEvents) {
  testing::TempDir dir;
  std::string terms = "id == 100000";
  for (int i = 1; i < 500; ++i)
    terms += " || id == " + std::to_string(100000 + i);
  const auto recipe = dir.path() / "slow.toml";
  std::ofstream(recipe) << "[recipe]\nname = \"slow\"\n[[probe]]\nname = \"sys\"\n"
                           "tracepoint = \"raw_syscalls:sys_enter\"\n[[stage]]\nuse = "
                           "\"filter\"\nexpr = \""
                        << terms << "\"\n[[stage]]\nuse = \"count\"\nby = [\"comm\"]\n";
  const pid_t load = ::fork();
  if (load == 0) {
    ::execl("/bin/dd", "dd", "if=/dev/zero", "of=/dev/null", "bs=1", "count=1000000000",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const auto out = dir.path() / "out", err = dir.path() / "err";
  const pid_t t = testing::spawn_to_file(
      {TRACER_CLI_PATH, "run", recipe.string(), "--placement", "user", "-v"}, out, err);
  ASSERT_TRUE(testing::wait_for_text(err, "tracer: rings:")) << slurp(err);
  std::this_thread::sleep_for(std::chrono::seconds(3));  // the stages fall behind meanwhile
  const auto sent = std::chrono::steady_clock::now();
  ::kill(t, SIGINT);
  int status = 0;
  ::waitpid(t, &status, 0);
  const double stop_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
  ::kill(load, SIGKILL);
  ::waitpid(load, nullptr, 0);
  const std::string e = slurp(err);
  ASSERT_TRUE(WIFEXITED(status)) << e;
  EXPECT_EQ(WEXITSTATUS(status), 0) << e;
  // One second of draining (rings, then the queue), and the scheduling of a loaded machine.
  EXPECT_LT(stop_s, 2.0) << e;
  EXPECT_NE(e.find("order.forced_flushes 0"), std::string::npos) << e;
  EXPECT_NE(e.find("the stages fell behind the events"), std::string::npos) << e;
  std::cout << "stop after SIGINT: " << stop_s << " s\n";
}

// Sizes a stream claims are not allocated before the bytes are there: a 14 KB pipe-mode stream
// whose TRACING_DATA record says 4 GB took 4.2 GB of RSS; now the replay stops at the stream's
// end with an error, its memory that of the bytes it read.
TEST(Hostile, ClaimedSizesInAPipeStreamAreNotAllocated) {
  testing::TempDir dir;
  const auto stream = dir.path() / "claim.data";
  {
    std::ofstream out(stream, std::ios::binary);
    const auto put = [&](auto v) { out.write(reinterpret_cast<const char*>(&v), sizeof v); };
    out.write("PERFILE2", 8);
    put(std::uint64_t{16});  // the pipe header's size
    // PERF_RECORD_HEADER_TRACING_DATA (66): header, then the size of the data that follows.
    put(std::uint32_t{66});
    put(std::uint16_t{0});
    put(std::uint16_t{16});
    put(std::uint32_t{0xF0000000});
    put(std::uint32_t{0});
    out << std::string(14000, '\0');
  }
  const auto out = dir.path() / "out", err = dir.path() / "err";
  // Through a pipe (a file on stdin would be mapped, not streamed); wait4 on the shell reports
  // the largest RSS of what it waited for.
  const std::string cmd = "cat " + stream.string() + " | " + TRACER_CLI_PATH + " replay - >" +
                          out.string() + " 2>" + err.string() + "; exit $?";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  int status = 0;
  rusage ru{};
  ASSERT_EQ(::wait4(pid, &status, 0, &ru), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_NE(WEXITSTATUS(status), 0) << testing::slurp(err);
  EXPECT_NE(testing::slurp(err).find(
                "HEADER_TRACING_DATA record of 16 bytes (+4026531840 bytes of data) is cut short"),
            std::string::npos)
      << testing::slurp(err);
  EXPECT_LT(ru.ru_maxrss, 200 * 1024) << "KiB of RSS for a 14 KB stream";
}

}  // namespace
}  // namespace tracer
