// tracer: the command line front end. Thin: every command is a call into libtracer.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <exception>

#include "commands.hpp"
#include "tracer/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"tracer: an eBPF-augmented Linux tracing engine"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every command");

  tracer::cli::Runner run;
  tracer::cli::add_version_command(app, run);
  tracer::cli::add_list_command(app, run);
  tracer::cli::add_stat_command(app, run);

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return tracer::cli::kExitUsage;
  }

  try {
    return run ? run() : tracer::cli::kExitUsage;
  } catch (const tracer::Error& e) {
    fmt::print(stderr, "tracer: {}\n", e.what());
    if (!e.hint().empty()) fmt::print(stderr, "  hint: {}\n", e.hint());
    return e.exit_code();
  } catch (const std::exception& e) {
    fmt::print(stderr, "tracer: {}\n", e.what());
    return tracer::cli::kExitRuntime;
  }
}
