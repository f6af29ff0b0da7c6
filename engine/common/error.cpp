// tracer::Error's composed text (tracer/error.hpp).
#include "tracer/error.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tracer {
namespace {

std::vector<Problem> at_least_one(std::vector<Problem> problems) {
  if (problems.empty())
    problems.push_back({.message = "unknown error"});
  return problems;
}

}  // namespace

Error::Error(ErrorCategory category, std::error_code code, std::vector<Problem> problems)
    : std::runtime_error(compose(problems.empty() ? at_least_one({}) : problems)),
      category_(category),
      code_(code),
      problems_(at_least_one(std::move(problems))) {}

std::string Error::compose(const std::vector<Problem>& problems) {
  std::string out;
  std::vector<const std::string*> hints;  // said already: a long one is not said again
  const Problem* last = nullptr;
  for (const auto& p : problems) {
    // The same problem found by two checks (the recipe's and a stage's own) is said once.
    if (last != nullptr && last->where.has_value() && p.where.has_value() &&
        last->where->path == p.where->path && last->where->line == p.where->line &&
        last->where->column == p.where->column && last->message == p.message)
      continue;
    last = &p;
    if (!out.empty())
      out += '\n';
    if (p.where)
      out += fmt::format("{}:{}:{}: ", p.where->path, p.where->line, p.where->column);
    out += p.message;
    if (p.hint.empty())
      continue;
    const bool said =
        std::any_of(hints.begin(), hints.end(), [&](const std::string* h) { return *h == p.hint; });
    if (said && p.hint.size() > 80) {
      out += "\n  hint: the same as above";
    } else {
      out += fmt::format("\n  hint: {}", p.hint);
      hints.push_back(&p.hint);
    }
  }
  return out;
}

}  // namespace tracer
