#include "tracer/common/text_file.hpp"

#include <gtest/gtest.h>

#include <string_view>
#include <vector>

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

}  // namespace
}  // namespace tracer::detail
