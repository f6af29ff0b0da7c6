// Out-of-tree stages (tracer/plugin.h): the example plugin (examples/plugin/sum_by.cpp) loaded
// from a recipe gives the built-in sum's table on the same live workload; plugins that break the
// ABI's rules are recipe errors at their position, and one that fails or throws while running is
// counted while the host and the other pipelines run on.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "support/scratch_path.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

std::string plugin(const std::string& variant) {
  return std::string(TRACER_PLUGIN_DIR) + "/libtracer_plugin_" + variant + ".so";
}

/// Two pipelines over the workload's lseek calls (fd 12345, offsets 0..2999, 2 children): the
/// plugin's sum of offset by pid, and the built-in `sum` by pid. The ring holds all 6,000 calls
/// should tracer not be scheduled while they come (busy CPUs).
std::string recipe_text(const std::string& so) {
  return R"([recipe]
name = "plugin"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
ring = "1MiB"
[[pipeline]]
name = "plugin"
[[pipeline.stage]]
plugin = ")" +
         so + R"("
key = "pid"
value = "offset"
[[pipeline]]
name = "builtin"
[[pipeline.stage]]
use = "sum"
field = "offset"
by = ["pid"]
)";
}

struct PluginRun {
  std::map<std::int64_t, std::pair<std::uint64_t, std::int64_t>> plugin;  // pid -> count, sum
  std::map<std::int64_t, std::int64_t> builtin;                           // pid -> sum
  std::map<std::string, std::uint64_t> counters;
  std::string text;
};

std::int64_t as_int(const Cell& c) {
  if (const auto* i = std::get_if<std::int64_t>(&c))
    return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&c))
    return static_cast<std::int64_t>(*u);
  ADD_FAILURE() << "not an integer";
  return 0;
}

PluginRun run_workload(const std::string& so) {
  const fs::path path =
      tracer::testing::scratch_path("plugin_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << recipe_text(so);
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  PluginRun r;
  Sink out = Sink::to_string(&r.text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = {.kind = Target::Kind::kCommand,
                              .command = {TRACER_ORACLE_WORKLOAD, "tree", "2", "3000"}}});
  session.on_table([&](const TableUpdate& u) {
    for (const auto& row : u.table.rows) {
      if (u.pipeline == 0) {
        r.plugin[as_int(row.keys.at(0))] = {static_cast<std::uint64_t>(as_int(row.values.at(0))),
                                            as_int(row.values.at(1))};
      } else {
        r.builtin[as_int(row.keys.at(0))] = as_int(row.values.at(0));
      }
    }
  });
  session.on_done([&] { io.stop(); });
  session.start();
  io.run_for(std::chrono::seconds(30));
  EXPECT_FALSE(session.running());
  EXPECT_EQ(session.stats().engine.lost(), 0u);
  for (const auto& [name, value] : session.stats().counters)
    r.counters[name] = value;
  return r;
}

TEST(PluginStage, TheExampleGivesTheBuiltinSumsTableOnTheSameWorkload) {
  const PluginRun r = run_workload(plugin("sum_by"));
  ASSERT_EQ(r.plugin.size(), 2u) << r.text;  // one row per child
  ASSERT_EQ(r.builtin.size(), 2u) << r.text;
  for (const auto& [pid, cs] : r.plugin) {
    EXPECT_EQ(cs.first, 3000u) << "pid " << pid;
    EXPECT_EQ(cs.second, 2999 * 3000 / 2) << "pid " << pid;  // 0 + 1 + ... + 2999
    EXPECT_EQ(r.builtin.at(pid), cs.second);
  }
  EXPECT_EQ(r.counters.at("plugin.failures"), 0u);
  EXPECT_EQ(r.counters.at("plugin.exceptions"), 0u);
  // The table's own output printed it too, under the plugin's column names.
  EXPECT_NE(r.text.find("sum_by"), std::string::npos) << r.text;
}

