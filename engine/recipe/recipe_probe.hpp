// Reading one [[probe]] table of a recipe: its kind and spec, sampling and ring options, and the
// combinations of them the kernel would refuse, each problem reported at its key or value.
#pragma once

#include <cstddef>
#include <span>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/recipe.hpp"

namespace tracer::core {

/// The `index`th [[probe]] table (from 0) as a RecipeProbe; `earlier` are the probes read before
/// it (a name used twice is reported). Problems go to `diags`; the probe is returned anyway.
[[nodiscard]] RecipeProbe read_probe(const ConfigValue& node,
                                     std::size_t index,
                                     std::span<const RecipeProbe> earlier,
                                     Diagnostics& diags);

}  // namespace tracer::core
