// The recipe's key schema and its messages: the keys each section takes and their types, how a
// wrong key or type is worded (always with the fix hint), and the one validator of stage
// options, which the recipe loader and tracer::StageOptions both call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/config_value.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/probe.hpp"
#include "tracer/stage_spec.hpp"

namespace tracer::core {

// ---------------------------------------------------------------------------------------------
// The fixed sections.

enum class KeyType : std::uint8_t { kString, kInt, kBool, kSize, kDuration };

struct KeySpec {
  std::string_view name;
  KeyType type;
};

inline constexpr std::string_view kTopKeys[] = {"recipe", "params",   "probe",   "bpf",
                                                "stage",  "pipeline", "counter", "export"};

inline constexpr KeySpec kExportKeys[] = {
    {"prefix", KeyType::kString},
    {"label_budget", KeyType::kInt},
    {"relabel", KeyType::kString},
};
inline constexpr KeySpec kRelabelKeys[] = {
    {"action", KeyType::kString},
    {"label", KeyType::kString},
    {"regex", KeyType::kString},
    {"to", KeyType::kString},
};

inline constexpr KeySpec kCounterKeys[] = {
    {"name", KeyType::kString},  {"events", KeyType::kString},  {"every", KeyType::kDuration},
    {"pinned", KeyType::kBool},  {"exclusive", KeyType::kBool}, {"weak", KeyType::kBool},
    {"per_cpu", KeyType::kBool}, {"exclude", KeyType::kString}, {"metrics", KeyType::kString},
};

inline constexpr KeySpec kRecipeKeys[] = {
    {"name", KeyType::kString},       {"description", KeyType::kString},
    {"duration", KeyType::kDuration}, {"placement", KeyType::kString},
    {"channel", KeyType::kString},    {"max_targets", KeyType::kInt},
};

struct KindKey {
  std::string_view key;
  ProbeKind kind;
};

inline constexpr KindKey kKindKeys[] = {
    {"tracepoint", ProbeKind::kTracepoint}, {"kprobe", ProbeKind::kKprobe},
    {"kretprobe", ProbeKind::kKretprobe},   {"uprobe", ProbeKind::kUprobe},
    {"uretprobe", ProbeKind::kUretprobe},   {"usdt", ProbeKind::kUsdt},
    {"software", ProbeKind::kSoftware},     {"hardware", ProbeKind::kHardware},
    {"cache", ProbeKind::kCache},           {"pmu", ProbeKind::kRawPmu},
    {"breakpoint", ProbeKind::kBreakpoint}, {"aux", ProbeKind::kAux},
};

inline constexpr KeySpec kProbeKeys[] = {
    {"name", KeyType::kString},
    {"tracepoint", KeyType::kString},
    {"kprobe", KeyType::kString},
    {"kretprobe", KeyType::kString},
    {"uprobe", KeyType::kString},
    {"uretprobe", KeyType::kString},
    {"usdt", KeyType::kString},
    {"software", KeyType::kString},
    {"hardware", KeyType::kString},
    {"cache", KeyType::kString},
    {"pmu", KeyType::kString},
    {"breakpoint", KeyType::kString},
    {"aux", KeyType::kString},
    {"period", KeyType::kInt},
    {"freq", KeyType::kInt},
    {"counting", KeyType::kBool},
    {"read", KeyType::kString},
    {"filter", KeyType::kString},
    {"bpf", KeyType::kString},
    {"callchain", KeyType::kBool},
    {"user_regs", KeyType::kBool},
    {"user_stack", KeyType::kSize},
    {"task_records", KeyType::kBool},
    {"context_switches", KeyType::kBool},
    {"ring", KeyType::kSize},
    {"wakeup_events", KeyType::kInt},
    {"wakeup_bytes", KeyType::kSize},
    {"aux_size", KeyType::kSize},
    {"aux_snapshot", KeyType::kBool},
    {"max_stack", KeyType::kInt},
    {"exclude_callchain_kernel", KeyType::kBool},
    {"exclude_callchain_user", KeyType::kBool},
    {"unwind", KeyType::kString},
    {"strings", KeyType::kString},
};

inline constexpr KeySpec kBpfKeys[] = {
    {"source", KeyType::kString}, {"object", KeyType::kString}, {"builtin", KeyType::kString},
    {"output", KeyType::kString}, {"struct", KeyType::kString}, {"time", KeyType::kString},
};

[[nodiscard]] const KeySpec* find_spec(std::span<const KeySpec> specs, std::string_view key);
[[nodiscard]] const KindKey* find_kind(std::string_view key);
/// "string", "integer", "boolean", "size", "duration".
[[nodiscard]] std::string_view type_label(KeyType t);

/// The names of specs of any kind (KeySpec, OptionSpec, StageSpec), in order.
template <typename Range>
[[nodiscard]] std::vector<std::string> names_of(const Range& specs) {
  std::vector<std::string> out;
  for (const auto& s : specs)
    out.emplace_back(s.name);
  return out;
}
[[nodiscard]] std::vector<std::string> kind_names();

// ---------------------------------------------------------------------------------------------
// Messages.

/// The candidates nearest to `word` (detail::nearest), if near enough to be a typo; all of
/// those equally near.
[[nodiscard]] std::vector<std::string> near_names(std::string_view word,
                                                  const std::vector<std::string>& candidates);
/// "'a', 'b' or 'c'".
[[nodiscard]] std::string quoted_list(const std::vector<std::string>& items,
                                      std::string_view last_sep = "or");
/// "a, b, c".
[[nodiscard]] std::string plain_list(const std::vector<std::string>& items);
/// "did you mean 'x'?" when a candidate is near, else "<what>: a, b, c".
[[nodiscard]] std::string suggest(std::string_view word,
                                  const std::vector<std::string>& candidates,
                                  std::string_view what);

/// Where to report an unknown key: the key, or the value when the key's position is unknown.
[[nodiscard]] const SourceRegion& key_position(const ConfigValue& v) noexcept;

/// "wrong type for LABEL: expected EXPECTED, got TYPE", at the value.
void wrong_type(Diagnostics& diags,
                const ConfigValue& v,
                std::string_view label,
                std::string_view expected,
                std::string hint);

// ---------------------------------------------------------------------------------------------
// Typed reads of a section's keys: the value, or nullopt after a diagnostic with the fix hint.

using Entry = ConfigTable::value_type;  // a key and its value

class KeyReader {
 public:
  explicit KeyReader(Diagnostics& diags) : diags_(&diags) {}

