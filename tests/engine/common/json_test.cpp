#include "tracer/common/json.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tracer::json {
namespace {

// The one escaper: what JSON requires escaped, well-formed UTF-8 kept whole, every byte of an
// invalid sequence (a stray continuation, an overlong form, a surrogate, a cut sequence) as its
// Latin-1 code point.
TEST(Json, EscapesWhatJsonRequiresAndKeepsEveryLineValid) {
  EXPECT_EQ(escape(R"(a"b\c)"), R"(a\"b\\c)");
  EXPECT_EQ(escape("l1\nl2\tx\r\x01"), "l1\\nl2\\tx\\r\\u0001");
  EXPECT_EQ(escape("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5"),
            "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5");
  EXPECT_EQ(escape("\x80"), "\\u0080");
  EXPECT_EQ(escape("\xc0\xaf"), "\\u00c0\\u00af");             // overlong '/'
  EXPECT_EQ(escape("\xed\xa0\x80"), "\\u00ed\\u00a0\\u0080");  // a UTF-16 surrogate
  EXPECT_EQ(escape("ok\xe2\x82"), "ok\\u00e2\\u0082");         // cut at the end
  // Lead bytes 0xF5-0xFF begin no UTF-8 sequence (they were taken for 3-byte leads).
  EXPECT_EQ(escape("\xf8\x80\x80"), "\\u00f8\\u0080\\u0080");
  EXPECT_EQ(escape("\xff"), "\\u00ff");
  fmt::memory_buffer b;
  append_string(b, "x\"");
  EXPECT_EQ(fmt::to_string(b), R"("x\"")");
}

}  // namespace
}  // namespace tracer::json
