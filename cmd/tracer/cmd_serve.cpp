// tracer serve: recipes kept running as a service, their tables and tracer's health exposed to
// Prometheus at /metrics (read when scraped), SIGHUP reloading the recipe files in place and
// SIGTERM stopping cleanly; logs are structured lines on stderr.
#include <fmt/chrono.h>
#include <fmt/format.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "privileges.hpp"
#include "tracer/common/json.hpp"
#include "tracer/duration.hpp"
#include "tracer/error.hpp"
#include "tracer/exporter/http_server.hpp"
#include "tracer/exporter/session_metrics.hpp"
#include "tracer/session.hpp"

namespace tracer::cli {

namespace asio = boost::asio;
using exporter::Family;
using exporter::MetricType;

namespace {

/// An error's problems as what() says them, without their hints (a log line's "error"; its
/// "hint" is the first problem's).
std::string without_hints(const Error& e) {
  std::vector<Problem> problems = e.problems();
  for (auto& p : problems)
    p.hint.clear();
  return Error::compose(problems);
}

struct ServeOptions {
  std::vector<std::string> recipes;
  std::vector<std::string> sets;
  std::string listen = "127.0.0.1:9435";
  std::uint32_t label_budget = 10000;
  std::string idle = "5m";
  std::string log_format = "logfmt";
  std::string user;
  int ready_fd = -1;
};

/// Structured log lines on stderr: logfmt (ts=... level=info msg="..." key=value) or JSON.
class Log {
 public:
  explicit Log(bool json) : json_(json) {}
  using Fields = std::vector<std::pair<std::string_view, std::string>>;
  void operator()(std::string_view level, std::string_view msg, const Fields& fields = {}) const {
    const auto now = std::chrono::system_clock::now();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
        1000;
    const std::string ts = fmt::format("{:%Y-%m-%dT%H:%M:%S}.{:03}Z",
                                       std::chrono::floor<std::chrono::seconds>(now), ms);
    std::string line;
    if (json_) {
      line = fmt::format(R"({{"ts":"{}","level":"{}","msg":"{}")", ts, level, json::escape(msg));
      for (const auto& [k, v] : fields)
        line += fmt::format(R"(,"{}":"{}")", k, json::escape(v));
      line += "}\n";
    } else {
      line = fmt::format("ts={} level={} msg={}", ts, level, quote(msg));
      for (const auto& [k, v] : fields)
        line += fmt::format(" {}={}", k, quote(v));
      line += "\n";
    }
    std::fputs(line.c_str(), stderr);
    std::fflush(stderr);
  }

