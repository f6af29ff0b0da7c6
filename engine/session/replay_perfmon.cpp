// A recipe over perfmon buffers, and their records printed (see replay.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "tracer/replay.hpp"
#include "tracer/session.hpp"

namespace tracer {

namespace {

constexpr std::uint64_t kSampleType =
    PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU | PERF_SAMPLE_PERIOD;

/// A record's time in ns: the TIME record before it, in the header's ticks per second.
std::uint64_t to_ns(std::uint64_t ticks, std::uint64_t per_second) {
  if (per_second == 0 || per_second == 1'000'000'000ULL)
    return ticks;
  return static_cast<std::uint64_t>(static_cast<unsigned __int128>(ticks) * 1'000'000'000ULL /
                                    per_second);
}

/// A sample of its event: every record but a plain TIME (one with an event is also its tick).
bool is_sample(const perfmon::Record& r) {
  return (r.type == perfmon::RecordType::kTime && r.event != 0) ||
         r.type == perfmon::RecordType::kTick || r.type == perfmon::RecordType::kCount ||
         r.type == perfmon::RecordType::kValue || r.type == perfmon::RecordType::kPc ||
         r.type == perfmon::RecordType::kLastBranch;
}

const char* type_name(perfmon::RecordType t) {
  switch (t) {
    case perfmon::RecordType::kTime:
      return "TIME";
    case perfmon::RecordType::kTick:
      return "TICK";
    case perfmon::RecordType::kCount:
      return "COUNT";
    case perfmon::RecordType::kValue:
      return "VALUE";
    case perfmon::RecordType::kPc:
      return "PC";
    case perfmon::RecordType::kLastBranch:
      return "LAST_BRANCH";
    case perfmon::RecordType::kReserved:
      break;
  }
  return "RESERVED";
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> replay_perfmon(
    const Recipe& recipe,
    std::span<const perfmon::Buffer> buffers,
    Sink& out,
    const ReplayOptions& options) {
  // The probes: every event id of the file, in id order.
  std::map<std::uint16_t, bool> ids;  // id -> has COUNT records
  for (const auto& b : buffers) {
    for (const auto& r : b.records) {
      if (is_sample(r))
        ids[r.event] = ids[r.event] || r.type == perfmon::RecordType::kCount;
    }
  }
  std::vector<ProbeInfo> probes;
  std::map<std::uint16_t, std::uint32_t> probe_of;
  for (const auto& [id, counts] : ids) {
    ProbeInfo p;
    p.index = static_cast<std::uint32_t>(probes.size());
    const std::uint16_t group = perfmon::group_of(id), event = perfmon::event_of(id);
    if (group == static_cast<std::uint16_t>(perfmon::Group::kMisc) && event >= 1 &&
        event <= recipe.probes.size())
      p.name = recipe.probes[event - 1].options.name;
    else
      p.name = fmt::format("perfmon:{}:{}", group, event);
    p.kind = ProbeKind::kSoftware;
    p.spec = p.name;
    p.attr.type(PERF_TYPE_SOFTWARE).sample_type(kSampleType);
    p.layout = perf::SampleLayout::from(p.attr);
    p.counts_to_stages = counts;
    probe_of[id] = p.index;
    probes.push_back(std::move(p));
  }
  // The samples, in time order across the CPUs (each buffer's in its own order).
  struct Item {
    std::uint64_t time;
    std::size_t seq;  // the file's order, for equal times
    std::uint32_t cpu;
    const perfmon::Record* record;
  };
  std::vector<Item> items;
  for (std::size_t cpu = 0; cpu < buffers.size(); ++cpu) {
    std::uint64_t time = 0;
    for (const auto& r : buffers[cpu].records) {
      if (r.type == perfmon::RecordType::kTime)
        time = to_ns(r.time, buffers[cpu].header.ticks_per_second);
      if (is_sample(r))
        items.push_back({time, items.size(), static_cast<std::uint32_t>(cpu), &r});
    }
  }
  // (std::sort with the file order as the last key: stable_sort's temporary buffer is deprecated)
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.time != b.time ? a.time < b.time : a.seq < b.seq;
  });

  Diagnostics diags;
  auto pipelines = make_pipelines(recipe, out, options.json, diags, options.pipeline);
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    const std::size_t said = diags.size();
    pipelines[i]->bind(probes, diags);
    diags.about_since(said, {.pipeline = i});
  }
  diags.throw_if_any();
  const auto first = std::chrono::nanoseconds(items.empty() ? 0 : items.front().time);
  for (auto& p : pipelines)
    p->start(first);
  std::vector<RecordRef> batch;
  const std::size_t max_batch = std::max<std::size_t>(1, options.max_batch);
  batch.reserve(max_batch);
  const auto flush = [&] {
    if (batch.empty())
      return;
    const Batch b{.records = batch};
    for (auto& p : pipelines) {
      p->on_batch(b);
      p->round();
    }
    batch.clear();
  };
  for (const Item& it : items) {
    const perfmon::Record& r = *it.record;
    RecordRef ref;
    ref.probe = probe_of[r.event];
    ref.cpu = static_cast<std::int32_t>(it.cpu);
    ref.record.type = PERF_RECORD_SAMPLE;
    perf::Sample s;
    s.sample_type = kSampleType;
    s.time = it.time;
    s.cpu = it.cpu;
    s.period = r.type == perfmon::RecordType::kCount   ? r.count
               : r.type == perfmon::RecordType::kValue ? r.value
                                                       : 1;
    if (r.type == perfmon::RecordType::kPc) {
      s.ip = r.pc;
      s.pid = s.tid = static_cast<std::uint32_t>(r.aspace);
    } else if (r.type == perfmon::RecordType::kLastBranch && !r.branches.empty()) {
      s.ip = r.branches.front().to;  // the most recent branch's target
    }
    ref.record.body = s;
    batch.push_back(ref);
    if (batch.size() == max_batch)
      flush();
  }
  flush();
  const auto last = std::chrono::nanoseconds(items.empty() ? 0 : items.back().time);
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    pipelines[i]->stop(last);
    for (auto& [name, value] : pipelines[i]->counters())
      counters.emplace_back(i == 0 ? name : fmt::format("pipeline{}.{}", i, name), value);
  }
  return counters;
}

