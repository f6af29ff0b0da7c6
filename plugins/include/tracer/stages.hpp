// The built-in stages (the stages layer, plugins/stages/): their table, and the process-wide
// registry the CLI and tracer::Session use by default.
#pragma once

#include <span>

#include "tracer/stage.hpp"

namespace tracer {

/// The table of built-in stages (plugins/stages/all_stages.cpp).
[[nodiscard]] std::span<const StageEntry> builtin_stages() noexcept;

/// A fresh registry of the built-in stages.
[[nodiscard]] StageRegistry builtin_stage_registry();

/// The process-wide registry: the built-ins, plus what embedders add with register_stage().
[[nodiscard]] StageRegistry& stage_registry();

/// register_stage on the process-wide registry (A1 libbpf_register_prog_handler).
void register_stage(StageSpec spec, StageFactory factory);

}  // namespace tracer
