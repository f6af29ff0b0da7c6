// Replay: recipe probes -> file events, records -> pipelines in batches, FINISHED_ROUND ->
// rounds.
#include "tracer/replay.hpp"

#include <fmt/format.h>
#include <linux/perf_event.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "tracer/error.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

constexpr std::uint32_t kSoftwareBpfOutput = 10;  // PERF_COUNT_SW_BPF_OUTPUT

/// What kind of probe recorded an event: from its attr type, and the file's PMU names for
/// dynamic PMUs (uprobe, kprobe).
ProbeKind kind_of(const perfdata::EventDesc& e, const perfdata::Features& f) {
  const auto* a = e.attr.raw();
  switch (a->type) {
    case PERF_TYPE_HARDWARE:
      return ProbeKind::kHardware;
    case PERF_TYPE_SOFTWARE:
      return a->config == kSoftwareBpfOutput ? ProbeKind::kBpfOutput : ProbeKind::kSoftware;
    case PERF_TYPE_TRACEPOINT:
      return ProbeKind::kTracepoint;
    case PERF_TYPE_HW_CACHE:
      return ProbeKind::kCache;
    case PERF_TYPE_BREAKPOINT:
      return ProbeKind::kBreakpoint;
    default:
      break;
  }
  for (const auto& [type, name] : f.pmu_mappings) {
    if (type != a->type)
      continue;
    const bool ret = (a->config & 1U) != 0;  // the probe PMUs' "retprobe" format bit
    if (name == "uprobe")
      return ret ? ProbeKind::kUretprobe : ProbeKind::kUprobe;
    if (name == "kprobe")
      return ret ? ProbeKind::kKretprobe : ProbeKind::kKprobe;
  }
  return ProbeKind::kRawPmu;
}

std::string pmu_of(const perfdata::EventDesc& e, const perfdata::Features& f) {
  for (const auto& [type, name] : f.pmu_mappings) {
    if (type == e.attr.raw()->type)
      return name;
  }
  return {};
}

}  // namespace

ProbeInfo probe_from(const perfdata::EventDesc& e, const perfdata::Features& f) {
  ProbeInfo p;
  p.name = e.name;
  p.kind = kind_of(e, f);
  p.spec = e.name;
  p.layout = e.layout;
  p.format = e.format;
  p.pmu = pmu_of(e, f);
  p.sample_regs_user = e.attr.raw()->sample_regs_user;
  p.attr = e.attr;
  return p;
}

namespace {

/// Does recipe probe `p` ask for file event `e`? By spec ("syscalls:sys_enter_getppid",
/// "cpu-clock"), by name, or by the tracepoint the file's format names.
bool matches(const RecipeProbe& p, const perfdata::EventDesc& e) {
  const auto& spec = p.options.spec;
  if (spec == e.name || p.options.name == e.name)
    return true;
  // A software event by what it counts, whatever perf named it ("cpu-clock/call-graph=fp/").
  if (p.options.kind == ProbeKind::kSoftware && e.attr.raw()->type == PERF_TYPE_SOFTWARE) {
    if (auto sw = perf::find_software_event(spec); sw && sw->config == e.attr.raw()->config)
      return true;
  }
  if (e.format) {
    const std::string tp = e.format->system + ":" + e.format->name;
    if (spec == tp || spec == e.format->system + "/" + e.format->name)
      return true;
  }
  return false;
}

std::string file_events(const perfdata::Reader& r) {
  std::string s;
  for (const auto& e : r.events())
    s += (s.empty() ? "" : ", ") + e.name;
  return s.empty() ? "no events" : s;
}

/// Feeds records to pipelines in batches. Records whose bytes do not outlive the next read
/// (swapped, decompressed, streamed) are copied into an arena first, then re-decoded there.
class Batcher {
 public:
  Batcher(std::vector<std::unique_ptr<Pipeline>>& pipelines, std::size_t max_batch)
      : pipelines_(&pipelines), max_(max_batch) {
    refs_.reserve(max_batch);
    arena_.resize(kArenaBytes);
  }

  void add(const perfdata::Item& item, std::uint32_t probe, const perf::SampleLayout& layout) {
    if (refs_.size() == max_)
      flush();
    const auto bytes = item.record.bytes;
    if (!item.stable && arena_used_ + bytes.size() > arena_.size())
      flush();
    refs_.emplace_back();
    auto& ref = refs_.back();
    ref.probe = probe;
    if (item.stable) {
      ref.record = item.record;
    } else {
      std::memcpy(arena_.data() + arena_used_, bytes.data(), bytes.size());
      const std::span<const std::byte> copy(arena_.data() + arena_used_, bytes.size());
      arena_used_ += bytes.size();
      if (perf::decode(copy, layout, ref.record) != perf::DecodeError::kOk) {
        ref.record = item.record;  // user records and unknown ids: header only
        ref.record.bytes = copy;
      }
    }
    if (const auto* s = std::get_if<perf::Sample>(&ref.record.body)) {
      ref.cpu = static_cast<std::int32_t>(s->cpu);
      last_time_ = std::max<std::uint64_t>(last_time_, s->time);
    } else if (ref.record.sample_id.present) {
      ref.cpu = static_cast<std::int32_t>(ref.record.sample_id.cpu);
    }
  }

  void flush() {
    if (refs_.empty())
      return;
    const Batch b{refs_};
    for (auto& p : *pipelines_)
      p->on_batch(b);
    for (auto& p : *pipelines_)
      p->tick(std::chrono::nanoseconds(last_time_));
    refs_.clear();
    arena_used_ = 0;
  }

  [[nodiscard]] std::uint64_t last_time() const noexcept { return last_time_; }

