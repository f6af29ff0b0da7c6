#include "tracer/tracefs/tracefs.hpp"

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <vector>

#include "support/temp_dir.hpp"

namespace tracer::tracefs {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tracer::testing::slurp;
using ::tracer::testing::TempDir;

const fs::path kData = fs::path(TRACER_TEST_DATA_DIR) / "tracefs";

Format load(const std::string& rel, std::string_view sys, std::string_view ev) {
  const std::string text = slurp(kData / rel);
  EXPECT_FALSE(text.empty()) << "missing test data " << rel;
  auto f = parse_format(text, sys, ev);
  EXPECT_TRUE(f.has_value()) << (f ? "" : f.error().describe());
  return f ? *f : Format{};
}

void expect_field(const Format& fmt,
                  std::string_view name,
                  std::string_view type,
                  std::uint32_t offset,
                  std::uint32_t size,
                  bool is_signed) {
  const Field* f = fmt.field(name);
  ASSERT_NE(f, nullptr) << name;
  EXPECT_EQ(f->type, type) << name;
  EXPECT_EQ(f->offset, offset) << name;
  EXPECT_EQ(f->size, size) << name;
  EXPECT_EQ(f->is_signed, is_signed) << name;
}

void expect_common_fields(const Format& fmt) {
  ASSERT_GE(fmt.fields.size(), 4u);
  EXPECT_EQ(fmt.fields[0].name, "common_type");
  EXPECT_EQ(fmt.fields[1].name, "common_flags");
  EXPECT_EQ(fmt.fields[2].name, "common_preempt_count");
  EXPECT_EQ(fmt.fields[3].name, "common_pid");
  expect_field(fmt, "common_type", "unsigned short", 0, 2, false);
  expect_field(fmt, "common_flags", "unsigned char", 2, 1, false);
  expect_field(fmt, "common_preempt_count", "unsigned char", 3, 1, false);
  expect_field(fmt, "common_pid", "int", 4, 4, true);
  for (std::size_t i = 0; i < 4; ++i)
    EXPECT_TRUE(fmt.fields[i].is_common);
  for (std::size_t i = 4; i < fmt.fields.size(); ++i)
    EXPECT_FALSE(fmt.fields[i].is_common);
}

// A RAW payload under construction; put() is memcpy so any offset is fine.
struct Payload {
  std::vector<std::byte> bytes;
  explicit Payload(std::size_t n) : bytes(n) {}
  template <typename T>
  Payload& put(std::size_t off, T v) {
    std::memcpy(bytes.data() + off, &v, sizeof v);
    return *this;
  }
  Payload& put_str(std::size_t off, std::string_view s) {
    std::memcpy(bytes.data() + off, s.data(), s.size());
    return *this;
  }
  [[nodiscard]] std::span<const std::byte> span() const { return bytes; }
};

std::uint32_t loc(std::uint32_t len, std::uint32_t off) {
  return len << 16 | off;
}

// ---- parse_format on formats captured from 6.18 ------------------------------------------------

TEST(ParseFormat, SysEnterOpenat) {
  const Format f =
      load("6.18-x86_64/syscalls__sys_enter_openat.format", "syscalls", "sys_enter_openat");
  EXPECT_EQ(f.system, "syscalls");
  EXPECT_EQ(f.name, "sys_enter_openat");
  EXPECT_EQ(f.id, 782u);
  ASSERT_EQ(f.fields.size(), 9u);
  expect_common_fields(f);
  expect_field(f, "__syscall_nr", "int", 8, 4, true);
  expect_field(f, "dfd", "int", 16, 8, false);
  expect_field(f, "filename", "const char *", 24, 8, false);
  expect_field(f, "flags", "int", 32, 8, false);
  expect_field(f, "mode", "umode_t", 40, 8, false);
  const Field* filename = f.field("filename");
  EXPECT_FALSE(filename->is_string);  // a user pointer, not string bytes
  EXPECT_FALSE(filename->array_len.has_value());
  EXPECT_EQ(filename->element_size, 8u);
  EXPECT_THAT(f.print_fmt, ::testing::StartsWith("\"dfd: 0x%08lx, filename: 0x%08lx"));
}

// A system call's `char *` argument is a user pointer: the kernel's filter must read it with
// .ustring, or a string comparison matches nothing. Only string comparisons of such fields
// change; quoted text, other fields, suffixed names and other systems stay as written.
TEST(KernelFilter, SyscallStringPointersCompareAsUserStrings) {
  const Format openat =
      load("6.18-x86_64/syscalls__sys_enter_openat.format", "syscalls", "sys_enter_openat");
  EXPECT_EQ(kernel_filter(R"(filename == "/etc/passwd")", openat),
            R"(filename.ustring == "/etc/passwd")");
  EXPECT_EQ(kernel_filter(R"(flags == 0 && (filename~"*.so" || filename != 'x'))", openat),
            R"(flags == 0 && (filename.ustring~"*.so" || filename.ustring != 'x'))");
  EXPECT_EQ(kernel_filter(R"(dfd == 3 && "filename == x" == filename)", openat),
            R"(dfd == 3 && "filename == x" == filename)");  // a string on the left: as written
  EXPECT_EQ(kernel_filter(R"(filename.ustring == "a")", openat), R"(filename.ustring == "a")");
  EXPECT_EQ(kernel_filter("filename == 0", openat), "filename == 0");  // a pointer compare
  EXPECT_EQ(kernel_filter(R"(xfilename == "a")", openat), R"(xfilename == "a")");
  Format other = openat;
  other.system = "sched";  // a kernel pointer: the kernel reads it as it is
  EXPECT_EQ(kernel_filter(R"(filename == "a")", other), R"(filename == "a")");
}

TEST(ParseFormat, SchedSwitchCharArrays) {
  const Format f = load("6.18-x86_64/sched__sched_switch.format", "sched", "sched_switch");
  EXPECT_EQ(f.id, 372u);
  ASSERT_EQ(f.fields.size(), 11u);
  expect_common_fields(f);
  expect_field(f, "prev_comm", "char", 8, 16, false);
  expect_field(f, "prev_pid", "pid_t", 24, 4, true);
  expect_field(f, "prev_prio", "int", 28, 4, true);
  expect_field(f, "prev_state", "long", 32, 8, true);
  expect_field(f, "next_comm", "char", 40, 16, false);
  expect_field(f, "next_pid", "pid_t", 56, 4, true);
  expect_field(f, "next_prio", "int", 60, 4, true);
  const Field* comm = f.field("prev_comm");
  EXPECT_TRUE(comm->is_string);
  EXPECT_EQ(comm->array_len, 16u);
  EXPECT_EQ(comm->element_size, 1u);
  EXPECT_FALSE(comm->is_data_loc);
  EXPECT_EQ(f.field("nope"), nullptr);
}

TEST(ParseFormat, SchedProcessExecDataLoc) {
  const Format f =
      load("6.18-x86_64/sched__sched_process_exec.format", "sched", "sched_process_exec");
  EXPECT_EQ(f.id, 365u);
  ASSERT_EQ(f.fields.size(), 7u);
  expect_field(f, "filename", "__data_loc char[]", 8, 4, false);
  expect_field(f, "pid", "pid_t", 12, 4, true);
  expect_field(f, "old_pid", "pid_t", 16, 4, true);
  const Field* fn = f.field("filename");
  EXPECT_TRUE(fn->is_data_loc);
  EXPECT_FALSE(fn->is_rel_loc);
  EXPECT_TRUE(fn->is_string);
  EXPECT_FALSE(fn->array_len.has_value());
  EXPECT_EQ(fn->element_size, 1u);
  EXPECT_EQ(f.print_fmt,
            "\"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid");
}

TEST(ParseFormat, SysEnterLseek) {
  const Format f =
      load("6.18-x86_64/syscalls__sys_enter_lseek.format", "syscalls", "sys_enter_lseek");
  EXPECT_EQ(f.id, 844u);
  ASSERT_EQ(f.fields.size(), 8u);
  expect_field(f, "__syscall_nr", "int", 8, 4, true);
  expect_field(f, "fd", "unsigned int", 16, 8, false);
  expect_field(f, "offset", "off_t", 24, 8, false);
  expect_field(f, "whence", "unsigned int", 32, 8, false);
}

TEST(ParseFormat, RawSysEnterArray) {
  const Format f = load("6.18-x86_64/raw_syscalls__sys_enter.format", "raw_syscalls", "sys_enter");
  EXPECT_EQ(f.id, 443u);
  ASSERT_EQ(f.fields.size(), 6u);
  expect_field(f, "id", "long", 8, 8, true);
  expect_field(f, "args", "unsigned long", 16, 48, false);
  const Field* args = f.field("args");
  EXPECT_EQ(args->array_len, 6u);
  EXPECT_EQ(args->element_size, 8u);
  EXPECT_FALSE(args->is_string);
}

TEST(ParseFormat, SelinuxAuditedThreeDataLocs) {
  const Format f = load("6.18-x86_64/avc__selinux_audited.format", "avc", "selinux_audited");
  EXPECT_EQ(f.id, 2080u);
  expect_field(f, "result", "int", 20, 4, true);
  expect_field(f, "scontext", "__data_loc char[]", 24, 4, false);
  expect_field(f, "tcontext", "__data_loc char[]", 28, 4, false);
  expect_field(f, "tclass", "__data_loc char[]", 32, 4, false);
  EXPECT_TRUE(f.field("tclass")->is_data_loc);
}

TEST(ParseFormat, FtracePrintFlexibleArray) {
  const Format f = load("6.18-x86_64/ftrace__print.format", "ftrace", "print");
  expect_field(f, "ip", "unsigned long", 8, 8, false);
  expect_field(f, "buf", "char", 16, 0, false);
  const Field* buf = f.field("buf");
  EXPECT_TRUE(buf->is_string);
  EXPECT_FALSE(buf->array_len.has_value());
  EXPECT_FALSE(buf->is_data_loc);
}

TEST(ParseFormat, RelLocSynthetic) {
  const Format f = load("synthetic/sample__foo_rel_loc.format", "sample", "foo_rel_loc");
  EXPECT_EQ(f.id, 4242u);
  expect_field(f, "foo", "__rel_loc char[]", 8, 4, false);
  expect_field(f, "samples", "__rel_loc u64[]", 12, 4, false);
  expect_field(f, "delta", "short", 16, 2, true);
  EXPECT_TRUE(f.field("foo")->is_rel_loc);
  EXPECT_FALSE(f.field("foo")->is_data_loc);
  EXPECT_TRUE(f.field("foo")->is_string);
  EXPECT_FALSE(f.field("samples")->is_string);
  EXPECT_EQ(f.field("samples")->element_size, 8u);
}

TEST(ParseFormat, MultiLinePrintFmtRunsToTheEnd) {
  // 6.18's ext4:ext4_fc_stats has a literal newline inside its print fmt string.
  const Format f = load("6.18-x86_64/ext4__ext4_fc_stats.format", "ext4", "ext4_fc_stats");
  EXPECT_EQ(f.id, 1159u);
  ASSERT_EQ(f.fields.size(), 9u);
  expect_field(f, "fc_ineligible_rc", "unsigned int", 12, 40, false);
  EXPECT_EQ(f.field("fc_ineligible_rc")->array_len, 10u);
  EXPECT_EQ(f.field("fc_ineligible_rc")->element_size, 4u);
  expect_field(f, "fc_numblks", "unsigned long", 72, 8, false);
  EXPECT_THAT(f.print_fmt, ::testing::StartsWith("\"dev %d,%d fc ineligible reasons:\n%s:%u, "));
  EXPECT_THAT(f.print_fmt, ::testing::EndsWith("REC->fc_ineligible_commits, REC->fc_numblks"));
}

TEST(ParseFormat, LongOffendingLineIsQuotedShortened) {
  const std::string junk(1000, 'x');
  auto f = parse_format("format:\n" + junk + "\n");
  ASSERT_FALSE(f);
  EXPECT_THAT(f.error().message, HasSubstr("line 2"));
  EXPECT_THAT(f.error().message, HasSubstr("xxx..."));
  EXPECT_LT(f.error().message.size(), 300u);
}

TEST(ParseFormat, NameLineFillsEventWhenNotGiven) {
  auto f = parse_format("name: x\nID: 7\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n");
  ASSERT_TRUE(f) << f.error().describe();
  EXPECT_EQ(f->name, "x");
  EXPECT_EQ(f->id, 7u);
  EXPECT_EQ(f->print_fmt, "");
}

struct BadFormat {
  const char* text;
  int line;
  const char* needle;  // part of the offending line that the message must quote
  const char* why;
};

// Shown by ctest next to the test name instead of the struct's raw bytes.
void PrintTo(const BadFormat& b, std::ostream* os) {
  *os << b.why;
}

class ParseFormatErrors : public ::testing::TestWithParam<BadFormat> {};

TEST_P(ParseFormatErrors, NamesTheLine) {
  const auto& p = GetParam();
  auto f = parse_format(p.text, "sys", "ev");
  ASSERT_FALSE(f) << p.text;
  EXPECT_EQ(f.error().errno_value(), EINVAL);
  EXPECT_THAT(f.error().message, HasSubstr(fmt::format("line {}", p.line)));
  EXPECT_THAT(f.error().message, HasSubstr(p.needle));
  EXPECT_THAT(f.error().message, HasSubstr(p.why));
  EXPECT_THAT(f.error().message, HasSubstr("sys:ev"));
}

INSTANTIATE_TEST_SUITE_P(
    Malformed,
    ParseFormatErrors,
    ::testing::Values(
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\tsize:4;\tsigned:1;\n", 4,
                  "field:int a;", "no offset"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsigned:1;\n", 4,
                  "field:int a;", "no size"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4x;\tsigned:1;\n", 4,
                  "size:4x", "bad size value"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:-8;\tsize:4;\tsigned:1;\n", 4,
                  "offset:-8", "bad offset value"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:2;\n", 4,
                  "signed:2", "bad signed value"},
        BadFormat{"name: ev\nID: abc\nformat:\n", 2, "ID: abc", "bad ID"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int;\toffset:0;\tsize:4;\tsigned:1;\n", 4,
                  "field:int;", "no type"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield: ;\toffset:0;\tsize:4;\tsigned:1;\n", 4,
                  "field: ;", "no field name"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:char c[16];\toffset:0;\tsize:15;\tsigned:0;\n",
                  4, "char c[16]", "not a multiple"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:__data_loc char[] s;\toffset:8;\tsize:8;\t"
                  "signed:0;\n",
                  4, "__data_loc char[] s", "size 4"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n"
                  "\tfield:int a;\toffset:4;\tsize:4;\tsigned:1;\n",
                  5, "field:int a;", "duplicate"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n\n"
                  "garbage here\n",
                  6, "garbage here", "unrecognised"},
        BadFormat{"name: ev\nID: 1\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n", 3,
                  "field:int a;", "before 'format:'"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1\n", 4,
                  "signed:1", "missing ';'"},
        BadFormat{"name: ev\nID: 1\nformat:\n\tfield:int a;\toffset:4294967295;\tsize:4;\t"
                  "signed:1;\n",
                  4, "offset:4294967295", "overflows"}),
    [](const ::testing::TestParamInfo<BadFormat>& param_info) {
      std::string name;
      for (const char* c = param_info.param.why; *c; ++c)
        if (std::isalnum(static_cast<unsigned char>(*c)))
          name.push_back(*c);
      return name;
    });

