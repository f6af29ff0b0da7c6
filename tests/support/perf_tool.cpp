#include "perf_tool.hpp"
#include "support/scratch_path.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

namespace tracer::testing {

ShellResult shell(const std::string& command) {
  static int counter = 0;
  const auto err_file = tracer::testing::scratch_path(
      "tracer_sh_err_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  const std::string cmd = "( " + command + " ) 2>" + err_file.string();
  ShellResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr)
    return r;
  std::array<char, 65536> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0)
    r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  std::filesystem::remove(err_file);
  return r;
}

std::string perf_unavailable() {
  const auto v = shell("perf --version");
  if (v.exit_code != 0)
    return "perf is not installed (perf --version: exit " + std::to_string(v.exit_code) + ")";
  const auto r = shell("perf record -q -e cpu-clock -o /dev/null -- true");
  if (r.exit_code != 0)
    return "perf record does not work here: " + r.err;
  return {};
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  for (std::size_t i = 0; i < c.size(); ++i)
    out[i] = static_cast<std::byte>(c[i]);
  return out;
}

void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

}  // namespace tracer::testing
