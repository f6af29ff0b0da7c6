// Golden outputs: `tracer replay` of a perf-recorded file (tests/data/golden/shelf.data: every
// event the shelf's non-BPF recipes use, recorded by perf record from a small workload) through
// each shelf recipe, compared byte for byte with tests/data/golden/<recipe>.expected. A
// refactor that changes what a recipe prints fails here. After an intended change, regenerate
// with TRACER_UPDATE_GOLDEN=1 and review the diff.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tracer/symbols/symbols.hpp"

namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(TRACER_TEST_DATA_DIR) / "golden";

std::string replay(const std::string& recipe, const std::string& extra) {
  const std::string cmd =
      std::string(TRACER_CLI_PATH) + " replay " + (kGolden / "shelf.data").string() + " " +
      (fs::path(TRACER_CONFIGS_DIR) / (recipe + ".toml")).string() + extra + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), p) != nullptr)
    out += buf.data();
  const int status = ::pclose(p);
  out += "exit " + std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + "\n";
  // The file's kernel is not this machine's: the warning names this kernel's build-id.
  if (const auto id = tracer::symbols::KernelSymbols::build_id(); !id.empty()) {
    for (auto at = out.find(id); at != std::string::npos; at = out.find(id, at))
      out.replace(at, id.size(), "@KERNEL_BUILD_ID@");
  }
  return out;
}

/// The expected text as this machine gives it: on a machine running the very kernel build the
/// file was recorded on, its build-id does not tell the kernels apart, and the file has no
/// kernel map to place its text: the warning is that one (frames are unnamed either way).
std::string expected_here(std::string want) {
  const std::string prefix = "tracer: warning: symbols: the records are of kernel build-id ";
  const auto at = want.find(prefix);
  if (at == std::string::npos)
    return want;
  const auto id_end = want.find(',', at + prefix.size());
  const auto line_end = want.find('\n', at);
  if (id_end == std::string::npos || line_end == std::string::npos)
    return want;
  const std::string recorded = want.substr(at + prefix.size(), id_end - at - prefix.size());
  if (tracer::symbols::KernelSymbols::build_id() != recorded)
    return want;
  want.replace(at, line_end - at,
               "tracer: warning: symbols: the records have no kernel map ([kernel.kallsyms]_text): "
               "kernel frames are left unnamed");
  return want;
}

class ShelfGolden : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(ShelfGolden, ReplayMatchesTheExpectedOutputByteForByte) {
  const auto [recipe, extra] = GetParam();
  const std::string got = replay(recipe, extra);
  const fs::path expected =
      kGolden / (std::string(recipe) + (std::string(extra).empty() ? "" : ".json") + ".expected");
  if (std::getenv("TRACER_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(expected) << got;
    GTEST_SKIP() << "wrote " << expected;
  }
  std::ifstream in(expected);
  ASSERT_TRUE(in) << expected << " is missing: run with TRACER_UPDATE_GOLDEN=1";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, expected_here(want.str())) << recipe;
}

INSTANTIATE_TEST_SUITE_P(Shelf,
                         ShelfGolden,
                         ::testing::Values(std::pair{"block-io-latency", ""},
                                           std::pair{"page-faults", ""},
                                           std::pair{"process-lifetimes", ""},
                                           std::pair{"profile", ""},
                                           std::pair{"runqlat", ""},
                                           std::pair{"signals", ""},
                                           std::pair{"syscall-latency", ""},
                                           std::pair{"syscalls-by-process", ""},
                                           std::pair{"syscalls-by-process", " --json"},
                                           std::pair{"tcp-states", ""}),
                         [](const auto& param_info) {
                           std::string name = param_info.param.first;
                           for (auto& c : name) {
                             if (c == '-')
                               c = '_';
                           }
                           return name +
                                  (std::string(param_info.param.second).empty() ? "" : "_json");
                         });

}  // namespace
