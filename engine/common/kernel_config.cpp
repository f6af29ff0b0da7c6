// Reading /proc/config.gz or /boot/config-<release>.
#include "tracer/common/kernel_config.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/utsname.h>
#include <zlib.h>

#include "tracer/unique_fd.hpp"

namespace tracer::detail {
namespace {

/// The whole text of a kernel config file. zlib reads files that are not gzip-compressed
/// transparently, so one reader serves /proc/config.gz and /boot/config-*.
std::string read_maybe_gz(const std::filesystem::path& path) {
  std::string text;
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd)
    return text;
  // gzdopen takes ownership of the fd and gzclose closes it.
  gzFile gz = ::gzdopen(fd.release(), "rb");
  if (gz == nullptr)
    return text;
  char buf[8192];
  int n = 0;
  while ((n = ::gzread(gz, buf, sizeof buf)) > 0)
    text.append(buf, static_cast<std::size_t>(n));
  ::gzclose(gz);
  return text;
}

}  // namespace

std::optional<std::string> kernel_config(std::string_view name,
                                         const std::filesystem::path& config_file) {
  std::string text;
  if (!config_file.empty()) {
    text = read_maybe_gz(config_file);
  } else {
    text = read_maybe_gz("/proc/config.gz");
    if (text.empty()) {
      utsname u{};
      if (::uname(&u) == 0)
        text = read_maybe_gz(std::filesystem::path("/boot") / fmt::format("config-{}", u.release));
    }
  }
  if (text.empty())
    return std::nullopt;
  const std::string set = fmt::format("\nCONFIG_{}=", name);
  text.insert(text.begin(), '\n');
  if (auto p = text.find(set); p != std::string::npos) {
    const auto start = p + set.size();
    return text.substr(start, text.find('\n', start) - start);
  }
  // "# CONFIG_X is not set", or absent altogether because its dependencies are off.
  return std::string("n");
}

}  // namespace tracer::detail
