#include "targets.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cerrno>

#include <boost/asio/post.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>

#include "tracer/error.hpp"

namespace tracer::core {
namespace {

namespace asio = boost::asio;

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> tids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    tids.push_back(static_cast<pid_t>(std::stol(e.path().filename().string())));
  }
  return tids;
}

}  // namespace

void Targets::open(const Target& target) {
  switch (target.kind) {
    case Target::Kind::kAllCpus:
      break;
    case Target::Kind::kPid:
      // EPERM: it is there, another user's (perf_event_open then says whether tracer may).
      if (target.pid <= 0 || (::kill(target.pid, 0) != 0 && errno != EPERM)) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::no_such_process),
                    fmt::format("engine: no process with pid {}", target.pid));
      }
      pids_ = threads_of(target.pid);
      if (pids_.empty())
        pids_ = {target.pid};
      break;
    case Target::Kind::kCgroup: {
      const int fd = ::open(target.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        throw Error(
            ErrorCategory::kUsage, {errno, std::generic_category()},
            fmt::format("engine: cannot open cgroup '{}': {}", target.cgroup, std::strerror(errno)),
            "give a cgroup v2 directory, e.g. /sys/fs/cgroup/system.slice/foo.service");
      }
      cgroup_fd_.reset(fd);
      break;
    }
    case Target::Kind::kCommand:
      if (target.command.empty()) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    "engine: empty command");
      }
      break;
  }
}

void Targets::start_command(const Target& target) {
  // Forked now, held on a pipe until its events exist; enable_on_exec turns them on at exec.
  const auto& cmd = target.command;
  std::vector<std::string> argv_storage(cmd.begin(), cmd.end());
  std::vector<char*> argv;
  for (auto& s : argv_storage)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "engine: pipe2 failed");
  }
  // The child may only call async-signal-safe functions: its messages are made here.
  const std::string cannot = fmt::format("tracer: cannot execute '{}': ", cmd.front());
  const std::string why[] = {cannot + std::strerror(ENOENT) + "\n",
                             cannot + std::strerror(EACCES) + "\n",
                             cannot + std::strerror(ENOEXEC) + "\n",
                             cannot + std::strerror(ENOTDIR) + "\n", cannot + "exec failed\n"};
  child_ = ::fork();
  if (child_ < 0) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    throw Error(ErrorCategory::kRuntime, {err, std::generic_category()},
                fmt::format("engine: cannot fork for '{}': {}", cmd.front(), std::strerror(err)));
  }
  if (child_ == 0) {
    ::close(pipefd[1]);
    char c = 0;
    if (::read(pipefd[0], &c, 1) != 1)
      ::_exit(126);  // the engine gave up before starting it
    if (target.stdout_to_stderr && ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
      ::_exit(126);
    ::execvp(argv[0], argv.data());
    const int err = errno;
    const std::string& msg = why[err == ENOENT    ? 0
                                 : err == EACCES  ? 1
                                 : err == ENOEXEC ? 2
                                 : err == ENOTDIR ? 3
                                                  : 4];
    [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
    ::_exit(err == EACCES || err == ENOEXEC ? 126 : 127);  // the shell's codes
  }
  ::close(pipefd[0]);
  go_fd_.reset(pipefd[1]);
  pids_ = {child_};
}

void Targets::release_command() {
  if (!go_fd_)
    return;
  const char c = 'g';
  [[maybe_unused]] auto n = ::write(go_fd_.get(), &c, 1);
  go_fd_.reset();
}

void Targets::watch_exit(const asio::any_io_executor& executor,
                         pid_t pid,
                         std::function<void(bool reapable)> on_exit) {
  // A pidfd becomes readable when the process exits (Linux 5.3+).
  const long pidfd = ::syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    if (errno == ESRCH) {
      // Gone already (between opening its events and now): what it left is drained at once.
      asio::post(executor, [on_exit = std::move(on_exit)] { on_exit(false); });
    }
    return;  // no pidfds (or a thread's id): a started command is ended by close()
  }
  exit_watch_.emplace(executor, static_cast<int>(pidfd));
  exit_watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                          [on_exit = std::move(on_exit)](const boost::system::error_code& ec) {
                            if (!ec)
                              on_exit(true);
                          });
}

void Targets::reap_command() {
  if (child_ > 0 && ::waitpid(child_, &child_status_, 0) == child_) {
    child_ = -1;
    exit_status_ = child_status_;
  }
}

void Targets::cancel_watch() noexcept {
  if (exit_watch_) {
    boost::system::error_code ignored;
    [[maybe_unused]] const auto& c = exit_watch_->cancel(ignored);
    [[maybe_unused]] const auto& d = exit_watch_->close(ignored);
  }
}

void Targets::close() noexcept {
  cgroup_fd_.reset();
  go_fd_.reset();  // never started: closing the pipe makes it exit
  if (child_ > 0) {
    // Stopped before the command finished (signal, duration): do not leave it behind.
    ::kill(child_, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
        child_ = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (child_ > 0) {
      ::kill(child_, SIGKILL);
      ::waitpid(child_, &child_status_, 0);
      child_ = -1;
    }
  }
}

}  // namespace tracer::core
