// --ready-fd: a supervisor or a test waits for "ready" on a pipe instead of sleeping.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>

#include "commands.hpp"
#include "tracer/error.hpp"

namespace tracer::cli {

void add_ready_fd_option(CLI::App* cmd, int& fd, std::string_view when) {
  cmd->add_option("--ready-fd", fd,
                  R"(Write "ready\n" to this open file descriptor (a pipe) and close it )" +
                      std::string(when) + ": wait for it instead of sleeping")
      ->check(CLI::NonNegativeNumber);
}

void check_ready_fd(int fd) {
  if (fd < 0)
    return;
  if (::fcntl(fd, F_GETFD) < 0) {
    throw Error(ErrorCategory::kUsage, {errno, std::generic_category()},
                "--ready-fd " + std::to_string(fd) + ": not an open file descriptor",
                "open it for the command, e.g. --ready-fd 3 3>ready.fifo");
  }
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // not inherited by a traced command
}

void signal_ready(int& fd) noexcept {
  if (fd < 0)
    return;
  static constexpr char kReady[] = "ready\n";
  ssize_t n = 0;
  do {
    n = ::write(fd, kReady, sizeof(kReady) - 1);
  } while (n < 0 && errno == EINTR);
  ::close(fd);  // the reader sees the line, then end of file
  fd = -1;
}

}  // namespace tracer::cli
