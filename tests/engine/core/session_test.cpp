// Session: a recipe run by the library alone on the caller's io_context (no CLI code).
#include "tracer/session.hpp"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <regex>

namespace tracer {
namespace {

namespace fs = std::filesystem;

fs::path write_recipe(const std::string& name, const std::string& text) {
  const fs::path p =
      fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(p) << text;
  return p;
}

// A command's exact getppid calls, counted by a recipe's count stage, through a Session on an
// io_context the test owns; the session ends by itself when the command exits.
/// Runs the count-by-comm recipe on a command making 4321 getppid calls through a Session on
/// this thread's io_context, with the stages placed as `placement` says.
void run_count_on_callers_io_context(Placement placement) {
  const auto path = write_recipe("session_count", R"([recipe]
name = "session-count"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
by = ["comm"]
)");
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = {.kind = Target::Kind::kCommand,
                              .command = {TRACER_SYSCALLER_PATH, "getppid", "4321"}},
                   .placement = placement});
  bool done = false;
  session.on_done([&] {
    done = true;
    io.stop();
  });
  session.start();
  EXPECT_TRUE(session.running());
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(done) << "the command's exit did not end the session";
  EXPECT_TRUE(session.target_exited());
  EXPECT_FALSE(session.running());
  const auto stats = session.stats();
  ASSERT_EQ(stats.engine.probes.size(), 1u);
  EXPECT_EQ(stats.engine.probes[0].total().samples, 4321u);
  EXPECT_EQ(stats.engine.probes[0].total().lost, 0u);
  if (placement == Placement::kUser)
    EXPECT_GE(stats.delivered, 4321u);  // the events went through the pipeline
  else
    EXPECT_EQ(stats.delivered, 0u);  // counted in the kernel: no event crossed
  // The implicit print stage wrote the final table to the caller's sink.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, std::regex(R"(tracer_test_sys\s+(\d+))"))) << text;
  EXPECT_EQ(m[1], "4321") << text;
  session.stop();  // idempotent
}

TEST(Session, RunsARecipeOnTheCallersIoContext) {
  run_count_on_callers_io_context(Placement::kUser);
}

// The same recipe with the count placed in the kernel: the same table, no event delivered.
TEST(Session, RunsARecipeInTheKernelOnTheCallersIoContext) {
  run_count_on_callers_io_context(Placement::kKernel);
}

TEST(Session, AMisspeltTracepointIsARecipeErrorAtItsPosition) {
  const auto path = write_recipe("session_typo", R"([recipe]
name = "typo"
[[probe]]
name = "x"
tracepoint = "syscalls:sys_enter_getppidd"
)");
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out);
  try {
    session.start();
    FAIL() << "started";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
    EXPECT_NE(std::string(e.what()).find(path.string() + ":5:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("sys_enter_getppid"), std::string::npos) << e.what();
  }
  fs::remove(path);
}

}  // namespace
}  // namespace tracer
