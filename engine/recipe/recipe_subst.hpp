// What a recipe's text is changed by before it is read: --set overrides (a param's default or a
// recipe key, typed by what the key expects) and ${param} references in strings.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/recipe.hpp"

namespace tracer::core {

/// Applies "key=value" overrides to the parsed recipe (its root table): a param name, or
/// recipe.KEY, probe.NAME.KEY, bpf.KEY. Each --set is reported at "--set:N:column".
void apply_sets(ConfigValue& root, std::span<const std::string> sets, Diagnostics& diags);

/// The [params] table (after --set): each param's value, in the order written.
[[nodiscard]] std::vector<RecipeParam> read_params(const ConfigValue& root, Diagnostics& diags);

/// Replaces every ${name} in the strings under `v` with the param's value ($${ is a literal ${).
/// A string that is one reference takes the param's type (period = "${period}").
void substitute(ConfigValue& v, std::span<const RecipeParam> params, Diagnostics& diags);

}  // namespace tracer::core
