// Shared machinery of the aggregation stages (count, sum, min, max, avg, rate, hist, lhist,
// quantiles): `by` keys encoded without allocation, or kept as integers when they are (the
// fixed-width path: no bytes, no string hash), a key -> state table, `top` and `every`.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "tracer/check.hpp"
#include "tracer/ext/stage.hpp"

namespace tracer::stages {

/// a + b wrapping at 64 bits, as the kernel's sums do (no signed overflow).
[[nodiscard]] constexpr std::int64_t wrapping_add(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) + static_cast<std::uint64_t>(b));
}

/// How a kernel part keeps a minimum or maximum in a u64 under which the largest wins and 0 is
/// none, so that zeroed array slots and new keys need no initial sentinel: v ^ kMaxXor (the sign
/// bit flipped: signed order becomes unsigned order) for a maximum, v ^ kMinXor (all but the
/// sign bit flipped: the order reversed) for a minimum.
inline constexpr std::uint64_t kMaxXor = 0x8000000000000000ULL;
inline constexpr std::uint64_t kMinXor = 0x7fffffffffffffffULL;

/// The options every aggregation takes: by, top, every.
[[nodiscard]] std::vector<OptionSpec> aggregate_options();
/// The spec of an aggregation of a field: `field` (required), its `own` options, then
/// aggregate_options().
[[nodiscard]] StageSpec field_aggregation_spec(std::string name,
                                               std::string summary,
                                               std::vector<OptionSpec> own = {});
/// `{ target = max(target, e) }` in a block of its own (its locals scoped), in a kernel part's
/// update.
void emit_raise_block(KernelCode& c, std::string_view target, std::string_view e);

/// Encodes a tuple of values as bytes (a type tag, then 8 bytes, or a length and the bytes).
/// The buffer keeps its capacity: after the longest key was seen once, encoding allocates nothing.
class KeyEncoder {
 public:
  KeyEncoder() { buf_.reserve(256); }
  void clear() noexcept { buf_.clear(); }
  /// May grow the buffer (and throw bad_alloc) for a key longer than any seen before.
  void add(const Value& v);
  /// A reference to an interned stack (StackInterner's canonical keys).
  void add_stack_ref(std::uint32_t index);
  /// Bytes of another key, as they are (a field copied from one key into another).
  void append_raw(std::string_view bytes) { buf_.append(bytes); }
  [[nodiscard]] std::string_view bytes() const noexcept { return buf_; }

 private:
  std::string buf_;
};

class StackInterner;

/// Decodes KeyEncoder bytes into cells: ip lists become stacks of unsymbolized frames, and the
/// stack references of a canonical key (StackInterner) the stacks they name.
[[nodiscard]] std::vector<Cell> decode_key(std::string_view bytes,
                                           const StackInterner* stacks = nullptr);

/// Encoded keys are hashed 8 bytes at a time (a multiply and a shift per word): a key holding
/// a callchain is a few hundred bytes, hashed for every event.
struct KeyHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept {
    std::uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
    const char* p = s.data();
    std::size_t n = s.size();
    for (; n >= 8; p += 8, n -= 8) {
      std::uint64_t w = 0;
      std::memcpy(&w, p, 8);
      h = (h ^ w) * 0xff51afd7ed558ccdULL;
      h ^= h >> 32;
    }
    std::uint64_t w = 0;
    if (n != 0)
      std::memcpy(&w, p, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const noexcept { return a == b; }
};

/// Keys with stacks, made canonical: each ip list of a key is symbolized once, when its key is
/// first seen (the process's maps are read then, while it lives), and replaced by a reference to
/// an interned stack of functions (offsets dropped, as perf report groups). Keys whose stacks name
/// the same functions then share one state, whatever their exact addresses or process.
class StackInterner {
 public:
  explicit StackInterner(symbols::Symbolizer& symbolizer) : symbolizer_(&symbolizer) {}
  /// The canonical key of KeyEncoder bytes `raw` (a lookup once known; a new raw key is
  /// symbolized and allocates). The view is valid until the next call.
  [[nodiscard]] std::string_view canonical(std::string_view raw);
  [[nodiscard]] const Stack& stack(std::uint32_t index) const noexcept { return stacks_[index]; }
  [[nodiscard]] std::size_t size() const noexcept { return stacks_.size(); }

