// tracer run RECIPE / tracer check RECIPE: a thin front end over tracer::Session (options, the
// output sink, SIGINT/SIGTERM, the status line) that prints the summary of events and losses per
// probe and the stages' accounting.
#include <fmt/core.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tracer/common/json.hpp"
#include "tracer/common/proc_mounts.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/duration.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::cli {
namespace {

namespace asio = boost::asio;

/// -p not given (any value the user gives is checked: 0 and negative ids are errors).
constexpr int kNoPid = std::numeric_limits<int>::min();

struct RunOptions {
  std::string recipe;
  int pid = kNoPid;
  std::string cgroup;   // --cgroup: a cgroup v2 directory (a path, or relative to its root)
  std::string command;  // -c "CMD ARGS"
  std::string duration;
  std::string output;
  std::string perf_data;               // --perf-data FILE, or -o FILE.data
  std::string folded, flamegraph;      // --folded FILE, --flamegraph FILE.svg
  std::vector<std::string> debuginfo;  // --debuginfo DIR: more separate-debuginfo roots
  bool json = false;
  bool verbose = false;
  bool trace_self = false;
  std::string delivery = "bpf";  // system-wide tracepoints: "bpf" or "perf"
  std::string placement;         // "", "auto", "kernel", "user"
  std::string channel;           // "", "ringbuf", "perf"
  bool plan = false;             // check --plan
  int ready_fd = -1;             // --ready-fd
  std::vector<std::string> sets;
};

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
  if (o.pid != kNoPid && o.pid <= 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("-p {}: a process id is a number above 0", o.pid),
                "tracer run RECIPE -p PID (see `pgrep NAME`)");
  }
  if (o.pid > 0 && !cmd.empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "give -p PID or a command, not both");
  }
  if (!o.cgroup.empty() && (o.pid > 0 || !cmd.empty())) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "give --cgroup, -p PID or a command, one of them");
  }
  if (!o.cgroup.empty()) {
    // A name is under the cgroup v2 hierarchy's mount (perf stat -G's habit).
    const std::string root = detail::cgroup2_root().string();
    t.kind = Target::Kind::kCgroup;
    t.cgroup = o.cgroup.starts_with('/') ? o.cgroup : root + "/" + o.cgroup;
  } else if (o.pid > 0) {
    t.kind = Target::Kind::kPid;
    t.pid = o.pid;
  } else if (!cmd.empty()) {
    t.kind = Target::Kind::kCommand;
    t.command = std::move(cmd);
  }
  return t;
}

using Counters = std::vector<std::pair<std::string, std::uint64_t>>;

/// The JSON summary's fields beside events and lost: each kind of loss on its own (lost is
/// their sum), and what is reported beside it.
std::string loss_parts_json(const ProbeStats& p) {
  const auto l = p.losses();
  const auto t = p.total();
  std::string out = fmt::format(R"(,"loss":{{"ring":{},"output_drops":{},"map_full":{},)"
                                R"("stacks_lost":{}}})",
                                l.ring, l.output_drops, l.map_full, l.stacks_lost);
  if (p.targets_dropped != 0)
    out += fmt::format(R"(,"targets_dropped":{})", p.targets_dropped);
  if (p.keys_truncated != 0)
    out += fmt::format(R"(,"keys_truncated":{})", p.keys_truncated);
  if (p.string_faults != 0)
    out += fmt::format(R"(,"string_faults":{})", p.string_faults);
  if (p.kernel_contended != 0)
    out += fmt::format(R"(,"contended":{})", p.kernel_contended);
  if (p.bpf_skipped != 0)
    out += fmt::format(R"(,"bpf_skipped":{})", p.bpf_skipped);
  if (t.kernel_hits != 0)
    out += fmt::format(R"(,"kernel_hits":{},"missed":{})", t.kernel_hits, t.missed);
  return out;
}

