#include "support/cli.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "support/scratch_path.hpp"

namespace tracer::testing {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// The process's scratch directory, removed at exit by the process that made it (a forked child
// that exits leaves it to its parent).
class ScratchDir {
 public:
  ScratchDir() : owner_(::getpid()) {
    std::string tmpl = (fs::temp_directory_path() / "tracer-test-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr)
      path_ = tmpl;
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty() && ::getpid() == owner_)
      fs::remove_all(path_, ec);
  }
  [[nodiscard]] const fs::path& path() const noexcept { return path_; }

 private:
  pid_t owner_;
  fs::path path_;
};

}  // namespace

fs::path scratch_path(const std::string& name) {
  static const ScratchDir dir;
  if (dir.path().empty())
    throw std::system_error(errno, std::generic_category(),
                            "mkdtemp of the test scratch directory");
  return dir.path() / name;
}

fs::path write_temp(const std::string& name, const std::string& text) {
  const fs::path p = scratch_path(name + "_" + std::to_string(::getpid()));
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

int exit_code_within(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 20; ++i) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid)
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (r < 0)
      return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::kill(pid, SIGKILL);
  (void)::waitpid(pid, nullptr, 0);
  return -2;
}

ReadyPipe::ReadyPipe() {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) == 0) {
    read_fd_ = fds[0];
    write_fd_ = fds[1];
    ::fcntl(write_fd_, F_SETFD, 0);  // the write end alone crosses exec (tracer's --ready-fd)
  }
}

ReadyPipe::~ReadyPipe() {
  close_writer();
  if (read_fd_ >= 0)
    ::close(read_fd_);
}

void ReadyPipe::close_writer() {
  if (write_fd_ >= 0)
    ::close(write_fd_);
  write_fd_ = -1;
}

bool ReadyPipe::wait(int seconds) {
  std::string got;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (got.find("ready\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left.count() <= 0)
      return false;
    pollfd p{read_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      return false;
    char buf[64];
    const ssize_t n = ::read(read_fd_, buf, sizeof buf);
    if (n <= 0)
      return false;  // every writer closed without "ready"
    got.append(buf, static_cast<std::size_t>(n));
  }
  return true;
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
