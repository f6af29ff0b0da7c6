// Plugins as an adversary: a library another user can change is never loaded (not through a
// relative path the loader searches, not through a link flipped between the check and the
// load); a plugin that throws in a setup call is a recipe error at its stage; one that hangs or
// crawls in any call (its constructor, create, on_events) cannot hold a check, a run's stop or
// its duration past its budget; one that crashes or hangs while loading is one line of
// `tracer list stages`. The hostile plugins are tests/plugins/hostile_plugin.cpp's variants.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <variant>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::slurp;

fs::path built(const std::string& name) {
  return fs::path(TRACER_PLUGIN_DIR) / ("lib" + name + ".so");
}

/// A recipe of lseek calls (the syscaller's fd 12345) with the plugin `so` counting them by
/// pid in one pipeline, and the built-in count by pid in another.
std::string trust_recipe_text(const std::string& so, const std::string& extra = "") {
  return "[recipe]\nname = \"trust\"\n"
         "[[probe]]\nname = \"lseek\"\ntracepoint = \"syscalls:sys_enter_lseek\"\n"
         "filter = \"fd == 12345\"\n"
         "[[pipeline]]\nname = \"plugin\"\n[[pipeline.stage]]\nplugin = \"" +
         so + "\"\n" + extra +
         "[[pipeline]]\nname = \"builtin\"\n[[pipeline.stage]]\nuse = \"count\"\n"
         "by = [\"pid\"]\n";
}

uid_t nobody() {
  const passwd* pw = ::getpwnam("nobody");
  return pw != nullptr ? pw->pw_uid : 0;
}

class PluginTrust : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0 || nobody() == 0)
      GTEST_SKIP() << "needs root and the user nobody (files another user owns)";
  }
  testing::TempDir dir_;
};

/// Seconds since `t0`.
double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// A Session on a host's own io_context for the recipe at `recipe`, its command the syscaller
/// making `calls` lseeks.
struct Hosted {
  Hosted(const fs::path& recipe, const std::string& calls)
      : r(Recipe::load(recipe, {.stages = stage_catalog()})),
        out(Sink::to_string(&text)),
        session(io.get_executor(),
                r,
                out,
                {.target = {.kind = Target::Kind::kCommand,
                            .command = {TRACER_SYSCALLER_PATH, "lseek", calls}}}) {}
  Recipe r;
  std::string text;
  Sink out;
  boost::asio::io_context io{1};
  Session session;
};

