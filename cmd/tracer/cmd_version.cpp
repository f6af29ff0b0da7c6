#include <fmt/core.h>
#include <sys/utsname.h>

#include <bpf/libbpf.h>

#include "commands.hpp"

namespace tracer::cli {

std::vector<std::string>& trailing_args() {
  static std::vector<std::string> args;
  return args;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
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
