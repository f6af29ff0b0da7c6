// Diagnostics: every problem found while validating a recipe, each with a position and a hint,
// collected before failing once (so a user fixes them all in one go).
#pragma once

#include <string>
#include <vector>

#include "tracer/error.hpp"

namespace tracer {

struct Diagnostic {
  SourceRegion where;
  std::string message;  // what is wrong: "unknown key 'bye'"
  std::string hint;     // how to fix it: "did you mean 'by'?" (may be empty)
};

class Diagnostics {
 public:
  void add(SourceRegion where, std::string message, std::string hint = {}) {
    items_.push_back({std::move(where), std::move(message), std::move(hint)});
  }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] const std::vector<Diagnostic>& items() const noexcept { return items_; }

  /// "file:line:column: message\n  hint: ...\n" for each, in order of position.
  [[nodiscard]] std::string format() const;
  /// Throws one tracer::Error (category kRecipe, exit code 2) carrying format() as its message
  /// and the first position, if there is anything.
  void throw_if_any() const;

 private:
  std::vector<Diagnostic> items_;
};

}  // namespace tracer