/// What the summary's numbers alone do not say, on stderr: each kind of loss beside the ring's,
/// children not followed, hits no ring saw, programs the kernel skipped.
void print_loss_warnings(const Stats& stats) {
  for (const auto& p : stats.probes) {
    const auto l = p.losses();
    if (l.output_drops + l.map_full + l.stacks_lost == 0)
      continue;  // only ring losses: the per-CPU columns are the whole story
    std::string parts;
    for (const auto& [what, n] :
         {std::pair{"ring (LOST records, per CPU above)", l.ring},
          std::pair{"BPF output calls that failed (beyond the rings' LOST)", l.output_drops},
          std::pair{"keys the in-kernel map had no room for (max_keys)", l.map_full},
          std::pair{"stacks the in-kernel stack map could not hold (max_stacks)", l.stacks_lost}}) {
      if (n != 0)
        parts += fmt::format("{}{} {}", parts.empty() ? "" : ", ", n, what);
    }
    fmt::print(stderr, "lost on probe '{}': {}\n", p.name, parts);
  }
  for (const auto& p : stats.probes) {
    if (p.keys_truncated != 0) {
      fmt::print(stderr,
                 "warning: probe '{}': {} events had a string key longer than the key's bytes "
                 "(string_key_bytes): counted under the cut string\n",
                 p.name, p.keys_truncated);
    }
    if (p.string_faults != 0) {
      fmt::print(stderr,
                 "warning: probe '{}': {} `char *` strings could not be read in the kernel "
                 "(their page was not in memory at the event): they count and filter as empty "
                 "strings\n",
                 p.name, p.string_faults);
    }
    if (p.kernel_contended != 0) {
      fmt::print(stderr,
                 "warning: probe '{}': {} min/max updates of the in-kernel map were given up "
                 "under contention (64 retries): those events are counted, their values may "
                 "not be the extreme\n",
                 p.name, p.kernel_contended);
    }
    if (p.targets_dropped != 0) {
      fmt::print(stderr,
                 "warning: probe '{}': {} processes of the target were not followed: the "
                 "in-kernel target map was full (raise [recipe] max_targets); their events are "
                 "not counted\n",
                 p.name, p.targets_dropped);
    }
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
  for (const auto& p : stats.probes) {
    if (p.bpf_skipped == 0)
      continue;
    fmt::print(stderr,
               "warning: probe '{}': the kernel skipped its BPF program {} times{}: another BPF "
               "program was running on that CPU (a tracepoint hit inside a BPF program, as "
               "bpf_trace_printk's); those hits reached no ring and no count\n",
               p.name, p.bpf_skipped,
               p.bpf_skipped_shared ? " (a program it shares with other probes: the count is "
                                      "theirs together)"
                                    : "");
  }
}

/// `json_out`: where the JSON summary goes (the run's output: `-o FILE` gets it too).
void print_summary(const Stats& stats,
                   const Counters& counters,
                   const std::vector<std::string>& warnings,
                   bool json,
                   double seconds,
                   Sink* json_out) {
  for (const auto& w : warnings)  // stderr: the stages' own (an export that lost records)
    fmt::print(stderr, "tracer: warning: {}\n", w);
  if (json) {
    std::string stages;
    for (const auto& [name, value] : counters)
      stages += fmt::format(R"({}"{}":{})", stages.empty() ? "" : ",", json::escape(name), value);
    std::string said;
    for (const auto& w : warnings)
      said += fmt::format(R"({}"{}")", said.empty() ? "" : ",", json::escape(w));
    std::string probes;
    for (const auto& p : stats.probes) {
      const auto t = p.total();
      const std::uint64_t lost = p.lost();
      std::string kernel = loss_parts_json(p);
      if (p.bpf_skipped != 0)
        kernel += fmt::format(R"(,"bpf_skipped":{}{})", p.bpf_skipped,
                              p.bpf_skipped_shared ? R"(,"bpf_skipped_shared":true)" : "");
      probes += fmt::format(R"({}"{}":{{"events":{},"lost":{},"bytes":{},"aux_truncated":{}{}}})",
                            probes.empty() ? "" : ",", json::escape(p.name), t.samples, lost,
                            t.bytes, t.aux_truncated, kernel);
    }
    const std::string line = fmt::format(
        "{{\"type\":\"summary\",\"seconds\":{:.3f},\"probes\":{{{}}},\"stages\":{{{}}},"
        "\"warnings\":[{}]}}\n",
        seconds, probes, stages, said);
    json_out->write(line);
    json_out->flush();
    print_loss_warnings(stats);  // stderr: the JSON lines stay alone on stdout
    return;
  }
  if (!stats.probes.empty())  // (a recipe of [[counter]] groups only has no probe)
    fmt::print(stderr, "\n{:<24} {:>12} {:>10}   per CPU (events/lost)\n", "probe", "events",
               "lost");
  for (const auto& p : stats.probes) {
    const auto t = p.total();
    const std::uint64_t lost = p.lost();
    std::string cpus;
    for (const auto& [cpu, rs] : p.per_cpu) {
      if (cpu < 0)  // a counting probe of a task target: one count wherever it ran
        cpus += fmt::format(" any:{}/{}", rs.samples, rs.lost + rs.lost_samples);
      else
        cpus += fmt::format(" cpu{}:{}/{}", cpu, rs.samples, rs.lost + rs.lost_samples);
    }
    fmt::print(stderr, "{:<24} {:>12} {:>10}  {}\n", p.name, t.samples, lost, cpus);
  }
  print_loss_warnings(stats);
  std::string line;
  for (const auto& [name, value] : counters)
    line += fmt::format("{}{} {}", line.empty() ? "" : ", ", name, value);
  if (!line.empty())
    fmt::print(stderr, "stages: {}\n", line);
  for (const auto& [name, value] : counters) {
    if (name.ends_with(".keys_dropped")) {
      fmt::print(stderr,
                 "tracer: warning: {}: {} events of keys past the stage's key_limit were not "
                 "counted (raise key_limit)\n",
                 name.substr(0, name.size() - std::string_view(".keys_dropped").size()), value);
    }
  }
  fmt::print(stderr, "({:.2f} s)\n", seconds);
}

/// The recipe, a missing or unreadable file being a usage error (exit 2) as a bad argument is.
/// With `problems` (check), the recipe's readable problems go there for the session to report.
Recipe load_recipe(const RunOptions& o, Diagnostics* problems = nullptr) {
  try {
    return Recipe::load(o.recipe,
                        {.sets = o.sets, .stages = stage_catalog(), .problems = problems});
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kNotFound)
      throw;
    throw Error(ErrorCategory::kUsage, e.code(), e.problems());
  }
}

