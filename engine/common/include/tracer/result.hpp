// Result<T>: the value-or-error type of the ABI layers (engine/perf, engine/tracefs, bpf glue).
// This is the only header that names the backing type (std::expected).
#pragma once

#include <expected>
#include <string>
#include <system_error>
#include <utility>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// Why an operation failed: the errno-style code callers branch on, plus text for people.
/// `message` follows libbpf's shape ("subsystem: what failed for which object: errno text");
/// `hint` says what to do about it (may be empty).
struct Failure {
  std::error_code code;
  std::string message;
  std::string hint;

  [[nodiscard]] int errno_value() const noexcept {
    return code.category() == std::generic_category() || code.category() == std::system_category()
               ? code.value()
               : 0;
  }
  /// "message (hint: ...)" for logs.
  [[nodiscard]] std::string describe() const {
    return hint.empty() ? message : message + "\n  hint: " + hint;
  }
};

template <typename T>
using Result = std::expected<T, Failure>;
using Status = std::expected<void, Failure>;

using Unexpected = std::unexpected<Failure>;

/// Build a failed Result from an errno value.
[[nodiscard]] inline Unexpected fail(int err, std::string message, std::string hint = {}) {
  return Unexpected(
      Failure{std::error_code(err, std::generic_category()), std::move(message), std::move(hint)});
}

[[nodiscard]] inline Unexpected fail(Failure f) {
  return Unexpected(std::move(f));
}

}  // namespace tracer

// Propagate a failed Result/Status from the enclosing function.
#define TRACER_TRY(expr)                                            \
  do {                                                              \
    auto&& tracer_try_result_ = (expr);                             \
    if (!tracer_try_result_)                                        \
      return ::tracer::fail(std::move(tracer_try_result_).error()); \
  } while (0)

#define TRACER_CONCAT_INNER_(a, b) a##b
#define TRACER_CONCAT_(a, b) TRACER_CONCAT_INNER_(a, b)
// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration, it cannot be parenthesized.
#define TRACER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp)                                           \
    return ::tracer::fail(std::move(tmp).error());    \
  lhs = std::move(*tmp)

// Evaluate a Result; on failure return it, on success assign/declare `lhs` from its value.
#define TRACER_ASSIGN_OR_RETURN(lhs, expr) \
  TRACER_ASSIGN_OR_RETURN_IMPL_(TRACER_CONCAT_(tracer_aor_, __LINE__), lhs, expr)
// NOLINTEND(bugprone-macro-parentheses)

#pragma GCC visibility pop
