// System call numbers to names, for the `syscall` field of raw_syscalls events (whose `id` is
// only a number). The table is the build machine's <asm/unistd.h>, generated at configure time.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tracer::core {

/// The name of system call `nr` of this architecture ("getppid" for 110 on x86_64).
/// @return the name, or an empty view for a number the table does not have.
[[nodiscard]] std::string_view syscall_name(std::int64_t nr) noexcept;

/// The number of system call `name`, if the table has it.
[[nodiscard]] std::optional<std::int64_t> syscall_number(std::string_view name) noexcept;

}  // namespace tracer::core