/// -v: the kernel counts tracer's own system calls (this thread's: the reactor, the drain and
/// the map reads all run on it), as `perf stat -e raw_syscalls:sys_enter -p` would. Empty when
/// tracefs or the event is not there.
perf::Event own_syscall_counter() {
  auto fs = tracefs::Tracefs::open();
  if (!fs)
    return {};
  auto id = fs->tracepoint_id({.system = "raw_syscalls", .event = "sys_enter"});
  if (!id)
    return {};
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(*id);
  auto ev = perf::Event::open(a, {.pid = 0, .cpu = -1});
  return ev ? std::move(*ev) : perf::Event{};
}

/// The session's options from the command line's.
SessionOptions session_options(const RunOptions& o) {
  SessionOptions so{.target = target_from(o),
                    .duration = std::nullopt,
                    .json = o.json,
                    .perf_data = o.perf_data,
                    .stacks = {.folded = o.folded, .flamegraph = o.flamegraph},
                    .verbose = o.verbose,
                    .deliver_tracepoints_via_bpf = o.delivery == "bpf",
                    .placement = parse_placement(o.placement),
                    .channel = parse_delivery_channel(o.channel),
                    .trace_self = o.trace_self};
  for (const auto& dir : o.debuginfo)
    so.pipeline.symbols.debug_roots.emplace_back(dir);
  // Tracer's text on stdout: the traced command's own output goes to stderr, never into it.
  if (o.output.empty())
    so.target.stdout_to_stderr = true;
  if (!o.duration.empty()) {
    auto d = parse_duration(o.duration);
    if (!d) {
      throw Error(ErrorCategory::kUsage, d.error().code, "--duration: " + d.error().message,
                  d.error().hint);
    }
    if (d->count() <= 0) {
      throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                  "--duration: must be positive", "leave it out to run until Ctrl-C");
    }
    so.duration = *d;
  }
  return so;
}

