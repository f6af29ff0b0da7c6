// `tracer serve`: recipes kept running, their tables exposed at /metrics and scraped by a real
// Prometheus server (Debian's prometheus 2.42), the exposition checked by promtool; processes
// with known numbers of calls give the known series, on every placement, through a reload; the
// label budget bounds the series; --user drops root and keeps only what a reload needs.
#include <arpa/inet.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "support/test_paths.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using testing::exited_ok;
using ::testing::HasSubstr;
using testing::shell;
using testing::slurp;

using tracer::testing::kSyscaller;

/// Sends `bytes` to 127.0.0.1:`port` and reads the answer until the server closes (each read waits
/// at most `wait_s`).
std::string raw_exchange(std::uint16_t port, const std::string& bytes, int wait_s = 10) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{.tv_sec = wait_s, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string got;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
      got.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return got;
}

/// GET `path` from 127.0.0.1:`port`: the body, or nullopt when nothing answered with 200.
std::optional<std::string> http_get(std::uint16_t port, const std::string& path) {
  const std::string got = raw_exchange(
      port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 30);
  const auto body = got.find("\r\n\r\n");
  if (body == std::string::npos || !got.starts_with("HTTP/1.1 200"))
    return std::nullopt;
  return got.substr(body + 4);
}

/// The value of the sample `series` (name and labels exactly as exposed) in `text`.
std::optional<double> sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(series + " "))
      return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

std::size_t series_count(const std::string& text, const std::string& name) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    n += line.starts_with(name + "{") || line.starts_with(name + " ") ? 1 : 0;
  return n;
}

/// Runs the syscaller with `args`; its pid.
std::string calls(const std::string& args) {
  std::string pid = testing::run_syscaller(args);
  EXPECT_FALSE(pid.empty()) << "syscaller " << args;
  return pid;
}

fs::path put(const testing::TempDir& dir, const std::string& name, const std::string& text) {
  dir.write(name, text);
  return dir.path() / name;
}

/// A running `tracer serve`: its pid, log and port. One a failed assertion left running is
/// killed at the end of the test (a child already reaped is not ours to signal).
struct Served {
  pid_t pid = -1;
  fs::path err;
  std::uint16_t port = 0;
  Served() = default;
  Served(pid_t p, fs::path e, std::uint16_t po) : pid(p), err(std::move(e)), port(po) {}
  Served(const Served&) = delete;
  Served& operator=(const Served&) = delete;
  Served(Served&& o) noexcept
      : pid(std::exchange(o.pid, -1)), err(std::move(o.err)), port(o.port) {}
  Served& operator=(Served&&) = delete;
  ~Served() {
    if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

Served serve(const std::vector<std::string>& args, const fs::path& err) {
  testing::ReadyPipe ready;
  std::vector<std::string> argv = {TRACER_CLI_PATH, "serve",      "--listen",
                                   "127.0.0.1:0",   "--ready-fd", ready.fd_arg()};
  argv.insert(argv.end(), args.begin(), args.end());
  Served s(testing::spawn_to_file(argv, "/dev/null", err), err, 0);
  ready.close_writer();
  if (!ready.wait()) {
    ::kill(s.pid, SIGKILL);
    (void)exited_ok(s.pid);
    s.pid = -1;
    return s;
  }
  std::smatch m;
  const std::string log = slurp(err);
  if (std::regex_search(log, m, std::regex(R"(listen=127\.0\.0\.1:([0-9]+))")))
    s.port = static_cast<std::uint16_t>(std::stoi(m[1]));
  return s;
}

/// Scrapes until `series` has `want` (the drain and the kernel's maps catch up), at most 30 s.
std::string scrape_until(std::uint16_t port, const std::string& series, double want) {
  std::string text;
  for (int i = 0; i < 300; ++i) {
    text = http_get(port, "/metrics").value_or("");
    if (sample(text, series) == want)
      return text;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return text;
}

/// A count and a hist of lseek calls by pid; `recipe` keys (placement), the stages' (every).
std::string count_recipe(const std::string& name,
                         const std::string& recipe,
                         const std::string& stage) {
  return "[recipe]\nname = \"" + name + "\"\n" + recipe +
         "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
         "[[pipeline]]\nname = \"calls\"\n"
         "[[pipeline.stage]]\nuse = \"count\"\nby = [\"pid\"]\n" +
         stage +
         "[[pipeline]]\nname = \"offsets\"\n"
         "[[pipeline.stage]]\nuse = \"hist\"\nfield = \"offset\"\nby = [\"pid\"]\n" +
         stage;
}

/// The series of the syscaller's 3,000 lseek calls (offsets 0..2999) in recipe `r`.
void expect_known_series(const std::string& text, const std::string& r, const std::string& pid) {
  const std::string p = "{pid=\"" + pid + "\"";
  EXPECT_EQ(sample(text, "tracer_" + r + "_calls_count_total" + p + "}"), 3000) << text;
  const std::string h = "tracer_" + r + "_offsets_offset";
  EXPECT_EQ(sample(text, h + "_count" + p + "}"), 3000) << text;
  EXPECT_EQ(sample(text, h + "_sum" + p + "}"), 3000.0 * 2999 / 2) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"0\"}"), 1) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"1\"}"), 2) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"1023\"}"), 1024) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"2047\"}"), 2048) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"4095\"}"), 3000) << text;
  EXPECT_EQ(sample(text, h + "_bucket" + p + ",le=\"+Inf\"}"), 3000) << text;
}

