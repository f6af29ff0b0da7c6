// tracer run RECIPE / tracer check RECIPE: load a recipe, resolve and start its probes, run its
// pipelines on the engine's batches, stop cleanly on SIGINT/SIGTERM, --duration or the command's
// exit, and print a summary of events and losses per probe.
#include <fmt/core.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "pipelines.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/duration.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/stage.hpp"

namespace tracer::cli {
namespace {

namespace asio = boost::asio;

struct RunOptions {
  std::string recipe;
  int pid = -1;
  std::string command;  // -c "CMD ARGS"
  std::string duration;
  std::string output;
  std::string perf_data;  // --perf-data FILE, or -o FILE.data
  bool json = false;
  bool verbose = false;
  std::vector<std::string> sets;
};

std::chrono::nanoseconds monotonic_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

// Splits -c "CMD ARGS" like a shell would for plain words and simple quotes.
std::vector<std::string> split_command(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  char quote = 0;
  bool any = false;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      any = true;
    } else if (c == ' ' || c == '\t') {
      if (!cur.empty() || any)
        out.push_back(std::move(cur));
      cur.clear();
      any = false;
    } else {
      cur += c;
    }
  }
  if (!cur.empty() || any)
    out.push_back(std::move(cur));
  return out;
}

Target target_from(const RunOptions& o) {
  Target t;
  std::vector<std::string> cmd = split_command(o.command);
  const auto& tail = trailing_args();
  cmd.insert(cmd.end(), tail.begin(), tail.end());
  if (o.pid > 0 && !cmd.empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "give -p PID or a command, not both");
  }
  if (o.pid > 0) {
    t.kind = Target::Kind::kPid;
    t.pid = o.pid;
  } else if (!cmd.empty()) {
    t.kind = Target::Kind::kCommand;
    t.command = std::move(cmd);
  }
  return t;
}

/// Whether a recipe stage writes perf.data; `to_stdout`: one of them to "-" (pipe mode).
bool has_perf_data_stage(const Recipe& recipe, bool* to_stdout = nullptr) {
  bool any = false;
  for (const auto& p : recipe.pipelines) {
    for (const auto& st : p.stages) {
      if (st.use != "perf-data")
        continue;
      any = true;
      const ConfigValue* path = st.options.find("path");
      if (to_stdout != nullptr && path != nullptr && path->string() != nullptr &&
          *path->string() == "-")
        *to_stdout = true;
    }
  }
  return any;
}

/// perf report needs COMM/MMAP2 of the processes that start during the run: as perf record
/// does, the first sampling probe asks the kernel for task records (when no probe does yet).
void enable_task_records(EngineOptions& eo) {
  for (const auto& p : eo.probes) {
    if (p.task_records)
      return;
  }
  for (auto& p : eo.probes) {
    if (!p.counting) {
      p.task_records = true;
      return;
    }
  }
}

/// Thread names at event time: the first sampling probe asks the kernel for COMM/FORK/EXIT
/// records (on every CPU), so a short-lived process still has its comm after it exited.
void enable_comm_records(EngineOptions& eo) {
  for (auto& p : eo.probes) {
    if (p.task_records || p.comm_records)
      return;
  }
  for (auto& p : eo.probes) {
    if (!p.counting) {
      p.comm_records = true;
      return;
    }
  }
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          out += c;
        }
    }
  }
  return out;
}

using Counters = std::vector<std::pair<std::string, std::uint64_t>>;

/// The stages' accounting of every pipeline ("latency.paired", "order.late", ...); the
/// pipelines after the first prefix theirs with "pipelineN.".
Counters pipeline_counters(const std::vector<std::unique_ptr<Pipeline>>& pipelines) {
  Counters out;
  for (std::size_t i = 0; i < pipelines.size(); ++i) {
    for (auto& [name, value] : pipelines[i]->counters())
      out.emplace_back(i == 0 ? name : fmt::format("pipeline{}.{}", i, name), value);
  }
  return out;
}