 private:
  std::string make_canonical(std::string_view raw);
  std::uint32_t intern(Stack stack);
  symbols::Symbolizer* symbolizer_;
  std::unordered_map<std::string, std::string, KeyHash, KeyEq> canonical_;  // raw -> canonical
  std::unordered_map<std::string, std::uint32_t> index_;                    // identity -> stack
  std::vector<Stack> stacks_;
  std::string identity_;  // intern()'s
  static constexpr std::size_t kMaxRawKeys = std::size_t{1} << 18;
};

/// A key of at most kMaxFields fields in at most kMaxWords words: an integer or a missing value
/// in one word, a string of at most kMaxString bytes (a comm, a char[16] field) in two (its
/// bytes, zero-padded). What the fixed-width path hashes instead of KeyEncoder bytes. `types`
/// holds a byte per field: the Value's index + 1 for the one-word kinds (1 missing, 2 int64,
/// 3 uint64), kString + its length for a string; so a signed and an unsigned key of the same
/// bits, strings of other lengths, or keys of other lengths stay apart, as their encoded bytes
/// do. A key that does not fit (a longer string, a double, a stack) takes the encoded path, and
/// always the same one: a key has one form.
struct FixedKey {
  static constexpr std::size_t kMaxFields = 3;
  static constexpr std::size_t kMaxWords = 4;
  static constexpr std::size_t kMaxString = 16;
  static constexpr std::uint32_t kString = 0x10;  // + length: 0x10 .. 0x20
  std::array<std::uint64_t, kMaxWords> v{};
  std::uint32_t types = 0;
  std::uint8_t words = 0;  // set()'s cursor: the words used (not part of the key)

  /// Adds field `i` (in order, from 0). @return false for a value that does not fit: that key
  /// takes the encoded path.
  bool set(std::size_t i, const Value& value) noexcept {
    const std::size_t t = value.index();
    std::uint32_t code = 0;
    if (t <= 2) {
      if (words >= kMaxWords)
        return false;
      if (t == 1)
        v[words] = static_cast<std::uint64_t>(*std::get_if<std::int64_t>(&value));
      else if (t == 2)
        v[words] = *std::get_if<std::uint64_t>(&value);
      ++words;
      code = static_cast<std::uint32_t>(t + 1);
    } else if (const auto* str = std::get_if<std::string_view>(&value)) {
      if (str->size() > kMaxString || words + 2U > kMaxWords)
        return false;
      std::memcpy(reinterpret_cast<char*>(v.data()) + (std::size_t{words} * 8), str->data(),
                  str->size());
      words += 2;
      code = kString + static_cast<std::uint32_t>(str->size());
    } else {
      return false;
    }
    types |= code << (8 * i);
    return true;
  }
};

/// The KeyEncoder bytes of `key`, as the encoded path would have stored them (a new key only).
[[nodiscard]] std::string encode_fixed(const FixedKey& key);

/// FixedKey -> state index: open addressing, a power-of-two table at most half full, linear
/// probing, a multiplicative hash, and the last key found (consecutive events of one thread are
/// common). find() does not allocate; insert() grows the table (a new key only).
class FixedKeyIndex {
 public:
  static constexpr std::uint32_t kAbsent = UINT32_MAX;

  [[nodiscard]] std::uint32_t find(const FixedKey& k) noexcept {
    if (slots_.empty())
      return kAbsent;
    if (same(slots_[last_], k))
      return slots_[last_].index;
    return find_other(k);
  }
  /// find() without the look at the last key found: for a key that is likely another (a run's
  /// next key). Right for any key.
  [[nodiscard]] std::uint32_t find_other(const FixedKey& k) noexcept {
    if (slots_.empty())
      return kAbsent;
    for (std::size_t s = slot_of(k);; s = (s + 1) & mask_) {
      const Slot& slot = slots_[s];
      if (same(slot, k)) {
        last_ = s;
        return slot.index;
      }
      if (slot.types == kEmpty)
        return kAbsent;
    }
  }
  /// Adds `k` (not present) as state `index`.
  void insert(const FixedKey& k, std::uint32_t index);
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }

 private:
  // An empty slot's types: no key has it (a key uses a byte per field), so same() never
  // matches an empty slot.
  static constexpr std::uint32_t kEmpty = UINT32_MAX;
  struct Slot {  // 40 bytes
    std::array<std::uint64_t, FixedKey::kMaxWords> v{};
    std::uint32_t types = kEmpty;
    std::uint32_t index = kAbsent;
  };
  // Word by word, without branches: std::array's == is a memcmp call in libstdc++ 12.
  template <typename A>
  static bool same(const A& a, const FixedKey& b) noexcept {
    return ((a.v[0] ^ b.v[0]) | (a.v[1] ^ b.v[1]) | (a.v[2] ^ b.v[2]) | (a.v[3] ^ b.v[3]) |
            (a.types ^ b.types)) == 0;
  }
  [[nodiscard]] std::size_t slot_of(const FixedKey& k) const noexcept {
    // Fibonacci hashing per word (the top bits of a multiply by an odd constant depend on
    // every bit of the word), the words' products xored: independent multiplies, one latency.
    const std::uint64_t h = ((k.v[0] + k.types) * 0x9E3779B97F4A7C15ULL) ^
                            (k.v[1] * 0xC2B2AE3D27D4EB4FULL) ^ (k.v[2] * 0x165667B19E3779F9ULL) ^
                            (k.v[3] * 0x27D4EB2F165667C5ULL);
    return static_cast<std::size_t>(h >> shift_);
  }
  /// @return the slot's position.
  std::size_t place(const Slot& slot) noexcept;

  std::vector<Slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
  std::size_t last_ = 0;  // the slot of the last key found or inserted
};

