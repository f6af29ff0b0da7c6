// Sub-command registration for the tracer CLI. Each command lives in its own cmd_*.cpp and
// registers itself here; main.cpp stays a dispatcher.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/stats.hpp"

namespace tracer::cli {

/// A recipe's events as each path counts them, per probe: delivered to user space, or hit in the
/// kernel (an in-kernel aggregation delivers nothing), whichever is larger.
[[nodiscard]] std::uint64_t events_seen(const Stats& stats);

/// Exit codes shared by every command.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;
inline constexpr int kExitUsage = 2;

/// A command adds its sub-app to `app` and sets `run` to the function that executes it; `run`
/// returns the process exit code.
using Runner = std::function<int()>;

/// The arguments after the first "--" on the command line (a command to run), if any.
std::vector<std::string>& trailing_args();

/// --ready-fd FD on `cmd`: "ready" is written to FD `when` (help text: "once every probe is
/// attached"). check_ready_fd: a usage error unless FD is open (-1: none). signal_ready: writes
/// the line, closes FD and sets it to -1 (nothing for -1).
void add_ready_fd_option(CLI::App* cmd, int& fd, std::string_view when);
void check_ready_fd(int fd);
void signal_ready(int& fd) noexcept;

void add_version_command(CLI::App& app, Runner& run);
void add_list_command(CLI::App& app, Runner& run);
void add_stat_command(CLI::App& app, Runner& run);
void add_run_command(CLI::App& app, Runner& run);
void add_replay_command(CLI::App& app, Runner& run);
void add_serve_command(CLI::App& app, Runner& run);

}  // namespace tracer::cli
