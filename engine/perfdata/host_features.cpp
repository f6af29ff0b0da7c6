// HostInfo: the machine description perf keeps in its header features, read the way perf record
// reads it (tools/perf/util/header.c write_*, cputopo.c, arch/x86/util/header.c get_cpuid).
#include <dirent.h>
#include <fcntl.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <ctime>
#include <string>
#include <vector>

#include "tracer/common/cpu_list.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/perfdata/writer.hpp"
#include "tracer/symbols/symbols.hpp"

namespace tracer::perfdata {
namespace {

using tracer::detail::trim;

/// A small procfs or sysfs file's text; empty when it cannot be read (the feature then says
/// less). /proc/cpuinfo is the largest: a few hundred KiB on a machine of hundreds of CPUs.
std::string read_small(const std::string& path) {
  return tracer::detail::read_text_file(path, "perf-data", std::size_t{4} << 20)
      .value_or(std::string());
}

std::uint32_t to_u32(std::string_view s, std::uint32_t fallback) {
  const std::string_view t = trim(s);
  std::uint32_t v = 0;
  const auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  return ec == std::errc{} && p == t.data() + t.size() ? v : fallback;
}

// The value of the first "key\t: value" line of /proc/cpuinfo whose key is `key`.
std::string cpuinfo_value(const std::string& cpuinfo, std::string_view key) {
  for (const std::string_view line : tracer::detail::lines(cpuinfo)) {
    const auto colon = line.find(':');
    if (colon != std::string_view::npos && trim(line.substr(0, colon)) == key)
      return std::string(trim(line.substr(colon + 1)));
  }
  return {};
}

// perf squashes runs of spaces in the brand string.
std::string squash_spaces(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c)) != 0) {
      if (!out.empty() && out.back() != ' ')
        out.push_back(' ');
    } else {
      out.push_back(c);
    }
  }
  return std::string(trim(out));
}

void add_unique(std::vector<std::string>& lists, std::string s) {
  if (!s.empty() && std::find(lists.begin(), lists.end(), s) == lists.end())
    lists.push_back(std::move(s));
}

}  // namespace

AuxtraceType auxtrace_type_for_pmu(std::string_view pmu) noexcept {
  if (pmu == "intel_pt")
    return AuxtraceType::kIntelPt;
  if (pmu == "intel_bts")
    return AuxtraceType::kIntelBts;
  if (pmu == "cs_etm")
    return AuxtraceType::kCsEtm;
  if (pmu.starts_with("arm_spe"))
    return AuxtraceType::kArmSpe;
  if (pmu == "cpum_sf")
    return AuxtraceType::kS390Cpumsf;
  return AuxtraceType::kUnknown;
}

HostInfo HostInfo::read() {
  HostInfo h;
  utsname uts{};
  if (::uname(&uts) == 0) {
    h.hostname = uts.nodename;
    h.os_release = uts.release;
    h.arch = uts.machine;
  }
  h.version = std::string("tracer ") + TRACER_VERSION;
  h.kernel_build_id = symbols::KernelSymbols::build_id();

  const std::string cpuinfo = read_small("/proc/cpuinfo");
  h.cpu_desc = squash_spaces(cpuinfo_value(cpuinfo, "model name"));
  const std::string vendor = cpuinfo_value(cpuinfo, "vendor_id");
  if (!vendor.empty()) {  // x86: "GenuineIntel,6,85,4" as perf's get_cpuid() prints it
    h.cpuid = vendor + "," + cpuinfo_value(cpuinfo, "cpu family") + "," +
              cpuinfo_value(cpuinfo, "model") + "," + cpuinfo_value(cpuinfo, "stepping");
  }

  const std::string meminfo = read_small("/proc/meminfo");
  if (const auto p = meminfo.find("MemTotal:"); p != std::string::npos) {
    const auto end = meminfo.find('\n', p);
    std::string v(trim(std::string_view(meminfo).substr(p + 9, end - p - 9)));
    if (v.ends_with("kB"))
      v = std::string(trim(std::string_view(v).substr(0, v.size() - 2)));
    std::from_chars(v.data(), v.data() + v.size(), h.total_mem_kb);
  }

  // nr_cpus_avail: max present CPU + 1 (perf's cpu__max_present_cpu()).
  const std::string sys_cpu = "/sys/devices/system/cpu/";
  if (auto present = cpus::parse_list(trim(read_small(sys_cpu + "present")));
      present && !present->empty()) {
    h.nr_cpus_avail =
        static_cast<std::uint32_t>(*std::max_element(present->begin(), present->end())) + 1;
  }
  const long online = ::sysconf(_SC_NPROCESSORS_ONLN);
  h.nr_cpus_online = online > 0 ? static_cast<std::uint32_t>(online) : 0;
  if (h.nr_cpus_avail == 0)
    h.nr_cpus_avail = h.nr_cpus_online;

  // CPU_TOPOLOGY, as cputopo.c: package (core_siblings) and thread sibling lists of online CPUs,
  // then core/socket ids of every CPU (-1 when offline), then dies.
  h.cpus.resize(h.nr_cpus_avail);
  for (std::uint32_t cpu = 0; cpu < h.nr_cpus_avail; ++cpu) {
    const std::string topo = sys_cpu + "cpu" + std::to_string(cpu) + "/topology/";
    std::string package(trim(read_small(topo + "package_cpus_list")));
    if (package.empty())
      package = std::string(trim(read_small(topo + "core_siblings_list")));
    std::string threads(trim(read_small(topo + "core_cpus_list")));
    if (threads.empty())
      threads = std::string(trim(read_small(topo + "thread_siblings_list")));
    add_unique(h.core_siblings, package);
    add_unique(h.thread_siblings, threads);
    add_unique(h.die_siblings, std::string(trim(read_small(topo + "die_cpus_list"))));
    h.cpus[cpu].core_id = to_u32(read_small(topo + "core_id"), 0xffffffffU);
    h.cpus[cpu].socket_id = to_u32(read_small(topo + "physical_package_id"), 0xffffffffU);
    h.cpus[cpu].die_id = to_u32(read_small(topo + "die_id"), 0xffffffffU);
  }

  // PMU_MAPPINGS: every PMU's type.
  if (DIR* d = ::opendir("/sys/bus/event_source/devices")) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..")
        continue;
      const std::string type(trim(read_small("/sys/bus/event_source/devices/" + name + "/type")));
      if (!type.empty())
        h.pmus.emplace_back(to_u32(type, 0), name);
    }
    ::closedir(d);
  }

  timespec res{};
  if (::clock_getres(CLOCK_MONOTONIC, &res) == 0) {
    h.clock_res_ns = static_cast<std::uint64_t>(res.tv_sec) * 1'000'000'000ULL +
                     static_cast<std::uint64_t>(res.tv_nsec);
  }
  timespec tod{}, mono{};
  ::clock_gettime(CLOCK_REALTIME, &tod);
  ::clock_gettime(CLOCK_MONOTONIC, &mono);
  h.tod_ns = static_cast<std::uint64_t>(tod.tv_sec) * 1'000'000'000ULL +
             static_cast<std::uint64_t>(tod.tv_nsec);
  h.clock_ns = static_cast<std::uint64_t>(mono.tv_sec) * 1'000'000'000ULL +
               static_cast<std::uint64_t>(mono.tv_nsec);
  return h;
}

}  // namespace tracer::perfdata
