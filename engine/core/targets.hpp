// The processes an engine's Target names: a pid target's threads, a cgroup's directory, and the
// command the engine starts, holds until its events exist, watches and ends.
//
// Usage (the engine's):
//   targets.open(opts.target);           // checks it: no such pid, no cgroup, an empty command
//   targets.start_command(opts.target);  // kCommand: forked, held on a pipe
//   open events on targets.pids() (or targets.cgroup_fd() for a cgroup)
//   targets.watch_exit(serial, pid, on_exit);
//   targets.release_command();           // it execs: enable_on_exec turns its events on
//   targets.cancel_watch(); ...; targets.close();  // stop: ends a command still running
#pragma once

#include <sys/types.h>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <functional>
#include <optional>
#include <vector>

#include "tracer/probe.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::core {

class Targets {
 public:
  /// Checks `target` and gathers what opening its events needs: a pid target's threads (the
  /// process must exist), a cgroup target's directory fd. Throws tracer::Error (kUsage).
  void open(const Target& target);
  /// Forks a kCommand target's command, held on a pipe until release_command(): pids() is then
  /// the command. Throws tracer::Error (kRuntime) when it cannot fork.
  void start_command(const Target& target);
  /// Lets the held command exec (once).
  void release_command();

  /// The tasks events open on: {-1} (every task: CPU-wide and cgroup targets), a pid target's
  /// threads, or the started command.
  [[nodiscard]] const std::vector<pid_t>& pids() const noexcept { return pids_; }
  /// A cgroup target's directory (-1 otherwise).
  [[nodiscard]] int cgroup_fd() const noexcept { return cgroup_fd_.get(); }
  /// The started command's pid (-1: none, or reaped).
  [[nodiscard]] pid_t command_pid() const noexcept { return child_; }
  /// The started command's wait status once it exited by itself (reap_command), not when
  /// close() ended it.
  [[nodiscard]] std::optional<int> command_status() const noexcept { return exit_status_; }

  /// Calls on_exit on `executor` once process `pid` exits (a pidfd, Linux 5.3+): with true when
  /// the pidfd said so (a started command can then be reaped, reap_command()), with false when
  /// the process was gone already. Without pidfds nothing is called (a started command is ended
  /// by close()).
  void watch_exit(const boost::asio::any_io_executor& executor,
                  pid_t pid,
                  std::function<void(bool reapable)> on_exit);
  /// Reaps the started command after it exited (watch_exit).
  void reap_command();
  /// A pending watch_exit completes with an error (on_exit is not called).
  void cancel_watch() noexcept;
  /// Closes the cgroup fd and ends the command: one never released exits (its pipe closes), one
  /// still running gets SIGTERM, then SIGKILL after a second.
  void close() noexcept;

 private:
  std::vector<pid_t> pids_ = {-1};
  UniqueFd cgroup_fd_;
  std::optional<boost::asio::posix::stream_descriptor> exit_watch_;  // the target's pidfd
  pid_t child_ = -1;
  int child_status_ = 0;
  std::optional<int> exit_status_;
  UniqueFd go_fd_;  // the pipe the held command waits on
};

}  // namespace tracer::core
