// The paths of the programs the tests run, from tracer_tests' compile definitions
// (tests/CMakeLists.txt): one definition each, shared by the test files (which compile in
// batches, so a file's own copy would collide with its neighbour's).
#pragma once

#include <string>

namespace tracer::testing {

inline const std::string kSyscaller = TRACER_SYSCALLER_PATH;
inline const std::string kTracer = TRACER_CLI_PATH;

}  // namespace tracer::testing
