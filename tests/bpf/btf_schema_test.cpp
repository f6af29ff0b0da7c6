// bpf::Object::struct_schema against the C header the BPF program shares with C++.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>

#include "syscall_output.h"
#include "tracer/bpf/object.hpp"

namespace tracer::bpf {
namespace {

struct Want {
  const char* name;
  std::size_t offset, size;
  FieldKind kind;
  std::uint32_t element_size, count;
  const char* type_name;
};

TEST(BpfStructSchema, MatchesTheSharedHeaderExactly) {
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  auto s = obj->struct_schema("syscall_output_event");
  ASSERT_TRUE(s.has_value()) << s.error().describe();
  using E = syscall_output_event;
  EXPECT_EQ(s->size, sizeof(E));
  const Want want[] = {
      {"ts", offsetof(E, ts), sizeof(E::ts), FieldKind::kUnsigned, 8, 1, "__u64"},
      {"pid", offsetof(E, pid), sizeof(E::pid), FieldKind::kUnsigned, 4, 1, "__u32"},
      {"tid", offsetof(E, tid), sizeof(E::tid), FieldKind::kUnsigned, 4, 1, "__u32"},
      {"nr", offsetof(E, nr), sizeof(E::nr), FieldKind::kSigned, 8, 1, "__s64"},
      {"args", offsetof(E, args), sizeof(E::args), FieldKind::kArray, 8, SYSCALL_OUTPUT_MAX_ARGS,
       "__u64[6]"},
      {"comm", offsetof(E, comm), sizeof(E::comm), FieldKind::kString, 1, SYSCALL_OUTPUT_COMM_LEN,
       "char[16]"},
  };
  ASSERT_EQ(s->fields.size(), std::size(want));
  for (std::size_t i = 0; i < std::size(want); ++i) {
    const SchemaField& f = s->fields[i];
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(f.name, want[i].name);
    EXPECT_EQ(f.offset, want[i].offset);
    EXPECT_EQ(f.size, want[i].size);
    EXPECT_EQ(f.kind, want[i].kind) << field_kind_name(f.kind);
    EXPECT_EQ(f.element_size, want[i].element_size);
    EXPECT_EQ(f.count, want[i].count);
    EXPECT_EQ(f.type_name, want[i].type_name);
    EXPECT_EQ(f.bit_size, 0);
  }
  ASSERT_NE(s->field("comm"), nullptr);
  EXPECT_EQ(s->field("comm")->offset, offsetof(E, comm));
  EXPECT_EQ(s->field("nope"), nullptr);
}

TEST(BpfStructSchema, UnknownStructListsTheKnownOnes) {
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  auto s = obj->struct_schema("no_such_struct");
  ASSERT_FALSE(s.has_value());
  EXPECT_EQ(s.error().errno_value(), ENOENT);
  EXPECT_THAT(s.error().hint, ::testing::HasSubstr("syscall_output_event"));
  // The tracepoint context type is in the BTF too: typedefs and nested kinds resolve.
  auto ctx = obj->struct_schema("trace_event_raw_sys_enter");
  ASSERT_TRUE(ctx.has_value()) << ctx.error().describe();
  ASSERT_NE(ctx->field("ent"), nullptr);
  EXPECT_EQ(ctx->field("ent")->kind, FieldKind::kStruct);
  ASSERT_NE(ctx->field("id"), nullptr);
  EXPECT_EQ(ctx->field("id")->offset, 8U);
  EXPECT_EQ(ctx->field("id")->kind, FieldKind::kSigned);
  ASSERT_NE(ctx->field("args"), nullptr);
  EXPECT_EQ(ctx->field("args")->offset, 16U);
  EXPECT_EQ(ctx->field("args")->count, 6U);
}

}  // namespace
}  // namespace tracer::bpf
