#include "tracer/perf/pmu.hpp"

#include <fmt/core.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "support/temp_dir.hpp"

namespace tracer::perf {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::tracer::testing::slurp;
using ::tracer::testing::TempDir;

const fs::path kLiveDevices = "/sys/bus/event_source/devices";

/// A fake /sys/bus/event_source/devices with a core-like PMU, an odd one with split bit ranges,
/// a symlinked PMU (as in real sysfs) and a directory that is not a PMU.
class FakeSysfs : public ::testing::Test {
 protected:
  void SetUp() override {
    d_.write("devices/software/type", "1\n");
    d_.write("devices/cpu/type", "4\n");
    d_.write("devices/cpu/format/event", "config:0-7\n");
    d_.write("devices/cpu/format/umask", "config:8-15\n");
    d_.write("devices/cpu/format/inv", "config:23\n");
    d_.write("devices/cpu/format/cmask", "config:24-31\n");
    d_.write("devices/cpu/events/cpu-cycles", "event=0x3c\n");
    d_.write("devices/cpu/events/ref-cycles", "event=0x00,umask=0x03\n");
    d_.write("devices/cpu/caps/max_precise", "3\n");
    d_.write("devices/odd/type", "42\n");
    d_.write("devices/odd/format/split", "config:4-7,32-35\n");
    d_.write("devices/odd/format/wide", "config1:0-63\n");
    d_.write("devices/odd/format/flag", "config2:5\n");
    d_.write("devices/odd/format/x3", "config3:0-31\n");
    d_.write("devices/odd/events/energy", "split=0x21\n");
    d_.write("devices/odd/events/energy.unit", "Joules\n");
    d_.write("devices/odd/events/energy.scale", "2.3283064365386962890625e-10\n");
    d_.write("devices/odd/cpumask", "0-2,5\n");
    d_.write("devices/odd/nr_addr_filters", "2\n");
    d_.write("real/linked/type", "7\n");
    d_.write("real/linked/format/retprobe", "config:0\n");
    fs::create_directory_symlink("../real/linked", d_.path() / "devices/linked");
    d_.mkdir("devices/not_a_pmu/power");
  }
  [[nodiscard]] PmuScanOptions opts() const { return {.devices_dir = d_.path() / "devices"}; }
  [[nodiscard]] Pmu get(const std::string& name) const {
    auto p = find_pmu(name, opts());
    EXPECT_TRUE(p) << (p ? "" : p.error().describe());
    return p ? *p : Pmu{};
  }

  TempDir d_;
};

TEST_F(FakeSysfs, ListsPmusSortedByType) {
  auto pmus = list_pmus(opts());
  ASSERT_TRUE(pmus) << pmus.error().describe();
  std::vector<std::pair<std::string, std::uint32_t>> got;
  for (const auto& p : *pmus)
    got.emplace_back(p.name, p.type);
  EXPECT_THAT(got, ElementsAre(Pair("software", 1u), Pair("cpu", 4u), Pair("linked", 7u),
                               Pair("odd", 42u)));
}

TEST_F(FakeSysfs, FindPmuReadsFormatsEventsAndAttributes) {
  const Pmu odd = get("odd");
  EXPECT_EQ(odd.type, 42u);
  EXPECT_EQ(odd.dir, d_.path() / "devices/odd");
  ASSERT_EQ(odd.formats.size(), 4u);  // sorted by name
  EXPECT_EQ(odd.formats[0].name, "flag");
  EXPECT_EQ(odd.formats[0].config_field, 2);
  EXPECT_THAT(odd.formats[0].bits, ElementsAre(Pair(5, 5)));
  EXPECT_EQ(odd.formats[1].name, "split");
  EXPECT_EQ(odd.formats[1].spec, "config:4-7,32-35");
  EXPECT_EQ(odd.formats[1].config_field, 0);
  EXPECT_THAT(odd.formats[1].bits, ElementsAre(Pair(4, 7), Pair(32, 35)));
  EXPECT_EQ(odd.formats[2].name, "wide");
  EXPECT_EQ(odd.formats[2].config_field, 1);
  EXPECT_THAT(odd.formats[2].bits, ElementsAre(Pair(0, 63)));
  EXPECT_EQ(odd.formats[3].name, "x3");
  EXPECT_EQ(odd.formats[3].config_field, 3);
  ASSERT_EQ(odd.events.size(), 1u);  // .unit/.scale are attributes, not aliases
  EXPECT_EQ(odd.events[0].name, "energy");
  EXPECT_EQ(odd.events[0].terms, "split=0x21");
  EXPECT_EQ(odd.events[0].unit, "Joules");
  EXPECT_EQ(odd.events[0].scale, "2.3283064365386962890625e-10");
  EXPECT_THAT(odd.cpus, ElementsAre(0, 1, 2, 5));
  EXPECT_EQ(odd.nr_addr_filters, 2u);

  const Pmu cpu = get("cpu");
  EXPECT_THAT(cpu.caps, ElementsAre(Pair("max_precise", "3")));
  EXPECT_TRUE(cpu.cpus.empty());
  EXPECT_EQ(cpu.nr_addr_filters, 0u);
  const Pmu linked = get("linked");  // through the symlink
  EXPECT_EQ(linked.type, 7u);
  ASSERT_EQ(linked.formats.size(), 1u);
  EXPECT_EQ(linked.formats[0].name, "retprobe");
}

TEST_F(FakeSysfs, FindPmuMissing) {
  auto p = find_pmu("kprobe", opts());
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().errno_value(), ENOENT);
  EXPECT_THAT(p.error().message, HasSubstr("kprobe"));
  auto not_pmu = find_pmu("not_a_pmu", opts());
  ASSERT_FALSE(not_pmu);
  EXPECT_EQ(not_pmu.error().errno_value(), ENOENT);
  auto escape = find_pmu("../real/linked", opts());
  ASSERT_FALSE(escape);
  EXPECT_EQ(escape.error().errno_value(), EINVAL);
}

