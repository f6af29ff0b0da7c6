// PrintFmt: tracepoint print fmts evaluated on hand-built payloads. (Files recorded by perf and
// compared line by line with perf script are in tests/cmd/replay_test.cpp.)
#include "tracer/perfdata/print_fmt.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace tracer::perfdata {
namespace {

tracefs::Format format_of(const std::string& fields, const std::string& print_fmt) {
  const std::string text =
      "name: test\nID: 1\nformat:\n"
      "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
      "\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n"
      "\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\t"
      "signed:0;\n"
      "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n" +
      fields + "\nprint fmt: " + print_fmt + "\n";
  auto f = tracefs::parse_format(text, "test", "test");
  EXPECT_TRUE(f.has_value());
  return f ? *f : tracefs::Format{};
}

// sched_switch as this kernel's format file has it (fields and print fmt).
const char* kSwitchFields =
    "\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n"
    "\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n"
    "\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n"
    "\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n"
    "\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n"
    "\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n";
const char* kSwitchFmt =
    R"("prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%s%s ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, (REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1)) ? __print_flags(REC->prev_state & ((((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) - 1), "|", { 0x00000001, "S" }, { 0x00000002, "D" }, { 0x00000004, "T" }, { 0x00000008, "t" }, { 0x00000010, "X" }, { 0x00000020, "Z" }, { 0x00000040, "P" }, { 0x00000080, "I" }) : "R", REC->prev_state & (((0x00000000 | 0x00000001 | 0x00000002 | 0x00000004 | 0x00000008 | 0x00000010 | 0x00000020 | 0x00000040) + 1) << 1) ? "+" : "", REC->next_comm, REC->next_pid, REC->next_prio)";

template <typename T>
void put(std::vector<std::byte>& raw, std::size_t at, T v) {
  std::memcpy(raw.data() + at, &v, sizeof(v));
}
void put_str(std::vector<std::byte>& raw, std::size_t at, const std::string& s) {
  std::memcpy(raw.data() + at, s.data(), s.size());
}

std::vector<std::byte> switch_record(long state) {
  std::vector<std::byte> raw(64);
  put_str(raw, 8, "bash");
  put<std::int32_t>(raw, 24, 1234);
  put<std::int32_t>(raw, 28, 120);
  put<std::int64_t>(raw, 32, state);
  put_str(raw, 40, "swapper/1");
  put<std::int32_t>(raw, 56, 0);
  put<std::int32_t>(raw, 60, 120);
  return raw;
}

TEST(PerfDataPrintFmt, SchedSwitchFlagsTernaryAndStrings) {
  const auto f = format_of(kSwitchFields, kSwitchFmt);
  const auto p = PrintFmt::parse(f);
  ASSERT_TRUE(p.supported()) << p.problem();
  const std::string prefix = "prev_comm=bash prev_pid=1234 prev_prio=120 prev_state=";
  const std::string suffix = " ==> next_comm=swapper/1 next_pid=0 next_prio=120";
  // (state, what the kernel's TP_printk shows): 0 is running, bits join with '|', the bit past
  // the mask (TASK_REPORT_MAX, preemption) adds '+'.
  const std::vector<std::pair<long, std::string>> cases = {
      {0, "R"}, {1, "S"}, {2, "D"}, {3, "S|D"}, {0x80, "I"}, {0x100, "R+"}, {0x101, "S+"}};
  for (const auto& [state, shown] : cases) {
    std::string out;
    EXPECT_TRUE(p.print(switch_record(state), out));
    EXPECT_EQ(out, prefix + shown + suffix) << state;
  }
}

TEST(PerfDataPrintFmt, CastsWidthsLengthsAndSymbolic) {
  const auto f = format_of(
      "\tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n"
      "\tfield:unsigned long b;\toffset:16;\tsize:8;\tsigned:0;\n"
      "\tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;\n",
      R"("a=%d ua=%u x=0x%08lx b=%llu c=%c s=%-6s| sym=%s neg=%d p=%p", REC->a, REC->a, ((unsigned long)(REC->b)), REC->b, 'A' + 1, __get_str(name), __print_symbolic(REC->a, { -1, "minus one" }, { 2, "two" }), -REC->a * 2, REC->b)");
  const auto p = PrintFmt::parse(f);
  ASSERT_TRUE(p.supported()) << p.problem();
  std::vector<std::byte> raw(40);
  put<std::int32_t>(raw, 8, -1);
  put<std::uint64_t>(raw, 16, 0xbeef);
  put<std::uint32_t>(raw, 24, (4U << 16) | 28U);  // __data_loc: len << 16 | offset
  put_str(raw, 28, "abc");
  std::string out;
  EXPECT_TRUE(p.print(raw, out));
  EXPECT_EQ(out,
            "a=-1 ua=4294967295 x=0x0000beef b=48879 c=B s=abc   | sym=minus one neg=2 "
            "p=0xbeef");
}

TEST(PerfDataPrintFmt, UnsupportedHelpersFallBackToNameValueAndSaySo) {
  const auto f = format_of(
      "\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n"
      "\tfield:int n;\toffset:16;\tsize:4;\tsigned:1;\n",
      R"("%pS n=%d", (void *)REC->ip, REC->n)");
  const auto p = PrintFmt::parse(f);
  EXPECT_FALSE(p.supported());
  EXPECT_NE(p.problem().find("%pS"), std::string::npos) << p.problem();
  std::vector<std::byte> raw(24);
  put<std::uint64_t>(raw, 8, 0x1000);
  put<std::int32_t>(raw, 16, -3);
  std::string out;
  EXPECT_FALSE(p.print(raw, out));
  EXPECT_EQ(out, "ip=4096 n=-3");

  const auto g =
      format_of("\tfield:int n;\toffset:8;\tsize:4;\tsigned:1;\n", R"("%s", __get_bitmask(n))");
  EXPECT_FALSE(PrintFmt::parse(g).supported());
  // An empty print fmt (syscalls without arguments) prints nothing.
  const auto e = PrintFmt::parse(format_of("", R"("")"));
  EXPECT_TRUE(e.supported()) << e.problem();
  std::string none;
  EXPECT_TRUE(e.print(std::vector<std::byte>(8), none));
  EXPECT_EQ(none, "");
}

TEST(PerfDataPrintFmt, PayloadTooShortFallsBack) {
  const auto p = PrintFmt::parse(format_of(kSwitchFields, kSwitchFmt));
  auto raw = switch_record(1);
  raw.resize(30);
  std::string out;
  EXPECT_FALSE(p.print(raw, out));
  EXPECT_NE(out.find("prev_comm=bash"), std::string::npos) << out;
}

}  // namespace
}  // namespace tracer::perfdata
