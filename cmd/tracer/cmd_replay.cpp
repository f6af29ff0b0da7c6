// tracer replay FILE [RECIPE]: runs a recorded perf.data file (perf's or tracer's, file or pipe
// mode; "-" reads a pipe on stdin) through a recipe's pipelines as if live, with the file's own
// schemas (attrs and tracepoint formats). Without a recipe it prints the samples the way
// `perf script` does.
#include <fmt/core.h>
#include <linux/perf_event.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "commands.hpp"
#include "pipelines.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/perfdata/reader.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"

namespace tracer::cli {
namespace {

struct ReplayOptions {
  std::string file;
  std::string recipe;
  std::string output;
  bool json = false;
  std::vector<std::string> sets;
};

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

/// Does recipe probe `p` ask for file event `e`? By spec ("syscalls:sys_enter_getppid",
/// "cpu-clock"), by name, or by the tracepoint the file's format names.
bool matches(const RecipeProbe& p, const perfdata::EventDesc& e) {
  const auto& spec = p.options.spec;
  if (spec == e.name || p.options.name == e.name)
    return true;
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

perfdata::Reader open_file(const std::string& path) {
  auto r = perfdata::Reader::open(path);
  if (!r) {
    const bool absent = r.error().errno_value() == ENOENT;
    throw Error(absent ? ErrorCategory::kNotFound : ErrorCategory::kRuntime, r.error());
  }
  return std::move(*r);
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

int report_read_error(const std::string& path, const perfdata::Reader& r) {
  if (const auto& err = r.error()) {
    std::fflush(stdout);
    fmt::print(stderr, "tracer: {}: {}\n", path, err->describe());
    fmt::print(stderr, "  ({} records read before it)\n", r.stats().records);
    return kExitRuntime;
  }
  return kExitOk;
}

int replay_recipe(const ReplayOptions& o) {
  Recipe recipe = Recipe::load(o.recipe, {.sets = o.sets, .stages = catalog()});
  auto reader = open_file(o.file);

  // Recipe probes -> the file's events.
  std::vector<ProbeInfo> probes;
  std::vector<std::int32_t> probe_of(reader.events().size(), -1);
  std::vector<perf::SampleLayout> layouts;
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
    p.index = static_cast<std::uint32_t>(probes.size());
    p.name = rp.options.name;
    p.kind = rp.options.kind;
    p.spec = rp.options.spec;
    probe_of[found->index] = static_cast<std::int32_t>(p.index);
    probes.push_back(std::move(p));
  }
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing)
      list += (list.empty() ? "" : ", ") + m;
    throw Error(ErrorCategory::kRecipe, std::make_error_code(std::errc::invalid_argument),
                fmt::format("{}: recipe probe{} {} not in {}", o.recipe,
                            missing.size() > 1 ? "s" : "", list, o.file),
                fmt::format("the file has: {}", file_events(reader)));
  }

  Sink out = Sink::to_file(stdout);
  if (!o.output.empty()) {
    auto s = Sink::open(o.output);
    if (!s)
      throw Error(ErrorCategory::kUsage, s.error());
    out = std::move(*s);
  }
  Diagnostics diags;
  PipelineOptions base;
  base.comm.read_proc = false;  // comms come from the file's COMM records, not this machine
  auto pipelines = make_pipelines(recipe, out, o.json, diags, base);
  for (auto& p : pipelines)
    p->bind(probes, diags);
  diags.throw_if_any();

