#include "tracer/common/edit_distance.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

namespace tracer::detail {
namespace {

using Names = std::vector<std::string>;

TEST(Nearest, ClosestFirstTiesInTheGivenOrder) {
  const Names names{"count", "cnt", "counts", "mount"};
  EXPECT_EQ(nearest("coutn", names, {.limit = 2}), (Names{"count", "counts"}));
  EXPECT_EQ(nearest("count", names, {.limit = 1}), Names{"count"});
}

TEST(Nearest, CutOffGrowsWithTheWord) {
  const Names names{"abcdefghijkl"};
  // 12 letters: up to 4 edits, at least max_distance.
  EXPECT_EQ(nearest("abcdefghWXYZ", names, {.max_distance = 2}), names);
  EXPECT_TRUE(nearest("abcdefgVWXYZ", names, {.max_distance = 2}).empty());
  EXPECT_EQ(nearest("abcdefgVWXYZ", names, {.max_distance = 5}), names);
}

TEST(Nearest, UnrelatedCandidatesOnlyWhenAsked) {
  const Names names{"xy"};
  EXPECT_TRUE(nearest("ab", names, {.max_distance = 2}).empty());
  EXPECT_EQ(nearest("ab", names, {.max_distance = 2, .related_only = false}), names);
}

TEST(Nearest, BestOnlyKeepsEveryTie) {
  const Names names{"bar", "baz", "bat", "barn"};
  EXPECT_EQ(nearest("bax", names, {.max_distance = 2, .limit = 10, .best_only = true}),
            (Names{"bar", "baz", "bat"}));
}

TEST(Nearest, SubstringCountsAsNearWhateverItsLength) {
  const std::set<std::string> names{"do_sys_openat2", "kill"};
  EXPECT_EQ(nearest("openat", names, {.max_distance = 3, .related_only = false, .substring = true}),
            Names{"do_sys_openat2"});
  EXPECT_TRUE(nearest("openat", names, {.max_distance = 3, .related_only = false}).empty());
}

TEST(Nearest, SeparatorFindsTheSameNameUnderAnotherPrefix) {
  const Names names{"sched:sched_switch", "syscalls:sys_enter_read"};
  EXPECT_EQ(nearest("xyzzyplugh:sched_switch", names, {.max_distance = 3, .separator = ':'}),
            Names{"sched:sched_switch"});
  EXPECT_TRUE(nearest("xyzzyplugh:sched_switch", names, {.max_distance = 3}).empty());
}

}  // namespace
}  // namespace tracer::detail
