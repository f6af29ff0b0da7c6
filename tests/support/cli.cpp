#include "support/cli.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

namespace tracer::testing {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::ofstream(p) << text;
  return p;
}

pid_t spawn_to_file(const std::vector<std::string>& argv, const fs::path& out) {
  return spawn_to_file(argv, out, {});
}

pid_t spawn_to_file(const std::vector<std::string>& argv,
                    const fs::path& out,
                    const fs::path& err) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (std::freopen(out.c_str(), "w", stdout) == nullptr)
      ::_exit(126);
    if (!err.empty() && std::freopen(err.c_str(), "w", stderr) == nullptr)
      ::_exit(126);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

bool exited_ok(pid_t pid) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

bool wait_for_text(const fs::path& file, const std::string& text) {
  for (int i = 0; i < 1200; ++i) {
    if (slurp(file).find(text) != std::string::npos)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

}  // namespace tracer::testing
