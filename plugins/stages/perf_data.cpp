#include "perf_data.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "tracer/error.hpp"

namespace tracer::stages {
namespace {

// argv of this process for the CMDLINE feature (perf shows it in `perf report --header`).
std::vector<std::string> own_cmdline() {
  std::vector<std::string> argv;
  const int fd = ::open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return argv;
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  for (std::size_t pos = 0; pos < text.size();) {
    const std::size_t end = text.find('\0', pos);
    argv.push_back(text.substr(pos, end - pos));
    if (end == std::string::npos)
      break;
    pos = end + 1;
  }
  return argv;
}

}  // namespace

StageSpec PerfData::spec() {
  return {
      .name = "perf-data",
      .summary = "write every record as a perf.data file (perf script/report read it)",
      .options =
          {
              {.name = "path",
               .type = OptionSpec::Type::kString,
               .required = true,
               .help = "the perf.data file to create; \"-\" writes a pipe-mode stream to stdout"},
              {.name = "pipe",
               .type = OptionSpec::Type::kBool,
               .required = false,
               .help = "pipe mode even for a regular file (default: only for \"-\", FIFOs, "
                       "sockets)"},
              {.name = "synthesize",
               .type = OptionSpec::Type::kBool,
               .required = false,
               .help = "COMM/MMAP2 records from /proc for processes that exist at start or "
                       "appear in samples, so perf resolves comms and symbols (default true)"},
          },
      .needs = {.kinds = kAllKinds, .task_records = true, .stdout_option = "path"}};
}

void PerfData::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  path_ = opts.string("path").value_or("");
  path_where_ = opts.where("path");
  pipe_ = opts.boolean("pipe").value_or(false);
  synthesize_ = opts.boolean("synthesize").value_or(true);
  if (opts.get("path") != nullptr && path_.empty())
    diags.add(path_where_, "perf-data: `path` is empty", R"(e.g. path = "out.data", or "-")");
}

void PerfData::bind(BindContext& ctx, Diagnostics& diags) {
  probes_.assign(ctx.schema.probes().begin(), ctx.schema.probes().end());
  bool any = false;
  for (const auto& p : probes_)
    any = any || p.attr.sample_type() != 0;
  if (!any) {
    diags.add(ctx.where, "perf-data: no probe of the recipe produces records",
              "counting probes have nothing to write; add a sampling probe");
  }
  if (path_ != "-" && !path_.empty()) {
    const auto dir = std::filesystem::path(path_).parent_path();
    std::error_code ec;
    if (!dir.empty() && !std::filesystem::is_directory(dir, ec)) {
      diags.add(path_where_, "perf-data: directory '" + dir.string() + "' does not exist",
                "create it first or give another path");
    }
  }
}

void PerfData::start() {
  perfdata::WriterOptions o;
  o.pipe = pipe_;
  o.cmdline = own_cmdline();
  o.synthesize = synthesize_;
  o.synthesize_new = synthesize_;
  auto w = perfdata::Writer::open(path_, probes_, std::move(o));
  if (!w) {
    // A link planted at the path is a path the user cannot have meant (exit 2, as for -o text).
    const auto cat =
        w.error().errno_value() == ELOOP ? ErrorCategory::kUsage : ErrorCategory::kRuntime;
    throw Error(cat, w.error().code, w.error().message, w.error().hint, path_where_);
  }
  writer_.emplace(std::move(*w));
}

void PerfData::on_events(std::span<Event* const> events) noexcept {
  if (!writer_)
    return;
  for (const Event* e : events)
    writer_->write(*e->ref);
}

void PerfData::on_round() noexcept {
  if (writer_)
    writer_->end_round();
}

void PerfData::flush() {
  if (writer_)
    writer_->flush();
}

void PerfData::stop() {
  if (!writer_)
    return;
  auto st = writer_->close();
  if (!st)
    throw Error(ErrorCategory::kRuntime, st.error().code, st.error().message, st.error().hint);
}

const perfdata::WriterStats* PerfData::writer_stats() const noexcept {
  return writer_ ? &writer_->stats() : nullptr;
}

}  // namespace tracer::stages