  Batcher batcher(pipelines, 128);
  bool started = false;
  perfdata::Item item;
  static const perf::SampleLayout kNone{};
  while (reader.next(item)) {
    std::int32_t probe = item.attr >= 0 ? probe_of[static_cast<std::size_t>(item.attr)] : -1;
    const auto type = item.record.type;
    if (probe < 0) {
      // Task records of events the recipe does not name still name threads (COMM) for it.
      if (probes.empty() ||
          (type != PERF_RECORD_COMM && type != PERF_RECORD_FORK && type != PERF_RECORD_EXIT))
        continue;
      probe = 0;
    }
    if (!started) {
      const auto* s = std::get_if<perf::Sample>(&item.record.body);
      const std::uint64_t t = s != nullptr ? s->time : item.record.sample_id.time;
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
  return report_read_error(o.file, reader);
}

/// `perf script`-like lines: comm, tid, [cpu], seconds.microseconds, event, then the tracepoint's
/// own fields as name=value.
int replay_print(const ReplayOptions& o) {
  auto reader = open_file(o.file);
  std::FILE* f = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(nullptr, &std::fclose);
  if (!o.output.empty()) {
    owned.reset(std::fopen(o.output.c_str(), "we"));
    if (!owned) {
      throw Error(ErrorCategory::kUsage, std::error_code(errno, std::generic_category()),
                  fmt::format("cannot write {}: {}", o.output, std::strerror(errno)));
    }
    f = owned.get();
  }
  std::unordered_map<std::uint32_t, std::string> comms;
  std::vector<std::uint64_t> threads;  // THREAD_MAP pids (perf stat record)
  std::vector<perfdata::Stat> stats;   // STAT records of the current round
  bool stat_header = false;
  std::string line;
  perfdata::Item item;
  while (reader.next(item)) {
    if (const auto* c = std::get_if<perf::Comm>(&item.record.body)) {
      comms[c->tid] = std::string(c->comm);
      continue;
    }
    if (const auto* tm = std::get_if<perfdata::ThreadMap>(&item.user)) {
      threads.clear();
      for (std::uint64_t i = 0; i < tm->nr; ++i)
        threads.push_back(tm->pid(i));
      continue;
    }
    if (const auto* st = std::get_if<perfdata::Stat>(&item.user)) {
      stats.push_back(*st);
      continue;
    }
    if (const auto* round = std::get_if<perfdata::StatRound>(&item.user)) {
      // perf script prints a round's counters when the round ends (builtin-script.c
      // process_stat_round_event).
      if (!stat_header) {
        fmt::print(f, "{:>3} {:>8} {:>15} {:>15} {:>15} {:>15} {}\n", "CPU", "THREAD", "VAL", "ENA",
                   "RUN", "TIME", "EVENT");
        stat_header = true;
      }
      for (const auto& st : stats) {
        const auto idx = reader.event_of_id(st.id);
        const std::string_view name =
            idx >= 0 ? std::string_view(reader.events()[static_cast<std::size_t>(idx)].name)
                     : std::string_view("?");
        const std::uint64_t thread = st.thread < threads.size() ? threads[st.thread] : st.thread;
        fmt::print(f, "{:>3} {:>8} {:>15} {:>15} {:>15} {:>15} {}\n",
                   static_cast<std::int32_t>(st.cpu), thread, st.val, st.ena, st.run, round->time,
                   name);
      }
      stats.clear();
      continue;
    }
    const auto* s = std::get_if<perf::Sample>(&item.record.body);
    if (s == nullptr || item.attr < 0)
      continue;
    const auto& ev = reader.events()[static_cast<std::size_t>(item.attr)];
    const auto it = comms.find(s->tid);
    line.clear();
    fmt::format_to(std::back_inserter(line), "{:>16} {:>6} [{:03}] {}.{:06}: {}:",
                   it != comms.end() ? std::string_view(it->second) : std::string_view(":-1"),
                   s->tid, s->cpu, s->time / 1000000000, s->time % 1000000000 / 1000, ev.name);
    if (ev.format) {
      for (const auto& field : ev.format->fields) {
        if (field.is_common)
          continue;
        if (field.is_string) {
          const auto v = tracefs::read_string(field, s->raw);
          fmt::format_to(std::back_inserter(line), " {}={}", field.name, v ? *v : "?");
        } else if (const auto v = tracefs::read_int(field, s->raw)) {
          if (field.type.find('*') != std::string::npos) {
            fmt::format_to(std::back_inserter(line), " {}={:#x}", field.name,
                           static_cast<std::uint64_t>(*v));
          } else if (field.is_signed) {
            fmt::format_to(std::back_inserter(line), " {}={}", field.name, *v);
          } else {
            fmt::format_to(std::back_inserter(line), " {}={}", field.name,
                           static_cast<std::uint64_t>(*v));
          }
        } else if (const auto b = tracefs::read_bytes(field, s->raw)) {
          fmt::format_to(std::back_inserter(line), " {}=[{} bytes]", field.name, b->size());
        }
      }
    } else if (s->period != 0) {
      fmt::format_to(std::back_inserter(line), " period={}", s->period);
    }
    line += '\n';
    std::fwrite(line.data(), 1, line.size(), f);
  }
  std::fflush(f);
  return report_read_error(o.file, reader);
}

}  // namespace

void add_replay_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ReplayOptions>();
  auto* cmd = app.add_subcommand(
      "replay", "Run a recorded perf.data file through a recipe's pipelines (or print it)");
  cmd->add_option("file", o->file, "perf.data file (perf's or tracer's); - reads a pipe on stdin")
      ->required();
  cmd->add_option("recipe", o->recipe, "Recipe whose pipelines to run (TOML)");
  cmd->add_option("-o,--output", o->output, "Write the output to this file");
  cmd->add_flag("--json", o->json, "JSON lines on stdout (with a recipe)");
  cmd->add_option("--set", o->sets, "Override a recipe value: param=value, ...")
      ->allow_extra_args(false);
  cmd->callback([o, &run] {
    run = [o] { return o->recipe.empty() ? replay_print(*o) : replay_recipe(*o); };
  });
}

}  // namespace tracer::cli
