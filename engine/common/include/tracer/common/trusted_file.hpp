// Files a root process may load: code and data (recipes, plugins, [bpf] sources and objects)
// that no less-privileged user can change. The rule is sudo's for sudoers and sshd's for its
// keys: the file and every directory above it are owned by a trusted user (root, or the user
// tracer started as) and writable by no one else. A world-writable directory is allowed only
// with the sticky bit (as /tmp): there, only an entry's owner can rename or remove it, and the
// entry below is checked too. Group write is allowed only to the root group.
//
// The file is opened once, through its resolved path (every symbolic link of the name resolved
// first, then every directory of the result checked from / down, then the last component opened
// with O_NOFOLLOW) and checked again on the descriptor: what is checked is what is read.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include "tracer/result.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::trust {

/// The owners whose files are trusted: root and the effective uid of the process when this was
/// first called (tracer's CLI calls it at start, before `serve --user` drops to another user, so
/// that the dropped user's files are never trusted).
[[nodiscard]] uid_t original_uid() noexcept;

/// An opened trusted file: its descriptor and the resolved path it was opened at.
struct TrustedFile {
  UniqueFd fd;
  std::filesystem::path path;
};

/// Opens `path` for reading if it is a regular file that it and every directory above it pass
/// the rule above. `what` names the file in messages ("plugin", "recipe", "bpf source").
/// @return the file, or why not: ENOENT (no such file), EACCES (untrusted: the message names the
/// file or directory, its owner and mode; the hint says how to fix it), or open's errno.
[[nodiscard]] Result<TrustedFile> open_trusted(const std::filesystem::path& path,
                                               std::string_view what);

/// open_trusted, then the whole file; a file over `max_bytes` gives its first `max_bytes + 1`
/// (the caller says it is too large).
[[nodiscard]] Result<std::string> read_trusted(const std::filesystem::path& path,
                                               std::string_view what,
                                               std::size_t max_bytes);

/// Whether `f` is open_trusted's refusal of an untrusted file (not a missing or unreadable one).
[[nodiscard]] bool is_refusal(const Failure& f) noexcept;

/// The user name of `uid` ("uid N" when it has none), for messages.
[[nodiscard]] std::string user_name(uid_t uid);

}  // namespace tracer::trust