/// The live status line on stderr: on a terminal, and not while a traced command shares it (its
/// output would land inside tracer's line); cleared before anything else is printed. Declared
/// before the session it watches (attach()), so that it outlives every callback the session
/// may still run while it is destroyed.
class StatusLine {
 public:
  explicit StatusLine(const RunOptions& o)
      : shown_on_tick_(!o.json && ::isatty(STDERR_FILENO) == 1 &&
                       target_from(o).kind != Target::Kind::kCommand) {}

  void attach(Session& session) {
    session_ = &session;
    session.on_delivery([this](std::size_t) { clear(); });
    session.on_table([this](const TableUpdate&) { clear(); });  // before a table is printed
    session.on_tick([this] { tick(); });
  }

  void clear() {
    if (shown_) {  // never mix the status line with output
      std::fputs("\r\033[K", stderr);
      shown_ = false;
    }
  }

 private:
  void tick() {
    clear();
    if (!shown_on_tick_)
      return;
    const auto st = session_->stats();
    // Every kind of loss, as the summary counts it (the rings' LOST records alone left out
    // LOST_SAMPLES, BPF output drops and in-kernel map drops while they happened).
    const std::uint64_t events = events_seen(st.engine);
    fmt::print(stderr, "\r[{:7.1f}s] {:>10} events/s  {:>12} events  {:>8} lost", st.seconds,
               (events - std::min(events, last_)) * 4, events, st.engine.lost());
    std::fflush(stderr);
    shown_ = true;
    last_ = events;
  }

  Session* session_ = nullptr;
  const bool shown_on_tick_;
  bool shown_ = false;
  std::uint64_t last_ = 0;
};

/// SIGHUP: the recipe file is read again (with the same --set values) and applied while the
/// run goes on (Session::apply): unchanged probes and pipelines keep their counts. What
/// changed, or why nothing could, goes to stderr; a recipe that fails leaves the run as it was.
void reload_on_sighup(asio::signal_set& hup,
                      const RunOptions& o,
                      Session& session,
                      StatusLine& status) {
  hup.async_wait([&](const boost::system::error_code& ec, int) {
    if (ec)
      return;
    if (session.running()) {
      try {
        const RecipeChanges changes = session.apply(load_recipe(o));
        status.clear();
        fmt::print(stderr, "tracer: reloaded {}: {}\n", o.recipe, changes.describe());
      } catch (const Error& e) {
        status.clear();
        fmt::print(stderr, "tracer: reloading {}: {}\n", o.recipe, e.what());
        fmt::print(stderr, "tracer: the run goes on with the recipe it had\n");
      }
    }
    reload_on_sighup(hup, o, session, status);
  });
}

/// After the summary: what the run warns about, and how it ends (a stage's or the output's
/// failure, else the command's exit status).
int finish_run(const RunOptions& o,
               Session& session,
               Sink& out,
               const perf::Event& own_syscalls,
               const SessionStats& st) {
  if (st.engine.held_passes != 0) {
    fmt::print(stderr,
               "tracer: warning: the stages fell behind the events: the rings were left unread "
               "for {} passes while they caught up (what the rings had no room for is in "
               "'lost')\n",
               st.engine.held_passes);
  }
  if (own_syscalls) {
    if (auto c = own_syscalls.read(); c && !c->values.empty()) {
      fmt::print(stderr, "tracer: own syscalls: {} in {:.1f}s ({:.0f}/s, once started)\n",
                 c->values[0].value, st.seconds,
                 st.seconds > 0 ? static_cast<double>(c->values[0].value) / st.seconds : 0.0);
    }
  }
  for (const auto& p : session.pipelines()) {
    for (const auto& w : p->take_warnings())
      fmt::print(stderr, "tracer: warning: {}\n", w);
  }
  if (o.pid > 0 && session.target_exited())
    fmt::print(stderr, "tracer: process {} exited\n", o.pid);
  if (auto e = session.failure())
    std::rethrow_exception(e);
  out.flush();
  if (out.error() != 0) {
    throw Error(ErrorCategory::kRuntime, std::error_code(out.error(), std::generic_category()),
                fmt::format("writing the output{}: {}", o.output.empty() ? "" : " to " + o.output,
                            std::strerror(out.error())),
                "is the disk full, or the reading end of the pipe closed?");
  }
  // The command's own failure is the run's exit status, as `tracer stat` (and a shell) give it.
  if (const auto code = session.command_exit_code(); code && *code != 0) {
    fmt::print(stderr, "tracer: the command exited with status {}\n", *code);
    return *code;
  }
  return kExitOk;
}

