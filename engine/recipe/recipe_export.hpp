// Reading a recipe's [export] table: how `tracer serve` names its metrics, how many label sets
// each keeps, and the relabeling rules; each problem reported at its key or value.
#pragma once

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/recipe.hpp"

namespace tracer::core {

/// The [export] table `node` (its header at node.where). Problems go to `diags`; what could be
/// read is returned anyway.
[[nodiscard]] RecipeExport read_export(const ConfigValue& node, Diagnostics& diags);

/// Whether `name` is a valid Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*).
[[nodiscard]] bool valid_metric_name(std::string_view name) noexcept;

}  // namespace tracer::core
