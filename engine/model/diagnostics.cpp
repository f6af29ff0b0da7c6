#include "tracer/diagnostics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tracer {

std::string Diagnostics::format() const {
  std::vector<const Diagnostic*> sorted;
  sorted.reserve(items_.size());
  for (const auto& d : items_)
    sorted.push_back(&d);
  // Position order; equal positions keep the order they were reported in (the items are
  // contiguous, so their addresses order them: std::sort, not stable_sort, whose temporary
  // buffer clang-19 flags as deprecated in libstdc++ 12).
  std::sort(sorted.begin(), sorted.end(), [](const Diagnostic* a, const Diagnostic* b) {
    if (a->where.path != b->where.path)
      return a->where.path < b->where.path;
    if (a->where.line != b->where.line)
      return a->where.line < b->where.line;
    if (a->where.column != b->where.column)
      return a->where.column < b->where.column;
    return a < b;
  });
  std::string out;
  std::vector<const std::string*> hints;  // said already: a long one is not said again
  const Diagnostic* last = nullptr;
  for (const auto* d : sorted) {
    // The same problem found by two checks (the recipe's and a stage's own) is said once.
    if (last != nullptr && last->where.path == d->where.path && last->where.line == d->where.line &&
        last->where.column == d->where.column && last->message == d->message)
      continue;
    last = d;
    out += fmt::format("{}:{}:{}: {}\n", d->where.path, d->where.line, d->where.column, d->message);
    if (d->hint.empty())
      continue;
    const bool said = std::any_of(hints.begin(), hints.end(),
                                  [&](const std::string* h) { return *h == d->hint; });
    if (said && d->hint.size() > 80) {
      out += "  hint: the same as above\n";
    } else {
      out += fmt::format("  hint: {}\n", d->hint);
      hints.push_back(&d->hint);
    }
  }
  return out;
}

void Diagnostics::throw_if_any() const {
  if (items_.empty())
    return;
  std::string text = format();
  if (!text.empty() && text.back() == '\n')
    text.pop_back();
  Error e(ErrorCategory::kRecipe, std::make_error_code(std::errc::invalid_argument), text, {},
          items_.front().where);
  e.subject() = items_.front().subject;
  throw e;
}

void Diagnostics::about_since(std::size_t from, const ErrorSubject& subject) {
  for (std::size_t i = from; i < items_.size(); ++i) {
    ErrorSubject& s = items_[i].subject;
    if (!s.probe)
      s.probe = subject.probe;
    if (!s.recipe_probe)
      s.recipe_probe = subject.recipe_probe;
    if (!s.pipeline)
      s.pipeline = subject.pipeline;
    if (!s.stage)
      s.stage = subject.stage;
    if (s.option.empty())
      s.option = subject.option;
  }
}

}  // namespace tracer
