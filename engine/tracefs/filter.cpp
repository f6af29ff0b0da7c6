#include "tracer/tracefs/filter.hpp"

#include <array>

namespace tracer::tracefs {

// filter_fields() is the filter tree parser's (filter_tree.cpp): one reader of the grammar.

bool is_generic_filter_field(std::string_view name) noexcept {
  static constexpr std::array<std::string_view, 7> kGeneric = {
      "CPU", "cpu", "common_cpu", "COMM", "comm", "STACKTRACE", "stacktrace"};
  for (auto g : kGeneric) {
    if (g == name)
      return true;
  }
  return false;
}

}  // namespace tracer::tracefs
