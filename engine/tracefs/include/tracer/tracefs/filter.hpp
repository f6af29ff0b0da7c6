// The field names of a tracefs event filter ("prev_pid == 1 && (next_comm ~ \"sh*\" || cpu > 0)"),
// so that a recipe can be checked against the event's format before the kernel sees the filter
// (the kernel only answers EINVAL, with no position).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tracer::tracefs {

struct FilterField {
  std::string name;        // as written, without a ".function" style suffix: "prev_pid"
  std::size_t offset = 0;  // of the name in the filter text (0-based)
};

/// The field of every predicate (`field op value`) of a filter in the kernel's grammar, read by
/// the filter tree's parser (tracer/ext/filter_tree.hpp) in its whole-grammar mode
/// (kernel/trace/trace_events_filter.c): predicates joined by && and ||, grouped with
/// parentheses, negated with !; ops ==, !=, <, <=, >, >=, &, ~; values are numbers, quoted or
/// bare strings, or CPUS{list}.
/// @return the fields in order; a text this does not understand gives the fields read up to
/// there (the kernel judges the rest), so nothing is reported that is not a field.
[[nodiscard]] std::vector<FilterField> filter_fields(std::string_view filter);

/// Fields every event's filter may name besides its format's (trace_define_generic_fields():
/// CPU, cpu, common_cpu, COMM, comm, STACKTRACE, stacktrace).
[[nodiscard]] bool is_generic_filter_field(std::string_view name) noexcept;

}  // namespace tracer::tracefs