TEST(ParseFormat, EmptyAndHeaderlessTextFail) {
  auto empty = parse_format("\n\n", "sys", "ev");
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().errno_value(), EINVAL);
  EXPECT_THAT(empty.error().message, HasSubstr("empty"));
  auto no_format = parse_format("name: ev\nID: 3\n", "sys", "ev");
  ASSERT_FALSE(no_format);
  EXPECT_THAT(no_format.error().message, HasSubstr("no 'format:' line"));
}

// ---- reading fields out of RAW payloads ---------------------------------------------------------

TEST(ReadField, IntegersSignAndZeroExtend) {
  const Format f = load("6.18-x86_64/sched__sched_switch.format", "sched", "sched_switch");
  Payload p(64);
  p.put<std::uint16_t>(0, 372).put<std::uint8_t>(2, 0x81).put<std::int32_t>(4, -5);
  p.put<std::int32_t>(24, 1234).put<std::int64_t>(32, -1).put<std::int32_t>(60, 120);
  EXPECT_EQ(read_int(*f.field("common_type"), p.span()), 372);
  EXPECT_EQ(read_int(*f.field("common_flags"), p.span()), 0x81);  // unsigned u8: no sign
  EXPECT_EQ(read_int(*f.field("common_pid"), p.span()), -5);
  EXPECT_EQ(read_int(*f.field("prev_pid"), p.span()), 1234);
  EXPECT_EQ(read_int(*f.field("prev_state"), p.span()), -1);
  EXPECT_EQ(read_int(*f.field("next_prio"), p.span()), 120);
  // Arrays are not integers.
  EXPECT_EQ(read_int(*f.field("prev_comm"), p.span()), std::nullopt);
  // next_prio occupies bytes 60..63: a 63-byte payload cuts it.
  EXPECT_EQ(read_int(*f.field("next_prio"), p.span().first(63)), std::nullopt);
  EXPECT_EQ(read_int(*f.field("next_prio"), p.span().first(64)), 120);
  EXPECT_EQ(read_int(*f.field("common_type"), {}), std::nullopt);

  Field u16;
  u16.name = "u";
  u16.type = "u16";
  u16.offset = 1;
  u16.size = 2;
  Field s16 = u16;
  s16.is_signed = true;
  Payload q(3);
  q.put<std::uint16_t>(1, 0xffff);  // odd offset: the read must not be an aligned deref
  EXPECT_EQ(read_int(u16, q.span()), 0xffff);
  EXPECT_EQ(read_int(s16, q.span()), -1);
  Field odd = u16;
  odd.offset = 0;
  odd.size = 3;
  EXPECT_EQ(read_int(odd, q.span()), std::nullopt);
}