void print_summary(const Stats& stats, const Counters& counters, bool json, double seconds) {
  if (json) {
    std::string stages;
    for (const auto& [name, value] : counters)
      stages += fmt::format(R"({}"{}":{})", stages.empty() ? "" : ",", json_escape(name), value);
    std::string probes;
    for (const auto& p : stats.probes) {
      const auto t = p.total();
      const std::uint64_t lost = std::max(t.lost + t.lost_samples, p.bpf_output_drops);
      std::string kernel;
      if (t.kernel_hits != 0)
        kernel = fmt::format(R"(,"kernel_hits":{},"missed":{})", t.kernel_hits, t.missed);
      probes += fmt::format(R"({}"{}":{{"events":{},"lost":{},"bytes":{},"aux_truncated":{}{}}})",
                            probes.empty() ? "" : ",", json_escape(p.name), t.samples, lost,
                            t.bytes, t.aux_truncated, kernel);
    }
    fmt::print("{{\"type\":\"summary\",\"seconds\":{:.3f},\"probes\":{{{}}},\"stages\":{{{}}}}}\n",
               seconds, probes, stages);
    std::fflush(stdout);
    return;
  }
  fmt::print(stderr, "\n{:<24} {:>12} {:>10}   per CPU (events/lost)\n", "probe", "events", "lost");
  for (const auto& p : stats.probes) {
    const auto t = p.total();
    const std::uint64_t lost = std::max(t.lost + t.lost_samples, p.bpf_output_drops);
    std::string cpus;
    for (const auto& [cpu, rs] : p.per_cpu) {
      cpus += fmt::format(" cpu{}:{}/{}", cpu, rs.samples, rs.lost + rs.lost_samples);
    }
    fmt::print(stderr, "{:<24} {:>12} {:>10}  {}\n", p.name, t.samples, lost, cpus);
  }
  for (const auto& p : stats.probes) {
    const auto t = p.total();
    if (t.missed == 0)
      continue;
    std::string cpus;
    for (const auto& [cpu, rs] : p.per_cpu) {
      if (rs.missed != 0)
        cpus += fmt::format(" cpu{}:{}/{}", cpu, rs.missed, rs.kernel_hits);
    }
    fmt::print(stderr,
               "warning: probe '{}': the kernel ran its tracepoint {} times, {} of them reached "
               "no ring and no LOST count (missed/hits:{}): this kernel's perf events drop "
               "tracepoint hits in some contexts; a BPF program sees them\n",
               p.name, t.kernel_hits, t.missed, cpus);
  }
  std::string line;
  for (const auto& [name, value] : counters)
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", name, value);
  if (!line.empty())
    fmt::print(stderr, "stages: {}\n", line);
  fmt::print(stderr, "({:.2f} s)\n", seconds);
}

/// The recipe, a missing or unreadable file being a usage error (exit 2) as a bad argument is.
Recipe load_recipe(const RunOptions& o) {
  try {
    return Recipe::load(o.recipe, {.sets = o.sets, .stages = catalog()});
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kNotFound)
      throw;
    throw Error(ErrorCategory::kUsage, e.code(), e.what(), e.hint(), e.where());
  }
}

/// What check_system() finds (unknown tracepoints, uprobe symbols, filter fields), as
/// `tracer check` reports it: file:line:column, exit 2.
void check_recipe_system(const Recipe& recipe, const RunOptions& o) {
  Diagnostics diags;
  recipe.check_system(diags, o.pid > 0 ? std::optional<pid_t>(o.pid) : std::nullopt);
  diags.throw_if_any();
}

/// An engine error about one probe ("probe 'x': ...") at that probe's place in the recipe: its
/// filter's for a rejected filter, else its tracepoint/uprobe/... value's. A probe the system
/// lacks or refuses as written is a recipe error (exit 2); other failures keep their category.
[[noreturn]] void rethrow_at_probe(const Error& e, const Recipe& recipe) {
  const std::string_view what = e.what();
  for (const auto& p : recipe.probes) {
    // A glob's probes are "name:event".
    const std::string prefix = fmt::format("probe '{}", p.options.name);
    if (!what.starts_with(prefix + "':") && !what.starts_with(prefix + ":"))
      continue;
    const bool filter = !p.options.filter.empty() && what.find("filter") != std::string_view::npos;
    const SourceRegion& where = p.where_of(filter ? "filter" : to_string(p.options.kind));
    if (where.path.empty())
      break;
    const bool recipe_error =
        e.category() == ErrorCategory::kUsage || e.category() == ErrorCategory::kNotFound;
    throw Error(recipe_error ? ErrorCategory::kRecipe : e.category(), e.code(),
                fmt::format("{}:{}:{}: {}", where.path, where.line, where.column, what), e.hint(),
                where);
  }
  throw e;
}

