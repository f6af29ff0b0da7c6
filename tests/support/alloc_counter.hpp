// Counts calls of the global operator new (replaced in alloc_counter.cpp) while counting is on:
// the allocation-free tests and benchmarks wrap their steady-state loops with it.
#pragma once

#include <cstdint>

namespace tracer::testing {

/// Starts counting from zero.
void alloc_count_start() noexcept;
/// Stops counting; returns the operator new calls since alloc_count_start().
std::uint64_t alloc_count_stop() noexcept;

}  // namespace tracer::testing
