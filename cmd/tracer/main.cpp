// tracer: the command line front end. Thin: every command is a call into libtracer.
#include <fmt/core.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tracer/common/trusted_file.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stages.hpp"

namespace {

int run_main(int argc, char** argv) {
  // The user tracer starts as is the one whose files it trusts beside root's, pinned now:
  // `serve --user` drops to another user later, whose files are never trusted.
  [[maybe_unused]] const uid_t trusted = tracer::trust::original_uid();
  CLI::App app{"tracer: an eBPF-augmented Linux tracing engine"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");

  tracer::cli::Runner run;
  tracer::cli::add_version_command(app, run);
  tracer::cli::add_list_command(app, run);
  tracer::cli::add_stat_command(app, run);
  tracer::cli::add_run_command(app, run);
  tracer::cli::add_replay_command(app, run);
  tracer::cli::add_serve_command(app, run);

  // Everything after the first "--" is a command line of its own (tracer stat -- CMD ARGS):
  // keep it away from CLI11, which would otherwise try to match its options.
  std::vector<std::string> args;
  for (int i = argc - 1; i > 0; --i)
    args.emplace_back(argv[i]);  // CLI11 wants them reversed
  auto dashdash = std::find(args.rbegin(), args.rend(), "--");
  if (dashdash != args.rend()) {
    tracer::cli::trailing_args().assign(args.begin(), std::prev(dashdash.base()));
    std::reverse(tracer::cli::trailing_args().begin(), tracer::cli::trailing_args().end());
    args.erase(args.begin(), dashdash.base());
  }

  try {
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return tracer::cli::kExitUsage;
  }

  try {
    const int code = run ? run() : tracer::cli::kExitUsage;
    // Output that could not be written (a full disk, a closed pipe, > /dev/full) is a failure,
    // never a silent exit 0.
    if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      fmt::print(stderr, "tracer: writing standard output failed: {}\n", std::strerror(errno));
      return code != 0 ? code : tracer::cli::kExitRuntime;
    }
    return code;
  } catch (const tracer::Error& e) {
    fmt::print(stderr, "tracer: {}\n", e.what());  // its problems, each with its hint
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "tracer: {}\n", e.what());
    return tracer::cli::kExitRuntime;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int code = run_main(argc, argv);
    if (tracer::abandoned_plugin_threads() != 0) {
      // A plugin thread is stuck in the plugin for good (said above): the exit handlers and the
      // loader's teardown could wait for it forever. Out now, output written.
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(code);
    }
    return code;
  } catch (...) {
    // Setting up the command line itself failed (allocation, CLI11 construction).
    std::fputs("tracer: internal error while starting\n", stderr);
    return tracer::cli::kExitRuntime;
  }
}
