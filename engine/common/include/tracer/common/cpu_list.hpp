// CPU lists as the kernel writes them (sysfs cpumask, cpus, online, present) and as perf's -C
// takes them: "0-3,8".
#pragma once

#include <string_view>
#include <vector>

#include "tracer/result.hpp"

namespace tracer::cpus {

/// The highest CPU number a list may name (above any kernel's NR_CPUS): a bound on the work a
/// hostile or damaged list can cause.
inline constexpr int kMaxCpu = 65535;

/// "0-3,8" -> {0, 1, 2, 3, 8}: ranges and single CPUs, separated by commas, white space
/// around the whole list ignored; each CPU once, in the order the list names them. An empty
/// list is no CPU.
/// @return the CPUs, or EINVAL naming the element that is not a CPU or a range of them (a
/// range backwards, a CPU above kMaxCpu).
[[nodiscard]] Result<std::vector<int>> parse_list(std::string_view text);

}  // namespace tracer::cpus
