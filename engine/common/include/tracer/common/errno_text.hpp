// The text of an errno value (strerror's, without its shared buffer: thread-safe).
#pragma once

#include <string>
#include <system_error>

namespace tracer {

[[nodiscard]] inline std::string errno_text(int err) {
  return std::generic_category().message(err);
}

}  // namespace tracer
