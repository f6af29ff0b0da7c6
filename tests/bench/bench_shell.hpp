// The end-to-end benches' one way to time a command: wall seconds of a shell command, the run
// ending (exit 1) when the command fails.
#pragma once

#include <fmt/core.h>

#include <chrono>
#include <cstdlib>
#include <string>

namespace tracer::bench {

inline double seconds_of(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(cmd.c_str());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rc != 0) {
    fmt::print(stderr, "command failed ({}): {}\n", rc, cmd);
    std::exit(1);
  }
  return s;
}

}  // namespace tracer::bench
