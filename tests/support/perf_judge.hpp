// Test support: the real `perf` as the judge of perf.data files (run a shell command, capture
// stdout and stderr apart).
#pragma once

#include <string>
#include <vector>

#include "support/perf_tool.hpp"  // shell()

namespace tracer::testing {

/// Whether `perf` runs here; otherwise `why` says what is missing (for GTEST_SKIP).
bool perf_available(std::string* why);

/// The non-empty lines of `text`.
std::vector<std::string> lines_of(const std::string& text);

/// A fresh path under the temp directory (removed by the caller).
std::string temp_path(const std::string& stem, const std::string& ext);

}  // namespace tracer::testing

/// Skips the running test, saying why, when `perf` does not run here (it reads and prints
/// perf.data: the judge). Opens no perf event, so kernel-free suites may use it.
#define REQUIRE_PERF_JUDGE()                                     \
  do {                                                           \
    if (std::string why; !tracer::testing::perf_available(&why)) \
      GTEST_SKIP() << why;                                       \
  } while (0)