/// Key -> State, for encoded keys and fixed keys alike: one state vector in first-seen order,
/// each key stored as its KeyEncoder bytes (what snapshots decode). A lookup of a known key
/// does not allocate (heterogeneous find, or the FixedKeyIndex); a new key allocates its bytes
/// once. reset() keeps keys and zeroes states so an `every` interval does not re-allocate the
/// keys it saw in the previous interval.
///
/// A key is looked up by one form only: a stage keys every integer-only key by FixedKey (when
/// AggregateStage::fixed_keys_) and the others by bytes, from events and kernel rows alike, so
/// a key never has two states.
template <typename State>
class KeyedStates {
 public:
  template <typename Make>
  State& get(std::string_view key, Make&& make) {
    if (auto it = index_.find(key); it != index_.end())
      return states_[it->second];
    if (states_.size() >= limit_)
      return spill(make);
    const auto i = static_cast<std::uint32_t>(states_.size());
    index_.emplace(std::string(key), i);
    keys_.emplace_back(key);
    states_.push_back(make());
    return states_.back();
  }
  template <typename Make>
  State& get(const FixedKey& key, Make&& make) {
    if (const std::uint32_t i = fixed_.find(key); i != FixedKeyIndex::kAbsent) [[likely]]
      return states_[i];
    return add(key, make);
  }
  /// get() without the look at the last key found, for a key likely to be another (a run's next
  /// key). Right for any key.
  template <typename Make>
  State& get_other(const FixedKey& key, Make&& make) {
    if (const std::uint32_t i = fixed_.find_other(key); i != FixedKeyIndex::kAbsent) [[likely]]
      return states_[i];
    return add(key, make);
  }
  /// An `every` interval's end: the states zeroed, their keys kept (no allocation for the keys
  /// that come back) while most of them had events in the interval and they fill at most half
  /// the limit; otherwise every key goes, so that keys that come and go (pids, offsets) neither
  /// fill the limit for good nor hold memory a run of hours would grow by.
  template <typename Zero>
  void reset(Zero&& zero) {
    std::size_t idle = 0;
    if constexpr (requires(const State& s) { s.total; })
      idle = static_cast<std::size_t>(std::count_if(states_.begin(), states_.end(),
                                                    [](const State& s) { return s.total == 0; }));
    else if constexpr (requires(const State& s) { s.count; })
      idle = static_cast<std::size_t>(std::count_if(states_.begin(), states_.end(),
                                                    [](const State& s) { return s.count == 0; }));
    if (states_.size() * 2 > limit_ || idle * 2 > states_.size()) {
      index_.clear();
      fixed_ = FixedKeyIndex{};
      keys_.clear();
      states_.clear();
      return;
    }
    for (auto& s : states_)
      zero(s);
  }
  /// At most `n` keys (the stage's key_limit): a new key past them gets no state of its own, its
  /// events go to one spill state the stage reports (dropped()).
  void limit(std::size_t n) noexcept { limit_ = n; }
  /// The events of keys past the limit since the start (their State's count or total).
  [[nodiscard]] std::uint64_t dropped() const noexcept {
    if (!spilled_)
      return 0;
    if constexpr (requires { spill_.total; })
      return spill_.total;
    else if constexpr (requires { spill_.count; })
      return spill_.count;
    else
      return 0;
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
  // A new fixed key, out of line so that get() of a known key stays small enough to inline.
  template <typename Make>
  [[gnu::noinline]] State& add(const FixedKey& key, Make& make) {
    if (states_.size() >= limit_)
      return spill(make);
    const auto i = static_cast<std::uint32_t>(states_.size());
    keys_.push_back(encode_fixed(key));
    states_.push_back(make());
    fixed_.insert(key, i);
    return states_.back();
  }

  template <typename Make>
  [[gnu::noinline]] State& spill(Make& make) {
    if (!spilled_) {
      spill_ = make();
      spilled_ = true;
    }
    return spill_;
  }

  std::unordered_map<std::string, std::uint32_t, KeyHash, KeyEq> index_;
  FixedKeyIndex fixed_;
  std::vector<std::string> keys_;
  std::vector<State> states_;
  std::size_t limit_ = SIZE_MAX;
  State spill_{};  // what keys past the limit add up to (never a row)
  bool spilled_ = false;
};

/// Tests and benchmarks: whether stages bound from now on may key by FixedKey (default true).
/// false keys every state by its encoded bytes, as before the fixed-width path, so both paths
/// can be compared on the same events.
void set_fixed_keys_enabled(bool enabled) noexcept;

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

/// The kernel part of a distribution (hist, lhist, quantiles): a count per bucket of
/// tracer/common/buckets.hpp (`tr_bucket(v)` is `call` of its C twin), then `extra` bytes of the
/// stage's own (quantiles: the extremes), then the sum of the values.
class DistributionKernel : public KernelAgg {
 public:
  DistributionKernel(std::string_view name, std::uint32_t buckets, std::string call)
      : name_(name), buckets_(buckets), call_(std::move(call)) {}
  [[nodiscard]] std::string_view name() const noexcept override { return name_; }
  [[nodiscard]] std::uint32_t value_size() const noexcept override {
    return (8 * buckets_) + extra_bytes() + 8;
  }
  [[nodiscard]] std::optional<std::string> check(std::uint32_t max_value_size) const override;
  void emit_value(KernelCode& c) const override;
  void emit_helpers(KernelCode& c) const override { c.bucket_function(call_); }
  void emit_update(KernelCode& c) const override;
  [[nodiscard]] bool same(const KernelAgg& other) const override;
  [[nodiscard]] std::uint32_t buckets() const noexcept { return buckets_; }
  /// Where the sum is in a value.
  [[nodiscard]] std::size_t sum_at() const noexcept {
    return (8 * std::size_t{buckets_}) + extra_bytes();
  }

 protected:
  /// Bytes between the counts and the sum.
  [[nodiscard]] virtual std::uint32_t extra_bytes() const noexcept { return 0; }
  virtual void emit_extra_value(KernelCode& c) const { (void)c; }
  virtual void emit_extra_update(KernelCode& c) const { (void)c; }

