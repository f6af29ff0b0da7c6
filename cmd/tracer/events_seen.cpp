// What `tracer run`'s status line and `tracer serve`'s log count as a recipe's events.
#include <algorithm>

#include "commands.hpp"

namespace tracer::cli {

std::uint64_t events_seen(const Stats& stats) {
  std::uint64_t events = 0;
  for (const auto& p : stats.probes) {
    const auto t = p.total();
    events += std::max(t.samples, t.kernel_hits);
  }
  return events;
}

}  // namespace tracer::cli
