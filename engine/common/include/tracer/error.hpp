// tracer::Error: the one exception type thrown by public setup APIs (Recipe::load,
// Engine::start). The hot path never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// A position in a source file (recipe), 1-based like toml++.
struct SourceRegion {
  std::string path;
  std::uint32_t line = 0;
  std::uint32_t column = 0;
  friend bool operator==(const SourceRegion&, const SourceRegion&) = default;
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

/// One problem: where it is (a recipe's position, when it has one), what is wrong, how to fix
/// it, and what it is about.
struct Problem {
  std::optional<SourceRegion> where{};
  std::string message{};  // what is wrong, without the position or the hint
  std::string hint{};     // how to fix it (may be empty)
  ErrorSubject subject{};
  friend bool operator==(const Problem&, const Problem&) = default;
};

/// The one error shape of the library: a category and an error code, and one or more problems
/// (a recipe's check reports each it finds) whose fields are the first's. what() is composed
/// from them the same way for every kind: each problem as "path:line:column: message" (the
/// position when it has one) and "  hint: ..." on the next line when it has a hint (a long
/// hint said already is "the same as above"; a problem said at the same place twice is said
/// once). A program reads the fields; a person reads what().
class Error : public std::runtime_error {
 public:
  Error(ErrorCategory category,
        std::error_code code,
        const std::string& message,
        std::string hint = {},
        std::optional<SourceRegion> where = std::nullopt)
      : Error(category,
              code,
              std::vector<Problem>{
                  {.where = std::move(where), .message = message, .hint = std::move(hint)}}) {}

  /// Several problems (at least one; an empty list is one problem "unknown error").
  Error(ErrorCategory category, std::error_code code, std::vector<Problem> problems);

  Error(ErrorCategory category, const Failure& failure)
      : Error(category, failure.code, failure.message, failure.hint) {}

  [[nodiscard]] ErrorCategory category() const noexcept { return category_; }
  [[nodiscard]] std::error_code code() const noexcept { return code_; }
  /// The first problem's message (no position, no hint).
  [[nodiscard]] const std::string& message() const noexcept { return problems_.front().message; }
  /// The first problem's hint.
  [[nodiscard]] const std::string& hint() const noexcept { return problems_.front().hint; }
  /// The first problem's position.
  [[nodiscard]] const std::optional<SourceRegion>& where() const noexcept {
    return problems_.front().where;
  }
  /// What the first problem is about (empty fields: not known or not about one).
  [[nodiscard]] const ErrorSubject& subject() const noexcept { return problems_.front().subject; }
  /// Set by the layer that knows it, also on an Error caught on its way up.
  ErrorSubject& subject() noexcept { return problems_.front().subject; }
  /// Every problem, in the order what() says them.
  [[nodiscard]] const std::vector<Problem>& problems() const noexcept { return problems_; }

  /// Process exit code for this error: 2 for usage/recipe errors, 1 otherwise.
  [[nodiscard]] int exit_code() const noexcept {
    return category_ == ErrorCategory::kUsage || category_ == ErrorCategory::kRecipe ? 2 : 1;
  }

  /// The text what() says for `problems` (see the class comment), without a final newline.
  [[nodiscard]] static std::string compose(const std::vector<Problem>& problems);

 private:
  ErrorCategory category_;
  std::error_code code_;
  std::vector<Problem> problems_;
};

}  // namespace tracer

#pragma GCC visibility pop
