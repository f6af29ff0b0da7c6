// Opening the files tracer writes (-o, a stage's `path`, a perf.data file) as a root process
// must: a path may have been planted by someone else.
#pragma once

#include <string>

#include "tracer/result.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer {

/// Opens `path` for writing, never through a symbolic link (O_NOFOLLOW on the last component:
/// a link planted at a predictable name would make root write wherever it points), created
/// with mode 0600 (umask permitting less); a regular file that exists is truncated and made
/// 0600 (its old mode could let others read what tracer writes). A FIFO, a character device
/// (/dev/null) or a socket is written as it is. "/dev/stdout" and "/dev/stderr" (links to
/// tracer's own descriptors) are duplicates of fd 1 and 2.
/// @return the descriptor (O_CLOEXEC), or the errno with a message naming the path; a link
/// gets ELOOP and says why it is refused.
[[nodiscard]] Result<UniqueFd> open_output_file(const std::string& path);

}  // namespace tracer
