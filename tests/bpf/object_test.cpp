// bpf::Object on the shipped objects: opening (file, memory, shipped), programs, maps (hash
// update/delete/iteration, per-CPU arrays), globals, and the verifier log trimming.
#include "tracer/bpf/object.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <vector>

namespace tracer::bpf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::vector<std::byte> file_bytes(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::transform(c.begin(), c.end(), out.begin(), [](char ch) { return std::byte(ch); });
  return out;
}

TEST(BpfObject, OpensTheShippedObjectsFromFileMemoryAndTheLibrary) {
  auto from_file = Object::open_file(TRACER_BPF_SYSCALL_OUTPUT_OBJECT);
  ASSERT_TRUE(from_file.has_value()) << from_file.error().describe();
  EXPECT_THAT(from_file->program_names(), ElementsAre("syscall_output"));
  EXPECT_THAT(from_file->map_names(),
              ::testing::IsSupersetOf({"tgids", "events", "output_drops", "hits"}));

  const auto bytes = file_bytes(TRACER_BPF_TGID_GATE_OBJECT);
  ASSERT_FALSE(bytes.empty());
  auto from_memory = Object::open_memory(bytes, "tgid_gate");
  ASSERT_TRUE(from_memory.has_value()) << from_memory.error().describe();
  EXPECT_EQ(from_memory->name(), "tgid_gate");
  EXPECT_THAT(from_memory->program_names(), ElementsAre("tgid_gate"));

  std::vector<std::string_view> names;
  for (const auto& p : shipped_programs())
    names.push_back(p.name);
  EXPECT_THAT(names, UnorderedElementsAre("syscall_output", "tgid_gate", "tp_hits", "tp_deliver",
                                          "tp_deliver_rb"));
  // The library embeds the same bytes the build produced.
  const auto shipped = shipped_programs();
  const auto gate = std::find_if(shipped.begin(), shipped.end(),
                                 [](const ShippedProgram& p) { return p.name == "tgid_gate"; });
  ASSERT_NE(gate, shipped.end());
  EXPECT_TRUE(std::equal(gate->object.begin(), gate->object.end(), bytes.begin(), bytes.end()));

  auto unknown = Object::open_shipped("nope");
  ASSERT_FALSE(unknown.has_value());
  EXPECT_EQ(unknown.error().errno_value(), ENOENT);
  EXPECT_THAT(unknown.error().hint, HasSubstr("syscall_output"));

  auto garbage = Object::open_memory(std::as_bytes(std::span("not an ELF file")), "garbage");
  ASSERT_FALSE(garbage.has_value());
  EXPECT_THAT(garbage.error().message, HasSubstr("garbage"));
}

TEST(BpfObject, ProgramsAndMapsByNameBeforeAndAfterLoad) {
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  auto before = obj->program_fd("syscall_output");
  ASSERT_FALSE(before.has_value());
  EXPECT_EQ(before.error().errno_value(), EBADF);
  EXPECT_EQ(obj->map_fd("tgids").error().errno_value(), EBADF);
  EXPECT_EQ(obj->program_type("syscall_output"), BPF_PROG_TYPE_TRACEPOINT);
  EXPECT_EQ(obj->map_type("events"), BPF_MAP_TYPE_PERF_EVENT_ARRAY);
  ASSERT_TRUE(obj->set_map_max_entries("tgids", 64).has_value());

  ASSERT_TRUE(obj->load().has_value());
  EXPECT_TRUE(obj->loaded());
  auto fd = obj->program_fd("syscall_output");
  ASSERT_TRUE(fd.has_value()) << fd.error().describe();
  EXPECT_GE(*fd, 0);
  EXPECT_EQ(obj->map_max_entries("tgids"), 64U);
  // libbpf sizes a PERF_EVENT_ARRAY to the possible CPUs.
  EXPECT_EQ(obj->map_max_entries("events"),
            static_cast<std::uint32_t>(::sysconf(_SC_NPROCESSORS_CONF)));

  auto missing = obj->program_fd("nope");
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
  EXPECT_THAT(missing.error().hint, HasSubstr("syscall_output"));
  auto missing_map = obj->map_fd("nope");
  ASSERT_FALSE(missing_map.has_value());
  EXPECT_THAT(missing_map.error().hint, HasSubstr("output_drops"));
  EXPECT_EQ(obj->load().error().errno_value(), EALREADY);
  EXPECT_EQ(obj->set_global("nr_args", std::uint32_t{1}).error().errno_value(), EINVAL);
}

