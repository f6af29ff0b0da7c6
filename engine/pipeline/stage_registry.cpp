// The stage registry: a table of stages (the built-ins are the stages layer's,
// tracer/ext/stages.hpp; no static-initialiser self-registration) checked for duplicate names, plus
// stages embedders register at run time.
#include <fmt/format.h>

#include <algorithm>
#include <ranges>
#include <system_error>

#include "tracer/common/edit_distance.hpp"
#include "tracer/ext/stage.hpp"

namespace tracer {

StageRegistry StageRegistry::from_table(std::span<const StageEntry> table) {
  StageRegistry r;
  for (const auto& entry : table) {
    StageSpec spec = entry.spec();
    if (r.find(spec.name) != nullptr) {
      throw Error(
          ErrorCategory::kRuntime, std::make_error_code(std::errc::file_exists),
          fmt::format("stage registry: built-in stage '{}' is listed twice", spec.name),
          "remove the duplicate from the table (the built-ins: plugins/stages/all_stages.cpp)");
    }
    auto* make = entry.make;
    r.items_.push_back({std::move(spec), [make] { return make(); }});
  }
  return r;
}

void StageRegistry::register_stage(StageSpec spec, StageFactory factory) {
  if (spec.name.empty() || !factory) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "stage registry: a stage needs a name and a factory");
  }
  if (find(spec.name) != nullptr) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::file_exists),
                fmt::format("stage registry: a stage named '{}' exists already", spec.name),
                "pick another name for the embedder's stage");
  }
  items_.push_back({std::move(spec), std::move(factory)});
}

const StageSpec* StageRegistry::find(std::string_view name) const noexcept {
  for (const auto& item : items_) {
    if (item.spec.name == name)
      return &item.spec;
  }
  return nullptr;
}

std::unique_ptr<Stage> StageRegistry::make(std::string_view name) const {
  for (const auto& item : items_) {
    if (item.spec.name == name)
      return item.factory();
  }
  return nullptr;
}

std::vector<const StageSpec*> StageRegistry::specs() const {
  std::vector<const StageSpec*> out;
  out.reserve(items_.size());
  for (const auto& item : items_)
    out.push_back(&item.spec);
  return out;
}

std::string StageRegistry::suggest(std::string_view name) const {
  auto near = detail::nearest(
      name, items_ | std::views::transform([](const auto& item) -> std::string_view {
              return item.spec.name;
            }),
      {.max_distance = 2, .related_only = false});
  return near.empty() ? std::string() : std::move(near.front());
}

}  // namespace tracer