TEST(ReadField, MisalignedPayloadStart) {
  // A RAW payload starts 4 bytes after an 8-aligned header (u32 size first), and may be copied
  // anywhere; start the span at an odd address to make sure no read assumes alignment.
  const Format f = load("6.18-x86_64/raw_syscalls__sys_enter.format", "raw_syscalls", "sys_enter");
  std::vector<std::byte> storage(1 + 64);
  std::span<std::byte> raw = std::span(storage).subspan(1);
  const std::int64_t id = 257;
  std::memcpy(raw.data() + 8, &id, sizeof id);
  for (std::uint64_t i = 0; i < 6; ++i) {
    const std::uint64_t v = 0x1000 + i;
    std::memcpy(raw.data() + 16 + 8 * i, &v, sizeof v);
  }
  EXPECT_EQ(read_int(*f.field("id"), raw), 257);
  auto args = read_bytes(*f.field("args"), raw);
  ASSERT_TRUE(args);
  ASSERT_EQ(args->size(), 48u);
  EXPECT_EQ(args->data(), raw.data() + 16);
  std::uint64_t arg5 = 0;
  std::memcpy(&arg5, args->data() + 40, 8);
  EXPECT_EQ(arg5, 0x1005u);
  EXPECT_EQ(read_bytes(*f.field("args"), std::span<const std::byte>(raw).first(63)), std::nullopt);
  EXPECT_EQ(read_string(*f.field("args"), raw), std::nullopt);  // not a string field
}