int run_recipe(const RunOptions& given) {
  RunOptions o = given;
  if (o.perf_data.empty() && o.output.ends_with(".data")) {
    o.perf_data = o.output;  // -o FILE.data: a perf.data file, not text
    o.output.clear();
  }
  Recipe recipe = load_recipe(o);
  check_recipe_system(recipe, o);
  EngineOptions eo = recipe.to_engine_options(target_from(o));
  eo.verbose = o.verbose;
  bool stage_to_stdout = false;
  if (has_perf_data_stage(recipe, &stage_to_stdout) || !o.perf_data.empty())
    enable_task_records(eo);
  enable_comm_records(eo);
  const bool stdout_is_perf_data = o.perf_data == "-" || stage_to_stdout;
  if (stdout_is_perf_data && o.json) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "a perf.data stream and --json both write to stdout",
                "write the perf.data to a file, or leave out --json");
  }
  // Machine output on stdout: the command's own output must not mix into it.
  eo.target.stdout_to_stderr = o.json || stdout_is_perf_data;
  std::optional<std::chrono::nanoseconds> duration = recipe.duration;
  if (!o.duration.empty()) {
    auto d = parse_duration(o.duration);
    if (!d) {
      throw Error(ErrorCategory::kUsage, d.error().code, "--duration: " + d.error().message,
                  d.error().hint);
    }
    duration = *d;
  }

  // A perf.data stream on stdout leaves the text output stderr.
  Sink out = Sink::to_file(stdout_is_perf_data ? stderr : stdout);
  if (!o.output.empty()) {
    auto s = Sink::open(o.output);
    if (!s)
      throw Error(ErrorCategory::kUsage, s.error());
    out = std::move(*s);
  }
  Diagnostics diags;
  auto pipelines = make_pipelines(recipe, out, o.json, diags, {}, o.perf_data);
  diags.throw_if_any();

  // One thread runs it (this one): the engine's handlers then need no strand.
  asio::io_context io(1);
  Engine engine(io.get_executor(), std::move(eo));
  const bool status_line = !o.json && ::isatty(STDERR_FILENO) == 1;
  bool status_shown = false;
  std::uint64_t delivered = 0;
  engine.on_batch([&](const Batch& b) {
    if (status_shown) {  // never mix the status line with output
      std::fputs("\r\033[K", stderr);
      status_shown = false;
    }
    delivered += b.records.size();
    for (auto& p : pipelines)
      p->on_batch(b);
  });
  try {
    engine.start();
  } catch (const Error& e) {
    rethrow_at_probe(e, recipe);
  }
  if (o.verbose)
    fmt::print(stderr, "tracer: rings: {}\n", engine.ring_note());
  for (auto& p : pipelines)
    p->bind(engine.probes(), diags, {}, &engine.maps());
  if (!diags.empty()) {
    engine.stop();
    diags.throw_if_any();
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& p : pipelines)
    p->start(monotonic_now());

  bool finished = false;
  auto finish = [&] {
    if (finished)
      return;
    finished = true;
    engine.stop();  // drains: the last batches reach the pipelines
    io.stop();
  };
  engine.on_done(finish);
  // perf-data sinks end a FINISHED_ROUND where the engine finished a pass over every ring.
  engine.on_round([&] {
    for (auto& p : pipelines)
      p->round();
  });
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec)
      finish();
  });
  asio::steady_timer deadline(io);
  if (duration) {
    deadline.expires_after(*duration);
    deadline.async_wait([&](const boost::system::error_code& ec) {
      if (!ec)
        finish();
    });
  }
  asio::steady_timer ticker(io);
  std::uint64_t last_delivered = 0;
  std::function<void(const boost::system::error_code&)> tick =
      [&](const boost::system::error_code& ec) {
        if (ec || finished)
          return;
        if (status_shown) {
          std::fputs("\r\033[K", stderr);
          status_shown = false;
        }
        for (auto& p : pipelines)
          p->tick(monotonic_now());
        if (status_line) {
          const double secs =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          std::uint64_t lost = 0;
          for (const auto& p : engine.stats().probes)
            lost += p.total().lost;
          fmt::print(stderr, "\r[{:7.1f}s] {:>10} events/s  {:>12} events  {:>8} lost", secs,
                     (delivered - last_delivered) * 4, delivered, lost);
          std::fflush(stderr);
          status_shown = true;
        }
        last_delivered = delivered;
        ticker.expires_after(std::chrono::milliseconds(250));
        ticker.async_wait(tick);
      };
  ticker.expires_after(std::chrono::milliseconds(250));
  ticker.async_wait(tick);

  io.run();
  finish();
  if (status_shown)
    std::fputs("\r\033[K", stderr);
  for (auto& p : pipelines)
    p->stop(monotonic_now());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_summary(engine.stats(), pipeline_counters(pipelines), o.json, seconds);
  if (o.pid > 0 && engine.target_exited())
    fmt::print(stderr, "tracer: process {} exited\n", o.pid);
  if (auto e = engine.failure())
    std::rethrow_exception(e);
  return kExitOk;
}