TEST(BpfObject, HashUpdateDeleteAndIteration) {
  auto obj = Object::open_shipped("tgid_gate");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->load().has_value());
  for (std::uint32_t tgid : {11U, 22U, 33U})
    ASSERT_TRUE((obj->update_elem<std::uint32_t, std::uint8_t>("tgids", tgid, 1)).has_value());
  ASSERT_TRUE(obj->delete_elem<std::uint32_t>("tgids", 22).has_value());
  EXPECT_EQ(obj->delete_elem<std::uint32_t>("tgids", 22).error().errno_value(), ENOENT);
  auto dup = obj->update_elem<std::uint32_t, std::uint8_t>("tgids", 11, 1, BPF_NOEXIST);
  EXPECT_EQ(dup.error().errno_value(), EEXIST);
  auto wrong = obj->update_elem<std::uint64_t, std::uint8_t>("tgids", 11, 1);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().errno_value(), EINVAL);
  EXPECT_THAT(wrong.error().message, HasSubstr("key is 8 bytes"));

  auto all = obj->entries("tgids");
  ASSERT_TRUE(all.has_value()) << all.error().describe();
  std::vector<std::uint32_t> keys;
  for (const auto& [k, v] : *all) {
    ASSERT_EQ(k.size(), 4U);
    ASSERT_EQ(v.size(), 1U);
    EXPECT_EQ(v[0], std::byte{1});
    std::uint32_t key = 0;
    std::memcpy(&key, k.data(), 4);
    keys.push_back(key);
  }
  EXPECT_THAT(keys, UnorderedElementsAre(11U, 33U));
  auto value = obj->lookup_elem("tgids", std::as_bytes(std::span<const std::uint32_t>({33U})));
  ASSERT_TRUE(value.has_value());
  EXPECT_EQ(value->size(), 1U);
}

TEST(BpfObject, PerCpuArrayReadsOneValuePerPossibleCpu) {
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->load().has_value());
  const auto ncpu = static_cast<std::size_t>(::sysconf(_SC_NPROCESSORS_CONF));
  std::vector<std::uint64_t> set(ncpu);
  for (std::size_t i = 0; i < ncpu; ++i)
    set[i] = 10 * (i + 1);
  const std::uint32_t zero = 0;
  ASSERT_TRUE(
      obj->update_elem("hits", std::as_bytes(std::span(&zero, 1)), std::as_bytes(std::span(set)))
          .has_value());
  auto per_cpu = obj->percpu_array<std::uint64_t>("hits");
  ASSERT_TRUE(per_cpu.has_value()) << per_cpu.error().describe();
  EXPECT_EQ(*per_cpu, set);
  std::uint64_t want = 0;
  for (auto v : set)
    want += v;
  EXPECT_EQ(obj->percpu_array_sum<std::uint64_t>("hits"), want);
  EXPECT_EQ(obj->percpu_array_sum<std::uint32_t>("hits").error().errno_value(), EINVAL);
  EXPECT_EQ(obj->percpu_array<std::uint8_t>("tgids").error().errno_value(), EINVAL);
}

TEST(BpfObject, SetGlobalFindsRodataVariablesByName) {
  auto obj = Object::open_shipped("syscall_output");
  ASSERT_TRUE(obj.has_value()) << obj.error().describe();
  ASSERT_TRUE(obj->set_global("nr_args", std::uint32_t{3}).has_value());
  auto missing = obj->set_global("nope", std::uint32_t{3});
  EXPECT_EQ(missing.error().errno_value(), ENOENT);
  auto wrong_size = obj->set_global("nr_args", std::uint64_t{3});
  EXPECT_EQ(wrong_size.error().errno_value(), EINVAL);
  ASSERT_TRUE(obj->load().has_value());
}

TEST(BpfObject, TrimVerifierLogEndsAtTheErrorLine) {
  std::string log;
  for (int i = 0; i < 40; ++i)
    log += "line " + std::to_string(i) + "\n";
  log += "invalid access to map value, value_size=8 off=64 size=8\n";
  log += "R0 min value is outside of the allowed memory range\n";
  log += "processed 12 insns (limit 1000000) max_states_per_insn 0 total_states 0\n\n";
  const std::string t = trim_verifier_log(log, 5);
  EXPECT_EQ(t,
            "line 37\nline 38\nline 39\n"
            "invalid access to map value, value_size=8 off=64 size=8\n"
            "R0 min value is outside of the allowed memory range\n");
  EXPECT_EQ(trim_verifier_log("only\n", 25), "only\n");
  EXPECT_EQ(trim_verifier_log("", 25), "");
}

}  // namespace
}  // namespace tracer::bpf
