// What a pipeline stage accepts and needs, declared per stage type: its name and options, so a
// recipe can be validated (unknown option, wrong type, missing required option) without
// constructing the stage, and what it asks of a run (record kinds, time order, task records,
// stdout), which the Pipeline and the Session read without naming the stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

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

// ---------------------------------------------------------------------------------------------
// Record kinds: a stage declares which it wants; the pipeline hands it only those.

enum class RecordKind : std::uint8_t {
  kSample,
  kAux,          // PERF_RECORD_AUX, with RecordRef::aux and the ring's ITRACE_START context
  kItraceStart,  // PERF_RECORD_ITRACE_START
  kLost,         // PERF_RECORD_LOST
  kLostSamples,  // PERF_RECORD_LOST_SAMPLES
  kComm,
  kMmap,  // MMAP and MMAP2
  kFork,
  kExit,
  kSwitch,    // SWITCH and SWITCH_CPU_WIDE
  kThrottle,  // THROTTLE and UNTHROTTLE
  kOther,     // every other record type, and unknown ones
};
inline constexpr std::size_t kRecordKindCount = 12;
using KindMask = std::uint32_t;
[[nodiscard]] constexpr KindMask kind_bit(RecordKind k) noexcept {
  return KindMask{1} << static_cast<unsigned>(k);
}
inline constexpr KindMask kAllKinds = (KindMask{1} << kRecordKindCount) - 1;

/// "sample", "aux", "itrace_start", "lost", "lost_samples", "comm", "mmap", "fork", "exit",
/// "switch", "throttle", "other".
[[nodiscard]] std::string_view to_string(RecordKind k) noexcept;
[[nodiscard]] std::optional<RecordKind> parse_record_kind(std::string_view name) noexcept;

/// What a stage needs from a run, declared once per stage type: the Pipeline routes records and
/// merges them in time order by it, the Session asks the engine for records and settles stdout by
/// it, so neither a front end nor the pipeline special-cases a stage by name. What a stage's
/// options decide (a `kinds` option, per-event output or not) the stage sets at bind instead
/// (BindContext::kinds, BindContext::time_order), starting from these defaults.
struct StageNeeds {
  /// The record kinds handed to the stage's on_events; the others flow past it untouched.
  KindMask kinds = kind_bit(RecordKind::kSample);
  /// Events in time order across rings and probes (pairing entries with exits, per-event
  /// output): the pipeline then merges records by time (tracer::Reorder) before its first stage.
  /// Aggregations that do not pair leave it false and do not pay for the merge.
  bool time_order = false;
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
  /// Options beyond `options` are the stage's own business, of any type (a plugin's).
  bool open_options = false;
};

struct ConfigValue;
class Diagnostics;

/// Checks a stage's options table against its spec: unknown options (at the key, with a "did you
/// mean"), wrong types (at the value, with an example), required options that are missing (at
/// the table), and values a type rules out (an empty expression, a bad duration or size). The
/// key `use` is the loader's and is skipped. The single validator, for the recipe loader (at
/// load time) and StageOptions (when a stage is configured).
void check_stage_options(const StageSpec& spec, const ConfigValue& options, Diagnostics& diags);

}  // namespace tracer

#pragma GCC visibility pop
