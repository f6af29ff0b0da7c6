// Errors as data: what a Session's error is about (tracer::ErrorSubject: the engine's probe, the
// recipe's [[probe]], pipeline, stage and option), so that a host reacts without parsing the
// message. Each case checks the subject and that the position in the recipe is the same one.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

/// What start() (or the constructor) throws for the recipe `text`; fails the test if nothing.
Error start_error(const std::string& name, const std::string& text, std::uint32_t* line = nullptr) {
  const fs::path path =
      fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << text;
  std::string out_text;
  Sink out = Sink::to_string(&out_text);
  boost::asio::io_context io(1);
  try {
    Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
    Session session(io.get_executor(), recipe, out);
    session.start();
  } catch (const Error& e) {
    fs::remove(path);
    if (line != nullptr)
      *line = e.where() ? e.where()->line : 0;
    return e;
  }
  fs::remove(path);
  ADD_FAILURE() << name << ": no error";
  return {ErrorCategory::kRuntime, {}, "none"};
}

TEST(SessionErrors, AMissingTracepointIsAboutItsRecipeProbe) {
  std::uint32_t line = 0;
  const Error e = start_error("subject_tp", R"([recipe]
name = "t"
[[probe]]
name = "ok"
tracepoint = "syscalls:sys_enter_getppid"
[[probe]]
name = "typo"
tracepoint = "syscalls:sys_enter_getppidd"
)",
                              &line);
  EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
  EXPECT_EQ(e.subject().recipe_probe, std::optional<std::size_t>(1)) << e.what();
  EXPECT_EQ(e.subject().option, "tracepoint");
  EXPECT_EQ(line, 8u);
}

TEST(SessionErrors, AFilterFieldTheEventLacksIsAboutTheFilter) {
  std::uint32_t line = 0;
  const Error e = start_error("subject_filter_field", R"([recipe]
name = "t"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "offsett == 1"
)",
                              &line);
  EXPECT_EQ(e.subject().recipe_probe, std::optional<std::size_t>(0)) << e.what();
  EXPECT_EQ(e.subject().option, "filter");
  EXPECT_EQ(line, 6u);
}

// The kernel refuses the filter (a syntax it does not parse) when the engine opens the events:
// the engine's error carries the engine's probe and the recipe's. A glob expands to several
// engine probes, so the two indexes differ; the position is the glob's filter.
TEST(SessionErrors, AFilterTheKernelRefusesOnAGlobIsAboutTheGlobsRecipeProbe) {
  std::uint32_t line = 0;
  const Error e = start_error("subject_glob_filter", R"([recipe]
name = "t"
[[probe]]
name = "a"
tracepoint = "syscalls:sys_enter_getppid"
[[probe]]
name = "b"
tracepoint = "syscalls:sys_enter_getp*"
filter = "common_pid == 1 &&"
)",
                              &line);
  EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
  EXPECT_EQ(e.subject().recipe_probe, std::optional<std::size_t>(1)) << e.what();
  ASSERT_TRUE(e.subject().probe.has_value()) << e.what();
  EXPECT_GE(*e.subject().probe, 1u);
  EXPECT_EQ(e.subject().option, "filter");
  EXPECT_EQ(line, 9u);
}

TEST(SessionErrors, AStageOptionIsAboutItsPipelineAndStage) {
  const Error e = start_error("subject_stage", R"([recipe]
name = "t"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[pipeline]]
name = "first"
[[pipeline.stage]]
use = "count"
[[pipeline]]
name = "second"
[[pipeline.stage]]
use = "filter"
expr = "offset > 1"
[[pipeline.stage]]
use = "lhist"
field = "offset"
min = 10
max = 5
step = 1
)");
  EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
  EXPECT_EQ(e.subject().pipeline, std::optional<std::size_t>(1)) << e.what();
  EXPECT_EQ(e.subject().stage, std::optional<std::size_t>(1)) << e.what();
  EXPECT_NE(std::string(e.what()).find("must be above 'min'"), std::string::npos) << e.what();
}

TEST(SessionErrors, AFieldAStageBindsIsAboutItsPipelineAndStage) {
  const Error e = start_error("subject_bind", R"([recipe]
name = "t"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "count"
by = ["nosuchfield"]
)");
  EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
  EXPECT_EQ(e.subject().pipeline, std::optional<std::size_t>(0)) << e.what();
  EXPECT_EQ(e.subject().stage, std::optional<std::size_t>(0)) << e.what();
}

TEST(SessionErrors, APipelineThatCannotRunInTheKernelIsAboutThePlacement) {
  const Error e = start_error("subject_placement", R"([recipe]
name = "t"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[stage]]
use = "print"
)");
  EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
  EXPECT_EQ(e.subject().pipeline, std::optional<std::size_t>(0)) << e.what();
  EXPECT_EQ(e.subject().option, "placement") << e.what();
}

}  // namespace
}  // namespace tracer
