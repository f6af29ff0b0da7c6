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
