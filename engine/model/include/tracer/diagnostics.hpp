// Diagnostics: every problem found while validating a recipe, each with a position and a hint,
// collected before failing once (so a user fixes them all in one go).
#pragma once

#include <string>
#include <vector>

#include "tracer/error.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

struct Diagnostic {
  SourceRegion where;
  std::string message;     // what is wrong: "unknown key 'bye'"
  std::string hint;        // how to fix it: "did you mean 'by'?" (may be empty)
  ErrorSubject subject{};  // what it is about (probe, pipeline, stage, option), where known
};

class Diagnostics {
 public:
  void add(SourceRegion where,
           std::string message,
           std::string hint = {},
           ErrorSubject subject = {}) {
    items_.push_back({std::move(where), std::move(message), std::move(hint), std::move(subject)});
  }
  [[nodiscard]] std::size_t size() const noexcept { return items_.size(); }
  /// The problems added since the first `from` are about `subject`: each gets the fields of it
  /// that it does not have yet (a layer that knows the probe or stage says so once).
  void about_since(std::size_t from, const ErrorSubject& subject);
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }
  [[nodiscard]] const std::vector<Diagnostic>& items() const noexcept { return items_; }

  /// "file:line:column: message\n  hint: ...\n" for each, in order of position.
  [[nodiscard]] std::string format() const;
  /// Throws one tracer::Error (category kRecipe, exit code 2) carrying format() as its message
  /// and the first problem's position and subject, if there is anything.
  void throw_if_any() const;

 private:
  std::vector<Diagnostic> items_;
};

}  // namespace tracer

#pragma GCC visibility pop
