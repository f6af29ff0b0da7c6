// Choosing between the probe PMUs and tracefs dynamic events, and building PMU attrs.
#include "probe_backend.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <optional>
#include <system_error>

#include "tracer/check.hpp"
#include "tracer/common/kernel_config.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::core {
namespace {

namespace fs = std::filesystem;

// kernel/events/core.c: PERF_PROBE_CONFIG_IS_RETPROBE, exported since 4.17 as
// format/retprobe = "config:0". Used only when that file is missing.
constexpr unsigned kDefaultRetprobeBit = 0;

/// The retprobe bit from the PMU's format/retprobe, if it is a single bit of `config`.
std::optional<unsigned> retprobe_bit(const perf::Pmu& pmu) {
  const auto it = std::find_if(pmu.formats.begin(), pmu.formats.end(),
                               [](const perf::PmuFormatTerm& t) { return t.name == "retprobe"; });
  if (it == pmu.formats.end())
    return kDefaultRetprobeBit;
  if (it->config_field != 0 || it->bits.size() != 1 || it->bits[0].first != it->bits[0].second)
    return std::nullopt;
  return static_cast<unsigned>(it->bits[0].first);
}

/// Why neither backend exists, from the kernel config (CONFIG_KPROBES/CONFIG_KPROBE_EVENTS or
/// CONFIG_UPROBES/CONFIG_UPROBE_EVENTS).
std::string missing_reason(ProbeFamily family,
                           const BackendRoots& roots,
                           bool tracefs_found,
                           const std::string& tracefs_error) {
  const std::string kind = family_name(family);
  const char* base_option = family == ProbeFamily::kKprobe ? "KPROBES" : "UPROBES";
  const char* events_option = family == ProbeFamily::kKprobe ? "KPROBE_EVENTS" : "UPROBE_EVENTS";
  std::string why;
  const auto base = detail::kernel_config(base_option, roots.kernel_config);
  if (!base) {
    why = "no kernel config is readable to say why";
  } else if (*base == "n") {
    why = fmt::format("CONFIG_{} is off", base_option);
  } else if (detail::kernel_config(events_option, roots.kernel_config) == "n") {
    why = fmt::format("CONFIG_{} is off", events_option);
  } else if (!tracefs_found) {
    why = fmt::format("CONFIG_{} is on, but tracefs is not available: {}", events_option,
                      tracefs_error);
  } else {
    why = fmt::format("CONFIG_{} is on, yet neither is visible", events_option);
  }
  return fmt::format("this kernel has neither the {} PMU nor tracefs {}_events ({})", kind, kind,
                     why);
}

}  // namespace

const char* family_name(ProbeFamily family) noexcept {
  return family == ProbeFamily::kKprobe ? "kprobe" : "uprobe";
}

ProbeBackend choose_probe_backend(ProbeFamily family, const BackendRoots& roots) {
  ProbeBackend out;
  out.family = family;
  const std::string kind = family_name(family);
  std::string pmu_problem;

  std::error_code ec;
  if (fs::exists(roots.devices_dir / kind / "type", ec)) {
    auto pmu = perf::find_pmu(kind, {.devices_dir = roots.devices_dir});
    if (pmu) {
      if (const auto bit = retprobe_bit(*pmu)) {
        out.kind = ProbeBackendKind::kPmu;
        out.pmu_type = pmu->type;
        out.retprobe_bit = *bit;
        for (const auto& t : pmu->formats) {
          if (t.name == "ref_ctr_offset" && t.config_field == 0 && t.bits.size() == 1)
            out.ref_ctr_shift = static_cast<unsigned>(t.bits[0].first);
        }
        out.reason =
            fmt::format("{} PMU (type {}, retprobe is config bit {})", kind, pmu->type, *bit);
        return out;
      }
      pmu_problem = fmt::format("the {} PMU's format/retprobe is not a single config bit", kind);
    } else {
      pmu_problem = pmu.error().message;
    }
  }

  fs::path root = roots.tracefs_root;
  std::string tracefs_error;
  if (root.empty()) {
    if (auto found = tracefs::Tracefs::open()) {
      root = found->root();
    } else {
      tracefs_error = found.error().message;
    }
  }
  const std::string events_file = kind + "_events";
  if (!root.empty() && fs::exists(root / events_file, ec)) {
    out.kind = ProbeBackendKind::kTracefs;
    out.tracefs_root = root;
    out.reason = pmu_problem.empty()
                     ? fmt::format("no {} PMU; tracefs {}", kind, (root / events_file).string())
                     : fmt::format("{}; tracefs {}", pmu_problem, (root / events_file).string());
    return out;
  }
  out.kind = ProbeBackendKind::kUnsupported;
  out.reason = pmu_problem.empty()
                   ? missing_reason(family, roots, !root.empty(), tracefs_error)
                   : fmt::format("{}, and there is no tracefs {}", pmu_problem, events_file);
  return out;
}

perf::EventAttr uprobe_attr(const ProbeBackend& backend,
                            const std::string& path,
                            std::uint64_t offset,
                            bool retprobe) {
  TRACER_CHECK_MSG(backend.kind == ProbeBackendKind::kPmu && backend.family == ProbeFamily::kUprobe,
                   "uprobe_attr needs the uprobe PMU backend");
  perf::EventAttr attr;
  // perf_uprobe_init(): config1 is uprobe_path (a user pointer copied with strndup_user),
  // config2 is probe_offset.
  attr.type(backend.pmu_type)
      .config(retprobe ? std::uint64_t{1} << backend.retprobe_bit : 0)
      .config1(reinterpret_cast<std::uint64_t>(path.c_str()))
      .config2(offset);
  return attr;
}

perf::EventAttr kprobe_attr(const ProbeBackend& backend,
                            const std::string& symbol,
                            std::uint64_t offset,
                            bool retprobe) {
  TRACER_CHECK_MSG(backend.kind == ProbeBackendKind::kPmu && backend.family == ProbeFamily::kKprobe,
                   "kprobe_attr needs the kprobe PMU backend");
  perf::EventAttr attr;
  // perf_kprobe_init(): config1 is kprobe_func (a user string) or 0, then config2 is kprobe_addr;
  // with a function, config2 is probe_offset.
  attr.type(backend.pmu_type)
      .config(retprobe ? std::uint64_t{1} << backend.retprobe_bit : 0)
      .config1(symbol.empty() ? 0 : reinterpret_cast<std::uint64_t>(symbol.c_str()))
      .config2(offset);
  return attr;
}

}  // namespace tracer::core
