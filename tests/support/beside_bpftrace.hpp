// A live comparison with bpftrace: tracer runs of a recipe (one per placement) and a bpftrace
// program, all system-wide and attached before a workload runs, stopped by SIGINT after it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace tracer::testing {

struct BesideBpftrace {
  std::map<std::string, std::string> tracer;  // --json output by placement
  std::optional<std::string> bpftrace;        // its output; nullopt without /usr/bin/bpftrace
  std::string problem;                        // what went wrong ("": nothing)
};

/// Runs `recipes` (a recipe file by placement name, each `tracer_cli run` with --json -v -d 60s)
/// and `bpftrace_program` (kBpftraceReady is put at its head) in `dir`, waits until every one
/// is attached, runs `workload` through the shell, then stops them all.
BesideBpftrace run_beside_bpftrace(const std::string& tracer_cli,
                                   const std::filesystem::path& dir,
                                   const std::map<std::string, std::filesystem::path>& recipes,
                                   const std::string& bpftrace_program,
                                   const std::string& workload);

/// The "events" of `probe` in a --json run's summary (nullopt when it is not there).
std::optional<std::uint64_t> summary_events(const std::string& json, const std::string& probe);

/// What bpftrace printed for map `@name` ("@name: N"; nullopt when it did not).
std::optional<std::uint64_t> bpftrace_count(const std::string& out, const std::string& name);

}  // namespace tracer::testing