 private:
  static std::string quote(std::string_view v) {
    const bool plain = !v.empty() && v.find_first_of(" \"=\\\n\t") == std::string_view::npos;
    return plain ? std::string(v) : "\"" + json::escape(v) + "\"";
  }
  bool json_;
};

/// A recipe file kept running.
struct Served {
  std::string path;
  Recipe recipe;
  std::unique_ptr<Session> session;
  std::unique_ptr<exporter::SessionMetrics> metrics;
};

Recipe load(const std::string& path, const std::vector<std::string>& sets) {
  try {
    return Recipe::load(path, {.sets = sets, .stages = stage_catalog()});
  } catch (const Error& e) {
    if (e.category() != ErrorCategory::kNotFound)
      throw;
    throw Error(ErrorCategory::kUsage, e.code(), e.problems());
  }
}

/// The process's own resident memory and open descriptors (the soak's and a dashboard's).
void process_families(std::vector<Family>& out) {
  Family rss{.name = "process_resident_memory_bytes",
             .help = "Resident memory size in bytes.",
             .type = MetricType::kGauge};
  if (std::FILE* f = std::fopen("/proc/self/statm", "re")) {
    unsigned long pages = 0, resident = 0;
    if (std::fscanf(f, "%lu %lu", &pages, &resident) == 2)
      rss.samples.push_back(
          {.value = static_cast<double>(resident) * static_cast<double>(::sysconf(_SC_PAGESIZE))});
    std::fclose(f);
  }
  out.push_back(std::move(rss));
  Family fds{.name = "process_open_fds",
             .help = "Number of open file descriptors.",
             .type = MetricType::kGauge};
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  fds.samples.push_back({.value = static_cast<double>(n)});
  out.push_back(std::move(fds));
}

/// SIGHUP's reloads, by result.
struct Reloads {
  std::uint64_t ok = 0, failed = 0, refused = 0;
};

/// Every recipe read again and applied to its session; one that fails or is refused runs on as
/// it was.
void reload_all(std::vector<Served>& served,
                const std::vector<std::string>& sets,
                const Log& log,
                Reloads& counts) {
  for (auto& s : served) {
    try {
      // Read and checked without tracefs access: a recipe, plugin or [bpf] file the dropped
      // user could have changed is refused (tracer/common/trusted_file.hpp).
      Recipe next = load(s.path, sets);
      const RecipeChanges changes = [&] {
        const ScopedTracefsAccess tracefs;  // formats of new probes, for as long as apply
        return s.session->apply(next);
      }();
      s.recipe = std::move(next);
      s.metrics->reload(s.recipe, changes);
      ++counts.ok;
      log("info", "reloaded", {{"recipe", s.path}, {"changes", changes.describe()}});
    } catch (const Error& e) {
      const bool refused = std::any_of(
          e.problems().begin(), e.problems().end(),
          [](const Problem& p) { return p.message.find(": refused '") != std::string::npos; });
      ++(refused ? counts.refused : counts.failed);
      log("error",
          refused ? "reload refused: a file another user can change; the recipe runs as it was"
                  : "reload failed: the recipe runs as it was",
          {{"recipe", s.path}, {"error", without_hints(e)}, {"hint", e.hint()}});
    }
  }
}

/// tracer's own families: scrapes, the last scrape's time, reloads, the build.
void tracer_families(const exporter::MetricsServer::Counters& c,
                     const Reloads& r,
                     std::vector<Family>& families) {
  Family scrapes{.name = "tracer_scrapes_total",
                 .help = "scrapes of /metrics answered",
                 .type = MetricType::kCounter};
  scrapes.samples.push_back({.value = static_cast<double>(c.scrapes)});
  Family took{.name = "tracer_scrape_duration_seconds",
              .help =
                  "how long the previous scrape took to make (reading the kernel's maps "
                  "and rings included)",
              .type = MetricType::kGauge};
  took.samples.push_back({.value = c.last_scrape_seconds});
  Family reloads{.name = "tracer_reloads_total",
                 .help = "SIGHUP reloads of a recipe, by result",
                 .type = MetricType::kCounter};
  reloads.samples.push_back(
      {.labels = {{.name = "result", .value = "ok"}}, .value = static_cast<double>(r.ok)});
  reloads.samples.push_back(
      {.labels = {{.name = "result", .value = "failed"}}, .value = static_cast<double>(r.failed)});
  reloads.samples.push_back({.labels = {{.name = "result", .value = "refused"}},
                             .value = static_cast<double>(r.refused)});
  Family build{.name = "tracer_build_info", .help = "tracer's version", .type = MetricType::kGauge};
  build.samples.push_back({.labels = {{.name = "version", .value = TRACER_VERSION}}, .value = 1});
  for (auto* f : {&scrapes, &took, &reloads, &build})
    families.push_back(std::move(*f));
}

void log_stopped(const std::vector<Served>& served, const Log& log) {
  for (auto& s : served) {
    const auto st = s.session->stats();
    log("info", "recipe stopped",
        {{"recipe", s.recipe.name},
         {"events", std::to_string(events_seen(st.engine))},
         {"lost", std::to_string(st.engine.lost())},
         {"seconds", fmt::format("{:.1f}", st.seconds)}});
  }
}

int serve(const ServeOptions& o) {
  check_ready_fd(o.ready_fd);
  if (!o.user.empty() && ::getpwnam(o.user.c_str()) == nullptr) {  // said before attaching
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("--user {}: no such user", o.user),
                "a user of this machine (getent passwd), e.g. --user nobody");
  }
  const Log log(o.log_format == "json");
  // The loop and the sink outlive the sessions (declared first, destroyed last).
  asio::io_context io(1);
  Sink out = Sink::discard();  // the recipes' text outputs go nowhere: their tables are metrics
  std::vector<Served> served;
  for (const auto& path : o.recipes)
    served.push_back({.path = path, .recipe = load(path, o.sets), .session = {}, .metrics = {}});
  const auto idle = parse_duration(o.idle);
  if (!idle || idle->count() <= 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("--idle {}: {}", o.idle,
                            idle ? std::string("must be positive") : idle.error().message),
                "a duration such as 5m or 90s");
  }
  const exporter::ExportOptions xo{.label_budget = o.label_budget, .idle = *idle};

