// Shared machinery of the aggregation stages (count, sum, min, max, avg, rate, hist, lhist,
// quantiles): `by` keys encoded without allocation, a key -> state table, `top` and `every`.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
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

/// The buckets of a histogram row, from the first non-empty one to the last: each with its count,
/// its bounds and label set by describe(bucket index, bucket).
template <typename Describe>
void append_buckets(TableRow& row, std::span<const std::uint64_t> counts, Describe&& describe) {
  std::size_t first = counts.size(), last = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    if (counts[b] != 0) {
      first = std::min(first, b);
      last = b;
    }
  }
  for (std::size_t b = first; b <= last; ++b) {
    HistBucket hb;
    hb.count = counts[b];
    describe(b, hb);
    row.buckets.push_back(std::move(hb));
  }
}

/// Base of the aggregations (the Aggregation role): reads by/top/every, binds the keys, orders
/// and cuts rows.
class AggregateStage : public Stage, public Aggregation {
 public:
  [[nodiscard]] Aggregation* aggregation() noexcept override { return this; }
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
  /// The key of a row an in-kernel run computed (valid until the next call).
  [[nodiscard]] std::string_view key_of(const KernelRow& row);
  /// The kernel form of this aggregation: `agg` over value_name_, keyed by `by`.
  [[nodiscard]] KernelForm kernel_base(KernelForm::Agg agg) const;
  /// Fills key names and title ("count by comm").
  void describe(Table& t, std::string_view what) const;
  /// Sorts rows by score descending (ties by key text) and keeps `top`.
  void order(Table& t, std::vector<double>& scores) const;

  /// The bind of a distribution (hist, lhist, quantiles): the keys, the value field, and room
  /// for `expected_keys` keys.
  template <typename State>
  void bind_distribution(BindContext& ctx,
                         Diagnostics& diags,
                         std::optional<FieldRef>& value,
                         KeyedStates<State>& states,
                         std::size_t expected_keys) {
    bind_keys(ctx, diags);
    if (!value_name_.empty())
      value = bind_value(ctx, diags);
    states.reserve(expected_keys);
  }

  /// The per-key loop of a distribution (hist, lhist, quantiles): for each event whose value
  /// field is set, add(state of its key, value), the state made by make() for a new key.
  template <typename State, typename Make, typename Add>
  void accumulate(std::span<Event* const> events,
                  const std::optional<FieldRef>& value,
                  KeyedStates<State>& states,
                  Make&& make,
                  Add&& add) noexcept {
    if (!value)
      return;
    for (const Event* e : events) {
      const Value v = value->read(*e);
      if (is_none(v))
        continue;
      add(states.get(key_of(*e), make), v);
    }
  }

  /// absorb() of a distribution (hist, lhist): each row's bucket counts added to its key's.
  template <typename State, typename Make>
  void absorb_buckets(const std::vector<KernelRow>& rows, KeyedStates<State>& states, Make&& make) {
    for (const auto& r : rows) {
      State& s = states.get(key_of(r), make);
      const std::size_t n = std::min(s.counts.size(), r.counts.size());
      for (std::size_t b = 0; b < n; ++b)
        s.counts[b] += r.counts[b];
      s.total += r.count;
    }
  }

  /// The snapshot of a distribution: a row per key with samples (State::total), its values
  /// filled by fill(state, row), scored by its total, ordered and cut to `top`; then, if
  /// `reset`, every state zeroed by zero(state) for the next interval.
  template <typename State, typename Fill, typename Zero>
  void snapshot_rows(Table& out, KeyedStates<State>& states, bool reset, Fill&& fill, Zero&& zero) {
    std::vector<double> scores;
    for (std::size_t i = 0; i < states.size(); ++i) {
      const State& s = states.state(i);
      if (s.total == 0)
        continue;
      TableRow row;
      row.keys = decode_key(states.key(i));
      fill(s, row);
      out.rows.push_back(std::move(row));
      scores.push_back(static_cast<double>(s.total));
    }
    order(out, scores);
    if (reset)
      states.reset(zero);
  }

  std::vector<std::pair<std::string, SourceRegion>> by_names_;
  std::vector<FieldRef> by_;
  std::optional<std::int64_t> top_;
  std::uint32_t max_keys_ = 10240;
  std::optional<std::chrono::nanoseconds> every_;
  std::string value_name_;
  SourceRegion value_where_;
  std::string stage_name_;
  KeyEncoder keys_enc_;
};

}  // namespace tracer::stages