TEST(ReadField, CharArrayStrings) {
  const Format f = load("6.18-x86_64/sched__sched_switch.format", "sched", "sched_switch");
  Payload p(64);
  p.put_str(8, "bash").put_str(40, "0123456789abcdef");  // next_comm fills all 16 bytes
  EXPECT_EQ(read_string(*f.field("prev_comm"), p.span()), "bash");
  EXPECT_EQ(read_string(*f.field("next_comm"), p.span()), "0123456789abcdef");
  EXPECT_EQ(read_string(*f.field("next_comm"), p.span().first(55)), std::nullopt);
  EXPECT_EQ(read_string(*f.field("prev_pid"), p.span()), std::nullopt);
}

TEST(ReadField, DataLocString) {
  const Format f =
      load("6.18-x86_64/sched__sched_process_exec.format", "sched", "sched_process_exec");
  const Field& fn = *f.field("filename");
  Payload p(40);
  p.put<std::uint32_t>(8, loc(10, 20)).put<std::int32_t>(12, 77).put_str(20, "/bin/true");
  EXPECT_EQ(read_string(fn, p.span()), "/bin/true");
  EXPECT_EQ(read_int(*f.field("pid"), p.span()), 77);
  auto bytes = read_bytes(fn, p.span());
  ASSERT_TRUE(bytes);
  EXPECT_EQ(bytes->size(), 10u);  // the length includes the NUL
  EXPECT_EQ(bytes->data(), p.span().data() + 20);
  EXPECT_EQ(read_int(fn, p.span()), std::nullopt);

  // Without a NUL inside the length, the string stops at the bound, not past it.
  Payload q(40);
  q.put<std::uint32_t>(8, loc(4, 20)).put_str(20, "abcdefgh");
  EXPECT_EQ(read_string(fn, q.span()), "abcd");

  // Zero length: empty string.
  q.put<std::uint32_t>(8, loc(0, 20));
  EXPECT_EQ(read_string(fn, q.span()), "");
}

