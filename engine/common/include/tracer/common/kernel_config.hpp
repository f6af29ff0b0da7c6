// Private helper shared by the engine layers: reading the running kernel's build configuration.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace tracer::detail {

/// Reads CONFIG_<name> from `config_file` (gzip-compressed or plain text) or, when it is empty,
/// from /proc/config.gz (CONFIG_IKCONFIG_PROC) and then /boot/config-<uname -r>.
/// @return the value ("y", "m", a number or string), "n" for "# CONFIG_X is not set" or when
/// the option is absent altogether (its dependencies are off), std::nullopt when no config is
/// readable.
[[nodiscard]] std::optional<std::string> kernel_config(
    std::string_view name,
    const std::filesystem::path& config_file = {});

}  // namespace tracer::detail