TEST_F(FakeSysfs, MalformedFormatSpecNamesTheFile) {
  d_.write("devices/cpu/format/bad", "confg:0-7\n");
  auto pmus = list_pmus(opts());
  ASSERT_FALSE(pmus);
  EXPECT_EQ(pmus.error().errno_value(), EINVAL);
  EXPECT_THAT(pmus.error().message, HasSubstr("format/bad"));
  EXPECT_THAT(pmus.error().message, HasSubstr("confg:0-7"));
  for (const char* spec :
       {"config:7-0", "config:0-64", "config:", "config:0-7,", "config:a", "config4:0"}) {
    d_.write("devices/cpu/format/bad", spec);
    EXPECT_FALSE(find_pmu("cpu", opts())) << spec;
  }
}

TEST_F(FakeSysfs, NonNumericTypeIsAnError) {
  d_.write("devices/cpu/type", "four\n");
  auto p = find_pmu("cpu", opts());
  ASSERT_FALSE(p);
  EXPECT_EQ(p.error().errno_value(), EINVAL);
  EXPECT_THAT(p.error().message, HasSubstr("four"));
}

TEST_F(FakeSysfs, EncodeCoreTerms) {
  const Pmu cpu = get("cpu");
  auto c = encode_pmu_terms(cpu, "event=0x3c,umask=1");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x13cu);
  EXPECT_EQ(c->config1, 0u);
  c = encode_pmu_terms(cpu, "event=60,umask=0x1,inv,cmask=2,name=foo");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x0280013cu);  // cmask 2 << 24 | inv 1 << 23 | umask << 8 | event
  // Aliases expand; explicit terms may follow and override bits.
  c = encode_pmu_terms(cpu, "cpu-cycles");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x3cu);
  c = encode_pmu_terms(cpu, "ref-cycles,umask=2");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x200u);
  // A repeated term replaces the earlier value rather than OR-ing into it.
  c = encode_pmu_terms(cpu, "event=0xff,event=0x01");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->config, 0x01u);
  c = encode_pmu_terms(cpu, "");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->config, 0u);
}

TEST_F(FakeSysfs, EncodeMultiRangeAndOtherWords) {
  const Pmu odd = get("odd");
  // 0xab: low nibble 0xb -> bits 4-7, high nibble 0xa -> bits 32-35.
  auto c = encode_pmu_terms(odd, "split=0xab");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0xa000000b0u);
  c = encode_pmu_terms(odd, "wide=0xffffffffffffffff,flag,x3=0xdeadbeef");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0u);
  EXPECT_EQ(c->config1, ~std::uint64_t{0});
  EXPECT_EQ(c->config2, std::uint64_t{1} << 5);
  EXPECT_EQ(c->config3, 0xdeadbeefu);
  c = encode_pmu_terms(odd, "energy");  // alias "split=0x21"
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x200000010u);
  // Builtin terms write whole words.
  c = encode_pmu_terms(odd, "config=0x1234,config1=5,config2=6,config3=7");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 0x1234u);
  EXPECT_EQ(c->config1, 5u);
  EXPECT_EQ(c->config2, 6u);
  EXPECT_EQ(c->config3, 7u);
}

