// TempDir: a scratch directory for fake sysfs/tracefs trees, removed with its contents.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include <gtest/gtest.h>

namespace tracer::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::path(::testing::TempDir()) / "tracer-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr)
      ADD_FAILURE() << "mkdtemp failed: " << errno;
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }

  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

  /// Writes `text` to `rel` (parents created), as sysfs/tracefs would present it.
  void write(const std::filesystem::path& rel, std::string_view text) const {
    const auto full = path_ / rel;
    std::filesystem::create_directories(full.parent_path());
    const int fd = ::open(full.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ASSERT_GE(fd, 0) << full;
    ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
    ::close(fd);
  }
  void mkdir(const std::filesystem::path& rel) const {
    std::filesystem::create_directories(path_ / rel);
  }

 private:
  std::filesystem::path path_;
};

/// Reads a whole file (test side; small files only).
inline std::string slurp(const std::filesystem::path& p) {
  std::string out;
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0)
    out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

}  // namespace tracer::testing
