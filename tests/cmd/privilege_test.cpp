// Least privilege: tracer as an unprivileged user (setpriv) with only the capabilities it asks
// for. With CAP_BPF, CAP_PERFMON and CAP_DAC_READ_SEARCH a tracepoint recipe on a command and a
// `-p` recipe count what root counts; without tracefs access the error names the file, its mode
// and the ways out (once, however many tracepoints); without CAP_BPF it names CAP_BPF.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::shell;
using testing::slurp;

using tracer::testing::kSyscaller;

class LeastPrivilege : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::access("/usr/bin/setpriv", X_OK) != 0 || ::getpwnam("nobody") == nullptr)
      GTEST_SKIP() << "needs setpriv (util-linux) and the user nobody";
    fs::permissions(dir_.path(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
    dir_.mkdir("cache");
    const passwd* pw = ::getpwnam("nobody");
    ASSERT_EQ(::chown((dir_.path() / "cache").c_str(), pw->pw_uid, pw->pw_gid), 0);
    dir_.write("tp.toml",
               "[recipe]\nname = \"tp\"\n"
               "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
               "[[stage]]\nuse = \"count\"\nby = [\"probe\"]\n");
  }
  /// `args` of tracer run as nobody with only `caps` ("bpf,perfmon").
  testing::CliResult as_nobody(const std::string& caps, const std::string& args) {
    std::string plus;
    std::istringstream in(caps);
    for (std::string c; std::getline(in, c, ',');)
      plus += (plus.empty() ? "+" : ",+") + c;
    return shell("setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=" + plus +
                 " --ambient-caps=" + plus + " env XDG_CACHE_HOME=" +
                 (dir_.path() / "cache").string() + " " + TRACER_CLI_PATH + " " + args);
  }
  [[nodiscard]] std::string recipe() const { return (dir_.path() / "tp.toml").string(); }
  testing::TempDir dir_;
};

long long count_of(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"("keys":\{"probe":"lseek"\},"count":([0-9]+))")))
    return -1;
  return std::stoll(m[1]);
}

TEST_F(LeastPrivilege, BpfPerfmonAndDacReadSearchCountWhatRootCounts) {
  const std::string cmd = " --json -- " + kSyscaller + " lseek 3000";
  const auto root = testing::run_tracer("run " + recipe() + cmd);
  ASSERT_EQ(root.exit_code, 0) << root.err;
  const auto user = as_nobody("bpf,perfmon,dac_read_search", "run " + recipe() + cmd);
  ASSERT_EQ(user.exit_code, 0) << user.err;
  EXPECT_EQ(count_of(root.out), 3000) << root.out;
  EXPECT_EQ(count_of(user.out), count_of(root.out)) << user.out;

  // -p of a process of root's (the in-kernel program filters by its tgid: no ptrace needed).
  // The process waits for a go file, made once tracer says it is attached (--ready-fd).
  const auto go = dir_.path() / "go";
  const pid_t target =
      testing::spawn_to_file({"/bin/sh", "-c",
                              "while [ ! -e " + go.string() + " ]; do sleep 0.01; done; exec " +
                                  kSyscaller + " lseek 2000"},
                             dir_.path() / "target.out");
  testing::ReadyPipe ready;
  const auto out = dir_.path() / "p.out", err = dir_.path() / "p.err";
  const pid_t t = testing::spawn_to_file(
      {"/usr/bin/setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
       "--inh-caps=+bpf,+perfmon,+dac_read_search", "--ambient-caps=+bpf,+perfmon,+dac_read_search",
       "/usr/bin/env", "XDG_CACHE_HOME=" + (dir_.path() / "cache").string(), TRACER_CLI_PATH, "run",
       recipe(), "--json", "--ready-fd", ready.fd_arg(), "-p", std::to_string(target)},
      out, err);
  ready.close_writer();
  const bool attached = ready.wait();
  std::ofstream(go) << "go\n";
  EXPECT_TRUE(testing::exited_ok(target));
  EXPECT_TRUE(testing::exited_ok(t)) << slurp(err);
  ASSERT_TRUE(attached) << slurp(err);
  EXPECT_EQ(count_of(slurp(out)), 2000) << slurp(out) << slurp(err);
}

TEST_F(LeastPrivilege, WithoutTracefsAccessTheErrorNamesTheFileItsModeAndTheWaysOut) {
  const auto r =
      as_nobody("bpf,perfmon", "check " + std::string(TRACER_CONFIGS_DIR) + "/counters.toml");
  if (r.exit_code == 0)
    GTEST_SKIP() << "tracefs is readable by others on this machine: nothing to name";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("as uid 65534: Permission denied"));
  EXPECT_THAT(r.err, HasSubstr("CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON"));
  EXPECT_THAT(r.err, HasSubstr("mount -o remount,gid=GROUP"));
  std::smatch m;
  EXPECT_TRUE(std::regex_search(r.err, m, std::regex(R"(is d[rwx-]{9} root:root)"))) << r.err;
  // The same hint once, however many tracepoints the recipe names.
  std::size_t hints = 0;
  for (auto at = r.err.find("CAP_DAC_READ_SEARCH beside"); at != std::string::npos;
       at = r.err.find("CAP_DAC_READ_SEARCH beside", at + 1))
    ++hints;
  EXPECT_EQ(hints, 1U) << r.err;
  EXPECT_THAT(r.err, HasSubstr("hint: the same as above"));
}

TEST_F(LeastPrivilege, WithoutCapBpfTheErrorNamesIt) {
  const auto r =
      as_nobody("perfmon,dac_read_search", "run " + recipe() + " -- " + kSyscaller + " lseek 10");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("lacks CAP_BPF")) << r.err;
  // In user space the same recipe needs no BPF for its stages... but the delivery of a
  // command's tracepoints is BPF too: the error names the capability there as well.
  const auto u = as_nobody("perfmon,dac_read_search",
                           "run " + recipe() + " --placement user -- " + kSyscaller + " lseek 10");
  EXPECT_NE(u.exit_code, 0);
  EXPECT_THAT(u.err, HasSubstr("CAP_BPF")) << u.err;
}

}  // namespace
}  // namespace tracer
