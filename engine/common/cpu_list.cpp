#include "tracer/common/cpu_list.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>

#include "tracer/common/text_file.hpp"

namespace tracer::cpus {

Result<std::vector<int>> parse_list(std::string_view text) {
  const std::string_view list = detail::trim(text);
  std::vector<int> out;
  std::vector<bool> seen;
  std::size_t at = 0;
  while (at < list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    const std::string_view part = list.substr(at, comma - at);
    const std::size_t dash = part.find('-');
    const auto lo = detail::parse_uint<unsigned>(part.substr(0, dash));
    const auto hi =
        dash == std::string_view::npos ? lo : detail::parse_uint<unsigned>(part.substr(dash + 1));
    if (!lo || !hi || *lo > *hi || *hi > static_cast<unsigned>(kMaxCpu)) {
      return fail(EINVAL, fmt::format("'{}' in the CPU list '{}' is not a CPU or a range of CPUs "
                                      "(0 to {})",
                                      part, list, kMaxCpu));
    }
    if (seen.size() <= *hi)
      seen.resize(*hi + 1, false);
    for (unsigned c = *lo; c <= *hi; ++c) {
      if (!seen[c]) {
        seen[c] = true;
        out.push_back(static_cast<int>(c));
      }
    }
    at = comma + 1;
    if (comma + 1 == list.size())  // a trailing comma names no CPU
      return fail(EINVAL, fmt::format("the CPU list '{}' ends with a comma", list));
  }
  return out;
}

}  // namespace tracer::cpus