  bool stopping = false;
  int exit_code = kExitOk;
  // However serve() ends (an error thrown after the start too), the sessions' ends are ours.
  struct Stopping {
    bool* flag;
    ~Stopping() { *flag = true; }
  } const stopping_at_exit{&stopping};
  std::unique_ptr<exporter::MetricsServer> server;
  const auto stop_all = [&] {
    if (stopping)
      return;
    stopping = true;
    if (server)
      server->close();
    for (auto& s : served)
      s.session->stop();
    io.stop();
  };
  for (auto& s : served) {
    s.session = std::make_unique<Session>(io.get_executor(), s.recipe, out, SessionOptions{});
    s.metrics = std::make_unique<exporter::SessionMetrics>(*s.session, s.recipe, xo);
    s.session->on_done([&, name = s.recipe.name, session = s.session.get()] {
      if (stopping)
        return;
      std::string why = "it stopped";
      if (auto e = session->failure()) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          why = x.what();
        }
      }
      log("error", "a recipe ended: tracer serve stops", {{"recipe", name}, {"error", why}});
      exit_code = kExitRuntime;
      asio::post(io, stop_all);
    });
  }

  // SIGINT and SIGTERM from before the start: a stop while the probes attach is honoured once
  // the loop runs.
  asio::signal_set signals(io, SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& ec, int sig) {
    if (ec)
      return;
    log("info", "stopping", {{"signal", sig == SIGINT ? "SIGINT" : "SIGTERM"}});
    stop_all();
  });
  Reloads reloads;
  asio::signal_set hup(io, SIGHUP);
  std::function<void()> wait_hup;
  wait_hup = [&] {
    hup.async_wait([&](const boost::system::error_code& ec, int) {
      if (ec || stopping)
        return;
      reload_all(served, o.sets, log, reloads);
      wait_hup();
    });
  };
  wait_hup();

  // The port first: a bad or taken address is said before any probe attaches (a scrape before
  // the recipes run gets tracer's own metrics).
  server = std::make_unique<exporter::MetricsServer>(io.get_executor(), o.listen, [&] {
    std::vector<Family> families;
    for (auto& s : served)
      s.metrics->collect(families);
    tracer_families(server->counters(), reloads, families);
    process_families(families);
    return exporter::exposition(std::move(families));
  });
  for (auto& s : served) {
    s.session->start();
    log("info", "recipe running",
        {{"recipe", s.recipe.name},
         {"file", s.path},
         {"probes", std::to_string(s.recipe.probes.size())},
         {"pipelines", std::to_string(s.recipe.pipelines.size())}});
  }

  log("info", "serving metrics",
      {{"listen", server->address()},
       {"path", "/metrics"},
       {"recipes", std::to_string(served.size())}});
  std::string user_cache;
  if (!o.user.empty()) {
    const DroppedTo to = drop_to_user(o.user);
    user_cache = to.cache;
    log("info", "running as an unprivileged user",
        {{"user", o.user}, {"capabilities", to.capabilities}, {"bpf_cache", to.cache}});
  }
  struct RemoveCache {
    const std::string* dir;
    ~RemoveCache() {
      std::error_code ec;
      if (!dir->empty())
        std::filesystem::remove_all(*dir, ec);
    }
  } const remove_cache{&user_cache};
  int ready = o.ready_fd;
  signal_ready(ready);
  if (!stopping)
    io.run();
  stop_all();
  log_stopped(served, log);
  return exit_code;
}

}  // namespace

void add_serve_command(CLI::App& app, Runner& run) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve",
      "Keep recipes running (system-wide) and expose their tables and tracer's health to "
      "Prometheus at /metrics; SIGHUP reloads the recipe files, SIGTERM stops");
  cmd->add_option("recipes", o->recipes, "Recipe files (TOML)")->required();
  cmd->add_option("--listen", o->listen,
                  "Where /metrics is served: ADDRESS:PORT (default 127.0.0.1:9435; :9435 for "
                  "every address)");
  cmd->add_option("--label-budget", o->label_budget,
                  "Label sets kept per metric (the largest first); the others are counted in "
                  "tracer_export_label_sets_dropped. A recipe's [export] label_budget wins")
      ->check(CLI::Range(1U, 1'000'000U));
  cmd->add_option("--idle", o->idle,
                  "A row of an aggregation with `every` that had no events for this long leaves "
                  "the export (default 5m): the series of processes that are gone go stale");
  cmd->add_option("--set", o->sets, "Override a value of every recipe: param=value, ...")
      ->allow_extra_args(false);
  cmd->add_option("--log-format", o->log_format, "Log lines on stderr: logfmt or json")
      ->check(CLI::IsMember({"logfmt", "json"}));
  cmd->add_option("--user", o->user,
                  "Once every probe is attached and the port bound, run as this user with "
                  "CAP_BPF, CAP_PERFMON, CAP_IPC_LOCK and CAP_SYS_RESOURCE (those tracer has) and "
                  "CAP_DAC_READ_SEARCH raised only while a reload reads tracefs; the bounding set "
                  "is cut to these and NoNewPrivs set. A reload uses only files no other user "
                  "than root can change (this user's are refused)");
  add_ready_fd_option(cmd, o->ready_fd, "once every recipe runs and /metrics is served");
  cmd->callback([o, &run] { run = [o] { return serve(*o); }; });
}

}  // namespace tracer::cli
