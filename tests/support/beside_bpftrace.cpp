#include "support/beside_bpftrace.hpp"

#include <fmt/core.h>

#include <csignal>
#include <fstream>
#include <regex>
#include <vector>

#include "support/cli.hpp"

namespace tracer::testing {

namespace fs = std::filesystem;

BesideBpftrace run_beside_bpftrace(const std::string& tracer_cli,
                                   const fs::path& dir,
                                   const std::map<std::string, fs::path>& recipes,
                                   const std::string& bpftrace_program,
                                   const std::string& workload) {
  BesideBpftrace out;
  std::vector<pid_t> runs;
  const auto stop_all = [&] {
    for (const pid_t pid : runs)
      ::kill(pid, SIGINT);
    for (const pid_t pid : runs) {
      if (exit_code_within(pid, kBpftraceExitSeconds) != 0 && out.problem.empty())
        out.problem = fmt::format("process {} did not end cleanly after its SIGINT", pid);
    }
  };
  for (const auto& [placement, recipe] : recipes) {
    runs.push_back(spawn_to_file({tracer_cli, "run", recipe.string(), "--json", "-v", "-d", "60s"},
                                 dir / (placement + ".out"), dir / (placement + ".err")));
  }
  const bool bpftrace = fs::exists("/usr/bin/bpftrace");
  const auto bt_out = dir / "bt.out";
  if (bpftrace) {
    const auto bt = dir / "beside.bt";
    std::ofstream(bt) << kBpftraceReady << bpftrace_program << "interval:s:60 { exit(); }\n";
    runs.push_back(spawn_to_file({"/usr/bin/bpftrace", bt.string()}, bt_out));
    if (!wait_for_text(bt_out, kBpftraceReadyLine)) {
      out.problem = "bpftrace never attached: " + slurp(bt_out);
      stop_all();
      return out;
    }
  }
  for (const auto& [placement, recipe] : recipes) {
    const auto err = dir / (placement + ".err");
    if (!wait_for_text(err, "tracer: rings:")) {
      out.problem = fmt::format("tracer ({}) never attached: {}", placement, slurp(err));
      stop_all();
      return out;
    }
  }
  const auto w = shell(workload);
  if (w.exit_code != 0)
    out.problem = fmt::format("the workload failed ({}): {}", w.exit_code, w.err);
  stop_all();
  for (const auto& [placement, recipe] : recipes)
    out.tracer[placement] = slurp(dir / (placement + ".out"));
  if (bpftrace)
    out.bpftrace = slurp(bt_out);
  return out;
}

std::optional<std::uint64_t> summary_events(const std::string& json, const std::string& probe) {
  const std::regex re(fmt::format(R"re("{}":\{{"events":(\d+))re", probe));
  std::smatch m;
  if (!std::regex_search(json, m, re))
    return std::nullopt;
  return std::stoull(m[1]);
}

std::optional<std::uint64_t> bpftrace_count(const std::string& out, const std::string& name) {
  const std::regex re(fmt::format(R"re(@{}: (\d+))re", name));
  std::smatch m;
  if (!std::regex_search(out, m, re))
    return std::nullopt;
  return std::stoull(m[1]);
}

}  // namespace tracer::testing