TEST(ReadField, DataLocOutOfBoundsIsRejected) {
  const Format f =
      load("6.18-x86_64/sched__sched_process_exec.format", "sched", "sched_process_exec");
  const Field& fn = *f.field("filename");
  Payload p(32);
  p.put_str(20, "abcdefghijk");
  // Offset past the end.
  p.put<std::uint32_t>(8, loc(4, 40));
  EXPECT_EQ(read_bytes(fn, p.span()), std::nullopt);
  EXPECT_EQ(read_string(fn, p.span()), std::nullopt);
  // Offset inside, length runs past the end by one byte.
  p.put<std::uint32_t>(8, loc(13, 20));
  EXPECT_EQ(read_string(fn, p.span()), std::nullopt);
  // Exactly to the end is fine.
  p.put<std::uint32_t>(8, loc(12, 20));
  EXPECT_EQ(read_string(fn, p.span()), "abcdefghijk");
  // Offset exactly at the end, zero length: empty, in bounds.
  p.put<std::uint32_t>(8, loc(0, 32));
  EXPECT_EQ(read_string(fn, p.span()), "");
  // Maximal descriptor.
  p.put<std::uint32_t>(8, 0xffffffffu);
  EXPECT_EQ(read_bytes(fn, p.span()), std::nullopt);
  // The descriptor itself is cut off.
  EXPECT_EQ(read_bytes(fn, p.span().first(11)), std::nullopt);
}