// docs/plugins.md's form: `tracer check even.toml` with plugin = "./lib.so" is the recipe's
// lib.so, from any current directory, never a file LD_LIBRARY_PATH or ld.so.cache picks (here:
// another user's world-writable lib.so whose constructor leaves a mark).
TEST_F(PluginTrust, ARelativePathIsTheRecipesDirectoryNeverALoaderSearch) {
  dir_.mkdir("recipes");
  dir_.mkdir("evil");
  const fs::path recipes = dir_.path() / "recipes", evil = dir_.path() / "evil";
  fs::copy_file(built("tracer_plugin_sum_by"), recipes / "lib.so");
  fs::copy_file(built("tracer_hostile_marker"), evil / "lib.so");
  ASSERT_EQ(::chown(evil.c_str(), nobody(), static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chown((evil / "lib.so").c_str(), nobody(), static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chmod((evil / "lib.so").c_str(), 0666), 0);
  dir_.write("recipes/even.toml", trust_recipe_text("./lib.so", "value = \"offset\"\n"));
  const fs::path marker = dir_.path() / "marker";
  const std::string env =
      "LD_LIBRARY_PATH=" + evil.string() + " TRACER_HOSTILE_MARKER=" + marker.string() + " ";
  for (const auto& [cwd, name] : {std::pair{recipes, std::string("even.toml")},
                                  std::pair{dir_.path(), std::string("recipes/even.toml")},
                                  std::pair{evil, std::string("../recipes/even.toml")}}) {
    SCOPED_TRACE(cwd.string() + " " + name);
    const auto r =
        testing::shell("cd " + cwd.string() + " && " + env + TRACER_CLI_PATH + " check " + name);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_FALSE(fs::exists(marker)) << "the other user's library was loaded";
  }
  // Their library named directly is refused before any of its code runs.
  dir_.write("recipes/theirs.toml", trust_recipe_text((evil / "lib.so").string()));
  const auto r =
      testing::shell(env + TRACER_CLI_PATH + " check " + (recipes / "theirs.toml").string());
  EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
  EXPECT_NE(r.err.find("plugin: refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("belongs to nobody"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("theirs.toml:10:"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(marker));
}

// A link in a directory another user controls, flipped between root's plugin and theirs as fast
// as it goes while the recipe loads 300 times: root's loads, theirs is refused, and the code of
// theirs never runs (the file checked is the file loaded: one open, then /proc/self/fd/N).
TEST_F(PluginTrust, ALinkFlippedBetweenRootsPluginAndAnotherUsersNeverLoadsTheirs) {
  dir_.mkdir("root");
  dir_.mkdir("theirs");
  const fs::path root = dir_.path() / "root", theirs = dir_.path() / "theirs";
  fs::copy_file(built("tracer_plugin_sum_by"), root / "good.so");
  fs::copy_file(built("tracer_hostile_marker"), theirs / "evil.so");
  ASSERT_EQ(::chown(theirs.c_str(), nobody(), static_cast<gid_t>(-1)), 0);
  ASSERT_EQ(::chown((theirs / "evil.so").c_str(), nobody(), static_cast<gid_t>(-1)), 0);
  const fs::path link = theirs / "link.so";
  fs::create_symlink(root / "good.so", link);
  const fs::path marker = dir_.path() / "marker";
  ::setenv("TRACER_HOSTILE_MARKER", marker.c_str(), 1);
  dir_.write("r.toml", trust_recipe_text(link.string(), "value = \"offset\"\n"));

  std::atomic<bool> done{false};
  std::thread flipper([&] {
    bool evil = true;
    const fs::path tmp = theirs / "tmp.so";
    while (!done.load()) {
      std::error_code ec;
      fs::remove(tmp, ec);
      fs::create_symlink(evil ? theirs / "evil.so" : root / "good.so", tmp, ec);
      fs::rename(tmp, link, ec);  // atomic: the link is always one or the other
      evil = !evil;
    }
  });
  int loaded = 0, refused = 0, other = 0;
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  for (int i = 0; i < 300; ++i) {
    try {
      Recipe r = Recipe::load(dir_.path() / "r.toml", {.stages = stage_catalog()});
      const Session session(io.get_executor(), r, out);  // its stages configured: loaded
      ++loaded;
    } catch (const Error& e) {
      const std::string what = e.what();
      if (what.find("plugin: refused") != std::string::npos &&
          what.find("belongs to nobody") != std::string::npos)
        ++refused;
      else
        ++other;
    }
  }
  done = true;
  flipper.join();
  ::unsetenv("TRACER_HOSTILE_MARKER");
  EXPECT_FALSE(fs::exists(marker)) << "their constructor ran as root";
  EXPECT_GT(loaded, 0) << refused << " refused, " << other << " other";
  EXPECT_GT(refused, 0) << loaded << " loaded, " << other << " other";
  EXPECT_EQ(loaded + refused + other, 300);
  EXPECT_LE(other, 3) << "a link replaced mid-walk may be missing for an instant, nothing else";
}

// One plugin after another in one process (a serve's reloads): each is the file its recipe
// names. A C++ plugin is never unloaded, and the loader returns the object it has for a name it
// knows: had both been loaded as /proc/self/fd/N through the same N, the second recipe would
// have run the first plugin (the hostile one is such a C++ object: NODELETE through its
// STB_GNU_UNIQUE symbol). The table a plugin makes carries its descriptor's name.
TEST_F(PluginTrust, EachLoadIsTheFileItsRecipeNamesNotAnEarlierOne) {
  for (const auto& [variant, name] :
       {std::pair{std::string("tracer_hostile_marker"), std::string("hostile")},
        std::pair{std::string("tracer_plugin_sum_by"), std::string("sum_by")},
        std::pair{std::string("tracer_hostile_marker"), std::string("hostile")}}) {
    SCOPED_TRACE(variant);
    dir_.write("r.toml", trust_recipe_text(built(variant).string(),
                                           name == "sum_by" ? "value = \"offset\"\n" : ""));
    Hosted h(dir_.path() / "r.toml", "10");
    auto& io = h.io;
    auto& session = h.session;
    const std::string& text = h.text;
    std::string stage;
    session.on_table([&](const TableUpdate& u) {
      if (u.pipeline == 0)
        stage = u.table.stage;
    });
    session.on_done([&] { io.stop(); });
    session.start();
    io.run_for(std::chrono::seconds(30));
    EXPECT_EQ(stage, name) << text;
  }
}

/// The error a recipe with the plugin `so` gets from load or the session's start.
Error setup_error(const fs::path& recipe) {
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  try {
    Recipe r = Recipe::load(recipe, {.stages = stage_catalog()});
    Session session(io.get_executor(), r, out);
    session.start();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << recipe << ": no error";
  return {ErrorCategory::kRuntime, {}, "none"};
}

// An exception out of fields or columns (setup calls) is a recipe error at the stage (the
// pipeline's stage table, line 8), before anything attaches.
TEST_F(PluginTrust, ASetupCallThatThrowsIsARecipeErrorAtTheStage) {
  for (const std::string call : {"fields", "columns"}) {
    SCOPED_TRACE(call);
    dir_.write("r.toml", trust_recipe_text(built("tracer_hostile_" + call + "_throw").string()));
    const Error e = setup_error(dir_.path() / "r.toml");
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
    EXPECT_NE(std::string(e.what()).find("an exception crossed the boundary in " + call),
              std::string::npos)
        << e.what();
    ASSERT_TRUE(e.where().has_value()) << e.what();
    EXPECT_EQ(e.where()->line, 9u) << e.what();
  }
}

// A constructor that never returns (met in the child process that loads a plugin first, 2 s) or a
// create that never returns (its budget, 250 ms): `tracer check` says so, exit 2, instead of
// hanging: within the budget, past the time the same check takes with a plugin that behaves
// (measured in the same run: an ASan build's check took 2 s beside the suite's load).
TEST_F(PluginTrust, ALoadOrCreateThatNeverReturnsIsAnErrorWithinItsBudget) {
  dir_.write("good.toml",
             trust_recipe_text(built("tracer_plugin_sum_by").string(), "value = \"offset\"\n"));
  const auto g0 = Clock::now();
  const auto good = testing::run_tracer("check " + (dir_.path() / "good.toml").string());
  const double reference = since(g0);
  ASSERT_EQ(good.exit_code, 0) << good.out << good.err;
  for (const auto& [variant, says] :
       {std::pair{std::string("hang_load"), std::string("loading it did not finish within 2 s")},
        std::pair{std::string("hang_create"),
                  std::string("create ran past its budget of 250 ms")}}) {
    SCOPED_TRACE(variant);
    dir_.write("r.toml", trust_recipe_text(built("tracer_hostile_" + variant).string()));
    const auto t0 = Clock::now();
    const auto r = testing::run_tracer("check " + (dir_.path() / "r.toml").string());
    const double took = since(t0);
    EXPECT_EQ(r.exit_code, 2) << r.out << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
    EXPECT_LT(took, reference + 2.0 + 1.0)
        << "check took " << took << " s, " << reference << " s with a plugin that behaves";
  }
}

/// `tracer run` of `recipe` system-wide (extra args after it), stdout/stderr into the temp dir;
/// returns its pid once it traces.
pid_t start_run(const testing::TempDir& dir,
                const fs::path& recipe,
                std::vector<std::string> extra) {
  std::vector<std::string> args{"run", recipe.string()};
  args.insert(args.end(), extra.begin(), extra.end());
  return testing::spawn_tracer_ready(args, dir.path() / "out", dir.path() / "err");
}

/// Waits for `pid`; its exit code (-1 for a signal) and how long the wait took.
std::pair<int, double> reap(pid_t pid) {
  const auto t0 = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, since(t0)};
}

// A plugin stuck in on_events for good (from its 100th event): the stage turns off at its
// budget, the other pipeline counts every call, and SIGTERM ends the run within 1 s (0.25 s of
// budget and the stop itself) with exit 1 saying what happened.
TEST_F(PluginTrust, APluginStuckInACallCannotHoldTheStop) {
  dir_.write("r.toml", trust_recipe_text(built("tracer_hostile_hang_events").string()));
  const pid_t pid = start_run(dir_, dir_.path() / "r.toml", {});
  ASSERT_GT(pid, 0) << slurp(dir_.path() / "err");
  const std::string caller = testing::run_syscaller("lseek 1000");
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // drained; the plugin stuck
  const auto t0 = Clock::now();
  ::kill(pid, SIGTERM);
  const auto [code, waited] = reap(pid);
  const double took = since(t0);
  const std::string err = slurp(dir_.path() / "err"), out = slurp(dir_.path() / "out");
  EXPECT_EQ(code, 1) << err;
  EXPECT_LT(took, 1.0) << "the stop took " << took << " s";
  EXPECT_NE(err.find("on_events ran past its budget of 250 ms"), std::string::npos) << err;
  EXPECT_NE(err.find("thread abandoned"), std::string::npos) << err;
  // The built-in pipeline beside it: every call of the syscaller.
  EXPECT_TRUE(std::regex_search(out, std::regex("\\b" + caller + "\\s+1000\\b"))) << out;
  (void)waited;
}

// The same plugin in a Session on an embedding host's own io_context: the host's executor waits
// for it once, for its budget (250 ms; the original fault held it for good). A timer of the
// host's, every 10 ms, keeps its pace but for that wait and the stop's; the session ends by
// itself once its command has exited, with the built-in pipeline's every call and the plugin's
// error out of the host's run, stop() returns at once, and the host's timer goes on.
TEST_F(PluginTrust, AStuckPluginNeverHoldsTheHostsExecutor) {
  dir_.write("r.toml", trust_recipe_text(built("tracer_hostile_hang_events").string()));
  Hosted h(dir_.path() / "r.toml", "1000");
  auto& io = h.io;
  auto& session = h.session;
  const std::string& text = h.text;
  std::optional<std::uint64_t> builtin;
  session.on_table([&](const TableUpdate& u) {
    if (u.pipeline == 1 && u.final && !u.table.rows.empty())
      if (const auto* n = std::get_if<std::uint64_t>(&u.table.rows.front().values.back()))
        builtin = *n;
  });
  bool done = false;
  session.on_done([&] { done = true; });
  boost::asio::steady_timer tick(io);
  auto last = Clock::now();
  double worst = 0;
  int ticks = 0;
  std::function<void()> arm = [&] {
    tick.expires_after(std::chrono::milliseconds(10));
    tick.async_wait([&](const boost::system::error_code& ec) {
      if (ec)
        return;
      const double gap = since(last);
      worst = std::max(worst, gap);
      last = Clock::now();
      ++ticks;
      arm();
    });
  };
  session.start();
  last = Clock::now();
  arm();
  // The session's own end (its command exited) stops the pipelines; the plugin stage's stop
  // throws its timeout out of the host's run, as any handler's error does.
  std::string error;
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (!done && Clock::now() < deadline) {
    try {
      io.run_one_for(std::chrono::milliseconds(100));
    } catch (const Error& e) {
      error = e.what();
    }
  }
  ASSERT_TRUE(done) << "the session did not end after its command: " << text;
  const auto t0 = Clock::now();
  session.stop();
  EXPECT_LT(since(t0), 0.5);
  io.run_for(std::chrono::milliseconds(200));  // the host goes on
  tick.cancel();
  EXPECT_GT(ticks, 10);
  // The longest wait: the budget's, or the stop's own closes (the kernel's grace periods, about
  // 35 ms per tracepoint, one after another).
  EXPECT_LT(worst, 0.25 + 0.35) << "the host's executor was held " << worst << " s";
  EXPECT_EQ(builtin, 1000u) << text;
  EXPECT_NE(error.find("on_events ran past its budget of 250 ms"), std::string::npos) << error;
  EXPECT_GE(abandoned_plugin_threads(), 1);
}

// A plugin taking 100 ms per event cannot stretch `-d 2s`: its first batch over budget turns it
// off (the events it misses counted) and the run ends on time.
TEST_F(PluginTrust, ASlowPluginCannotStretchADuration) {
  dir_.write("r.toml", trust_recipe_text(built("tracer_hostile_slow").string()));
  const auto t0 = Clock::now();
  const pid_t pid = start_run(dir_, dir_.path() / "r.toml", {"-d", "2s"});
  ASSERT_GT(pid, 0) << slurp(dir_.path() / "err");
  const double started = since(t0);
  const std::string caller = testing::run_syscaller("lseek 500");
  const auto [code, waited] = reap(pid);
  const double took = since(t0) - started;
  const std::string err = slurp(dir_.path() / "err"), out = slurp(dir_.path() / "out");
  EXPECT_EQ(code, 1) << err;
  EXPECT_LT(took, 2.0 + 1.0) << "-d 2s took " << took << " s from ready";
  EXPECT_NE(err.find("ran past its budget"), std::string::npos) << err;
  EXPECT_TRUE(std::regex_search(out, std::regex("\\b" + caller + "\\s+500\\b"))) << out;
  (void)waited;
}

// `tracer list stages` describes each plugin of TRACER_PLUGIN_PATH in a child process: one
// that crashes or hangs while loading is one line of error, the others are listed, exit 0.
TEST_F(PluginTrust, ListingStagesSurvivesAPluginThatCrashesOrHangs) {
  dir_.mkdir("plugins");
  const fs::path plugins = dir_.path() / "plugins";
  fs::copy_file(built("tracer_hostile_crash_load"), plugins / "libcrash.so");
  fs::copy_file(built("tracer_hostile_hang_load"), plugins / "libhang.so");
  fs::copy_file(built("tracer_plugin_sum_by"), plugins / "libsum.so");
  const auto t0 = Clock::now();
  const auto r = testing::shell("TRACER_PLUGIN_PATH=" + plugins.string() + " " + TRACER_CLI_PATH +
                                " list stages");
  const double took = since(t0);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("sum_by"), std::string::npos) << r.out;
  // (SIGSEGV; a sanitizer's handler makes it an abort)
  EXPECT_TRUE(std::regex_search(r.out, std::regex("libcrash.so cannot be loaded: loading it "
                                                  "crashed \\((Segmentation fault|Aborted)\\)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("libhang.so cannot be loaded: loading it did "
                                                  "not finish within 2 s")))
      << r.out;
  EXPECT_LT(took, 6.0);
}

}  // namespace
}  // namespace tracer
