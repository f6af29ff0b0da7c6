#include "tracer/common/trusted_file.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace tracer::trust {

namespace fs = std::filesystem;

uid_t original_uid() noexcept {
  static const uid_t uid = ::geteuid();
  return uid;
}

std::string user_name(uid_t uid) {
  std::array<char, 1024> buf{};
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
    return fmt::format("{} (uid {})", found->pw_name, uid);
  return fmt::format("uid {}", uid);
}

namespace {

constexpr std::string_view kRefused = ": refused '";
constexpr std::string_view kHint =
    "tracer runs as root and loads only what no other user can change: chown root (or the user "
    "tracer runs as) and chmod go-w the file and every directory above it, or move it to such a "
    "directory";

/// Why the inode `st` (named `name`) is not trusted, or "".
std::string distrust(const struct stat& st, const std::string& name, bool dir) {
  const uid_t me = original_uid();
  if (st.st_uid != 0 && st.st_uid != me) {
    return fmt::format("{} belongs to {}, neither root nor {}", name, user_name(st.st_uid),
                       me == 0 ? std::string("anyone tracer trusts") : user_name(me));
  }
  const bool sticky = dir && (st.st_mode & S_ISVTX) != 0;
  if ((st.st_mode & S_IWOTH) != 0 && !sticky)
    return fmt::format("{} is writable by every user (mode {:04o})", name, st.st_mode & 07777);
  if ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && !sticky)
    return fmt::format("{} is writable by group {} (mode {:04o})", name, st.st_gid,
                       st.st_mode & 07777);
  return {};
}

Unexpected errno_failure(int err, std::string_view what, const fs::path& path) {
  return fail(err,
              fmt::format("{}: cannot read '{}': {}", what, path.string(), std::strerror(err)));
}

}  // namespace

bool is_refusal(const Failure& f) noexcept {
  return f.errno_value() == EACCES && f.message.find(kRefused) != std::string::npos;
}

Result<TrustedFile> open_trusted(const fs::path& path, std::string_view what) {
  std::error_code ec;
  // Every symbolic link of the name resolved once: what is checked below is the real place.
  const fs::path real = fs::canonical(path, ec);
  if (ec)
    return errno_failure(ec.value(), what, path);
  // From / down, each directory held open while the next is opened below it: no component can
  // be swapped between its check and its use.
  UniqueFd dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir)
    return errno_failure(errno, what, path);
  fs::path so_far = "/";
  struct stat st {};
  const auto check = [&](const UniqueFd& fd, const fs::path& name, bool is_dir) -> Status {
    if (::fstat(fd.get(), &st) != 0)
      return errno_failure(errno, what, path);
    if (auto why = distrust(st,
                            is_dir ? fmt::format("directory {}", name.string())
                                   : fmt::format("{} '{}'", what, name.string()),
                            is_dir);
        !why.empty()) {
      return fail(EACCES, fmt::format("{}{}{}': {}", what, kRefused, path.string(), why),
                  std::string(kHint));
    }
    return {};
  };
  TRACER_TRY(check(dir, so_far, true));
  const fs::path parent = real.parent_path();
  for (const auto& part : parent.relative_path()) {
    so_far /= part;
    UniqueFd next(::openat(dir.get(), part.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next)
      return errno_failure(errno, what, path);
    dir = std::move(next);
    TRACER_TRY(check(dir, so_far, true));
  }
  UniqueFd file(
      ::openat(dir.get(), real.filename().c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file)
    return errno_failure(errno, what, path);
  TRACER_TRY(check(file, real, false));
  if (!S_ISREG(st.st_mode))
    return fail(EINVAL, fmt::format("{}: '{}' is not a regular file", what, path.string()));
  return TrustedFile{.fd = std::move(file), .path = real};
}

Result<std::string> read_trusted(const fs::path& path,
                                 std::string_view what,
                                 std::size_t max_bytes) {
  TRACER_ASSIGN_OR_RETURN(TrustedFile f, open_trusted(path, what));
  std::string out;
  std::array<char, 16384> buf{};
  for (;;) {
    const ssize_t n = ::read(f.fd.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno_failure(errno, what, path);
    if (n == 0)
      break;
    out.append(buf.data(), static_cast<std::size_t>(n));
    if (out.size() > max_bytes) {  // the caller sees a file over its limit, not a cut one
      out.resize(max_bytes + 1);
      break;
    }
  }
  return out;
}

}  // namespace tracer::trust
