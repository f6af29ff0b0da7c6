#include "tracer/diagnostics.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tracer {

namespace {

/// The problems in position order; equal positions keep the order they were reported in.
std::vector<Problem> in_order(const std::vector<Diagnostic>& items) {
  std::vector<const Diagnostic*> sorted;
  sorted.reserve(items.size());
  for (const auto& d : items)
    sorted.push_back(&d);
  // The items are contiguous, so their addresses order equal positions (std::sort, not
  // stable_sort, whose temporary buffer clang-19 flags as deprecated in libstdc++ 12).
  std::sort(sorted.begin(), sorted.end(), [](const Diagnostic* a, const Diagnostic* b) {
    if (a->where.path != b->where.path)
      return a->where.path < b->where.path;
    if (a->where.line != b->where.line)
      return a->where.line < b->where.line;
    if (a->where.column != b->where.column)
      return a->where.column < b->where.column;
    return a < b;
  });
  std::vector<Problem> out;
  out.reserve(sorted.size());
  for (const auto* d : sorted)
    out.push_back(
        {.where = d->where, .message = d->message, .hint = d->hint, .subject = d->subject});
  return out;
}

}  // namespace

std::string Diagnostics::format() const {
  if (items_.empty())
    return {};
  return Error::compose(in_order(items_)) + "\n";
}

void Diagnostics::throw_if_any() const {
  if (items_.empty())
    return;
  throw Error(ErrorCategory::kRecipe, std::make_error_code(std::errc::invalid_argument),
              in_order(items_));
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
