// Private helper shared by the engine layers: where tracefs is mounted, from /proc/mounts (the
// tracefs layer opens it there; the perf layer, which does not depend on engine/tracefs, looks
// for legacy PMU event files in it).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tracer::detail {

/// /proc/mounts escapes space, tab, newline and backslash in paths as \ooo octal
/// (fs/proc_namespace.c show_vfsmnt(), mangle()).
[[nodiscard]] std::string unescape_mount_path(std::string_view s);

/// Finds a tracefs root in the text of /proc/mounts: a tracefs mount, else <debugfs>/tracing
/// when that has an events/ directory (debugfs automounts tracefs there on first access).
/// @return the root, or std::nullopt if neither is mounted.
[[nodiscard]] std::optional<std::filesystem::path> find_mounted_tracefs(std::string_view mounts);

/// The cgroup v2 (unified) hierarchy's mount point in the text of /proc/mounts: where perf's
/// cgroup events find their cgroups (/sys/fs/cgroup, or /sys/fs/cgroup/unified beside v1).
[[nodiscard]] std::optional<std::filesystem::path> find_cgroup2_root(std::string_view mounts);
/// This machine's cgroup v2 root (find_cgroup2_root of /proc/mounts), else /sys/fs/cgroup.
[[nodiscard]] std::filesystem::path cgroup2_root();

}  // namespace tracer::detail