// A plugin that throws across the boundary: caught, counted, the stage gets no more events, and
// the other pipeline's numbers are exact.
TEST(PluginStage, AnExceptionAcrossTheBoundaryIsCountedAndTheHostRunsOn) {
  const PluginRun r = run_workload(plugin("throws"));
  ASSERT_EQ(r.builtin.size(), 2u) << r.text;
  for (const auto& [pid, sum] : r.builtin)
    EXPECT_EQ(sum, 2999 * 3000 / 2) << "pid " << pid;
  EXPECT_EQ(r.counters.at("plugin.exceptions"), 1u);
  EXPECT_GT(r.counters.at("plugin.missed"), 0u);
  EXPECT_NE(r.text.find("an exception crossed the plugin boundary"), std::string::npos) << r.text;
}

// A plugin call that fails with its error code: counted, with the plugin's reason in the table's
// note, and it keeps getting events.
TEST(PluginStage, AFailedCallIsCountedWithThePluginsReason) {
  const PluginRun r = run_workload(plugin("fails"));
  EXPECT_EQ(r.counters.at("plugin.failures"), 1u);
  EXPECT_EQ(r.counters.at("plugin.exceptions"), 0u);
  std::uint64_t events = 0;
  for (const auto& [pid, cs] : r.plugin)
    events += cs.first;
  EXPECT_EQ(events, 6000u) << "it was given every event after its failed call too";
  EXPECT_NE(r.text.find("the test plugin fails at its 100th event"), std::string::npos) << r.text;
}

/// The error a recipe naming `so` gets (at load or when the session is made).
Error plugin_error(const std::string& so, const std::string& extra = "") {
  const fs::path path =
      tracer::testing::scratch_path("plugin_bad_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[recipe]\nname = \"bad\"\n[[probe]]\nname = \"lseek\"\ntracepoint = "
                         "\"syscalls:sys_enter_lseek\"\n[[stage]]\nplugin = \""
                      << so << "\"\nvalue = \"offset\"\n"
                      << extra;
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  try {
    Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
    Session session(io.get_executor(), recipe, out);
    session.start();
  } catch (const Error& e) {
    fs::remove(path);
    return e;
  }
  fs::remove(path);
  ADD_FAILURE() << so << ": no error";
  return {ErrorCategory::kRuntime, {}, "none"};
}

TEST(PluginStage, ABrokenPluginIsARecipeErrorAtItsPosition) {
  struct Case {
    std::string so, extra, says;
  };
  const fs::path text_file = tracer::testing::scratch_path("tracer_not_a_plugin.so");
  std::ofstream(text_file) << "not an ELF object\n";
  fs::permissions(text_file, fs::perms::owner_read | fs::perms::owner_write);
  for (const Case& c : {
           Case{plugin("bad_abi"), "", "built for the plugin ABI 99.0; this tracer speaks 1.0"},
           Case{plugin("no_entry"), "", "has no entry point 'tracer_plugin_entry'"},
           Case{plugin("small_size"), "",
                "its descriptor's size is 24 bytes, and tracer needs at least "},
           Case{plugin("no_events"), "", "its descriptor has no on_events (every stage needs"},
           Case{plugin("sum_by"), "colour = \"blue\"\n",
                "refused its options: sum_by takes the options key and value"},
           Case{"/nonexistent/libnothing.so", "", "no plugin '/nonexistent/libnothing.so'"},
           Case{text_file.string(), "", "cannot load plugin"},
       }) {
    SCOPED_TRACE(c.so);
    const Error e = plugin_error(c.so, c.extra);
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
    EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    ASSERT_TRUE(e.where().has_value());
    EXPECT_EQ(e.where()->line, c.says.starts_with("refused") ? 6u : 7u) << e.what();
  }
  fs::remove(text_file);
}

// tracer runs as root: a library others can write is refused before it is loaded.
TEST(PluginStage, APluginOthersCanWriteIsRefused) {
  const fs::path dir = tracer::testing::scratch_path("tracer_plugin_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path copy = dir / "libwritable.so";
  fs::copy_file(plugin("sum_by"), copy, fs::copy_options::overwrite_existing);
  fs::permissions(copy, fs::perms::others_write, fs::perm_options::add);
  const Error e = plugin_error(copy.string());
  EXPECT_NE(std::string(e.what()).find("is writable by every user"), std::string::npos) << e.what();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tracer
