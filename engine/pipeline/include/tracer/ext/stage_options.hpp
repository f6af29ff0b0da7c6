// Reading a [[stage]] table against the stage's spec: typed options with their positions.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/stage_spec.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

// ---------------------------------------------------------------------------------------------
// Stage options: reads a [[stage]] table against the stage's spec.

/// Validates `table` against `spec` with the recipe loader's validator and wording (unknown keys
/// with a hint, wrong types with an example, missing required options, bad durations and sizes;
/// the key `use` is the loader's and is skipped) and gives typed access. Errors go to `diags`
/// with the position of the offending key or value.
class StageOptions {
 public:
  StageOptions(const StageSpec& spec, const ConfigValue& table, Diagnostics& diags);

  [[nodiscard]] const ConfigValue* get(std::string_view name) const noexcept;
  /// The option's position, or the table's when absent.
  [[nodiscard]] SourceRegion where(std::string_view name) const;
  [[nodiscard]] std::optional<std::string> string(std::string_view name) const;
  [[nodiscard]] std::optional<std::int64_t> integer(std::string_view name) const;
  [[nodiscard]] std::optional<double> number(std::string_view name) const;
  [[nodiscard]] std::optional<bool> boolean(std::string_view name) const;
  /// kDuration: parsed; a bad duration (reported by the constructor) yields nullopt, and so
  /// does one that is not positive (reported here).
  [[nodiscard]] std::optional<std::chrono::nanoseconds> duration(std::string_view name);
  /// kStringList/kFieldList: each entry with its position (a single string is a list of one).
  [[nodiscard]] std::vector<std::pair<std::string, SourceRegion>> list(std::string_view name) const;
  [[nodiscard]] Diagnostics& diags() noexcept { return *diags_; }

 private:
  const ConfigValue* table_;
  Diagnostics* diags_;
};

}  // namespace tracer

#pragma GCC visibility pop
