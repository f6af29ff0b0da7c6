// Private helper shared by the layers: "did you mean" suggestions by edit distance.
#pragma once

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tracer::detail {

/// Levenshtein distance with one reusable row; ~30-char names make this a few µs per pair.
inline std::size_t edit_distance(std::string_view a,
                                 std::string_view b,
                                 std::vector<std::size_t>& row) {
  row.resize(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j)
    row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + cost});
      diag = up;
    }
  }
  return row[b.size()];
}

/// How nearest() chooses among candidates. Callers differ in how far a typo may go; the
/// ranking is the same for all.
struct NearestOptions {
  static constexpr std::size_t kAnyDistance = std::numeric_limits<std::size_t>::max();

  /// The farthest a suggestion may be: max(max_distance, word.size() / 3), so that a long name
  /// may have more typos. kAnyDistance: no cut-off (but see related_only).
  std::size_t max_distance = kAnyDistance;
  /// How many to return at the most, closest first (ties in the candidates' order).
  std::size_t limit = 1;
  /// Only those at the best distance ("did you mean 'a' or 'b'?").
  bool best_only = false;
  /// Leave out a candidate with nothing in common with the word (a distance of the longer
  /// length: "ab" is no typo of "xy").
  bool related_only = true;
  /// A candidate that contains the word, or is contained in it, counts as at the cut-off
  /// whatever its length (words of 3 characters or more).
  bool substring = false;
  /// Names of the form prefix<separator>rest ("sched:sched_switch"): a candidate under another
  /// prefix also scores the distance of the rests plus one (the same event under another
  /// system). '\0': none.
  char separator = '\0';
};

/// The candidates nearest to `word` by edit distance, as `options` choose ("did you mean"). The
/// single implementation of suggestions in tracer: every layer calls this.
/// @return up to options.limit candidates, closest first; empty when none is near enough.
template <typename Range>
std::vector<std::string> nearest(std::string_view word,
                                 const Range& candidates,
                                 const NearestOptions& options = {}) {
  constexpr std::size_t kFar = NearestOptions::kAnyDistance;
  const std::size_t cutoff =
      options.max_distance == kFar ? kFar : std::max(options.max_distance, word.size() / 3);
  const auto gap = [](std::size_t a, std::size_t b) { return a > b ? a - b : b - a; };
  const auto split = [&](std::string_view s) {
    const auto at = s.find(options.separator);
    return at == std::string_view::npos ? std::pair{std::string_view{}, s}
                                        : std::pair{s.substr(0, at), s.substr(at + 1)};
  };
  const auto [word_prefix, word_rest] = split(word);

  std::vector<std::size_t> row;
  std::vector<std::string_view> names;
  std::vector<std::pair<std::size_t, std::size_t>> ranked;  // (score, index in names)
  for (const auto& item : candidates) {
    const std::string_view c(item);
    // A distance is never less than the gap in length: skip the quadratic work where the
    // result could not pass the cut-off anyway.
    std::size_t score = gap(word.size(), c.size()) <= cutoff ? edit_distance(word, c, row) : kFar;
    if (options.related_only && score >= std::max(word.size(), c.size()))
      score = kFar;
    if (options.separator != '\0') {
      const auto [prefix, rest] = split(c);
      if (prefix != word_prefix && gap(rest.size(), word_rest.size()) <= cutoff)
        score = std::min(score, edit_distance(word_rest, rest, row) + 1);
    }
    if (options.substring && word.size() >= 3 &&
        (c.find(word) != std::string_view::npos || word.find(c) != std::string_view::npos))
      score = std::min(score, cutoff);
    if (score == kFar || score > cutoff)
      continue;
    ranked.emplace_back(score, names.size());
    names.push_back(c);
  }
  std::sort(ranked.begin(), ranked.end());  // by distance, then in the given order
  std::vector<std::string> out;
  for (const auto& [score, i] : ranked) {
    if (out.size() == options.limit || (options.best_only && score != ranked.front().first))
      break;
    out.emplace_back(names[i]);
  }
  return out;
}

/// "did you mean a, b?" for nearest()'s suggestions, or `otherwise` when there are none.
[[nodiscard]] inline std::string did_you_mean(const std::vector<std::string>& near,
                                              std::string otherwise) {
  if (near.empty())
    return otherwise;
  std::string s = "did you mean ";
  for (std::size_t i = 0; i < near.size(); ++i)
    s += (i != 0 ? ", " : "") + near[i];
  return s + "?";
}

}  // namespace tracer::detail
