#include <fmt/core.h>
#include <sys/utsname.h>

#include <bpf/libbpf.h>

#include "commands.hpp"
#include "tracer/common/json.hpp"

namespace tracer::cli {

std::vector<std::string>& trailing_args() {
  static std::vector<std::string> args;
  return args;
}

void add_version_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("version", "Print tracer's version and the kernel it runs on");
  cmd->callback([&run] {
    run = [] {
      utsname u{};
      ::uname(&u);
      fmt::print("tracer {}\nlibbpf {}.{}\nkernel {} {}\n", TRACER_VERSION, libbpf_major_version(),
                 libbpf_minor_version(), u.release, u.machine);
      return kExitOk;
    };
  });
}

}  // namespace tracer::cli
