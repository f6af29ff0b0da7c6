#include "tracer/common/byte_cursor.hpp"

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>

namespace tracer::detail {
namespace {

TEST(ByteCursor, ReadsInOrderAndFailsForGoodAtTheFirstOverrun) {
  std::array<std::byte, 12> buf{};
  const std::uint32_t a = 7;
  const std::uint64_t b = 0x1122334455667788;
  std::memcpy(buf.data(), &a, 4);
  std::memcpy(buf.data() + 4, &b, 8);
  ByteCursor<const std::byte> c{std::span<const std::byte>(buf)};
  EXPECT_EQ(c.take<std::uint32_t>(), 7U);
  EXPECT_EQ(c.left(), 8U);
  EXPECT_EQ(c.take<std::uint64_t>(), b);
  EXPECT_TRUE(c.ok());
  EXPECT_EQ(c.take<std::uint8_t>(), 0U);
  EXPECT_FALSE(c.ok());
  EXPECT_EQ(c.left(), 0U);
}

TEST(ByteCursor, ArraysAreOverflowSafe) {
  std::array<std::byte, 16> buf{};
  ByteCursor<const std::byte> c{std::span<const std::byte>(buf)};
  EXPECT_EQ(c.take_array(2, 8).size(), 16U);
  ByteCursor<const std::byte> d{std::span<const std::byte>(buf)};
  EXPECT_TRUE(d.take_array(std::uint64_t{1} << 61, 8).empty());
  EXPECT_FALSE(d.ok());
}

TEST(ByteCursor, TakeSwappedSwapsInPlace) {
  std::array<std::byte, 4> buf{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  ByteCursor<std::byte> c{std::span<std::byte>(buf)};
  std::uint32_t want = 0;
  std::memcpy(&want, buf.data(), 4);
  want = std::byteswap(want);
  EXPECT_EQ(c.take_swapped<std::uint32_t>(), want);
  EXPECT_EQ(buf[0], std::byte{4});
  EXPECT_EQ(buf[3], std::byte{1});
}

TEST(ByteCursor, StringStopsAtTheNulAndConsumesThePadding) {
  const char text[8] = {'c', 'a', 't', '\0', 'x', 'x', 'x', 'x'};
  ByteCursor<const std::byte> c(reinterpret_cast<const std::byte*>(text),
                                reinterpret_cast<const std::byte*>(text) + sizeof(text));
  EXPECT_EQ(c.take_string(), "cat");
  EXPECT_EQ(c.left(), 0U);
  EXPECT_TRUE(c.ok());
}

}  // namespace
}  // namespace tracer::detail
