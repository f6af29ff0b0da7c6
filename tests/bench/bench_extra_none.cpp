// Without the BPF runs: the table has the engine's raw-sample run against the untraced one.
#include "bench_common.hpp"

namespace tracer::bench {
std::vector<std::function<Row(long)>> extra_runs() {
  return {};
}
}  // namespace tracer::bench