 private:
  static constexpr std::size_t kArenaBytes = std::size_t{4} << 20;  // 64 max-size records
  std::vector<std::unique_ptr<Pipeline>>* pipelines_;
  std::size_t max_;
  std::vector<RecordRef> refs_;
  std::vector<std::byte> arena_;
  std::size_t arena_used_ = 0;
  std::uint64_t last_time_ = 0;
};

}  // namespace

struct Replay::Impl {
  perfdata::Reader* reader = nullptr;
  std::vector<ProbeInfo> probes;
  std::vector<std::int32_t> probe_of;  // file event index -> probe index, or -1
  std::vector<std::unique_ptr<Pipeline>> pipelines;
  ReplayOptions options;
  bool ran = false;
};

Replay::Replay(const Recipe& recipe, perfdata::Reader& reader, Sink& out, ReplayOptions options)
    : impl_(std::make_unique<Impl>()) {
  auto& s = *impl_;
  s.reader = &reader;
  s.options = std::move(options);
  s.probe_of.assign(reader.events().size(), -1);
  std::vector<std::string> missing;
  for (const auto& rp : recipe.probes) {
    const perfdata::EventDesc* found = nullptr;
    for (const auto& e : reader.events()) {
      if (matches(rp, e)) {
        found = &e;
        break;
      }
    }
    if (found == nullptr) {
      missing.push_back(fmt::format("'{}' ({} {})", rp.options.name, to_string(rp.options.kind),
                                    rp.options.spec));
      continue;
    }
    ProbeInfo p = probe_from(*found, reader.features());
    p.index = static_cast<std::uint32_t>(s.probes.size());
    p.name = rp.options.name;
    p.kind = rp.options.kind;
    p.spec = rp.options.spec;
    s.probe_of[found->index] = static_cast<std::int32_t>(p.index);
    s.probes.push_back(std::move(p));
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing)
      list += (list.empty() ? "" : ", ") + m;
    throw Error(
        ErrorCategory::kRecipe, std::make_error_code(std::errc::invalid_argument),
        fmt::format("{}: recipe probe{} {} not in {}", recipe.path, missing.size() > 1 ? "s" : "",
                    list, s.options.file.empty() ? "the file" : s.options.file),
        fmt::format("the file has: {}", file_events(reader)));
  }
  Diagnostics diags;
  PipelineOptions base = s.options.pipeline;
  base.comm.read_proc = false;     // comms come from the file's COMM records, not this machine
  base.symbols.read_proc = false;  // maps from its MMAP records
  base.symbols.recorded_kallsyms = perfdata::cached_kallsyms(reader.features());
  base.symbols.recorded_kernel_build_id = perfdata::kernel_build_id(reader.features());
  s.pipelines = make_pipelines(recipe, out, s.options.json, diags, base);
  for (auto& p : s.pipelines)
    p->bind(s.probes, diags);
  diags.throw_if_any();
}

Replay::~Replay() = default;

void Replay::run() {
  auto& s = *impl_;
  if (s.ran)
    return;
  s.ran = true;
  auto& reader = *s.reader;
  auto& pipelines = s.pipelines;
  Batcher batcher(pipelines, s.options.max_batch);
  bool started = false;
  for (auto& p : pipelines)
    p->preload_symbols();  // kallsyms (or perf's copy of it) read while the file is
  perfdata::Item item;
  static const perf::SampleLayout kNone{};
  while (reader.next(item)) {
    if (std::holds_alternative<perfdata::FinishedRound>(item.user)) {
      // perf record finished a pass over its rings: the pipelines that order records release
      // what is now safe (Pipeline::round), as perf's ordered_events does at FINISHED_ROUND.
      if (started) {
        batcher.flush();
        for (auto& p : pipelines)
          p->round();
      }
      continue;
    }
    std::int32_t probe = item.attr >= 0 ? s.probe_of[static_cast<std::size_t>(item.attr)] : -1;
    const auto type = item.record.type;
    if (probe < 0) {
      // Task records of events the recipe does not name still name threads (COMM) for it.
      if (s.probes.empty() ||
          (type != PERF_RECORD_COMM && type != PERF_RECORD_FORK && type != PERF_RECORD_EXIT))
        continue;
      probe = 0;
    }
    if (!started) {
      const auto* smp = std::get_if<perf::Sample>(&item.record.body);
      const std::uint64_t t = smp != nullptr ? smp->time : item.record.sample_id.time;
      for (auto& p : pipelines)
        p->start(std::chrono::nanoseconds(t));
      started = true;
    }
    const auto& layout =
        item.attr >= 0 ? reader.events()[static_cast<std::size_t>(item.attr)].layout : kNone;
    batcher.add(item, static_cast<std::uint32_t>(probe), layout);
  }
  batcher.flush();
  if (!started) {
    for (auto& p : pipelines)
      p->start(std::chrono::nanoseconds(0));
  }
  for (auto& p : pipelines)
    p->stop(std::chrono::nanoseconds(batcher.last_time()));
}

std::vector<std::pair<std::string, std::uint64_t>> Replay::counters() const {
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (std::size_t i = 0; i < impl_->pipelines.size(); ++i) {
    for (auto& [name, value] : impl_->pipelines[i]->counters())
      out.emplace_back(i == 0 ? name : fmt::format("pipeline{}.{}", i, name), value);
  }
  return out;
}

std::vector<std::string> Replay::take_warnings() {
  std::vector<std::string> out;
  for (auto& p : impl_->pipelines) {
    for (auto& w : p->take_warnings())
      out.push_back(std::move(w));
  }
  return out;
}

std::span<const ProbeInfo> Replay::probes() const noexcept {
  return impl_->probes;
}

}  // namespace tracer