 private:
  std::string_view name_;
  std::uint32_t buckets_;
  std::string call_;
};

/// Base of the aggregations (the Aggregation role): reads by/top/every, binds the keys, orders
/// and cuts rows.
class AggregateStage : public Stage, public Aggregation {
 public:
  [[nodiscard]] Aggregation* aggregation() noexcept override { return this; }
  [[nodiscard]] std::optional<std::chrono::nanoseconds> every() const noexcept override {
    return every_;
  }
  /// keys_dropped: the events of keys past key_limit, not counted in any row.
  void counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const override {
    if (const std::uint64_t n = keys_dropped(); n != 0)
      out.emplace_back("keys_dropped", n);
  }

 protected:
  /// The events of keys its states had no room for (KeyedStates::dropped).
  [[nodiscard]] virtual std::uint64_t keys_dropped() const noexcept { return 0; }
  /// The `by` fields' readers of a probe's in-place samples (ok when each has one), bound when
  /// fixed_keys_.
  struct IntKeys {
    std::array<IntReader, FixedKey::kMaxFields> readers{};
    bool ok = false;
    bool words = false;  // integers only: field i is word i of the key
    /// The key fits with every field there: field i's first word when every field has a value
    /// (else the key is laid out by FixedKey::set's cursor: a missing string takes one word).
    bool laid_out = false;
    std::uint8_t fields = 0;  // by_.size()
    std::array<std::uint8_t, FixedKey::kMaxFields> at{};
  };
  /// Reads by/top/every; returns the options for the stage's own ones.
  void configure_common(StageOptions& opts);
  void bind_keys(BindContext& ctx, Diagnostics& diags);
  /// Binds a required value field read in configure (value_name_/value_where_).
  std::optional<FieldRef> bind_value(BindContext& ctx, Diagnostics& diags);
  /// The key of `e`, an Event or a InPlaceSample (valid until the next call).
  template <typename Sample>
  [[nodiscard]] std::string_view key_of(const Sample& e) {
    keys_enc_.clear();
    for (const auto& f : by_)
      keys_enc_.add(f.read(e));
    return keys_enc_.bytes();
  }
  /// The key of a row an in-kernel run computed (valid until the next call).
  [[nodiscard]] std::string_view key_of(const KernelRow& row);
  /// The key of `e` (an Event or a InPlaceSample) as integers, when fixed_keys_ and each `by`
  /// value is an integer or missing.
  template <typename Sample>
  [[nodiscard]] bool fixed_key_of(const Sample& e, FixedKey& k) const noexcept {
    TRACER_DCHECK(by_.size() <= FixedKey::kMaxFields);
    for (std::size_t i = 0; i < by_.size(); ++i) {
      if (!k.set(i, by_[i].read(e)))
        return false;
    }
    return true;
  }
  [[nodiscard]] bool fixed_key_of(const KernelRow& row, FixedKey& k) const noexcept;

