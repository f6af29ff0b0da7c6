// The look at the running system that Recipe::check_system and a load with
// RecipeLoadOptions::check_kernel share.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>

#include "tracer/diagnostics.hpp"
#include "tracer/recipe.hpp"

namespace tracer::core {

/// What of the running system a recipe's checks read: the kernel alone (tracepoints and their
/// formats, counted events, the sampling rate limit), or the whole system (also uprobe binaries
/// and symbols, [bpf] files and the compile of a source).
enum class SystemScope : std::uint8_t { kKernel, kAll };

void check_against_system(const Recipe& recipe,
                          Diagnostics& diagnostics,
                          SystemScope scope,
                          std::optional<pid_t> pid,
                          Recipe::Writes writes);

}  // namespace tracer::core