TEST(ReadField, RelLocIsRelativeToTheFieldEnd) {
  const Format f = load("synthetic/sample__foo_rel_loc.format", "sample", "foo_rel_loc");
  const Field& foo = *f.field("foo");          // offset 8, ends at 12
  const Field& samples = *f.field("samples");  // offset 12, ends at 16
  Payload p(48);
  // foo's string at 20 = 12 + 8; samples' two u64 at 24 = 16 + 8.
  p.put<std::uint32_t>(8, loc(4, 8)).put<std::uint32_t>(12, loc(16, 8));
  p.put<std::int16_t>(16, -300).put_str(20, "hey");
  p.put<std::uint64_t>(24, 11).put<std::uint64_t>(32, 22);
  EXPECT_EQ(read_string(foo, p.span()), "hey");
  EXPECT_EQ(read_int(*f.field("delta"), p.span()), -300);
  auto s = read_bytes(samples, p.span());
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 16u);
  EXPECT_EQ(s->data(), p.span().data() + 24);
  // Read as __data_loc, the same descriptor would point at offset 8 instead: make sure it isn't.
  Field as_data_loc = foo;
  as_data_loc.is_rel_loc = false;
  as_data_loc.is_data_loc = true;
  EXPECT_NE(read_string(as_data_loc, p.span()), "hey");
  // Relative offset that runs past the end.
  p.put<std::uint32_t>(12, loc(32, 8));
  EXPECT_EQ(read_bytes(samples, p.span()), std::nullopt);
  p.put<std::uint32_t>(12, loc(0, 33));
  EXPECT_EQ(read_bytes(samples, p.span()), std::nullopt);
}

TEST(ReadField, FlexibleTrailingArray) {
  const Format f = load("6.18-x86_64/ftrace__print.format", "ftrace", "print");
  Payload p(24);
  p.put_str(16, "hi\n");
  EXPECT_EQ(read_string(*f.field("buf"), p.span()), "hi\n");
  EXPECT_EQ(read_bytes(*f.field("buf"), p.span())->size(), 8u);
  EXPECT_EQ(read_string(*f.field("buf"), p.span().first(16)), "");
  EXPECT_EQ(read_string(*f.field("buf"), p.span().first(15)), std::nullopt);
}

TEST(SplitTracepoint, Forms) {
  auto a = split_tracepoint("sched:sched_switch");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->system, "sched");
  EXPECT_EQ(a->event, "sched_switch");
  auto b = split_tracepoint("syscalls/sys_enter_openat");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->system, "syscalls");
  EXPECT_EQ(b->event, "sys_enter_openat");
  EXPECT_FALSE(split_tracepoint("sched_switch"));
  EXPECT_FALSE(split_tracepoint(":x"));
  EXPECT_FALSE(split_tracepoint("x:"));
  EXPECT_FALSE(split_tracepoint("a:b:c"));
  EXPECT_FALSE(split_tracepoint("a/b/c"));
  EXPECT_FALSE(split_tracepoint("..:x"));
  EXPECT_FALSE(split_tracepoint(""));
}

// ---- a fake tracefs tree
// -------------------------------------------------------------------------

class FakeTracefs : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string fmt_text = slurp(kData / "6.18-x86_64/sched__sched_switch.format");
    dir_.write("events/sched/sched_switch/id", "372\n");
    dir_.write("events/sched/sched_switch/format", fmt_text);
    dir_.write("events/sched/sched_wakeup/id", "371\n");
    dir_.write("events/alpha/zeta/id", "9\n");
    dir_.write("events/alpha/beta/id", "8\n");
    dir_.write("events/other/sched_switch/id", "1000\n");
    dir_.mkdir("events/sched/no_id_here");  // not a tracepoint: no id file
    dir_.write("events/header_page", "field: u64 timestamp;\n");
    dir_.write("events/enable", "0\n");
    dir_.write("events/broken/bad_id/id", "12a\n");
  }
  TempDir dir_;
};

std::vector<std::string> names(const std::vector<TracepointName>& tps) {
  std::vector<std::string> out;
  for (const auto& tp : tps)
    out.push_back(tp.system + ":" + tp.event);
  return out;
}

