// scratch_path: a file name in this test process's own scratch directory. The directory is made by
// mkdtemp (mode 0700, a name nobody can guess or take first) under the temp directory on first
// use, and removed with its contents when the process that made it exits; a name in it is safe
// from another user's symlink or file planted there, which a fixed name under /tmp is not.
#pragma once

#include <filesystem>
#include <string>

namespace tracer::testing {

/// `name` in this process's private scratch directory (nothing is created but the directory).
std::filesystem::path scratch_path(const std::string& name);

}  // namespace tracer::testing
