// Private helper shared by the engine layers: "did you mean" suggestions by edit distance.
#pragma once

#include <algorithm>
#include <cstddef>
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

}  // namespace tracer::detail

namespace tracer::detail {

/// Up to `limit` of `candidates` nearest to `word` by edit distance (closest first, ties in
/// their given order), leaving out those with nothing in common with it.
inline std::vector<std::string> nearest(std::string_view word,
                                        const std::vector<std::string>& candidates,
                                        std::size_t limit) {
  std::vector<std::size_t> row;
  std::vector<std::pair<std::size_t, std::size_t>> ranked;  // (distance, index)
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::size_t d = edit_distance(word, candidates[i], row);
    if (d < std::max(word.size(), candidates[i].size()))
      ranked.emplace_back(d, i);
  }
  std::sort(ranked.begin(), ranked.end());  // by distance, then by given order
  std::vector<std::string> out;
  for (std::size_t i = 0; i < ranked.size() && i < limit; ++i)
    out.push_back(candidates[ranked[i].second]);
  return out;
}

}  // namespace tracer::detail
