#include "tracer/common/text_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "support/temp_dir.hpp"
#include "tracer/common/cpu_list.hpp"
#include "tracer/common/proc_mounts.hpp"

namespace tracer::detail {
namespace {

std::vector<std::string_view> all_lines(std::string_view text) {
  std::vector<std::string_view> out;
  for (const std::string_view line : lines(text))
    out.push_back(line);
  return out;
}

TEST(Lines, SplitsOnNewlinesWithOrWithoutTheLastOne) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(all_lines(""), V{});
  EXPECT_EQ(all_lines("a"), V{"a"});
  EXPECT_EQ(all_lines("a\n"), V{"a"});
  EXPECT_EQ(all_lines("a\n\nb"), (V{"a", "", "b"}));
}

TEST(Trim, DropsWhiteSpaceAtBothEnds) {
  EXPECT_EQ(trim("  1234\n"), "1234");
  EXPECT_EQ(trim("\t a b \r\n"), "a b");
  EXPECT_EQ(trim(" \n"), "");
}

TEST(ProcMounts, FindsTracefsAndUnescapesItsPath) {
  EXPECT_EQ(find_mounted_tracefs("sysfs /sys sysfs rw 0 0\n"
                                 "tracefs /mnt/my\\040trace tracefs rw 0 0\n"),
            std::filesystem::path("/mnt/my trace"));
  EXPECT_EQ(find_mounted_tracefs("sysfs /sys sysfs rw 0 0\n"), std::nullopt);
}

// The one reader of the layers: procfs files of size 0 whole, a file over max_bytes refused,
// and what a root process must refuse: a FIFO in a file's place (it would block the read
// forever) and a directory, each with its path in the error.
TEST(ReadTextFile, ReadsProcfsWholeAndRefusesAFileOverItsBound) {
  auto self = read_text_file("/proc/self/status", "test");
  ASSERT_TRUE(self) << self.error().message;
  EXPECT_NE(self->find("Pid:"), std::string::npos);
  testing::TempDir dir;
  const auto big = dir.path() / "big";
  std::ofstream(big) << std::string(300000, 'x');
  auto whole = read_text_file(big, "test");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->size(), 300000U);
  // Past the bound: an error, never a cut text (a cut format or kallsyms would mislead).
  auto cut = read_text_file(big, "test", 1000);
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().errno_value(), EFBIG);
  EXPECT_EQ(cut.error().message, "test: " + big.string() + " is larger than 1000 bytes: not read");
  auto exact = read_text_file(big, "test", 300000);
  ASSERT_TRUE(exact);
  EXPECT_EQ(exact->size(), 300000U);
}

TEST(ReadTextFile, AFifoOrADirectoryIsRefusedWithoutBlocking) {
  testing::TempDir dir;
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = read_text_file(fifo, "test");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().errno_value(), EINVAL);
  EXPECT_EQ(r.error().message, "test: " + fifo.string() + " is not a regular file");
  auto d = read_text_file(dir.path(), "test");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().errno_value(), EINVAL);
  auto missing = read_text_file(dir.path() / "none", "test");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
}

// Line by line through a 64 KiB buffer: every line of a file far larger than it, in order,
// whatever read ends in it; a line over the buffer cut to it; the same bound and refusals as
// read_text_file; procfs (size 0) too.
TEST(ReadTextLines, GivesEveryLineAcrossTheBuffersEndsAndKeepsTheBound) {
  testing::TempDir dir;
  std::string text;
  std::vector<std::string> want;
  for (int i = 0; i < 40000; ++i) {  // lines of 1 to 60 bytes: every offset of a buffer's end
    want.push_back(std::string(static_cast<std::size_t>(i % 60), static_cast<char>('a' + i % 26)) +
                   std::to_string(i));
    text += want.back() + "\n";
  }
  want.emplace_back(70000, 'L');  // over the buffer
  text += want.back() + "\n";
  want.emplace_back("");
  text += "\n";
  want.emplace_back("last, without its end of line");
  text += want.back();
  const auto path = dir.path() / "lines";
  std::ofstream(path) << text;
  std::vector<std::string> got;
  auto n = read_text_lines(path, "test", text.size(),
                           [&](std::string_view line) { got.emplace_back(line); });
  ASSERT_TRUE(n) << n.error().message;
  EXPECT_EQ(*n, text.size());
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i + 3 < want.size(); ++i)
    ASSERT_EQ(got[i], want[i]) << "line " << i;
  EXPECT_EQ(got[got.size() - 3], std::string(std::size_t{64} << 10, 'L')) << "cut to the buffer";
  EXPECT_EQ(got[got.size() - 2], "");
  EXPECT_EQ(got.back(), want.back());

  auto over = read_text_lines(path, "test", text.size() - 1, [](std::string_view) {});
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().errno_value(), EFBIG);
  EXPECT_EQ(over.error().message, "test: " + path.string() + " is larger than " +
                                      std::to_string(text.size() - 1) + " bytes: not read");
  const auto fifo = dir.path() / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto refused = read_text_lines(fifo, "test", 1000, [](std::string_view) {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "test: " + fifo.string() + " is not a regular file");
  bool pid = false;
  auto status = read_text_lines("/proc/self/status", "test", 1 << 20, [&](std::string_view line) {
    pid = pid || line.starts_with("Pid:");
  });
  ASSERT_TRUE(status) << status.error().message;
  EXPECT_TRUE(pid);
}

}  // namespace
}  // namespace tracer::detail

namespace tracer::cpus {
namespace {

// sysfs lists, perf's -C lists, each CPU once in order; a bad element, a backwards range, a CPU
// past the bound and a trailing comma are errors naming themselves.
TEST(CpuList, ParsesRangesAndSinglesOnceInOrder) {
  using V = std::vector<int>;
  EXPECT_EQ(parse_list("0-3,8\n").value(), (V{0, 1, 2, 3, 8}));
  EXPECT_EQ(parse_list("1").value(), V{1});
  EXPECT_EQ(parse_list("2,0-2").value(), (V{2, 0, 1}));
  EXPECT_EQ(parse_list("").value(), V{});
  EXPECT_EQ(parse_list("65535").value(), V{65535});
  for (const char* bad : {"1-", "-1", "3-1", "a", "0,,1", "0,", "65536", "0-99999999999", " 1 "}) {
    auto r = parse_list(bad);
    if (std::string_view(bad) == " 1 ") {  // white space around the list is the kernel's
      EXPECT_EQ(r.value(), V{1});
      continue;
    }
    ASSERT_FALSE(r) << bad;
    EXPECT_EQ(r.error().errno_value(), EINVAL) << bad;
  }
  EXPECT_EQ(parse_list("0,x,2").error().message,
            "'x' in the CPU list '0,x,2' is not a CPU or a range of CPUs (0 to 65535)");
}

}  // namespace
}  // namespace tracer::cpus
