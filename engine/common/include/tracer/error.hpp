// tracer::Error: the one exception type thrown by public setup APIs (Recipe::load,
// Engine::start). The hot path never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>

#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// A position in a source file (recipe), 1-based like toml++.
struct SourceRegion {
  std::string path;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
};

/// What an error is about besides its text, for a program that reacts to it without parsing
/// the message (a host that shows the probe or stage, or drops it and retries).
struct ErrorSubject {
  std::optional<std::size_t> probe{};         // the engine's probe (EngineOptions::probes index)
  std::optional<std::size_t> recipe_probe{};  // the recipe's [[probe]] it comes from (its index)
  std::optional<std::size_t> pipeline{};      // the recipe's pipeline (index)
  std::optional<std::size_t> stage{};         // the stage's index in that pipeline
  std::string option{};                       // the option it is about ("filter", "by", ...)
  friend bool operator==(const ErrorSubject&, const ErrorSubject&) = default;
};

enum class ErrorCategory : std::uint8_t {
  kUsage,        // bad command line
  kRecipe,       // bad recipe (file:line:column)
  kPermission,   // missing privilege
  kUnsupported,  // this kernel/machine lacks the feature
  kNotFound,     // tracepoint, symbol, file, PMU absent
  kRuntime,      // anything else at run time
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category,
        std::error_code code,
        const std::string& message,
        std::string hint = {},
        std::optional<SourceRegion> where = std::nullopt)
      : std::runtime_error(message),
        category_(category),
        code_(code),
        hint_(std::move(hint)),
        where_(std::move(where)) {}

  Error(ErrorCategory category, const Failure& failure)
      : Error(category, failure.code, failure.message, failure.hint) {}

  [[nodiscard]] ErrorCategory category() const noexcept { return category_; }
  [[nodiscard]] std::error_code code() const noexcept { return code_; }
  [[nodiscard]] const std::string& hint() const noexcept { return hint_; }
  [[nodiscard]] const std::optional<SourceRegion>& where() const noexcept { return where_; }
  /// What the error is about (empty fields: not known or not about one).
  [[nodiscard]] const ErrorSubject& subject() const noexcept { return subject_; }
  /// Set by the layer that knows it, also on an Error caught on its way up.
  ErrorSubject& subject() noexcept { return subject_; }

  /// Process exit code for this error: 2 for usage/recipe errors, 1 otherwise.
  [[nodiscard]] int exit_code() const noexcept {
    return category_ == ErrorCategory::kUsage || category_ == ErrorCategory::kRecipe ? 2 : 1;
  }

 private:
  ErrorCategory category_;
  std::error_code code_;
  std::string hint_;
  std::optional<SourceRegion> where_;
  ErrorSubject subject_;
};

}  // namespace tracer

#pragma GCC visibility pop
