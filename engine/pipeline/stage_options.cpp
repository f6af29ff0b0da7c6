// StageOptions: a [[stage]] table read against the stage's spec.
#include "tracer/ext/stage_options.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <ranges>
#include <system_error>
#include <type_traits>

#include "tracer/duration.hpp"

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

// StageOptions

StageOptions::StageOptions(const StageSpec& spec, const ConfigValue& table, Diagnostics& diags)
    : table_(&table), diags_(&diags) {
  // The validator the recipe loader runs too: one check and one wording for each mistake.
  check_stage_options(spec, table, diags);
}

const ConfigValue* StageOptions::get(std::string_view name) const noexcept {
  return table_->find(name);
}

SourceRegion StageOptions::where(std::string_view name) const {
  if (const auto* v = get(name))
    return v->where;
  return table_->where;
}

std::optional<std::string> StageOptions::string(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_string())
    return *v->string();
  return std::nullopt;
}

std::optional<std::int64_t> StageOptions::integer(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_int())
    return *v->integer();
  return std::nullopt;
}

std::optional<double> StageOptions::number(std::string_view name) const {
  if (const auto* v = get(name)) {
    if (v->is_int())
      return static_cast<double>(*v->integer());
    if (const auto* d = std::get_if<double>(&v->value))
      return *d;
  }
  return std::nullopt;
}

std::optional<bool> StageOptions::boolean(std::string_view name) const {
  if (const auto* v = get(name); v != nullptr && v->is_bool())
    return std::get<bool>(v->value);
  return std::nullopt;
}

std::optional<std::chrono::nanoseconds> StageOptions::duration(std::string_view name) {
  const auto* v = get(name);
  if (v == nullptr || !v->is_string())
    return std::nullopt;
  auto d = parse_duration(*v->string());
  if (!d)
    return std::nullopt;  // the constructor reported it
  if (d->count() <= 0) {
    diags_->add(v->where, fmt::format("option '{}' must be a positive duration", name));
    return std::nullopt;
  }
  return *d;
}

std::vector<std::pair<std::string, SourceRegion>> StageOptions::list(std::string_view name) const {
  std::vector<std::pair<std::string, SourceRegion>> out;
  const auto* v = get(name);
  if (v == nullptr)
    return out;
  if (const auto* s = v->string()) {
    out.emplace_back(*s, v->where);
  } else if (const auto* a = v->array()) {
    for (const auto& e : *a) {
      if (const auto* s2 = e.string())
        out.emplace_back(*s2, e.where);
    }
  }
  return out;
}

}  // namespace tracer
