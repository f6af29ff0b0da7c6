// Running the real `perf` (and shell pipelines around it) from tests and benchmarks.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <vector>

namespace tracer::testing {

struct ShellResult {
  int exit_code = -1;  // -1: killed by a signal or could not run
  std::string out, err;
};

/// Runs `command` with /bin/sh, capturing stdout and stderr.
ShellResult shell(const std::string& command);

/// Why `perf record` cannot run here ("" when it can): perf missing, or no permission.
std::string perf_unavailable();

/// Reads a whole file.
std::vector<std::byte> read_file(const std::filesystem::path& path);
/// Writes a whole file.
void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes);

}  // namespace tracer::testing

/// Skips the running test, saying why, when `perf record` cannot run here (perf is the judge).
#define REQUIRE_PERF()                                                \
  do {                                                                \
    if (auto why = tracer::testing::perf_unavailable(); !why.empty()) \
      GTEST_SKIP() << why;                                            \
  } while (0)