int check_recipe(const RunOptions& o) {
  Recipe recipe = load_recipe(o);
  check_recipe_system(recipe, o);
  Diagnostics diags;
  asio::io_context io;
  Engine engine(io.get_executor(), recipe.to_engine_options(target_from(o)));
  std::vector<std::string> notes;
  std::vector<ProbeInfo> probes;
  try {
    probes = engine.check(&notes);
  } catch (const Error& e) {
    rethrow_at_probe(e, recipe);
  }
  Sink out = Sink::to_file(stdout);
  auto pipelines = make_pipelines(recipe, out, false, diags);
  for (auto& p : pipelines)
    p->bind(probes, diags, {}, &engine.maps());
  diags.throw_if_any();
  fmt::print("{}: ok ({} probes, {} pipelines)\n", o.recipe, probes.size(),
             recipe.pipelines.size());
  for (const auto& p : probes) {
    fmt::print("  {:<20} {:<11} {:<40} {}\n", p.name, to_string(p.kind), p.spec, p.pmu);
  }
  for (const auto& n : notes)
    fmt::print("  note: {}\n", n);
  return kExitOk;
}

void common_options(CLI::App* cmd, RunOptions& o) {
  cmd->add_option("recipe", o.recipe, "Recipe file (TOML)")->required();
  cmd->add_option("-p,--pid", o.pid, "Trace this process (and its threads and children)");
  cmd->add_option("-c,--command", o.command, "Run this command and trace it (or give it after --)");
  cmd->add_option("--set", o.sets, "Override a recipe value: param=value, recipe.duration=5s, ...")
      ->allow_extra_args(false);
}

}  // namespace

void add_run_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "Run a recipe: probes, BPF and pipelines");
  common_options(cmd, *o);
  cmd->add_option("-d,--duration", o->duration, "Stop after this long (e.g. 5s)");
  cmd->add_option("-o,--output", o->output,
                  "Write the pipelines' output to this file; a name ending in .data is a "
                  "perf.data file instead (as --perf-data)");
  cmd->add_option("--perf-data", o->perf_data,
                  "Also write every record of every probe as a perf.data file that perf "
                  "script/report read (\"-\": a pipe-mode stream on stdout, text goes to stderr)");
  cmd->add_flag("--json", o->json, "JSON lines on stdout; the last line is the summary");
  cmd->add_flag("-v,--verbose", o->verbose,
                "Full verifier logs on BPF errors; how the rings were sized");
  cmd->callback([o, &run] { run = [o] { return run_recipe(*o); }; });

  auto c = std::make_shared<RunOptions>();
  auto* check = app.add_subcommand(
      "check", "Validate a recipe and resolve everything (probes, BPF) without attaching");
  common_options(check, *c);
  check->callback([c, &run] { run = [c] { return check_recipe(*c); }; });
}

}  // namespace tracer::cli