TEST_F(FakeTracefs, ListsSortedEventsWithIdFiles) {
  const Tracefs t = Tracefs::at(dir_.path());
  EXPECT_EQ(t.root(), dir_.path());
  auto all = t.list_tracepoints();
  ASSERT_TRUE(all) << all.error().describe();
  EXPECT_THAT(names(*all),
              ElementsAre("alpha:beta", "alpha:zeta", "broken:bad_id", "other:sched_switch",
                          "sched:sched_switch", "sched:sched_wakeup"));
  auto sched = t.list_tracepoints("sched:*");
  ASSERT_TRUE(sched);
  EXPECT_THAT(names(*sched), ElementsAre("sched:sched_switch", "sched:sched_wakeup"));
  auto any_switch = t.list_tracepoints("*:sched_sw?tch");
  ASSERT_TRUE(any_switch);
  EXPECT_THAT(names(*any_switch), ElementsAre("other:sched_switch", "sched:sched_switch"));
  auto slash = t.list_tracepoints("alpha/[bz]eta");
  ASSERT_TRUE(slash);
  EXPECT_THAT(names(*slash), ElementsAre("alpha:beta", "alpha:zeta"));
  auto none = t.list_tracepoints("nothing:*");
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(FakeTracefs, IdAndFormat) {
  const Tracefs t = Tracefs::at(dir_.path());
  auto id = t.tracepoint_id({"alpha", "zeta"});
  ASSERT_TRUE(id) << id.error().describe();
  EXPECT_EQ(*id, 9u);
  auto fmt = t.format({"sched", "sched_switch"});
  ASSERT_TRUE(fmt) << fmt.error().describe();
  EXPECT_EQ(fmt->system, "sched");
  EXPECT_EQ(fmt->name, "sched_switch");
  EXPECT_EQ(fmt->id, 372u);
  ASSERT_NE(fmt->field("next_comm"), nullptr);

  auto bad = t.tracepoint_id({"broken", "bad_id"});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().errno_value(), EINVAL);
  EXPECT_THAT(bad.error().message, HasSubstr("12a"));

  auto no_format = t.format({"alpha", "zeta"});
  ASSERT_FALSE(no_format);
  EXPECT_EQ(no_format.error().errno_value(), ENOENT);
}

TEST_F(FakeTracefs, MissingTracepointSuggestsNearMatches) {
  const Tracefs t = Tracefs::at(dir_.path());
  auto id = t.tracepoint_id({"sched", "sched_swich"});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().errno_value(), ENOENT);
  EXPECT_THAT(id.error().message, HasSubstr("sched:sched_swich"));
  EXPECT_THAT(id.error().hint, HasSubstr("sched:sched_switch"));

  // Typo: nearest first, then the same event in another system; sched_wakeup is too far (6).
  EXPECT_THAT(t.near_matches({"sched", "sched_swich"}),
              ElementsAre("sched:sched_switch", "other:sched_switch"));
  // Distance 1 first; sched_switch (5) is still within the threshold (max(3, 17 / 3) = 5).
  EXPECT_THAT(t.near_matches({"sched", "sched_wakeu"}),
              ElementsAre("sched:sched_wakeup", "sched:sched_switch"));
  // Right event, wrong system.
  EXPECT_THAT(t.near_matches({"wrongsys", "sched_switch"}, 1), ElementsAre("other:sched_switch"));
  // An exact existing name is not its own near match; unrelated names give nothing.
  EXPECT_THAT(t.near_matches({"alpha", "beta"}, 1), ElementsAre("alpha:zeta"));
  EXPECT_TRUE(t.near_matches({"completely", "unrelated_thing_xyz"}).empty());
  EXPECT_TRUE(t.near_matches({"sched", "sched_swich"}, 0).empty());
}

TEST_F(FakeTracefs, PathTraversalIsRejected) {
  dir_.write("secret/id", "5\n");
  const Tracefs t = Tracefs::at(dir_.path() / "events" / "sched");
  auto id = t.tracepoint_id({"..", ".."});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().errno_value(), EINVAL);
  EXPECT_FALSE(Tracefs::at(dir_.path()).format({"a/../../secret", "x"}));
}

TEST(FakeTracefsMissing, NoEventsDirIsAnError) {
  TempDir dir;
  auto all = Tracefs::at(dir.path() / "nope").list_tracepoints();
  ASSERT_FALSE(all);
  EXPECT_EQ(all.error().errno_value(), ENOENT);
  EXPECT_THAT(all.error().message, HasSubstr("nope/events"));
}

// ---- live: this kernel's tracefs
// -----------------------------------------------------------------

