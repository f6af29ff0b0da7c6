// One-line human text for a decoded record: for logs, golden tests and `perf script`-like output.
#pragma once

#include <string>

#include "tracer/perf/record.hpp"

namespace tracer::perf {

/// "SAMPLE pid=12 tid=12 time=1234 cpu=1 id=7 raw=48B" / "COMM pid=12 tid=12 comm=bash exec" ...
/// Fields appear only when the record carries them; the sample_id trailer is appended as
/// "{pid=.. tid=.. time=.. id=.. cpu=..}" when present.
[[nodiscard]] std::string to_text(const Record& r);

}  // namespace tracer::perf
