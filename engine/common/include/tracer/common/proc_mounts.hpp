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

}  // namespace tracer::detail
