// Probe backend choice on fake sysfs/tracefs trees (exact), on this kernel (kprobes absent,
// uprobe PMU present), and live uprobes/uretprobes through the uprobe PMU: exactly one sample
// per call of the target function, from the child's pid, with the argument (DI) on entry and
// the return value (AX) on return.
#include "core/probe_backend.hpp"

#include <asm/perf_regs.h>
#include <gtest/gtest.h>
#include <linux/perf_event.h>
#include <sys/wait.h>

#include <string>

#include "support/probe_hits.hpp"
#include "support/temp_dir.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::core {
namespace {

namespace fs = std::filesystem;
constexpr int kCalls = 7;

// Fake trees ----------------------------------------------------------------------------------

TEST(ProbeBackend, PmuWinsWithItsTypeAndRetprobeBit) {
  testing::TempDir t;
  t.write("devices/kprobe/type", "6\n");
  t.write("devices/kprobe/format/retprobe", "config:0\n");
  t.write("tracing/kprobe_events", "");
  const auto b = choose_probe_backend(ProbeFamily::kKprobe, {.devices_dir = t.path() / "devices",
                                                             .tracefs_root = t.path() / "tracing",
                                                             .kernel_config = t.path() / "none"});
  EXPECT_EQ(b.kind, ProbeBackendKind::kPmu);
  EXPECT_EQ(b.family, ProbeFamily::kKprobe);
  EXPECT_EQ(b.pmu_type, 6U);
  EXPECT_EQ(b.retprobe_bit, 0U);
  EXPECT_EQ(b.reason, "kprobe PMU (type 6, retprobe is config bit 0)");
}

TEST(ProbeBackend, RetprobeBitComesFromTheFormatFile) {
  testing::TempDir t;
  t.write("devices/uprobe/type", "42\n");
  t.write("devices/uprobe/format/retprobe", "config:5\n");
  t.write("devices/uprobe/format/ref_ctr_offset", "config:32-63\n");
  const auto b = choose_probe_backend(ProbeFamily::kUprobe, {.devices_dir = t.path() / "devices",
                                                             .tracefs_root = t.path() / "tracing",
                                                             .kernel_config = {}});
  ASSERT_EQ(b.kind, ProbeBackendKind::kPmu);
  EXPECT_EQ(b.pmu_type, 42U);
  EXPECT_EQ(b.retprobe_bit, 5U);

  const std::string path = "/bin/true";
  const auto ret = uprobe_attr(b, path, 0x1139, true);
  EXPECT_EQ(ret.type(), 42U);
  EXPECT_EQ(ret.config(), 1U << 5);
  EXPECT_EQ(ret.raw()->config1, reinterpret_cast<std::uint64_t>(path.c_str()));
  EXPECT_EQ(ret.raw()->config2, 0x1139U);
  EXPECT_EQ(uprobe_attr(b, path, 0x1139, false).config(), 0U);

  // Without format/retprobe the kernel's bit 0 is assumed.
  testing::TempDir u;
  u.write("devices/uprobe/type", "9\n");
  u.mkdir("devices/uprobe/format");
  const auto d = choose_probe_backend(ProbeFamily::kUprobe, {.devices_dir = u.path() / "devices",
                                                             .tracefs_root = u.path() / "tracing",
                                                             .kernel_config = {}});
  ASSERT_EQ(d.kind, ProbeBackendKind::kPmu);
  EXPECT_EQ(d.retprobe_bit, 0U);
  // A multi-bit retprobe term is not something we know how to set: fall back to tracefs.
  u.write("devices/uprobe/format/retprobe", "config:0-1\n");
  u.write("tracing/uprobe_events", "");
  const auto e = choose_probe_backend(ProbeFamily::kUprobe, {.devices_dir = u.path() / "devices",
                                                             .tracefs_root = u.path() / "tracing",
                                                             .kernel_config = {}});
  EXPECT_EQ(e.kind, ProbeBackendKind::kTracefs);
  EXPECT_NE(e.reason.find("not a single config bit"), std::string::npos) << e.reason;
}

TEST(ProbeBackend, KprobeAttrByNameAndByAddress) {
  ProbeBackend b;
  b.kind = ProbeBackendKind::kPmu;
  b.family = ProbeFamily::kKprobe;
  b.pmu_type = 77;
  b.retprobe_bit = 0;
  const std::string sym = "do_nanosleep";
  const auto by_name = kprobe_attr(b, sym, 0x10, true);
  EXPECT_EQ(by_name.type(), 77U);
  EXPECT_EQ(by_name.config(), 1U);
  EXPECT_EQ(by_name.raw()->config1, reinterpret_cast<std::uint64_t>(sym.c_str()));
  EXPECT_EQ(by_name.raw()->config2, 0x10U);
  const auto by_addr = kprobe_attr(b, std::string(), 0xffffffff81000000, false);
  EXPECT_EQ(by_addr.config(), 0U);
  EXPECT_EQ(by_addr.raw()->config1, 0U);
  EXPECT_EQ(by_addr.raw()->config2, 0xffffffff81000000U);
}

TEST(ProbeBackend, TracefsWhenThereIsNoPmu) {
  testing::TempDir t;
  t.mkdir("devices/software");
  t.write("tracing/kprobe_events", "");
  const auto b = choose_probe_backend(ProbeFamily::kKprobe, {.devices_dir = t.path() / "devices",
                                                             .tracefs_root = t.path() / "tracing",
                                                             .kernel_config = {}});
  EXPECT_EQ(b.kind, ProbeBackendKind::kTracefs);
  EXPECT_EQ(b.tracefs_root, t.path() / "tracing");
  EXPECT_EQ(b.reason,
            "no kprobe PMU; tracefs " + (t.path() / "tracing" / "kprobe_events").string());
}

TEST(ProbeBackend, NeitherExplainedByTheKernelConfig) {
  testing::TempDir t;
  t.mkdir("devices");
  t.mkdir("tracing");
  const BackendRoots roots{.devices_dir = t.path() / "devices",
                           .tracefs_root = t.path() / "tracing",
                           .kernel_config = t.path() / "config"};
  t.write("config", "CONFIG_UPROBES=y\n# CONFIG_KPROBES is not set\n");
  EXPECT_EQ(choose_probe_backend(ProbeFamily::kKprobe, roots).reason,
            "this kernel has neither the kprobe PMU nor tracefs kprobe_events "
            "(CONFIG_KPROBES is off)");
  t.write("config", "CONFIG_KPROBES=y\n");
  EXPECT_EQ(choose_probe_backend(ProbeFamily::kKprobe, roots).reason,
            "this kernel has neither the kprobe PMU nor tracefs kprobe_events "
            "(CONFIG_KPROBE_EVENTS is off)");
  t.write("config", "CONFIG_UPROBES=y\nCONFIG_UPROBE_EVENTS=y\n");
  const auto u = choose_probe_backend(ProbeFamily::kUprobe, roots);
  EXPECT_EQ(u.kind, ProbeBackendKind::kUnsupported);
  EXPECT_EQ(u.reason,
            "this kernel has neither the uprobe PMU nor tracefs uprobe_events "
            "(CONFIG_UPROBE_EVENTS is on, yet neither is visible)");
  const BackendRoots no_config{.devices_dir = t.path() / "devices",
                               .tracefs_root = t.path() / "tracing",
                               .kernel_config = t.path() / "absent"};
  EXPECT_EQ(choose_probe_backend(ProbeFamily::kKprobe, no_config).reason,
            "this kernel has neither the kprobe PMU nor tracefs kprobe_events "
            "(no kernel config is readable to say why)");
}

// This kernel ---------------------------------------------------------------------------------

TEST(ProbeBackendHere, KprobesAreUnsupportedWithTheReason) {
  if (fs::exists("/sys/bus/event_source/devices/kprobe"))
    GTEST_SKIP() << "this kernel has the kprobe PMU";
  const auto b = choose_probe_backend(ProbeFamily::kKprobe);
  EXPECT_EQ(b.kind, ProbeBackendKind::kUnsupported);
  EXPECT_EQ(b.reason,
            "this kernel has neither the kprobe PMU nor tracefs kprobe_events "
            "(CONFIG_KPROBES is off)");
}

TEST(ProbeBackendHere, UprobesUseThePmuOfSysfs) {
  const std::string type_text = testing::slurp("/sys/bus/event_source/devices/uprobe/type");
  if (type_text.empty())
    GTEST_SKIP() << "no uprobe PMU on this kernel";
  const auto b = choose_probe_backend(ProbeFamily::kUprobe);
  ASSERT_EQ(b.kind, ProbeBackendKind::kPmu) << b.reason;
  EXPECT_EQ(b.pmu_type, std::stoul(type_text));
  EXPECT_EQ(b.retprobe_bit, 0U);
}

// Live uprobes through the PMU ----------------------------------------------------------------

class UprobePmuLive : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = choose_probe_backend(ProbeFamily::kUprobe);
    if (backend_.kind != ProbeBackendKind::kPmu)
      GTEST_SKIP() << "no uprobe PMU: " << backend_.reason;
  }

  /// Hits of a uprobe at binary:symbol while `program` runs kCalls calls, sampling `reg`.
  testing::Collected run(const std::string& binary,
                         const std::string& symbol,
                         bool retprobe,
                         int reg,
                         const std::string& program) {
    auto offset = symbols::symbol_file_offset(binary, symbol);
    EXPECT_TRUE(offset.has_value()) << offset.error().describe();
    if (!offset)
      return {};
    auto attr = uprobe_attr(backend_, binary, *offset, retprobe);
    attr.sample_type(PERF_SAMPLE_REGS_USER).sample_regs_user(std::uint64_t{1} << reg);
    auto hits = testing::run_and_collect(attr, program, {std::to_string(kCalls)});
    EXPECT_TRUE(hits.has_value()) << hits.error().describe();
    return hits ? *hits : testing::Collected{};
  }

  /// Exactly kCalls hits, all from the child, whose register values are factor * 1..kCalls in
  /// call order.
  static void expect_calls(const testing::Collected& run, std::uint64_t factor) {
    const auto& hits = run.hits;
    ASSERT_EQ(hits.size(), static_cast<std::size_t>(kCalls));
    for (std::size_t i = 0; i < hits.size(); ++i) {
      EXPECT_EQ(hits[i].pid, static_cast<std::uint32_t>(run.child));
      ASSERT_EQ(hits[i].regs_user.size(), 1U);
      // 32-bit int in a 64-bit register: the upper half is not part of the value.
      EXPECT_EQ(hits[i].regs_user[0] & 0xffffffffU, factor * (i + 1)) << "call " << i;
    }
  }

  ProbeBackend backend_;
};