  /// "unknown key 'K' in SECTION" at the key, with the keys SECTION takes.
  void unknown_key(const Entry& e, std::string_view section, const std::vector<std::string>& keys);

  [[nodiscard]] const std::string* string(const Entry& e);
  [[nodiscard]] std::optional<std::int64_t> integer(const Entry& e);
  [[nodiscard]] std::optional<bool> boolean(const Entry& e);
  /// Bytes: an integer, or a string with a unit ("64KiB").
  [[nodiscard]] std::optional<std::uint64_t> size(const Entry& e);
  [[nodiscard]] std::optional<std::chrono::nanoseconds> duration(const Entry& e);
  [[nodiscard]] const ConfigTable* table(const Entry& e, std::string_view hint);
  /// An array of tables (`header` is how one is written: "[[probe]]").
  [[nodiscard]] const ConfigArray* table_array(const Entry& e, std::string_view header);

  /// A positive integer that fits T.
  template <typename T>
  [[nodiscard]] std::optional<T> count(const Entry& e) {
    auto v = integer(e);
    if (!v)
      return std::nullopt;
    constexpr auto kMax = static_cast<std::int64_t>(std::min<std::uint64_t>(
        std::numeric_limits<T>::max(),
        static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())));
    if (*v < 1 || *v > kMax) {
      out_of_range(e, *v, kMax);
      return std::nullopt;
    }
    return static_cast<T>(*v);
  }

 private:
  void out_of_range(const Entry& e, std::int64_t v, std::int64_t max);

  Diagnostics* diags_;
};

// ---------------------------------------------------------------------------------------------
// Stage options: the single validator, for the recipe loader (at load time) and StageOptions
// (when a stage is configured).

/// check_stage_options() (tracer/stage_spec.hpp) is the validator, public for StageOptions.

/// Reports every date or time in `v`: no option takes one. `label` names the option.
void reject_date_times(const ConfigValue& v, std::string_view label, Diagnostics& diags);

}  // namespace tracer::core
