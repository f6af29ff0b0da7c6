// tracer replay FILE [RECIPE]: runs a recorded perf.data file (perf's or tracer's, file or pipe
// mode; "-" reads a pipe on stdin) through a recipe's pipelines as if live, with the file's own
// schemas (attrs and tracepoint formats). Without a recipe it prints the samples the way
// `perf script` does.
#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/output_file.hpp"
#include "tracer/perfdata/perfmon.hpp"
#include "tracer/perfdata/reader.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/replay.hpp"
#include "tracer/session.hpp"

namespace tracer::cli {
namespace {

struct ReplayCliOptions {
  std::string file;
  std::string recipe;
  std::string output;
  bool json = false;
  bool perf = false;  // print exactly perf script's default lines
  std::vector<std::string> sets;
  std::vector<std::string> debuginfo;  // --debuginfo DIR
};

perfdata::Reader open_file(const std::string& path) {
  auto r = perfdata::Reader::open(path);
  if (!r) {
    const bool absent = r.error().errno_value() == ENOENT;
    throw Error(absent ? ErrorCategory::kNotFound : ErrorCategory::kRuntime, r.error());
  }
  return std::move(*r);
}

/// Stdout, or -o's file.
Sink open_sink(const ReplayCliOptions& o) {
  if (o.output.empty())
    return Sink::to_file(stdout);
  auto s = Sink::open(o.output);
  if (!s)
    throw Error(ErrorCategory::kUsage, s.error());
  return std::move(*s);
}

int report_read_error(const std::string& path, const perfdata::Reader& r) {
  if (const auto& err = r.error()) {
    std::fflush(stdout);
    fmt::print(stderr, "tracer: {}: {}\n", path, err->describe());
    fmt::print(stderr, "  ({} records read before it)\n", r.stats().records);
    return kExitRuntime;
  }
  return kExitOk;
}

int replay_recipe(const ReplayCliOptions& o) {
  Recipe recipe = Recipe::load(o.recipe, {.sets = o.sets, .stages = stage_catalog()});
  auto reader = open_file(o.file);
  Sink out = open_sink(o);
  ReplayOptions ro{.json = o.json, .file = o.file};
  for (const auto& dir : o.debuginfo)
    ro.pipeline.symbols.debug_roots.emplace_back(dir);
  Replay replay(recipe, reader, out, std::move(ro));
  replay.run();
  for (const auto& w : replay.take_warnings())
    fmt::print(stderr, "tracer: warning: {}\n", w);
  return report_read_error(o.file, reader);
}

/// `perf script`-like lines: comm, tid, [cpu], seconds.microseconds, event, then the tracepoint's
/// own fields as name=value (or, with --perf, exactly perf script's default line).
int replay_print_file(const ReplayCliOptions& o) {
  auto reader = open_file(o.file);
  std::FILE* f = stdout;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> owned(nullptr, &std::fclose);
  if (!o.output.empty()) {
    auto fd = open_output_file(o.output);
    if (!fd)
      throw Error(ErrorCategory::kUsage, fd.error());
    owned.reset(::fdopen(fd->get(), "w"));
    if (!owned) {
      throw Error(ErrorCategory::kUsage, std::error_code(errno, std::generic_category()),
                  fmt::format("cannot write {}: {}", o.output, std::strerror(errno)));
    }
    [[maybe_unused]] const int owned_by_file = fd->release();
    f = owned.get();
  }
  std::vector<std::filesystem::path> roots(o.debuginfo.begin(), o.debuginfo.end());
  replay_print(
      reader, f,
      {.perf = o.perf,
       .file = o.file,
       .warn =
           [](const std::string& warning) { fmt::print(stderr, "tracer: warning: {}\n", warning); },
       .debug_roots = std::move(roots)});
  return report_read_error(o.file, reader);
}

/// A perfmon buffer file (what the perfmon stage writes), read whole: nullopt when `path` is not
/// one (a perf.data file, a pipe).
std::optional<std::vector<std::byte>> read_perfmon(const std::string& path) {
  if (path == "-")
    return std::nullopt;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return std::nullopt;  // the perf.data path says why
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return std::nullopt;
  std::array<std::byte, perfmon::kHeaderSize> head{};
  if (::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size()))
    return std::nullopt;
  std::uint16_t version = 0, arch = 0;
  std::memcpy(&version, head.data(), 2);
  std::memcpy(&arch, head.data() + 2, 2);
  if (std::memcmp(head.data(), "PERFILE", 7) == 0 || version != perfmon::kBufferVersion ||
      arch > static_cast<std::uint16_t>(perfmon::Arch::kArm64))
    return std::nullopt;
  constexpr std::uint64_t kMax = std::uint64_t{1} << 30;  // a guard: buffers are capped per CPU
  if (static_cast<std::uint64_t>(st.st_size) > kMax) {
    throw Error(
        ErrorCategory::kUsage, std::make_error_code(std::errc::file_too_large),
        fmt::format("{}: a perfmon file of {} bytes (at most 1 GiB is read)", path, st.st_size));
  }
  std::vector<std::byte> bytes(static_cast<std::size_t>(st.st_size));
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n =
        ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  if (!perfmon::looks_like_perfmon(bytes))
    return std::nullopt;
  return bytes;
}

int replay_perfmon_file(const ReplayCliOptions& o, const std::vector<std::byte>& bytes) {
  auto buffers = perfmon::parse(bytes);
  if (!buffers)
    throw Error(ErrorCategory::kRuntime, buffers.error());
  if (o.recipe.empty()) {
    print_perfmon(*buffers, stdout);
    return kExitOk;
  }
  Recipe recipe = Recipe::load(o.recipe, {.sets = o.sets, .stages = stage_catalog()});
  Sink out = open_sink(o);
  (void)replay_perfmon(recipe, *buffers, out, {.json = o.json, .file = o.file});
  out.flush();
  return kExitOk;
}

}  // namespace

void add_replay_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ReplayCliOptions>();
  auto* cmd = app.add_subcommand(
      "replay", "Run a recorded perf.data file through a recipe's pipelines (or print it)");
  cmd->add_option("file", o->file, "perf.data file (perf's or tracer's); - reads a pipe on stdin")
      ->required();
  cmd->add_option("recipe", o->recipe, "Recipe whose pipelines to run (TOML)");
  cmd->add_option("-o,--output", o->output, "Write the output to this file");
  cmd->add_flag("--json", o->json, "JSON lines on stdout (with a recipe)");
  cmd->add_flag("--perf", o->perf,
                "Print perf script's default lines (tracepoints through their print fmt), to "
                "diff with perf script");
  cmd->add_option("--set", o->sets, "Override a recipe value: param=value, ...")
      ->allow_extra_args(false);
  cmd->add_option("--debuginfo", o->debuginfo,
                  "Also look for separate debuginfo under this directory (DIR/.build-id/ab/"
                  "cdef.debug, as under /usr/lib/debug); repeatable")
      ->allow_extra_args(false);
  cmd->callback([o, &run] {
    run = [o] {
      if (auto perfmon = read_perfmon(o->file))  // a perfmon buffer file (the perfmon stage's)
        return replay_perfmon_file(*o, *perfmon);
      return o->recipe.empty() ? replay_print_file(*o) : replay_recipe(*o);
    };
  });
}

}  // namespace tracer::cli