Result<Tracefs> open_live() {
  auto t = Tracefs::open();
  if (!t && ::geteuid() != 0)
    return t;  // caller skips
  EXPECT_TRUE(t) << (t ? "" : t.error().describe());
  return t;
}

// NOLINTBEGIN(bugprone-macro-parentheses): `var` names a new variable.
#define TRACER_LIVE_TRACEFS(var)                                           \
  auto var##_r = open_live();                                              \
  if (!var##_r)                                                            \
    GTEST_SKIP() << "tracefs unavailable: " << var##_r.error().describe(); \
  const Tracefs& var = *var##_r
// NOLINTEND(bugprone-macro-parentheses)

TEST(LiveTracefs, OpenFindsAMountWithEvents) {
  TRACER_LIVE_TRACEFS(t);
  EXPECT_TRUE(fs::is_directory(t.root() / "events")) << t.root();
  // open() reports what /proc/mounts says (or mounted it there): it must now be listed.
  const std::string mounts = slurp("/proc/mounts");
  EXPECT_THAT(mounts, HasSubstr(" " + t.root().string() + " "));
}

TEST(LiveTracefs, ListsSyscallTracepointsSorted) {
  TRACER_LIVE_TRACEFS(t);
  auto all = t.list_tracepoints();
  ASSERT_TRUE(all) << all.error().describe();
  const auto all_names = names(*all);
  EXPECT_THAT(all_names, ::testing::Contains("syscalls:sys_enter_openat"));
  EXPECT_THAT(all_names, ::testing::Contains("sched:sched_switch"));
  EXPECT_TRUE(std::is_sorted(all->begin(), all->end(), [](const auto& a, const auto& b) {
    return std::tie(a.system, a.event) < std::tie(b.system, b.event);
  }));
  auto one = t.list_tracepoints("sched:sched_switch");
  ASSERT_TRUE(one);
  EXPECT_THAT(names(*one), ElementsAre("sched:sched_switch"));
}

TEST(LiveTracefs, IdMatchesTheIdFile) {
  TRACER_LIVE_TRACEFS(t);
  auto id = t.tracepoint_id({"syscalls", "sys_enter_openat"});
  ASSERT_TRUE(id) << id.error().describe();
  const std::string file = slurp(t.root() / "events/syscalls/sys_enter_openat/id");
  EXPECT_EQ(std::to_string(*id) + "\n", file);
}

TEST(LiveTracefs, MisspelledTracepointHintsTheRightOne) {
  TRACER_LIVE_TRACEFS(t);
  auto id = t.tracepoint_id({"syscalls", "sys_enter_opnat"});
  ASSERT_FALSE(id);
  EXPECT_EQ(id.error().errno_value(), ENOENT);
  EXPECT_THAT(id.error().hint, HasSubstr("sys_enter_openat"));
  auto fmt = t.format(*split_tracepoint("syscalls:sys_enter_opnat"));
  ASSERT_FALSE(fmt);
  EXPECT_EQ(fmt.error().errno_value(), ENOENT);
  EXPECT_THAT(fmt.error().hint, HasSubstr("sys_enter_openat"));
}

TEST(LiveTracefs, LiveFormatMatchesIdAndParses) {
  TRACER_LIVE_TRACEFS(t);
  auto fmt = t.format({"sched", "sched_process_exec"});
  ASSERT_TRUE(fmt) << fmt.error().describe();
  auto id = t.tracepoint_id({"sched", "sched_process_exec"});
  ASSERT_TRUE(id);
  EXPECT_EQ(fmt->id, *id);
  ASSERT_NE(fmt->field("filename"), nullptr);
  EXPECT_TRUE(fmt->field("filename")->is_data_loc);
}

TEST(LiveTracefs, EveryFormatOnThisKernelParses) {
  TRACER_LIVE_TRACEFS(t);
  auto all = t.list_tracepoints();
  ASSERT_TRUE(all);
  std::size_t parsed = 0;
  for (const auto& tp : *all) {
    auto fmt = t.format(tp);
    if (!fmt && fmt.error().errno_value() == EACCES)
      continue;
    ASSERT_TRUE(fmt) << fmt.error().describe();
    EXPECT_GE(fmt->fields.size(), 1u) << tp.system << ":" << tp.event;
    for (const auto& f : fmt->fields) {
      if (f.is_data_loc || f.is_rel_loc) {
        EXPECT_EQ(f.size, 4u) << f.name;
      }
      if (f.array_len && *f.array_len) {
        EXPECT_EQ(f.element_size * *f.array_len, f.size) << f.name;
      }
    }
    ++parsed;
  }
  EXPECT_GT(parsed, 100u);
}

}  // namespace
}  // namespace tracer::tracefs
