// What a pipeline stage accepts: its name and options, so a recipe can be validated (unknown
// option, wrong type, missing required option) without constructing the stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tracer {

struct OptionSpec {
  enum class Type : std::uint8_t {
    kBool,
    kInt,
    kFloat,
    kString,
    kDuration,    // string: "250ms", "1s" (tracer::parse_duration)
    kSize,        // string or integer: "64KiB", 4096 (tracer::parse_size)
    kStringList,  // array of strings (a single string is accepted as a list of one)
    kFieldList,   // array of field names (binds against the probe schemas)
    kExpression,  // string: a filter expression
    kAny,
  };
  std::string name;
  Type type = Type::kString;
  bool required = false;
  std::string help;
};

/// What a stage needs from a run beyond its probes' samples: a Session provides it, so no
/// front end special-cases a stage by name.
struct StageNeeds {
  /// COMM/FORK/EXIT/MMAP2 records of every task (perf report needs them in a perf.data file).
  bool task_records = false;
  /// The option whose value "-" makes the stage write machine output on stdout (then nothing
  /// else may: text output moves to stderr, --json is refused). Empty: none.
  std::string stdout_option{};
};

struct StageSpec {
  std::string name;     // "count"
  std::string summary;  // one line for `tracer list stages`
  std::vector<OptionSpec> options;
  StageNeeds needs{};
};

}  // namespace tracer