TEST_F(UprobePmuLive, EntryFiresOncePerCallWithTheArgument) {
  expect_calls(
      run(TRACER_UPROBE_TARGET, "tracer_test_fn", false, PERF_REG_X86_DI, TRACER_UPROBE_TARGET), 1);
}

TEST_F(UprobePmuLive, ReturnFiresOncePerCallWithTheReturnValue) {
  expect_calls(
      run(TRACER_UPROBE_TARGET, "tracer_test_fn", true, PERF_REG_X86_AX, TRACER_UPROBE_TARGET), 3);
}

TEST_F(UprobePmuLive, NonPieExecutable) {
  expect_calls(run(TRACER_UPROBE_TARGET_NOPIE, "tracer_test_fn", true, PERF_REG_X86_AX,
                   TRACER_UPROBE_TARGET_NOPIE),
               3);
}

TEST_F(UprobePmuLive, StrippedExecutableThroughDynsym) {
  expect_calls(run(TRACER_UPROBE_TARGET_STRIPPED, "tracer_test_fn", false, PERF_REG_X86_DI,
                   TRACER_UPROBE_TARGET_STRIPPED),
               1);
}

TEST_F(UprobePmuLive, SharedLibraryFunction) {
  expect_calls(run(TRACER_TARGET_LIB, "tracer_lib_fn", false, PERF_REG_X86_DI, TRACER_LIB_USER), 1);
  expect_calls(run(TRACER_TARGET_LIB, "tracer_lib_fn", true, PERF_REG_X86_AX, TRACER_LIB_USER), 5);
}

TEST_F(UprobePmuLive, HitsComeFromTheChildOnly) {
  // The event follows the child (pid = child): another process running the same binary at the
  // same time is not counted.
  auto offset = symbols::symbol_file_offset(TRACER_UPROBE_TARGET, "tracer_test_fn");
  ASSERT_TRUE(offset.has_value());
  const std::string path = TRACER_UPROBE_TARGET;
  auto attr = uprobe_attr(backend_, path, *offset, false);
  testing::GatedExec other(path, {"1000"});
  ASSERT_TRUE(other.release());
  auto run = testing::run_and_collect(attr, path, {std::to_string(kCalls)});
  ASSERT_TRUE(run.has_value()) << run.error().describe();
  EXPECT_EQ(other.wait(), 0);
  ASSERT_EQ(run->hits.size(), static_cast<std::size_t>(kCalls));
  for (const auto& h : run->hits) {
    EXPECT_EQ(h.pid, static_cast<std::uint32_t>(run->child));
    EXPECT_EQ(h.tid, h.pid);
  }
}

}  // namespace
}  // namespace tracer::core