/// The first value of a Prometheus instant query, or nullopt.
std::optional<double> prom_query(std::uint16_t port, const std::string& query) {
  std::string q;
  for (unsigned char c : query) {
    if (std::isalnum(c) != 0 || c == '_')
      q.push_back(static_cast<char>(c));
    else
      q += fmt::format("%{:02X}", c);
  }
  const auto body = http_get(port, "/api/v1/query?query=" + q);
  if (!body)
    return std::nullopt;
  std::smatch m;
  if (!std::regex_search(*body, m, std::regex(R"re("value":\[[0-9.]+,"([^"]+)"\])re")))
    return std::nullopt;
  return std::stod(m[1]);
}

std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const auto port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// Two recipes served at once: the same probe and tables in the kernel (auto) and in user space
// with `every` (the exporter adds the intervals up); a process on each CPU with known calls.
// Both expose the same known series, promtool accepts the exposition, and a real Prometheus
// scraping tracer every second stores the same numbers.
TEST(CliServe, APrometheusServerScrapesTheKnownCountsOnEveryPath) {
  if (::access("/usr/bin/prometheus", X_OK) != 0 || ::access("/usr/bin/promtool", X_OK) != 0)
    GTEST_SKIP() << "Debian's prometheus package is not installed (.ci/setup installs it)";
  testing::TempDir dir;
  const auto kernel = put(dir, "kernel.toml", count_recipe("serve_kernel", "", ""));
  const auto user =
      put(dir, "user.toml",
          count_recipe("serve_user", "placement = \"user\"\n", "every = \"300ms\"\n"));
  const Served s = serve({kernel.string(), user.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  ASSERT_NE(s.port, 0) << slurp(s.err);

  const std::string a = calls("lseek 3000 0");
  const std::string b = calls("lseek 3000 1");
  std::string text =
      scrape_until(s.port, "tracer_serve_user_calls_count_total{pid=\"" + b + "\"}", 3000);
  for (const std::string r : {"serve_kernel", "serve_user"}) {
    SCOPED_TRACE(r);
    expect_known_series(text, r, a);
    expect_known_series(text, r, b);
  }
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_serve_kernel_offsets_offset histogram\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_serve_user_calls_count_total counter\n"));
  EXPECT_EQ(sample(text, R"(tracer_recipe_up{recipe="serve_kernel"})"), 1);
  // The drain's latency and the rings' peak fill (the user-space recipe samples through rings).
  EXPECT_GT(sample(text, R"(tracer_drain_pass_seconds_count{recipe="serve_user"})").value_or(0), 0)
      << text;
  EXPECT_THAT(text, HasSubstr("# TYPE tracer_drain_pass_seconds histogram\n"));
  EXPECT_THAT(
      text,
      HasSubstr(
          R"(tracer_probe_lost_total{recipe="serve_user",probe="lseek",cpu="1",kind="ring"} 0)"));

  // promtool's own check of the format (and its lint: names, HELP, counters' _total).
  const auto body = put(dir, "metrics.txt", text);
  const auto check = shell("promtool check metrics < " + body.string());
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_EQ(check.out + check.err, "") << "promtool's lint";
  // The stages' counters, where a stage keeps some, are counters (a pipeline a reload restarts
  // is a counter reset).
  if (text.find("tracer_stage_counter") != std::string::npos) {
    EXPECT_THAT(text, HasSubstr("# TYPE tracer_stage_counter_total counter\n"));
  }

  // A real Prometheus, scraping tracer every second.
  const std::uint16_t prom_port = free_port();
  const auto config = put(dir, "prometheus.yml",
                          fmt::format("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                                      "scrape_configs:\n  - job_name: tracer\n    static_configs:\n"
                                      "      - targets: ['127.0.0.1:{}']\n",
                                      s.port));
  const pid_t prom = testing::spawn_to_file(
      std::vector<std::string>{"/usr/bin/prometheus", "--config.file=" + config.string(),
                               "--storage.tsdb.path=" + (dir.path() / "tsdb").string(),
                               "--web.listen-address=127.0.0.1:" + std::to_string(prom_port)},
      dir.path() / "prom.out", dir.path() / "prom.err");
  ASSERT_GT(prom, 0);
  const std::string q = "tracer_serve_kernel_calls_count_total{pid=\"" + a + "\"}";
  std::optional<double> got;
  for (int i = 0; i < 600 && got != 3000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    got = prom_query(prom_port, q);
  }
  EXPECT_EQ(got, 3000) << slurp(dir.path() / "prom.err");
  for (const std::string r : {"serve_kernel", "serve_user"}) {
    const std::string h = "tracer_" + r + "_offsets_offset";
    EXPECT_EQ(prom_query(prom_port, h + "_count{pid=\"" + b + "\"}"), 3000) << r;
    EXPECT_EQ(prom_query(prom_port, h + "_sum{pid=\"" + b + "\"}"), 3000.0 * 2999 / 2) << r;
    EXPECT_EQ(prom_query(prom_port, h + "_bucket{pid=\"" + b + "\",le=\"2047\"}"), 2048) << r;
    EXPECT_EQ(prom_query(prom_port, "histogram_quantile(1, " + h + "_bucket{pid=\"" + b + "\"})"),
              4095)
        << r;
  }
  EXPECT_EQ(prom_query(prom_port, "up{job=\"tracer\"}"), 1);
  ::kill(prom, SIGTERM);
  EXPECT_TRUE(exited_ok(prom)) << slurp(dir.path() / "prom.err");

  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
  const std::string log = slurp(s.err);
  EXPECT_THAT(log, HasSubstr("level=info msg=stopping signal=SIGTERM"));
  EXPECT_THAT(log, HasSubstr("msg=\"recipe stopped\" recipe=serve_kernel"));
}

// SIGHUP reads the recipe again: the unchanged probe keeps its counts, an added one counts
// from then on, a broken file leaves the run as it was; SIGTERM ends with 0.
TEST(CliServe, SighupReloadsInPlaceAndKeepsTheCounts) {
  testing::TempDir dir;
  const std::string head =
      "[recipe]\nname = \"reload\"\n"
      "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n";
  const std::string tail = "[[stage]]\nuse = \"count\"\nby = [\"probe\", \"pid\"]\n";
  const auto recipe = put(dir, "r.toml", head + tail);
  const Served s = serve({recipe.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  const std::string a = calls("lseek 1000");
  ASSERT_EQ(
      sample(scrape_until(s.port, "tracer_reload_count_total{probe=\"lseek\",pid=\"" + a + "\"}",
                          1000),
             "tracer_reload_count_total{probe=\"lseek\",pid=\"" + a + "\"}"),
      1000);
  std::ofstream(recipe, std::ios::trunc)
      << head << "[[probe]]\nname = \"getppid\"\ntracepoint = \"syscalls:sys_enter_getppid\"\n"
      << tail;
  ::kill(s.pid, SIGHUP);
  ASSERT_TRUE(testing::wait_for_text(s.err, "msg=reloaded")) << slurp(s.err);
  const std::string b = calls("getppid 500");
  const std::string c = calls("lseek 700");
  std::ofstream(recipe, std::ios::trunc) << head << "[[probe]]\nname = \"typo\"\n" << tail;
  ::kill(s.pid, SIGHUP);
  ASSERT_TRUE(testing::wait_for_text(s.err, "reload failed")) << slurp(s.err);
  const std::string text =
      scrape_until(s.port, R"(tracer_reload_count_total{probe="lseek",pid=")" + c + "\"}", 700);
  EXPECT_EQ(sample(text, "tracer_reload_count_total{probe=\"lseek\",pid=\"" + a + "\"}"), 1000)
      << text;
  EXPECT_EQ(sample(text, "tracer_reload_count_total{probe=\"getppid\",pid=\"" + b + "\"}"), 500)
      << text;
  EXPECT_EQ(sample(text, R"(tracer_reloads_total{result="ok"})"), 1) << text;
  EXPECT_EQ(sample(text, R"(tracer_reloads_total{result="failed"})"), 1) << text;
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

// Many distinct keys: the exposition keeps the budget's label sets (the largest first) and says
// how many it left out; the stage's key_limit bounds the keys it holds (the events of the rest
// are counted, as the kernel map's map_full would be); tracer's memory stays flat while more keys
// come.
TEST(CliServe, TheLabelBudgetBoundsTheSeriesAndCountsTheRest) {
  testing::TempDir dir;
  const auto recipe =
      put(dir, "r.toml",
          "[recipe]\nname = \"budget\"\n[export]\nlabel_budget = 100\n"
          "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
          "[[stage]]\nuse = \"count\"\nby = [\"pid\", \"offset\"]\nkey_limit = 20000\n");
  const Served s = serve({recipe.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  (void)calls("lseek 5000");
  std::string text;
  for (int i = 0; i < 100; ++i) {
    text = http_get(s.port, "/metrics").value_or("");
    const auto d = sample(
        text,
        R"(tracer_export_label_sets_dropped{recipe="budget",metric="tracer_budget_count_total"})");
    if (d && *d >= 4900)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(series_count(text, "tracer_budget_count_total"), 100U) << text;
  EXPECT_GE(
      sample(
          text,
          R"(tracer_export_label_sets_dropped{recipe="budget",metric="tracer_budget_count_total"})")
          .value_or(0),
      4900)
      << text;
  const double rss0 = sample(text, "process_resident_memory_bytes").value_or(0);
  for (int round = 0; round < 4; ++round) {
    (void)calls("lseek 5000");
    text = http_get(s.port, "/metrics").value_or("");
  }
  // Past the limits the events are counted, in the kernel's map (map_full) or in the stage
  // (keys_dropped), whichever had no room first: never a key more.
  const double map_full =
      sample(text, R"(tracer_probe_lost_total{recipe="budget",probe="lseek",kind="map_full"})")
          .value_or(0);
  const double keys_dropped =
      sample(text, R"(tracer_stage_counter_total{recipe="budget",counter="count.keys_dropped"})")
          .value_or(0);
  EXPECT_GE(map_full + keys_dropped, 4900) << text;
  // 25,000 keys came; the map holds 20,000: the rest is counted, not silently dropped.
  text = http_get(s.port, "/metrics").value_or("");
  EXPECT_EQ(series_count(text, "tracer_budget_count_total"), 100U);
  const double rss1 = sample(text, "process_resident_memory_bytes").value_or(0);
  EXPECT_GT(rss0, 0);
  // ASan keeps freed memory in its quarantine (256 MiB by default): RSS says nothing there.
#if defined(__SANITIZE_ADDRESS__)
  constexpr double kGrowth = 512.0 * 1024 * 1024;
#else
  constexpr double kGrowth = 32.0 * 1024 * 1024;
#endif
  EXPECT_LT(rss1 - rss0, kGrowth) << rss0 << " -> " << rss1;
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

// The label budget keeps the largest series since the start, with and without `every` (the
// issue "boundaries", item 5): 490 processes making 1 call each come first, then 10 making 50
// each; a budget of 10 keeps exactly the ten 50s, and says how many label sets it left out.
TEST(CliServe, TheLabelBudgetKeepsTheLargestSeriesOnEveryPath) {
  testing::TempDir dir;
  // The test's own syscaller under a name of its own: system-wide, the other processes that
  // make the same calls (another test, another copy) are not counted.
  const std::string comm = fmt::format("lbudget{}", ::getpid() % 100000);
  const fs::path caller = dir.path() / comm;
  fs::copy_file(kSyscaller, caller);
  const auto recipe = [&](const std::string& name, const std::string& head,
                          const std::string& every) {
    return put(dir, name + ".toml",
               "[recipe]\nname = \"" + name + "\"\n" + head +
                   "[export]\nlabel_budget = 10\n"
                   "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
                   "filter = \"fd == 12345 && comm == \\\"" +
                   comm +
                   "\\\"\"\n"
                   "[[stage]]\nuse = \"count\"\nby = [\"pid\"]\n" +
                   every);
  };
  const auto every = recipe("every", "placement = \"user\"\n", "every = \"300ms\"\n");
  const auto kernel = recipe("kernel", "", "");
  const Served s = serve({every.string(), kernel.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  ASSERT_EQ(
      shell("for i in $(seq 490); do " + caller.string() + " lseek 1 >/dev/null; done").exit_code,
      0);
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // intervals end between them
  std::vector<std::string> big;
  for (int i = 0; i < 10; ++i) {
    const auto r = shell(caller.string() + " lseek 50 & echo $!; wait");
    big.push_back(r.out.substr(0, r.out.find_first_of(" \n")));
  }
  for (const std::string r : {"every", "kernel"}) {
    SCOPED_TRACE(r);
    const std::string last = "tracer_" + r + "_count_total{pid=\"" + big.back() + "\"}";
    const std::string text = scrape_until(s.port, last, 50);
    EXPECT_EQ(series_count(text, "tracer_" + r + "_count_total"), 10U) << text;
    for (const auto& pid : big)
      EXPECT_EQ(sample(text, "tracer_" + r + "_count_total{pid=\"" + pid + "\"}"), 50) << text;
    EXPECT_EQ(sample(text, "tracer_export_label_sets_dropped{recipe=\"" + r +
                               "\",metric=\"tracer_" + r + "_count_total\"}"),
              490)
        << text;
  }
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

// The endpoint is hostile input too: an oversized request, garbage and a method other than GET
// get their error answers, and /metrics still answers after them.
TEST(CliServe, TheEndpointRefusesWhatIsNotAScrapeAndGoesOn) {
  testing::TempDir dir;
  const auto recipe =
      put(dir, "r.toml",
          "[recipe]\nname = \"hostile\"\n[[probe]]\nname = \"lseek\"\n"
          "tracepoint = \"syscalls:sys_enter_lseek\"\n[[stage]]\nuse = \"count\"\n");
  const Served s = serve({recipe.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Big: " + std::string(20000, 'a') + "\r\n\r\n";
  EXPECT_THAT(raw_exchange(s.port, big), HasSubstr("400 Bad Request"));
  EXPECT_THAT(raw_exchange(s.port, "\x01\x02garbage\r\n\r\n"), HasSubstr("400 Bad Request"));
  EXPECT_THAT(raw_exchange(s.port,
                           "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n"
                           "Connection: close\r\n\r\nxx"),
              HasSubstr("405 Method Not Allowed"));
  EXPECT_THAT(raw_exchange(s.port, "GET /nope HTTP/1.1\r\nConnection: close\r\n\r\n"),
              HasSubstr("404 Not Found"));
  const auto text = http_get(s.port, "/metrics");
  ASSERT_TRUE(text.has_value());
  EXPECT_THAT(*text, HasSubstr("tracer_recipe_up{recipe=\"hostile\"} 1"));
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

/// A line of /proc/PID/status ("Uid:", "CapEff:"), its value.
std::string status_field(pid_t pid, const std::string& field) {
  std::istringstream in(slurp("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(field))
      return line.substr(line.find_first_not_of(" \t", field.size()));
  }
  return {};
}

// --user: once attached, tracer serve runs as that user with CAP_BPF, CAP_PERFMON,
// CAP_IPC_LOCK and CAP_SYS_RESOURCE alone (CAP_DAC_READ_SEARCH permitted, raised for a reload), and
// still counts, scrapes and reloads (a probe added then opens, its tracepoint's format read through
// tracefs); SIGTERM still cleans up.
TEST(CliServe, UserDropsRootAndKeepsWhatAReloadNeeds) {
  if (::getpwnam("nobody") == nullptr)
    GTEST_SKIP() << "no user 'nobody' on this machine";
  testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  const std::string head =
      "[recipe]\nname = \"asuser\"\n"
      "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n";
  const std::string tail = "[[stage]]\nuse = \"count\"\nby = [\"probe\", \"pid\"]\n";
  const auto recipe = put(dir, "r.toml", head + tail);
  const Served s = serve({"--user", "nobody", recipe.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  const std::string uid = status_field(s.pid, "Uid:");
  EXPECT_EQ(uid.substr(0, uid.find_first_of(" \t")), std::to_string(::getpwnam("nobody")->pw_uid));
  // CAP_DAC_READ_SEARCH 2, CAP_IPC_LOCK 14, CAP_SYS_RESOURCE 24, CAP_PERFMON 38, CAP_BPF 39:
  // those this (root) process has (a container may lack some).
  const std::uint64_t want =
      ((1ULL << 2) | (1ULL << 14) | (1ULL << 24) | (1ULL << 38) | (1ULL << 39)) &
      std::stoull(status_field(::getpid(), "CapPrm:"), nullptr, 16);
  // CAP_DAC_READ_SEARCH is raised only while a reload reads tracefs.
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapEff:"), nullptr, 16), want & ~(1ULL << 2));
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapPrm:"), nullptr, 16), want);
  EXPECT_THAT(slurp(s.err), HasSubstr("msg=\"running as an unprivileged user\" user=nobody"));

  const std::string a = calls("lseek 800");
  const std::string series = R"(tracer_asuser_count_total{probe="lseek",pid=")" + a + "\"}";
  EXPECT_EQ(sample(scrape_until(s.port, series, 800), series), 800);
  std::ofstream(recipe, std::ios::trunc)
      << head << "[[probe]]\nname = \"getppid\"\ntracepoint = \"syscalls:sys_enter_getppid\"\n"
      << tail;
  ::kill(s.pid, SIGHUP);
  ASSERT_TRUE(testing::wait_for_text(s.err, "msg=reloaded")) << slurp(s.err);
  const std::string b = calls("getppid 300");
  const std::string added = R"(tracer_asuser_count_total{probe="getppid",pid=")" + b + "\"}";
  const std::string text = scrape_until(s.port, added, 300);
  EXPECT_EQ(sample(text, added), 300) << slurp(s.err);
  EXPECT_EQ(sample(text, series), 800);
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

/// Waits until `file` holds `text` `n` times (a log line per reload), at most 30 s.
bool wait_for_times(const fs::path& file, const std::string& text, std::size_t n) {
  for (int i = 0; i < 300; ++i) {
    const std::string log = slurp(file);
    std::size_t seen = 0;
    for (auto at = log.find(text); at != std::string::npos; at = log.find(text, at + 1))
      ++seen;
    if (seen >= n)
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

// The escalation of the issue, tried by the user tracer serve drops to: it owns the process (it
// may send SIGHUP) and can change files of its own. A recipe made theirs, or a plugin of theirs
// named by root's recipe: each reload is refused and said, no code of theirs runs (the plugin's
// constructor would leave a mark), and the run goes on as it was; a reload of root's own files
// still applies. A [bpf] source of theirs is refused at the start. The process keeps no capability
// beyond the kept set, not even in its bounding set, has NoNewPrivs, and CAP_DAC_READ_SEARCH is not
// effective.
TEST(CliServe, TheUserItDropsToCannotTurnItsReloads) {
  const passwd* pw = ::getpwnam("nobody");
  if (pw == nullptr)
    GTEST_SKIP() << "no user 'nobody' on this machine";
  const uid_t nobody = pw->pw_uid;
  testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  // Theirs: a directory and a plugin whose constructor leaves a mark, a BPF source.
  dir.mkdir("theirs");
  const fs::path theirs = dir.path() / "theirs", marker = theirs / "marker";
  fs::copy_file(fs::path(TRACER_PLUGIN_DIR) / "libtracer_hostile_marker.so", theirs / "lib.so");
  fs::copy_file(fs::path(TRACER_CONFIGS_DIR) / "opens.bpf.c", theirs / "opens.bpf.c");
  for (const auto& f : {theirs, theirs / "lib.so", theirs / "opens.bpf.c"})
    ASSERT_EQ(::chown(f.c_str(), nobody, static_cast<gid_t>(-1)), 0);
  const std::string head =
      "[recipe]\nname = \"turn\"\n"
      "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n";
  const std::string count = "[[stage]]\nuse = \"count\"\nby = [\"probe\", \"pid\"]\n";
  const std::string plugin = "[[stage]]\nplugin = \"" + (theirs / "lib.so").string() + "\"\n";
  const auto recipe = put(dir, "r.toml", head + count);
  ::setenv("TRACER_HOSTILE_MARKER", marker.c_str(), 1);
  const Served s = serve({"--user", "nobody", recipe.string()}, dir.path() / "serve.err");
  ::unsetenv("TRACER_HOSTILE_MARKER");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");

  // What it kept: the kept set (those root has) permitted and bounding, DAC_READ_SEARCH (bit 2)
  // not effective; NoNewPrivs.
  const std::uint64_t kept =
      ((1ULL << 2) | (1ULL << 14) | (1ULL << 24) | (1ULL << 38) | (1ULL << 39)) &
      std::stoull(status_field(::getpid(), "CapPrm:"), nullptr, 16);
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapPrm:"), nullptr, 16), kept);
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapEff:"), nullptr, 16), kept & ~(1ULL << 2));
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapBnd:"), nullptr, 16) & ~kept, 0u)
      << status_field(s.pid, "CapBnd:");
  EXPECT_EQ(status_field(s.pid, "NoNewPrivs:"), "1");

  const std::string a = calls("lseek 400");
  const std::string series = R"(tracer_turn_count_total{probe="lseek",pid=")" + a + "\"}";
  EXPECT_EQ(sample(scrape_until(s.port, series, 400), series), 400);
  // 1. The recipe is theirs: they append their plugin and send the SIGHUP themselves, as
  // nobody (setpriv), as a user who owns the dropped process can.
  ASSERT_EQ(::chown(recipe.c_str(), nobody, static_cast<gid_t>(-1)), 0);
  std::ofstream(theirs / "stage.toml") << plugin;
  const std::string as_them = "setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c 'cat " +
                              (theirs / "stage.toml").string() + " >> " + recipe.string() +
                              " && kill -HUP " + std::to_string(s.pid) + "'";
  ASSERT_EQ(std::system(as_them.c_str()), 0) << as_them;
  ASSERT_THAT(slurp(recipe), HasSubstr("plugin = "));
  ASSERT_TRUE(wait_for_times(s.err, "msg=\"reload refused", 1)) << slurp(s.err);
  EXPECT_THAT(slurp(s.err), HasSubstr("belongs to nobody"));
  // 2. Root's recipe naming their plugin.
  ASSERT_EQ(::chown(recipe.c_str(), 0, static_cast<gid_t>(-1)), 0);
  ::kill(s.pid, SIGHUP);
  ASSERT_TRUE(wait_for_times(s.err, "msg=\"reload refused", 2)) << slurp(s.err);
  // 3. Their BPF source ([bpf] cannot change on a reload: its programs are loaded; so at a
  // start, which reads it as root).
  const auto bpf = put(dir, "bpf.toml",
                       head + count +
                           "[[probe]]\nname = \"openat\"\ntracepoint = "
                           "\"syscalls:sys_enter_openat\"\ncounting = true\nbpf = \"opens\"\n"
                           "[bpf]\nsource = \"" +
                           (theirs / "opens.bpf.c").string() +
                           "\"\noutput = \"events\"\nstruct = \"open_event\"\ntime = \"ts\"\n");
  const auto started =
      testing::run_tracer("serve --listen 127.0.0.1:0 --user nobody " + bpf.string());
  EXPECT_EQ(started.exit_code, 2) << started.err;
  EXPECT_THAT(started.err, HasSubstr("bpf source: refused"));
  EXPECT_THAT(started.err, HasSubstr("bpf.toml:15:10: bpf source: refused"));
  EXPECT_THAT(started.err, HasSubstr("theirs belongs to nobody"));
  EXPECT_FALSE(fs::exists(marker)) << "their plugin's code ran in tracer serve";

  // Root's own change still applies, the unchanged probe keeps counting.
  std::ofstream(recipe, std::ios::trunc)
      << head << "[[probe]]\nname = \"getppid\"\ntracepoint = \"syscalls:sys_enter_getppid\"\n"
      << count;
  ::kill(s.pid, SIGHUP);
  ASSERT_TRUE(testing::wait_for_text(s.err, "msg=reloaded")) << slurp(s.err);
  const std::string b = calls("getppid 300");
  const std::string added = R"(tracer_turn_count_total{probe="getppid",pid=")" + b + "\"}";
  const std::string text = scrape_until(s.port, added, 300);
  EXPECT_EQ(sample(text, added), 300) << slurp(s.err);
  EXPECT_EQ(sample(text, series), 400);
  EXPECT_EQ(sample(text, R"(tracer_reloads_total{result="refused"})"), 2);
  EXPECT_EQ(sample(text, R"(tracer_reloads_total{result="ok"})"), 1);
  EXPECT_EQ(std::stoull(status_field(s.pid, "CapEff:"), nullptr, 16), kept & ~(1ULL << 2))
      << "the reload's tracefs access is given back";
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
}

// Slow and silent scrapers while tracer serve runs: 100 connections from 127.0.0.2 holding
// half-sent requests do not keep a scrape from 127.0.0.1 out, and SIGTERM ends serve within
// 0.5 s with all of them open.
TEST(CliServe, SlowClientsNeitherKeepAScraperOutNorHoldTheStop) {
  testing::TempDir dir;
  const auto recipe = put(dir, "r.toml",
                          "[recipe]\nname = \"slow\"\n[[probe]]\nname = \"lseek\"\n"
                          "tracepoint = \"syscalls:sys_enter_lseek\"\n"
                          "[[stage]]\nuse = \"count\"\nby = [\"pid\"]\n");
  const Served s = serve({recipe.string()}, dir.path() / "serve.err");
  ASSERT_GT(s.pid, 0) << slurp(dir.path() / "serve.err");
  std::vector<int> held;
  const std::string half = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
  for (int i = 0; i < 100; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in from{}, to{};
    from.sin_family = to.sin_family = AF_INET;
    ::inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
    to.sin_port = htons(s.port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0 &&
        ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0)
      (void)::send(fd, half.data(), half.size(), MSG_NOSIGNAL);
    held.push_back(fd);
  }
  const std::string a = calls("lseek 250");
  for (int i = 0; i < 10; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto text = http_get(s.port, "/metrics");
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(text.has_value());
    EXPECT_LT(took, 1.0);
  }
  EXPECT_EQ(sample(scrape_until(s.port, "tracer_slow_count_total{pid=\"" + a + "\"}", 250),
                   "tracer_slow_count_total{pid=\"" + a + "\"}"),
            250);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(s.pid, SIGTERM);
  EXPECT_TRUE(exited_ok(s.pid)) << slurp(s.err);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.5);
  for (int fd : held)
    ::close(fd);
}

}  // namespace
}  // namespace tracer