  /// The state of the key of `e` (an event or a KernelRow), made by make() when new: by its
  /// integers when fixed_keys_ and they are all integers, else by its encoded bytes.
  template <typename State, typename Source, typename Make>
  State& state_of(const Source& e, KeyedStates<State>& states, Make&& make) {
    if constexpr (std::is_same_v<Source, InPlaceSample>) {
      FixedKey k;
      if (int_key_of(e, k))
        return states.get(k, make);
    }
    if (fixed_keys_) {
      FixedKey k;
      if (fixed_key_of(e, k))
        return states.get(k, make);
    }
    if (stacks_)
      return states.get(stacks_->canonical(key_of(e)), make);
    return states.get(key_of(e), make);
  }
  /// Whether the `by` fields and `value` (when set) of probe `probe` read from its delivered
  /// samples in place (Stage::takes_delivered of an aggregation).
  [[nodiscard]] bool reads_in_place(std::uint32_t probe,
                                    const std::optional<FieldRef>& value) const noexcept {
    if (stacks_ || (value && !value->reads_in_place(probe)))
      return false;
    return std::all_of(by_.begin(), by_.end(),
                       [probe](const FieldRef& f) { return f.reads_in_place(probe); });
  }
  /// The key of a delivered sample as integers read straight from it, when its probe has an
  /// IntReader for each `by` field (int_keys_).
  [[nodiscard, gnu::always_inline]] bool int_key_of(const InPlaceSample& s,
                                                    FixedKey& k) const noexcept {
    const std::uint32_t probe = s.probe();
    if (probe >= int_keys_.size() || !int_keys_[probe].ok)
      return false;
    const auto& readers = int_keys_[probe].readers;
    if (int_keys_[probe].words) {  // integers only: field i is word i
      for (std::size_t i = 0; i < by_.size(); ++i) {
        const bool has = readers[i].read(s, k.v[i]);
        k.types |= static_cast<std::uint32_t>(has ? readers[i].value_index() + 1 : 1) << (8 * i);
      }
      return true;
    }
    // As FixedKey::set lays the same values out: a word per integer or missing value, two per
    // string.
    std::size_t w = 0;
    for (std::size_t i = 0; i < by_.size(); ++i) {
      const IntReader& r = readers[i];
      std::uint32_t code = 1;  // missing
      std::array<std::uint64_t, 2> str{};
      const int len = r.is_string ? r.read_string_words(s, str.data()) : -1;
      if (len >= 0) {
        if (w + 2 > FixedKey::kMaxWords)
          return false;
        k.v[w] = str[0];
        k.v[w + 1] = str[1];
        w += 2;
        code = FixedKey::kString + static_cast<std::uint32_t>(len);
      } else {
        if (w >= FixedKey::kMaxWords)
          return false;
        if (!r.is_string && r.read(s, k.v[w]))
          code = static_cast<std::uint32_t>(r.value_index() + 1);
        ++w;
      }
      k.types |= code << (8 * i);
    }
    return true;
  }
  /// int_key_of() of a probe whose key is laid out (IntKeys::laid_out) with N fields: each
  /// field at its word (the other words of `k` are left as they are: zero). @return false when
  /// a field has no value (the key is then laid out by the cursor).
  template <std::size_t N>
  [[nodiscard, gnu::always_inline]] static bool laid_out_key(const IntKeys& plan,
                                                             const InPlaceSample& s,
                                                             FixedKey& k) noexcept {
    std::uint32_t types = 0;
    for (std::size_t i = 0; i < N; ++i) {
      const IntReader& r = plan.readers[i];
      if (r.is_string) {
        const int len = r.read_string_words(s, &k.v[plan.at[i]]);
        if (len < 0)
          return false;
        types |= (FixedKey::kString + static_cast<std::uint32_t>(len)) << (8 * i);
      } else {
        if (!r.read(s, k.v[plan.at[i]]))
          return false;
        types |= static_cast<std::uint32_t>(r.value_index() + 1) << (8 * i);
      }
    }
    k.types = types;
    return true;
  }
  /// count_runs() from samples[i], whose key `k` begins a run of `run`, over the samples of its
  /// probe with a laid-out key of N fields. Keys alternate between two buffers (no copy); every
  /// word the layout uses is written for each sample and the others stay zero.
  /// @return the first sample not counted.
  template <std::size_t N, typename State, typename Make, typename Add>
  std::size_t laid_out_runs(std::span<const InPlaceSample> samples,
                            std::size_t i,
                            const FixedKey& first,
                            std::uint64_t run,
                            KeyedStates<State>& states,
                            Make& make,
                            Add& add) const noexcept {
    const std::uint32_t probe = samples[i].probe();
    const IntKeys& plan = int_keys_[probe];
    std::array<FixedKey, 2> keys{first, FixedKey{}};
    std::size_t cur = 0;
    State* state = &states.get(keys[0], make);
    for (++i; i < samples.size() && samples[i].probe() == probe; ++i, ++run) {
      FixedKey& next = keys[cur ^ 1];
      if (!laid_out_key<N>(plan, samples[i], next))
        break;
      if (same_key(next, keys[cur])) [[likely]]
        continue;
      add(*state, run);  // before the next get(): a new key may move the states
      run = 0;
      cur ^= 1;
      state = &states.get_other(keys[cur], make);
    }
    add(*state, run);
    return i;
  }
  [[nodiscard]] static bool same_key(const FixedKey& a, const FixedKey& b) noexcept {
    return ((a.v[0] ^ b.v[0]) | (a.v[1] ^ b.v[1]) | (a.v[2] ^ b.v[2]) | (a.v[3] ^ b.v[3]) |
            (a.types ^ b.types)) == 0;
  }
  /// Events per key of a batch of delivered samples: consecutive samples of one probe and key (a
  /// thread's burst) are counted in a register, each compared word by word with the run's key,
  /// and added to their state once, by add(state, run); the samples int_key_of cannot key go to
  /// one(sample).
  template <typename State, typename Make, typename Add, typename One>
  void count_runs(std::span<const InPlaceSample> samples,
                  KeyedStates<State>& states,
                  Make&& make,
                  Add&& add,
                  One&& one) noexcept {
    const std::size_t n = samples.size(), fields = by_.size();
    if (fields == 0 && n != 0) {
      add(states.get(FixedKey{}, make), n);  // no key: one run
      return;
    }
    // k: the key of samples[i] when `keyed` (computed once: the sample that ends a run starts
    // the next).
    FixedKey k;
    bool keyed = n != 0 && int_key_of(samples[0], k);
    for (std::size_t i = 0; i < n;) {
      if (!keyed) {
        one(samples[i++]);
        k = {};
        keyed = i < n && int_key_of(samples[i], k);
        continue;
      }
      const std::uint32_t probe = samples[i].probe();
      const auto& readers = int_keys_[probe].readers;
      std::uint64_t run = 1;
      if (fields == 1 && readers[0].in_header && readers[0].size == 4 && !readers[0].is_signed) {
        // One word before the raw data (pid, tid, cpu): the probe's samples keyed by that word
        // alone, each run of one value added once; the key's type bits stay those of the first.
        const std::uint32_t off = readers[0].offset;
        auto want = static_cast<std::uint32_t>(k.v[0]);
        State* state = &states.get(k, make);
        for (++i; i < n && samples[i].probe() == probe; ++i, ++run) {
          const std::uint32_t w = samples[i].word32(off);
          if (w == want) [[likely]]
            continue;
          add(*state, run);  // before the next get(): a new key may move the states
          run = 0;
          want = w;
          k.v[0] = w;
          state = &states.get(k, make);
        }
        add(*state, run);
        k = {};
        keyed = i < n && int_key_of(samples[i], k);
        continue;
      }
      if (int_keys_[probe].laid_out) {
        // Each field at its word: a run of the probe's samples keyed in line, each run added
        // once; a sample missing a field ends it (the paths below).
        switch (int_keys_[probe].fields) {
          case 1:
            i = laid_out_runs<1>(samples, i, k, run, states, make, add);
            break;
          case 2:
            i = laid_out_runs<2>(samples, i, k, run, states, make, add);
            break;
          default:
            i = laid_out_runs<3>(samples, i, k, run, states, make, add);
            break;
        }
        k = {};
        keyed = i < n && int_key_of(samples[i], k);
        continue;
      }
      if (int_keys_[probe].words) {
        // Integers only: a run compared field by field (no key built per sample).
        for (++i; i < n; ++i, ++run) {
          const InPlaceSample& s = samples[i];
          if (s.probe() != probe)
            break;
          bool same = true;
          for (std::size_t f = 0; f < fields && same; ++f) {
            std::uint64_t v = 0;
            const bool has = readers[f].read(s, v);
            // The run's key has field f when its type byte says a value (not 1: missing).
            same = has == (((k.types >> (8 * f)) & 0xFFU) != 1U) && (!has || v == k.v[f]);
          }
          if (!same)
            break;
        }
        add(states.get(k, make), run);
        k = {};
        keyed = i < n && int_key_of(samples[i], k);
        continue;
      }
      FixedKey next;
      bool next_keyed = false;
      for (++i; i < n; ++i, ++run) {
        next = {};
        next_keyed = int_key_of(samples[i], next);
        if (!next_keyed || samples[i].probe() != probe || !same_key(next, k))
          break;
      }
      add(states.get(k, make), run);
      k = next;
      keyed = next_keyed;
    }
  }
  /// The cells of a stored key, its stacks symbolized.
  [[nodiscard]] std::vector<Cell> decode(std::string_view key) const {
    return decode_key(key, stacks_.get());
  }
  /// The kernel form of this aggregation: its kernel part `agg` over value_name_, keyed by `by`.
  [[nodiscard]] KernelForm kernel_base(std::shared_ptr<const KernelAgg> agg) const;
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
    states.reserve(std::min<std::size_t>(expected_keys, key_limit_));
    states.limit(key_limit_);
  }