void print_perfmon(std::span<const perfmon::Buffer> buffers, std::FILE* out) {
  for (std::size_t cpu = 0; cpu < buffers.size(); ++cpu) {
    const auto& b = buffers[cpu];
    std::uint64_t time = 0;
    for (const auto& r : b.records) {
      if (r.type == perfmon::RecordType::kTime) {
        time = to_ns(r.time, b.header.ticks_per_second);
        if (r.event == 0)
          continue;  // (one with an event is also its tick: printed)
      }
      std::string line =
          fmt::format("cpu {:>3} {:>6}.{:09} {:<11} {}:{}", cpu, time / 1'000'000'000ULL,
                      time % 1'000'000'000ULL, type_name(r.type), perfmon::group_of(r.event),
                      perfmon::event_of(r.event));
      switch (r.type) {
        case perfmon::RecordType::kCount:
          line += fmt::format(" count={}", r.count);
          break;
        case perfmon::RecordType::kValue:
          line += fmt::format(" value={}", r.value);
          break;
        case perfmon::RecordType::kPc:
          line += fmt::format(" aspace={} pc={:#x}", r.aspace, r.pc);
          break;
        case perfmon::RecordType::kLastBranch:
          line += fmt::format(" aspace={} branches={}", r.aspace, r.branches.size());
          for (const auto& br : r.branches)
            line += fmt::format(" {:#x}->{:#x}/{}{}", br.from, br.to, br.cycles(),
                                br.mispredicted() ? "/M" : "");
          break;
        default:
          break;
      }
      fmt::print(out, "{}\n", line);
    }
    if ((b.header.flags & perfmon::kFlagFull) != 0)
      fmt::print(out, "cpu {:>3} FULL: records were dropped\n", cpu);
  }
}

}  // namespace tracer
