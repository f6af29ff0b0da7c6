// ConfigValue: a recipe value as written (TOML types), with the position it came from. The recipe
// loader produces them; stages read their options from them; errors point back at them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "tracer/error.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct ConfigValue;
/// A TOML date, time or date-time. No recipe key takes one: it is kept so that a type error
/// can say "got date-time" at the value's position.
struct ConfigDateTime {};
using ConfigArray = std::vector<ConfigValue>;
/// A table keeps the order keys were written in.
using ConfigTable = std::vector<std::pair<std::string, ConfigValue>>;

struct ConfigValue {
  std::variant<bool, std::int64_t, double, std::string, ConfigArray, ConfigTable, ConfigDateTime>
      value{};
  SourceRegion where{};
  /// Where the key naming this value was written, for the values of a table read from a file
  /// (unknown keys are reported there); line 0 when unknown (built in code, array elements).
  SourceRegion key_where{};

  [[nodiscard]] bool is_bool() const noexcept { return std::holds_alternative<bool>(value); }
  [[nodiscard]] bool is_int() const noexcept { return std::holds_alternative<std::int64_t>(value); }
  [[nodiscard]] bool is_float() const noexcept { return std::holds_alternative<double>(value); }
  [[nodiscard]] bool is_string() const noexcept {
    return std::holds_alternative<std::string>(value);
  }
  [[nodiscard]] bool is_array() const noexcept {
    return std::holds_alternative<ConfigArray>(value);
  }
  [[nodiscard]] bool is_table() const noexcept {
    return std::holds_alternative<ConfigTable>(value);
  }
  [[nodiscard]] bool is_date_time() const noexcept {
    return std::holds_alternative<ConfigDateTime>(value);
  }

  [[nodiscard]] const std::string* string() const noexcept {
    return std::get_if<std::string>(&value);
  }
  [[nodiscard]] const std::int64_t* integer() const noexcept {
    return std::get_if<std::int64_t>(&value);
  }
  [[nodiscard]] const ConfigArray* array() const noexcept {
    return std::get_if<ConfigArray>(&value);
  }
  [[nodiscard]] const ConfigTable* table() const noexcept {
    return std::get_if<ConfigTable>(&value);
  }
  [[nodiscard]] ConfigTable* table() noexcept { return std::get_if<ConfigTable>(&value); }
  [[nodiscard]] ConfigArray* array() noexcept { return std::get_if<ConfigArray>(&value); }
  [[nodiscard]] const bool* boolean() const noexcept { return std::get_if<bool>(&value); }
  /// A key of a table value, or nullptr.
  [[nodiscard]] const ConfigValue* find(std::string_view key) const noexcept {
    if (const auto* t = table()) {
      for (const auto& [k, v] : *t) {
        if (k == key)
          return &v;
      }
    }
    return nullptr;
  }
  [[nodiscard]] ConfigValue* find(std::string_view key) noexcept {
    return const_cast<ConfigValue*>(std::as_const(*this).find(key));
  }
  /// "boolean", "integer", "float", "string", "array", "table", "date-time" (for messages).
  [[nodiscard]] std::string_view type_name() const noexcept {
    static constexpr std::string_view kNames[] = {"boolean", "integer", "float",    "string",
                                                  "array",   "table",   "date-time"};
    return kNames[value.index()];
  }
};

}  // namespace tracer

#pragma GCC visibility pop
