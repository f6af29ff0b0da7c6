// Errors as data: what a Session's error is about (tracer::ErrorSubject: the engine's probe, the
// recipe's [[probe]], pipeline, stage and option), so that a host reacts without parsing the
// message. Each case checks the subject and that the position in the recipe is the same one.
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "support/scratch_path.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

/// What start() (or the constructor) throws for the recipe `text`; fails the test if nothing.
Error start_error(const std::string& name, const std::string& text, std::uint32_t* line = nullptr) {
  const fs::path path =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
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

namespace tracer {
namespace {

/// what() as every error kind composes it from the error's fields: each problem's position
/// (when it has one), message and hint.
std::string composed(const Error& e) {
  std::string out;
  for (const Problem& p : e.problems()) {
    if (!out.empty())
      out += '\n';
    if (p.where)
      out += p.where->path + ":" + std::to_string(p.where->line) + ":" +
             std::to_string(p.where->column) + ": ";
    out += p.message;
    if (!p.hint.empty())
      out += "\n  hint: " + p.hint;
  }
  return out;
}

// One error shape: a recipe's own check (two problems), the system's (a missing tracepoint,
// found at start), a stage's unknown option, a live change refused, and an engine error without
// a place all carry position, message, hint and subject in their fields, and what() is composed
// from them the same way; the message never repeats the position or the hint.
TEST(ErrorShape, EveryKindComposesWhatFromItsFields) {
  std::vector<Error> errors;
  // The recipe's own check: two problems, each with its position and hint.
  errors.push_back(start_error("shape_recipe", R"([recipe]
name = "t"
[[probe]]
name = "p"
tracepoint = "syscalls:sys_enter_getppid"
colour = "blue"
[[stage]]
use = "count"
bye = ["pid"]
)"));
  ASSERT_EQ(errors.back().problems().size(), 2u) << errors.back().what();
  EXPECT_EQ(errors.back().message(), "unknown key 'colour' in [[probe]]");
  EXPECT_FALSE(errors.back().hint().empty());
  EXPECT_EQ(errors.back().problems()[1].subject.option, "bye")
      << "an unknown option is about that option";
  EXPECT_EQ(errors.back().problems()[1].hint, "did you mean 'by'?");
  // The system's: a tracepoint this kernel lacks, placed at its value.
  errors.push_back(start_error("shape_system", R"([recipe]
name = "t"
[[probe]]
name = "p"
tracepoint = "syscalls:sys_enter_getppidd"
)"));
  EXPECT_EQ(errors.back().where()->line, 5u);
  EXPECT_FALSE(errors.back().hint().empty()) << errors.back().what();
  // An engine error with no place in a recipe.
  errors.emplace_back(ErrorCategory::kRuntime, std::make_error_code(std::errc::io_error),
                      "engine: a failure", "a hint");
  for (const Error& e : errors) {
    SCOPED_TRACE(e.what());
    EXPECT_EQ(std::string(e.what()), composed(e));
    EXPECT_EQ(e.message(), e.problems().front().message);
    EXPECT_EQ(e.hint(), e.problems().front().hint);
    EXPECT_EQ(e.where(), e.problems().front().where);
    EXPECT_EQ(e.message().find(":5:"), std::string::npos) << "the position is not in the message";
    EXPECT_EQ(e.message().find("hint:"), std::string::npos) << "the hint is not in the message";
  }
}

}  // namespace
}  // namespace tracer
