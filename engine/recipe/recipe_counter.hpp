// Reading one [[counter]] table of a recipe: a group's events, its scheduling flags and its
// derived metrics, each problem reported at its key or value.
#pragma once

#include <cstddef>
#include <span>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/recipe.hpp"

namespace tracer::core {

/// The `index`th [[counter]] table (from 0); `earlier` are the groups read before it (a name
/// used twice is reported). Problems go to `diags`; the group is returned anyway.
[[nodiscard]] RecipeCounter read_counter(const ConfigValue& node,
                                         std::size_t index,
                                         std::span<const RecipeCounter> earlier,
                                         Diagnostics& diags);

}  // namespace tracer::core