TEST_F(FakeSysfs, EncodeErrors) {
  const Pmu cpu = get("cpu");
  const Pmu odd = get("odd");
  auto too_big = encode_pmu_terms(cpu, "event=0x100");
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().errno_value(), EINVAL);
  EXPECT_THAT(too_big.error().message, HasSubstr("'event'"));
  EXPECT_THAT(too_big.error().message, HasSubstr("8 bits"));
  EXPECT_THAT(too_big.error().message, HasSubstr("0x100"));
  EXPECT_TRUE(encode_pmu_terms(cpu, "event=0xff"));
  auto split_big = encode_pmu_terms(odd, "split=0x100");
  ASSERT_FALSE(split_big);
  EXPECT_THAT(split_big.error().message, HasSubstr("config:4-7,32-35"));
  auto flag_big = encode_pmu_terms(odd, "flag=2");
  ASSERT_FALSE(flag_big);
  EXPECT_THAT(flag_big.error().message, HasSubstr("1 bit "));

  auto unknown = encode_pmu_terms(cpu, "event=1,bogus=3");
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().errno_value(), EINVAL);
  EXPECT_THAT(unknown.error().message, HasSubstr("'bogus'"));
  EXPECT_THAT(unknown.error().hint, HasSubstr("umask"));

  for (const char* bad : {"event=xyz", "event=", "event=0x", "event=-1", "event=1,,umask=1",
                          "event=1,", "config", "cpu-cycles=1", "event=99999999999999999999"}) {
    auto r = encode_pmu_terms(cpu, bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_EQ(r.error().errno_value(), EINVAL) << bad;
    }
  }
}

TEST_F(FakeSysfs, NameForType) {
  EXPECT_EQ(pmu_name_for_type(42, opts()), "odd");
  EXPECT_EQ(pmu_name_for_type(7, opts()), "linked");
  EXPECT_EQ(pmu_name_for_type(1, opts()), "software");
  // Built-in ABI types with no directory in this tree.
  EXPECT_EQ(pmu_name_for_type(0, opts()), "hardware");
  EXPECT_EQ(pmu_name_for_type(2, opts()), "tracepoint");
  EXPECT_EQ(pmu_name_for_type(3, opts()), "hw_cache");
  EXPECT_EQ(pmu_name_for_type(5, opts()), "breakpoint");
  EXPECT_EQ(pmu_name_for_type(6, opts()), std::nullopt);
  EXPECT_EQ(pmu_name_for_type(12345, opts()), std::nullopt);
}

const PmuCapability& cap(const std::vector<PmuCapability>& caps, std::string_view name) {
  for (const auto& c : caps)
    if (c.name == name)
      return c;
  ADD_FAILURE() << "no capability " << name;
  static const PmuCapability kNone;
  return kNone;
}

TEST_F(FakeSysfs, CapabilitiesFollowThePmuList) {
  d_.write("devices/kprobe/type", "6\n");
  d_.write("devices/intel_pt/type", "10\n");
  auto pmus = list_pmus(opts());
  ASSERT_TRUE(pmus) << pmus.error().describe();
  const auto caps = probe_capabilities(*pmus, opts());
  EXPECT_TRUE(cap(caps, "kprobe").available);
  EXPECT_EQ(cap(caps, "kprobe").reason, "PMU type 6");
  EXPECT_TRUE(cap(caps, "AUX tracing").available);
  EXPECT_THAT(cap(caps, "AUX tracing").reason, HasSubstr("intel_pt (type 10)"));
  EXPECT_THAT(cap(caps, "AUX tracing").reason, HasSubstr("odd (type 42)"));  // nr_addr_filters
  EXPECT_FALSE(cap(caps, "breakpoint").available);
  EXPECT_FALSE(cap(caps, "tracepoints").available);
  EXPECT_TRUE(cap(caps, "software events").available);
  EXPECT_THAT(cap(caps, "hardware counters").reason, HasSubstr("cpu (type 4)"));
}

TEST(FakeSysfsMissing, NoDevicesDir) {
  TempDir d;
  auto pmus = list_pmus({.devices_dir = d.path() / "absent"});
  ASSERT_FALSE(pmus);
  EXPECT_EQ(pmus.error().errno_value(), ENOENT);
  EXPECT_THAT(pmus.error().message, HasSubstr("absent"));
}

// ---- live: this machine's sysfs -----------------------------------------------------------------

std::uint32_t live_type(const std::string& pmu) {
  return static_cast<std::uint32_t>(std::stoul(slurp(kLiveDevices / pmu / "type")));
}

