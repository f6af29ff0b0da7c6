#include "support/perf_judge.hpp"
#include "support/scratch_path.hpp"

#include <unistd.h>

#include <sys/wait.h>
#include <array>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tracer::testing {

std::string temp_path(const std::string& stem, const std::string& ext) {
  static std::atomic<int> counter{0};
  return (tracer::testing::scratch_path(stem + "_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++) + ext))
      .string();
}

bool perf_available(std::string* why) {
  const auto r = shell("perf version");
  if (r.exit_code == 0 && r.out.starts_with("perf version"))
    return true;
  if (why != nullptr)
    *why = "perf is not installed or does not run (" + r.err + "): it is the judge of perf.data";
  return false;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty())
      out.push_back(line);
  }
  return out;
}

}  // namespace tracer::testing
