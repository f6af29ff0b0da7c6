#include "tracer/common/proc_mounts.hpp"

#include <system_error>
#include <utility>

#include "tracer/common/text_file.hpp"

namespace tracer::detail {

namespace fs = std::filesystem;

/// /proc/mounts escapes space, tab, newline and backslash in paths as \ooo octal.
std::string unescape_mount_path(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '3' && s[i + 2] >= '0' &&
        s[i + 2] <= '7' && s[i + 3] >= '0' && s[i + 3] <= '7') {
      out.push_back(
          static_cast<char>((s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

/// Finds a tracefs root in /proc/mounts: a tracefs mount, else <debugfs>/tracing.
std::optional<fs::path> find_mounted_tracefs(std::string_view mounts) {
  std::optional<fs::path> debugfs_candidate;
  for (const std::string_view line : lines(mounts)) {
    // "<device> <mount point> <fstype> <options> <dump> <pass>"
    const auto sp1 = line.find(' ');
    if (sp1 == std::string_view::npos)
      continue;
    const auto sp2 = line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos)
      continue;
    const auto sp3 = line.find(' ', sp2 + 1);
    const std::string_view dir = line.substr(sp1 + 1, sp2 - sp1 - 1);
    const std::string_view type = line.substr(
        sp2 + 1, sp3 == std::string_view::npos ? std::string_view::npos : sp3 - sp2 - 1);
    if (type == "tracefs")
      return fs::path(unescape_mount_path(dir));
    if (type == "debugfs" && !debugfs_candidate) {
      // debugfs automounts tracefs at <debugfs>/tracing on first access.
      fs::path p = fs::path(unescape_mount_path(dir)) / "tracing";
      std::error_code ec;
      if (fs::is_directory(p / "events", ec))
        debugfs_candidate = std::move(p);
    }
  }
  return debugfs_candidate;
}

std::optional<fs::path> find_cgroup2_root(std::string_view mounts) {
  for (const std::string_view line : lines(mounts)) {
    const auto sp1 = line.find(' ');
    const auto sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
    if (sp2 == std::string_view::npos)
      continue;
    const auto sp3 = line.find(' ', sp2 + 1);
    const std::string_view type = line.substr(
        sp2 + 1, sp3 == std::string_view::npos ? std::string_view::npos : sp3 - sp2 - 1);
    if (type == "cgroup2")
      return fs::path(unescape_mount_path(line.substr(sp1 + 1, sp2 - sp1 - 1)));
  }
  return std::nullopt;
}

fs::path cgroup2_root() {
  if (auto mounts = read_text_file("/proc/mounts", "cgroup", kMaxMountsBytes)) {
    if (auto found = find_cgroup2_root(*mounts))
      return *found;
  }
  return "/sys/fs/cgroup";
}

}  // namespace tracer::detail