TEST(LivePmu, UprobeTypeMatchesSysfs) {
  if (!fs::exists(kLiveDevices / "uprobe/type"))
    GTEST_SKIP() << "no uprobe PMU on this kernel (CONFIG_UPROBE_EVENTS off)";
  auto p = find_pmu("uprobe");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->type, live_type("uprobe"));
  // The kernel's uprobe PMU has format/retprobe = config:0 (kernel/events/core.c).
  auto c = encode_pmu_terms(*p, "retprobe");
  ASSERT_TRUE(c) << c.error().describe();
  EXPECT_EQ(c->config, 1u);
  EXPECT_EQ(pmu_name_for_type(p->type), "uprobe");
}

TEST(LivePmu, TracepointTypeIsTwo) {
  EXPECT_EQ(pmu_name_for_type(2), "tracepoint");
  EXPECT_EQ(pmu_name_for_type(1), "software");
}

TEST(LivePmu, ListMatchesSysfsDirectories) {
  auto pmus = list_pmus();
  ASSERT_TRUE(pmus) << pmus.error().describe();
  std::size_t dirs = 0;
  for (const auto& e : fs::directory_iterator(kLiveDevices))
    if (fs::exists(e.path() / "type"))
      ++dirs;
  EXPECT_EQ(pmus->size(), dirs);
  for (const auto& p : *pmus)
    EXPECT_EQ(p.type, live_type(p.name)) << p.name;
}

TEST(LivePmu, CapabilitiesMatchTheFilesystem) {
  auto pmus = list_pmus();
  ASSERT_TRUE(pmus) << pmus.error().describe();
  const auto caps = probe_capabilities(*pmus);
  for (const char* name : {"hardware counters", "AUX tracing", "kprobe", "uprobe", "breakpoint",
                           "tracepoints", "software events"}) {
    EXPECT_FALSE(cap(caps, name).reason.empty()) << name;
  }
  const bool kprobe_pmu = fs::exists(kLiveDevices / "kprobe");
  const bool kprobe_events = fs::exists("/sys/kernel/tracing/kprobe_events") ||
                             fs::exists("/sys/kernel/debug/tracing/kprobe_events");
  EXPECT_EQ(cap(caps, "kprobe").available, kprobe_pmu || kprobe_events);
  if (!kprobe_pmu && !kprobe_events) {
    EXPECT_THAT(cap(caps, "kprobe").reason, HasSubstr("kprobe"));
  }
  if (kprobe_pmu) {
    EXPECT_EQ(cap(caps, "kprobe").reason, fmt::format("PMU type {}", live_type("kprobe")));
  }
  const bool uprobe_pmu = fs::exists(kLiveDevices / "uprobe");
  if (uprobe_pmu) {
    EXPECT_TRUE(cap(caps, "uprobe").available);
    EXPECT_EQ(cap(caps, "uprobe").reason, fmt::format("PMU type {}", live_type("uprobe")));
  }
  EXPECT_EQ(cap(caps, "breakpoint").available, fs::exists(kLiveDevices / "breakpoint"));
  EXPECT_EQ(cap(caps, "tracepoints").available, fs::exists(kLiveDevices / "tracepoint"));
}

// The perfmon properties from CPUID leaf 0xA: a Skylake-class core (version 4, 4 programmable
// 48-bit counters in EAX; 3 fixed 48-bit counters in EDX) with a 32-deep LBR; version 1 has no
// fixed-counter description; version 0 (a VM without a virtual PMU, as here) none at all.
TEST(PmuProperties, DecodesCpuidLeafTen) {
  auto p = properties_from_cpuid(0x0730'0404U, 0x0000'0603U, 32);
  EXPECT_EQ(p.api_version, 3);
  EXPECT_EQ(p.pm_version, 4);
  EXPECT_EQ(p.max_num_programmable_events, 4);
  EXPECT_EQ(p.max_programmable_counter_width, 48);
  EXPECT_EQ(p.max_num_fixed_events, 3);
  EXPECT_EQ(p.max_fixed_counter_width, 48);
  EXPECT_EQ(p.max_num_events, 7);
  EXPECT_TRUE(p.has_last_branch);
  EXPECT_EQ(p.last_branch_depth, 32u);
  p = properties_from_cpuid(0x0028'0201U, 0xffff'ffffU, 0);
  EXPECT_EQ(p.pm_version, 1);
  EXPECT_EQ(p.max_num_programmable_events, 2);
  EXPECT_EQ(p.max_programmable_counter_width, 40);
  EXPECT_EQ(p.max_num_fixed_events, 0);  // EDX describes fixed counters from version 2
  EXPECT_FALSE(p.has_last_branch);
  p = properties_from_cpuid(0, 0, 0);
  EXPECT_EQ(p.max_num_events, 0);
  EXPECT_NE(p.source.find("version 0"), std::string::npos) << p.source;
}

}  // namespace
}  // namespace tracer::perf