int run_recipe(const RunOptions& given) {
  RunOptions o = given;
  check_ready_fd(o.ready_fd);
  if (o.perf_data.empty() && o.output.ends_with(".data")) {
    o.perf_data = o.output;  // -o FILE.data: a perf.data file, not text
    o.output.clear();
  }
  Recipe recipe = load_recipe(o);
  SessionOptions so = session_options(o);
  // A perf.data stream on stdout leaves the text output stderr.
  Sink out = Sink::to_file(Session::takes_stdout(recipe, so) ? stderr : stdout);
  if (!o.output.empty()) {
    auto s = Sink::open(o.output);
    if (!s)
      throw Error(ErrorCategory::kUsage, s.error());
    out = std::move(*s);
  }

  // One thread runs it (this one): the engine's handlers then need no strand.
  asio::io_context io(1);
  StatusLine status(o);
  Session session(io.get_executor(), recipe, out, std::move(so));
  status.attach(session);
  session.on_done([&] { io.stop(); });
  // SIGINT and SIGTERM are caught from before the start: one that comes while the probes attach
  // (or right after a supervisor saw "ready") stops the run cleanly once the loop runs, instead
  // of killing tracer with its probes attached.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int) {
    if (!ec)
      session.stop();
  });
  asio::signal_set hup(io, SIGHUP);
  reload_on_sighup(hup, o, session, status);
  session.start();
  // From here on: the run's own cost (reactor, drains, map reads), not the start's compiles.
  perf::Event own_syscalls = o.verbose ? own_syscall_counter() : perf::Event{};
  for (const auto& note : out_of_target_notes(recipe, target_from(o)))
    fmt::print(stderr, "tracer: warning: {}\n", note);
  if (o.verbose) {
    fmt::print(stderr, "tracer: rings: {}\n", session.engine().ring_note());
    if (session.stats().in_place)
      fmt::print(stderr,
                 "tracer: the stages read samples in place (no record rebuilt or decoded)\n");
  }
  signal_ready(o.ready_fd);
  // A stage's end may fail the run (a plugin over its budget, an export that reached nothing),
  // in the loop (a duration's or a signal's stop) or here: the summary is printed first all the
  // same, then the error.
  std::exception_ptr failed;
  try {
    io.run();
    session.stop();
  } catch (...) {
    failed = std::current_exception();
  }
  status.clear();
  const auto st = session.stats();
  print_summary(st.engine, st.counters, st.warnings, o.json, st.seconds, &out);
  if (failed)
    std::rethrow_exception(failed);
  return finish_run(o, session, out, own_syscalls, st);
}

