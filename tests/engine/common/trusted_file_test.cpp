// Trusted files (tracer/common/trusted_file.hpp): what a root process loads is a regular file
// that it and every directory above it are owned by root (or the user tracer started as) and
// writable by no one else; a sticky world-writable directory (/tmp) is allowed; a symbolic link
// is followed to its real place, and that place is what is checked and opened.
#include "tracer/common/trusted_file.hpp"

#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "support/temp_dir.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

class TrustedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0)
      GTEST_SKIP() << "needs root: the rule is about files other users own";
    const passwd* pw = ::getpwnam("nobody");
    if (pw == nullptr)
      GTEST_SKIP() << "no user 'nobody' on this machine";
    nobody_ = pw->pw_uid;
    ASSERT_EQ(trust::original_uid(), 0u);
    dir_.write("a/b/r.toml", "[recipe]\n");
  }
  [[nodiscard]] fs::path file() const { return dir_.path() / "a/b/r.toml"; }
  /// The error open_trusted gives for `path` ("" when it opens).
  static std::string refusal(const fs::path& path) {
    auto f = trust::open_trusted(path, "recipe");
    return f ? std::string() : f.error().message;
  }

  testing::TempDir dir_;
  uid_t nobody_ = 0;
};

TEST_F(TrustedFileTest, RootsFileInRootsDirectoriesIsReadFromItsDescriptor) {
  auto f = trust::open_trusted(file(), "recipe");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->path, fs::canonical(file()));
  char buf[16] = {};
  EXPECT_EQ(::read(f->fd.get(), buf, sizeof buf), 9);
  EXPECT_EQ(std::string(buf), "[recipe]\n");
  auto text = trust::read_trusted(file(), "recipe", 4);
  ASSERT_TRUE(text);
  EXPECT_EQ(text->size(), 5u) << "over the limit: the first max + 1 bytes, for the caller to say";
}

TEST_F(TrustedFileTest, AnotherUsersFileIsRefusedNamingTheOwner) {
  ASSERT_EQ(::chown(file().c_str(), nobody_, static_cast<gid_t>(-1)), 0);
  auto f = trust::open_trusted(file(), "recipe");
  ASSERT_FALSE(f);
  EXPECT_TRUE(trust::is_refusal(f.error()));
  EXPECT_NE(f.error().message.find("belongs to nobody (uid " + std::to_string(nobody_) + ")"),
            std::string::npos)
      << f.error().message;
  EXPECT_NE(f.error().hint.find("chmod go-w"), std::string::npos);
}

TEST_F(TrustedFileTest, AFileOthersOrItsGroupCanWriteIsRefused) {
  fs::permissions(file(), fs::perms::others_write, fs::perm_options::add);
  EXPECT_NE(refusal(file()).find("writable by every user (mode 0646)"), std::string::npos)
      << refusal(file());
  fs::permissions(file(), fs::perms::others_write, fs::perm_options::remove);
  fs::permissions(file(), fs::perms::group_write, fs::perm_options::add);
  ASSERT_EQ(::chown(file().c_str(), 0, 100), 0);
  EXPECT_NE(refusal(file()).find("writable by group 100"), std::string::npos) << refusal(file());
  ASSERT_EQ(::chown(file().c_str(), 0, 0), 0);  // the root group's write is root's
  EXPECT_EQ(refusal(file()), "");
}

TEST_F(TrustedFileTest, ADirectoryAboveThatAnotherUserOwnsOrAllCanWriteIsRefused) {
  const fs::path a = dir_.path() / "a";
  ASSERT_EQ(::chown(a.c_str(), nobody_, static_cast<gid_t>(-1)), 0);
  EXPECT_NE(refusal(file()).find("directory " + fs::canonical(a).string() + " belongs to nobody"),
            std::string::npos)
      << refusal(file());
  ASSERT_EQ(::chown(a.c_str(), 0, static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chmod(a.c_str(), 0777), 0);
  EXPECT_NE(refusal(file()).find("writable by every user (mode 0777)"), std::string::npos);
  // Sticky, as /tmp: only an entry's owner may rename it, and the entry (root's) is checked.
  ASSERT_EQ(::chmod(a.c_str(), 01777), 0);
  EXPECT_EQ(refusal(file()), "");
  const fs::path b = a / "b";
  ASSERT_EQ(::chown(b.c_str(), nobody_, static_cast<gid_t>(-1)), 0);
  EXPECT_NE(refusal(file()).find("belongs to nobody"), std::string::npos);
}

// A link another user controls is resolved once: what is checked and opened is where it led,
// never the link again (so flipping it afterwards changes nothing).
TEST_F(TrustedFileTest, ALinkIsFollowedOnceToItsRealPlaceWhichIsChecked) {
  dir_.mkdir("theirs");
  const fs::path theirs = dir_.path() / "theirs";
  ASSERT_EQ(::chown(theirs.c_str(), nobody_, static_cast<gid_t>(-1)), 0);
  fs::create_symlink(file(), theirs / "link.toml");
  auto f = trust::open_trusted(theirs / "link.toml", "recipe");
  ASSERT_TRUE(f) << f.error().message;
  EXPECT_EQ(f->path, fs::canonical(file()));
  // Their own file behind the link is theirs.
  dir_.write("theirs/own.toml", "x");
  ASSERT_EQ(::chown((theirs / "own.toml").c_str(), nobody_, static_cast<gid_t>(-1)), 0);
  fs::remove(theirs / "link.toml");
  fs::create_symlink(theirs / "own.toml", theirs / "link.toml");
  EXPECT_NE(refusal(theirs / "link.toml").find("belongs to nobody"), std::string::npos);
}

TEST_F(TrustedFileTest, NotARegularFileIsAnErrorWithoutBlocking) {
  const fs::path fifo = dir_.path() / "a/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(refusal(fifo).find("is not a regular file"), std::string::npos) << refusal(fifo);
  EXPECT_NE(refusal(dir_.path() / "a/missing").find("No such file"), std::string::npos);
  EXPECT_FALSE(trust::is_refusal(trust::open_trusted(dir_.path() / "a/missing", "x").error()));
}

}  // namespace
}  // namespace tracer
