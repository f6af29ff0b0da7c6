// USDT notes (engine/symbols/usdt.cpp): tests/programs/usdt_target.c's probes, their call
// sites, semaphores and arguments, and Debian's python3.
#include "tracer/symbols/usdt.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>

namespace tracer::symbols {
namespace {

const std::string kTarget = TRACER_USDT_TARGET;

TEST(UsdtNotes, EveryCallSiteWithItsSemaphoreAndArguments) {
  auto sites = read_usdt(kTarget);
  ASSERT_TRUE(sites.has_value()) << sites.error().describe();
  ASSERT_EQ(sites->size(), 3U);
  const auto& hit = sites->at(0);
  EXPECT_EQ(hit.provider, "tracer_test");
  EXPECT_EQ(hit.name, "hit");
  EXPECT_NE(hit.semaphore, 0U);
  ASSERT_NE(hit.semaphore_offset, 0U);
  // The semaphore's bytes in the file: a zero counter (the kernel counts it up in memory).
  const int fd = ::open(kTarget.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  std::uint16_t value = 1;
  EXPECT_EQ(::pread(fd, &value, sizeof value, static_cast<off_t>(hit.semaphore_offset)), 2);
  ::close(fd);
  EXPECT_EQ(value, 0U);
  ASSERT_EQ(hit.arg_list.size(), 3U) << hit.args;
  EXPECT_EQ(hit.arg_list[0].size, 8);  // long i
  EXPECT_TRUE(hit.arg_list[0].is_signed);
  EXPECT_EQ(hit.arg_list[1].operand, "$-7");  // the constant
  EXPECT_EQ(hit.arg_list[1].size, 4);
  EXPECT_FALSE(hit.arg_list[2].is_signed);  // const char *
  // tick: two call sites of one probe, no semaphore.
  EXPECT_EQ(sites->at(1).name, "tick");
  EXPECT_EQ(sites->at(2).name, "tick");
  EXPECT_NE(sites->at(1).file_offset, sites->at(2).file_offset);
  EXPECT_EQ(sites->at(1).semaphore, 0U);
  EXPECT_EQ(sites->at(1).semaphore_offset, 0U);
}

TEST(UsdtNotes, ArgumentTexts) {
  const auto args = parse_usdt_args("-4@%edi 8@-8(%rbp) 4@$5 8@foo(%rip) 1@%al");
  ASSERT_TRUE(args.has_value());
  ASSERT_EQ(args->size(), 5U);
  EXPECT_EQ(args->at(1).operand, "-8(%rbp)");
  EXPECT_EQ(args->at(3).operand, "foo(%rip)");
  EXPECT_EQ(args->at(4).size, 1);
  EXPECT_TRUE(parse_usdt_args("")->empty());
  EXPECT_TRUE(parse_usdt_args("8@(%rax, %rbx, 8)").has_value());  // spaces inside parentheses
  for (const char* bad : {"x@%rdi", "3@%eax", "8@", "%rdi"})
    EXPECT_FALSE(parse_usdt_args(bad).has_value()) << bad;
}

// Each operand decoded: registers of every width by their pt_regs names, constants (signed,
// hex), memory at a base register plus a displacement; the rest listed but not readable.
TEST(UsdtNotes, OperandsDecode) {
  using K = UsdtArg::Kind;
  const auto args = parse_usdt_args(
      "-4@%edi 8@-8(%rbp) 4@$5 8@foo(%rip) 1@%al 8@(%rax) -2@0x10(%r12) 8@%r9 4@%r10d "
      "1@%ah 8@$-0x20 8@8(%rax,%rbx,8) 1@%sil 8@%rsp 8@sym+8(%rbx)");
  ASSERT_TRUE(args.has_value());
  ASSERT_EQ(args->size(), 15U);
  const auto is = [&](std::size_t i, K kind, const char* reg, std::int64_t value) {
    SCOPED_TRACE(args->at(i).operand);
    EXPECT_EQ(args->at(i).kind, kind);
    EXPECT_EQ(args->at(i).reg, reg);
    EXPECT_EQ(args->at(i).value, value);
  };
  is(0, K::kRegister, "di", 0);
  is(1, K::kMemory, "bp", -8);
  is(2, K::kConstant, "", 5);
  is(3, K::kUnsupported, "", 0);  // a symbol
  is(4, K::kRegister, "ax", 0);
  is(5, K::kMemory, "ax", 0);
  is(6, K::kMemory, "r12", 16);
  is(7, K::kRegister, "r9", 0);
  is(8, K::kRegister, "r10", 0);
  is(9, K::kUnsupported, "", 0);  // bits 8..15
  is(10, K::kConstant, "", -32);
  is(11, K::kUnsupported, "", 0);  // an index register
  is(12, K::kRegister, "si", 0);
  is(13, K::kRegister, "sp", 0);
  is(14, K::kUnsupported, "", 0);  // a symbol's displacement: no register either (usdt_fuzzer)
  EXPECT_TRUE(args->at(6).is_signed);
  EXPECT_EQ(args->at(6).size, 2);
  for (const char* name : {"r16", "r7", "r08", "xmm0", "eip", ""})
    EXPECT_EQ(usdt_register(name), "") << name;
}

TEST(UsdtNotes, SpecsNameOneProbeOrAPattern) {
  auto hit = parse_usdt_spec(kTarget + ":tracer_test:hit", std::nullopt);
  ASSERT_TRUE(hit.has_value()) << hit.error().describe();
  EXPECT_EQ(hit->sites.size(), 1U);
  auto all = parse_usdt_spec(kTarget + ":tracer_*:*", std::nullopt);
  ASSERT_TRUE(all.has_value());
  EXPECT_EQ(all->sites.size(), 3U);
  auto typo = parse_usdt_spec(kTarget + ":tracer_test:hti", std::nullopt);
  ASSERT_FALSE(typo.has_value());
  EXPECT_EQ(typo.error().errno_value(), ENOENT);
  EXPECT_NE(typo.error().hint.find("did you mean tracer_test:hit"), std::string::npos)
      << typo.error().hint;
  auto none = parse_usdt_spec(std::string(TRACER_UPROBE_TARGET) + ":a:b", std::nullopt);
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().hint.find("has no USDT probes"), std::string::npos);
  for (const std::string& bad :
       {kTarget + ":hit", std::string("nocolons"), kTarget + "::hit", kTarget + ":p:"}) {
    auto r = parse_usdt_spec(bad, std::nullopt);
    ASSERT_FALSE(r.has_value()) << bad;
    EXPECT_EQ(r.error().errno_value(), EINVAL) << bad;
  }
}

TEST(UsdtNotes, DebiansPython) {
  const std::filesystem::path python = "/usr/bin/python3.11";
  if (!std::filesystem::exists(python))
    GTEST_SKIP() << "no /usr/bin/python3.11 (Debian 12's python3)";
  auto sites = read_usdt(python);
  ASSERT_TRUE(sites.has_value()) << sites.error().describe();
  bool audit = false;
  for (const auto& s : *sites) {
    if (s.provider == "python" && s.name == "audit") {
      audit = true;
      EXPECT_NE(s.semaphore_offset, 0U);
      EXPECT_EQ(s.arg_list.size(), 2U) << s.args;  // the event's name, its arguments tuple
    }
  }
  EXPECT_TRUE(audit);
  EXPECT_GE(sites->size(), 8U);
}

}  // namespace
}  // namespace tracer::symbols
