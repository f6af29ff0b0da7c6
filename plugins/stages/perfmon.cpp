#include "perfmon.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tracer/error.hpp"
#include "tracer/output_file.hpp"

namespace tracer::stages {

StageSpec Perfmon::spec() {
  return {
      .name = "perfmon",
      .summary = "write the samples as perfmon buffers, one per CPU (the Fuchsia perfmon format)",
      .options =
          {
              {.name = "path",
               .type = OptionSpec::Type::kString,
               .required = true,
               .help = "the file to create: the CPUs' buffers one after another, CPU 0 first"},
              {.name = "max_bytes",
               .type = OptionSpec::Type::kInt,
               .required = false,
               .help = "the size cap of each CPU's buffer, header included (default 4 MiB): "
                       "records past it are dropped and counted, and the buffer says FULL"},
          },
      .needs = {.kinds = kind_bit(RecordKind::kSample), .time_order = true}};
}

void Perfmon::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  path_ = opts.string("path").value_or("");
  path_where_ = opts.where("path");
  if (opts.get("path") != nullptr && path_.empty())
    diags.add(path_where_, "perfmon: `path` is empty", R"(e.g. path = "out.perfmon")");
  if (const auto m = opts.integer("max_bytes")) {
    if (*m < static_cast<std::int64_t>(perfmon::kHeaderSize) || *m > (std::int64_t{1} << 32)) {
      diags.add(opts.where("max_bytes"), "perfmon: max_bytes must be from 24 to 4 GiB",
                "e.g. max_bytes = 1048576");
    } else {
      max_bytes_ = static_cast<std::uint64_t>(*m);
    }
  }
}

void Perfmon::bind(BindContext& ctx, Diagnostics& /*diags*/) {
  counting_.clear();
  for (const auto& p : ctx.schema.probes())
    counting_.push_back(p.counts_to_stages);
  dry_run_ = ctx.dry_run;
}

std::uint16_t Perfmon::event_id(std::uint32_t probe) noexcept {
  if (probe >= perfmon::kMaxEvent)
    return 0;
  return perfmon::make_event_id(static_cast<std::uint16_t>(perfmon::Group::kMisc),
                                static_cast<std::uint16_t>(probe + 1));
}

void Perfmon::on_events(std::span<Event* const> events) noexcept {
  for (const Event* e : events) {
    const perf::Sample* s = e->sample;
    if (s == nullptr)
      continue;
    const std::uint32_t probe = e->ref->probe;
    const std::uint16_t id = event_id(probe);
    if (id == 0) {
      ++unmapped_;
      continue;
    }
    const std::uint32_t cpu = (s->sample_type & PERF_SAMPLE_CPU) != 0
                                  ? s->cpu
                                  : static_cast<std::uint32_t>(std::max(e->ref->cpu, 0));
    auto it = cpus_.find(cpu);
    if (it == cpus_.end()) {
      try {
        it = cpus_
                 .emplace(cpu, perfmon::BufferWriter(static_cast<std::size_t>(max_bytes_),
                                                     perfmon::this_arch(), 1'000'000'000ULL))
                 .first;
      } catch (...) {
        ++unmapped_;  // out of memory
        continue;
      }
    }
    auto& w = it->second;
    ++records_;
    if ((s->sample_type & PERF_SAMPLE_TIME) != 0 && s->time != w.last_time())
      w.time(s->time);
    if ((s->sample_type & PERF_SAMPLE_IP) != 0)
      w.pc(id, s->pid, s->ip);
    else if (probe < counting_.size() && counting_[probe])
      w.count(id, s->period);
    else
      w.tick(id);
  }
}

void Perfmon::counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const {
  std::uint64_t dropped = unmapped_;
  for (const auto& [cpu, w] : cpus_)
    dropped += w.dropped();
  out.emplace_back("samples", records_);
  out.emplace_back("dropped", dropped);
}

void Perfmon::stop() {
  if (dry_run_ || path_.empty())
    return;
  auto fd = open_output_file(path_);
  if (!fd) {
    const auto cat =
        fd.error().errno_value() == ELOOP ? ErrorCategory::kUsage : ErrorCategory::kRuntime;
    throw Error(cat, fd.error().code, fd.error().message, fd.error().hint, path_where_);
  }
  // The buffers by CPU, every CPU up to the highest with samples (an empty one: its header).
  const std::uint32_t n = cpus_.empty() ? 0 : cpus_.rbegin()->first + 1;
  const perfmon::BufferWriter empty(perfmon::kHeaderSize, perfmon::this_arch(), 1'000'000'000ULL);
  for (std::uint32_t cpu = 0; cpu < n; ++cpu) {
    const auto it = cpus_.find(cpu);
    const auto& bytes = it != cpus_.end() ? it->second.bytes() : empty.bytes();
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w = ::write(fd->get(), bytes.data() + done, bytes.size() - done);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0) {
        throw Error(ErrorCategory::kRuntime, std::error_code(errno, std::generic_category()),
                    fmt::format("perfmon: writing {}: {}", path_, std::strerror(errno)),
                    "is the disk full?", path_where_);
      }
      done += static_cast<std::size_t>(w);
    }
  }
}

}  // namespace tracer::stages