  /// The per-key loop of a distribution (hist, lhist, quantiles): for each event (Event* or
  /// InPlaceSample) whose value field is set, add(state of its key, value), the state made by
  /// make() for a new key.
  template <typename Sample, typename State, typename Make, typename Add>
  void accumulate(std::span<Sample> events,
                  const std::optional<FieldRef>& value,
                  KeyedStates<State>& states,
                  Make&& make,
                  Add&& add) noexcept {
    if (!value)
      return;
    for (const auto& item : events) {
      const auto& e = [&item]() -> const auto& {
        if constexpr (std::is_pointer_v<Sample>)
          return *item;
        else
          return item;
      }
      ();
      const Value v = value->read(e);
      if (is_none(v))
        continue;
      add(state_of(e, states, make), v);
    }
  }

  /// absorb() of a distribution (hist, lhist, quantiles: DistributionKernel's values): each
  /// row's bucket counts, over its CPUs, added to its key's, then also(state, row) for what
  /// else the stage keeps (quantiles: min and max).
  template <typename State, typename Make, typename Also>
  void absorb_buckets(const std::vector<KernelRow>& rows,
                      const DistributionKernel& kernel,
                      KeyedStates<State>& states,
                      Make&& make,
                      Also&& also) {
    const std::uint32_t n = kernel.buckets();
    for (const auto& r : rows) {
      State& s = state_of(r, states, make);
      const std::size_t kept = std::min<std::size_t>(s.counts.size(), n);
      for (std::uint32_t i = 0; i < r.values; ++i) {
        const std::byte* v = r.value(i);
        for (std::size_t b = 0; b < n; ++b) {
          const std::uint64_t c = kernel_u64(v + (8 * b));
          if (b < kept)
            s.counts[b] += c;
          s.total += c;
        }
        s.sum = wrapping_add(s.sum, static_cast<std::int64_t>(kernel_u64(v + kernel.sum_at())));
      }
      also(s, r);
    }
  }
  template <typename State, typename Make>
  void absorb_buckets(const std::vector<KernelRow>& rows,
                      const DistributionKernel& kernel,
                      KeyedStates<State>& states,
                      Make&& make) {
    absorb_buckets(rows, kernel, states, std::forward<Make>(make), [](State&, const KernelRow&) {});
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
      row.keys = decode(states.key(i));
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
  /// Keys the stage holds in user space at most (`key_limit`): the kernel's map is read before
  /// it fills, so a run may gather more keys than max_keys, but not without bound.
  std::uint32_t key_limit_ = 1U << 20;
  std::uint32_t max_stacks_ = 16384;
  std::optional<std::chrono::nanoseconds> every_;
  std::string value_name_;
  SourceRegion value_where_;
  std::string stage_name_;
  KeyEncoder keys_enc_;
  /// Set at bind: every `by` field is an integer (FieldType kInt/kUint) and there are at most
  /// FixedKey::kMaxFields of them (or none), so states are keyed by FixedKey where they can be.
  bool fixed_keys_ = false;
  /// Set at bind when fixed_keys_: per probe, the `by` fields' readers (IntKeys).
  std::vector<IntKeys> int_keys_;
  /// Set at bind when a `by` field is a stack: keys made canonical through the pipeline's
  /// symbolizer.
  std::unique_ptr<StackInterner> stacks_;
};

}  // namespace tracer::stages
