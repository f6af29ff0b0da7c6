// TOML text to the ConfigValue tree the recipe loader reads: toml++ parses, and every key and
// value keeps the position it was written at (A6 `source_region`, 1-based line and column).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"

namespace tracer::core {

/// Parses a recipe's text: a table whose keys are in the order written (toml++ sorts them),
/// positions printed as `path`.
/// @return the root table; nullopt after a diagnostic for the first syntax error.
[[nodiscard]] std::optional<ConfigValue> parse_toml(std::string_view text,
                                                    const std::string& path,
                                                    Diagnostics& diags);

/// Whether `a` comes before `b` in the same file.
[[nodiscard]] bool before(const SourceRegion& a, const SourceRegion& b) noexcept;

}  // namespace tracer::core
