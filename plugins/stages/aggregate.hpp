// Shared machinery of the aggregation stages (count, sum, min, max, avg, rate, hist, lhist,
// quantiles): `by` keys encoded without allocation, a key -> state table, `top` and `every`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tracer/stage.hpp"

namespace tracer::stages {

/// The options every aggregation takes: by, top, every.
[[nodiscard]] std::vector<OptionSpec> aggregate_options();

/// Encodes a tuple of values as bytes (a type tag, then 8 bytes, or a length and the bytes).
/// The buffer keeps its capacity: after the longest key was seen once, encoding allocates nothing.
class KeyEncoder {
 public:
  KeyEncoder() { buf_.reserve(256); }
  void clear() noexcept { buf_.clear(); }
  /// May grow the buffer (and throw bad_alloc) for a key longer than any seen before.
  void add(const Value& v);
  [[nodiscard]] std::string_view bytes() const noexcept { return buf_; }

 private:
  std::string buf_;
};

/// Decodes KeyEncoder bytes into cells (ip lists become "0x...;0x..." leaf first).
[[nodiscard]] std::vector<Cell> decode_key(std::string_view bytes);

struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    return std::hash<std::string_view>{}(s);
  }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};

/// Key -> State. A lookup of a known key does not allocate (heterogeneous find); a new key
/// allocates its node once. reset() keeps keys and zeroes states so an `every` interval does not
/// re-allocate the keys it saw in the previous interval.
template <typename State>
class KeyedStates {
 public:
  template <typename Make>
  State& get(std::string_view key, Make&& make) {
    if (auto it = index_.find(key); it != index_.end())
      return states_[it->second];
    const auto i = static_cast<std::uint32_t>(states_.size());
    index_.emplace(std::string(key), i);
    keys_.emplace_back(key);
    states_.push_back(make());
    return states_.back();
  }
  template <typename Zero>
  void reset(Zero&& zero) {
    for (auto& s : states_)
      zero(s);
  }
  [[nodiscard]] std::size_t size() const noexcept { return states_.size(); }
  [[nodiscard]] const std::string& key(std::size_t i) const noexcept { return keys_[i]; }
  [[nodiscard]] State& state(std::size_t i) noexcept { return states_[i]; }
  void reserve(std::size_t n) {
    index_.reserve(n);
    keys_.reserve(n);
    states_.reserve(n);
  }

 private:
  std::unordered_map<std::string, std::uint32_t, KeyHash, KeyEq> index_;
  std::vector<std::string> keys_;
  std::vector<State> states_;
};

/// Base of the aggregations: reads by/top/every, binds the keys, orders and cuts rows.
class AggregateStage : public Stage {
 public:
  [[nodiscard]] bool aggregates() const noexcept override { return true; }
  [[nodiscard]] std::optional<std::chrono::nanoseconds> every() const noexcept override {
    return every_;
  }

 protected:
  /// Reads by/top/every; returns the options for the stage's own ones.
  void configure_common(StageOptions& opts);
  void bind_keys(BindContext& ctx, Diagnostics& diags);
  /// Binds a required value field read in configure (value_name_/value_where_).
  std::optional<FieldRef> bind_value(BindContext& ctx, Diagnostics& diags);
  /// The key of `e` (valid until the next call).
  [[nodiscard]] std::string_view key_of(const Event& e) {
    keys_enc_.clear();
    for (const auto& f : by_)
      keys_enc_.add(f.read(e));
    return keys_enc_.bytes();
  }
  /// Fills key names and title ("count by comm").
  void describe(Table& t, std::string_view what) const;
  /// Sorts rows by score descending (ties by key text) and keeps `top`.
  void order(Table& t, std::vector<double>& scores) const;

  std::vector<std::pair<std::string, SourceRegion>> by_names_;
  std::vector<FieldRef> by_;
  std::optional<std::int64_t> top_;
  std::optional<std::chrono::nanoseconds> every_;
  std::string value_name_;
  SourceRegion value_where_;
  std::string stage_name_;
  KeyEncoder keys_enc_;
};

}  // namespace tracer::stages