int check_recipe(const RunOptions& o) {
  // Every problem of the recipe in one report: the recipe's own, its stages' options, the
  // system's and each probe's (a recipe with five mistakes took three rounds to fix).
  Diagnostics problems;
  Recipe recipe = load_recipe(o, &problems);
  asio::io_context io;
  Sink out = Sink::to_file(stdout);
  SessionOptions so{.target = target_from(o), .placement = parse_placement(o.placement)};
  so.pipeline.dry_run = true;  // check writes nothing: no output path is opened
  so.all_problems = true;
  so.problems = std::move(problems);
  Session session(io.get_executor(), recipe, out, std::move(so));
  std::vector<std::string> notes;
  const auto probes = session.check(&notes);
  if (o.plan) {
    fmt::print("{}", session.placement());
    return kExitOk;
  }
  fmt::print("{}: ok ({} probes, {} pipelines{})\n", o.recipe, probes.size(),
             recipe.pipelines.size(),
             recipe.counters.empty() ? std::string()
                                     : fmt::format(", {} counter groups", recipe.counters.size()));
  for (const auto& p : probes) {
    fmt::print("  {:<20} {:<11} {:<40} {}\n", p.name, to_string(p.kind), p.spec, p.pmu);
    if (!p.sites.empty())
      fmt::print("    {} places:\n", p.sites.size());
    for (const auto& site : p.sites)
      fmt::print("      {}\n", site.symbol);
  }
  for (const auto& n : out_of_target_notes(recipe, target_from(o)))
    notes.push_back(n);
  for (const auto& n : notes)
    fmt::print("  note: {}\n", n);
  return kExitOk;
}

void common_options(CLI::App* cmd, RunOptions& o) {
  cmd->add_option("recipe", o.recipe, "Recipe file (TOML)")->required();
  cmd->add_option("-p,--pid", o.pid, "Trace this process (and its threads and children)");
  cmd->add_option("-c,--command", o.command, "Run this command and trace it (or give it after --)");
  cmd->add_option("--cgroup", o.cgroup,
                  "Trace the tasks of this cgroup v2 (a path, or a name under the cgroup v2 "
                  "hierarchy, e.g. system.slice/ssh.service) on every CPU");
  cmd->add_option("--set", o.sets, "Override a recipe value: param=value, recipe.duration=5s, ...")
      ->allow_extra_args(false);
  cmd->add_option("--placement", o.placement,
                  "Where stages run: auto (in the kernel where they can), kernel (or fail), "
                  "user; instead of the recipe's [recipe] placement")
      ->check(CLI::IsMember({"auto", "kernel", "user"}));
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
  cmd->add_option("--folded", o->folded,
                  "Also write the stacks of the recipe's aggregations as collapsed lines "
                  "(frame;frame count) to this file, for flamegraph.pl or speedscope");
  cmd->add_option("--flamegraph", o->flamegraph,
                  "Also write the stacks of the recipe's aggregations as an SVG flame graph");
  cmd->add_option("--debuginfo", o->debuginfo,
                  "Also look for separate debuginfo under this directory (DIR/.build-id/ab/"
                  "cdef.debug, as under /usr/lib/debug); repeatable")
      ->allow_extra_args(false);
  cmd->add_flag("--json", o->json, "JSON lines on stdout; the last line is the summary");
  cmd->add_option("--delivery", o->delivery,
                  "System-wide tracepoints: every hit through BPF (bpf, the default), or "
                  "sampled by their own perf events (perf)")
      ->check(CLI::IsMember({"bpf", "perf"}));
  cmd->add_option("--channel", o->channel,
                  "What carries BPF's deliveries to tracer: a BPF ring buffer (ringbuf, the "
                  "default where the kernel has one) or a perf ring per CPU (perf); instead of "
                  "the recipe's [recipe] channel")
      ->check(CLI::IsMember({"ringbuf", "perf"}));
  cmd->add_flag("--trace-self", o->trace_self,
                "System-wide: trace tracer's own process too (left out by default: its drains' "
                "system calls would be events that wake it again)");
  cmd->add_flag("-v,--verbose", o->verbose,
                "Full verifier logs on BPF errors; how the rings were sized");
  add_ready_fd_option(cmd, o->ready_fd, "once every probe is attached and the run has begun");
  cmd->callback([o, &run] { run = [o] { return run_recipe(*o); }; });

  auto c = std::make_shared<RunOptions>();
  auto* check = app.add_subcommand(
      "check", "Validate a recipe and resolve everything (probes, BPF) without attaching");
  common_options(check, *c);
  check->add_flag("--plan", c->plan,
                  "Print where each stage runs (kernel or user) and why, attaching nothing");
  check->callback([c, &run] { run = [c] { return check_recipe(*c); }; });
}

}  // namespace tracer::cli
