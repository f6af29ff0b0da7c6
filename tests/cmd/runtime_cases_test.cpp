// The runtime directive runner (STYLE: "tests/runtime/<suite> directive files"): each file under
// tests/runtime/ is a suite of end-to-end cases of the tracer CLI, written as data. A case runs a
// command line (usually tracer on an inline recipe and a workload with a known answer) under a
// timeout and checks its exit code and what it printed. Format: tests/runtime/README.md.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "support/cli.hpp"
#include "support/temp_dir.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;

const fs::path kSuites = fs::path(TRACER_TEST_DATA_DIR).parent_path() / "runtime";

struct Case {
  std::string suite, name;
  std::string recipe;  // RECIPE ... END
  std::string run;
  int exit = 0;
  int timeout_s = 60;
  std::vector<std::string> expect, expect_regex, expect_not, requires_;
  std::string where;  // file:line of NAME
};

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  for (std::size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

/// The directive and the rest of its line ("EXPECT x y" -> {"EXPECT", "x y"}).
std::pair<std::string, std::string> directive(const std::string& line) {
  const auto sp = line.find(' ');
  if (sp == std::string::npos)
    return {line, ""};
  return {line.substr(0, sp), line.substr(sp + 1)};
}

/// Every case of suite file `file`; a malformed file gives one case whose `run` is empty and
/// whose name says what is wrong (the test then fails with it).
std::vector<Case> parse_suite(const fs::path& file) {
  std::vector<Case> out;
  std::ifstream in(file);
  const std::string suite = file.filename().string();
  const auto bad = [&](int line, const std::string& why) {
    Case c;
    c.suite = suite;
    c.name = "malformed";
    c.where = file.string() + ":" + std::to_string(line) + ": " + why;
    out.push_back(c);
  };
  int n = 0;
  bool in_recipe = false;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (in_recipe) {
      if (line == "END")
        in_recipe = false;
      else
        out.back().recipe += line + "\n";
      continue;
    }
    if (line.empty() || line.starts_with("#"))
      continue;
    const auto [key, value] = directive(line);
    if (key == "NAME") {
      Case c;
      c.suite = suite;
      c.name = value;
      c.where = file.string() + ":" + std::to_string(n);
      out.push_back(std::move(c));
      continue;
    }
    if (out.empty()) {
      bad(n, "a directive before the first NAME");
      return out;
    }
    Case& c = out.back();
    if (key == "RECIPE")
      in_recipe = true;
    else if (key == "RUN")
      c.run = value;
    else if (key == "EXIT" || key == "TIMEOUT") {
      int v = 0;
      const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
      if (ec != std::errc{} || end != value.data() + value.size()) {
        bad(n, key + " wants a number");
        return out;
      }
      (key == "EXIT" ? c.exit : c.timeout_s) = v;
    } else if (key == "EXPECT")
      c.expect.push_back(value);
    else if (key == "EXPECT_REGEX")
      c.expect_regex.push_back(value);
    else if (key == "EXPECT_NOT")
      c.expect_not.push_back(value);
    else if (key == "REQUIRES")
      c.requires_.push_back(value);
    else
      bad(n, "unknown directive '" + key + "'");
  }
  if (in_recipe)
    bad(n, "RECIPE without END");
  return out;
}

std::vector<Case> all_cases() {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(kSuites, ec)) {
    if (e.is_regular_file() && e.path().filename() != "README.md")
      files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  std::vector<Case> out;
  for (const auto& f : files) {
    auto cases = parse_suite(f);
    out.insert(out.end(), cases.begin(), cases.end());
  }
  return out;
}

std::string substitute(std::string text, const fs::path& dir) {
  text = replace_all(std::move(text), "{{TRACER}}", TRACER_CLI_PATH);
  text = replace_all(std::move(text), "{{RECIPE}}", (dir / "recipe.toml").string());
  text = replace_all(std::move(text), "{{DIR}}", dir.string());
  text = replace_all(std::move(text), "{{SYSCALLER}}", TRACER_SYSCALLER_PATH);
  text = replace_all(std::move(text), "{{UPROBE_TARGET}}", TRACER_UPROBE_TARGET);
  text = replace_all(std::move(text), "{{DATA}}", TRACER_TEST_DATA_DIR);
  text = replace_all(std::move(text), "{{PLUGINS}}", TRACER_PLUGIN_DIR);
  return replace_all(std::move(text), "{{CONFIGS}}", TRACER_CONFIGS_DIR);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    out.push_back(line);
  return out;
}

// gtest names a case by this (not its bytes).
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.suite << "/" << c.name;
}

class RuntimeCase : public ::testing::TestWithParam<Case> {};

TEST_P(RuntimeCase, RunsAsItsDirectivesSay) {
  const Case& c = GetParam();
  SCOPED_TRACE(c.where);
  ASSERT_NE(c.name, "malformed") << c.where;
  ASSERT_FALSE(c.run.empty()) << "no RUN";
  testing::TempDir dir;
  for (const auto& r : c.requires_) {
    const auto got = testing::shell(substitute(r, dir.path()) + " >/dev/null 2>&1");
    if (got.exit_code != 0)
      GTEST_SKIP() << "REQUIRES " << r << " (not here)";
  }
  if (!c.recipe.empty())
    std::ofstream(dir.path() / "recipe.toml") << substitute(c.recipe, dir.path());
  const std::string run = substitute(c.run, dir.path());
  const auto r = testing::shell("timeout -s KILL " + std::to_string(c.timeout_s) + " sh -c '" +
                                replace_all(run, "'", "'\\''") + "' </dev/null");
  SCOPED_TRACE("RUN " + run + "\nstdout:\n" + r.out.substr(0, 3000) + "\nstderr:\n" +
               r.err.substr(0, 3000));
  ASSERT_NE(r.exit_code, 137) << "still running after TIMEOUT " << c.timeout_s << " s";
  ASSERT_NE(r.exit_code, -1) << "killed by a signal";
  EXPECT_EQ(r.exit_code, c.exit);
  auto lines = lines_of(r.out);
  const auto err_lines = lines_of(r.err);
  lines.insert(lines.end(), err_lines.begin(), err_lines.end());
  for (const auto& want : c.expect) {
    EXPECT_TRUE(std::find(lines.begin(), lines.end(), substitute(want, dir.path())) != lines.end())
        << "no line is: " << want;
  }
  for (const auto& pattern : c.expect_regex) {
    const std::regex re(substitute(pattern, dir.path()));
    EXPECT_TRUE(std::any_of(lines.begin(), lines.end(),
                            [&](const std::string& l) { return std::regex_search(l, re); }))
        << "no line matches: " << pattern;
  }
  for (const auto& text : c.expect_not) {
    EXPECT_EQ(r.out.find(text), std::string::npos) << "stdout shows: " << text;
    EXPECT_EQ(r.err.find(text), std::string::npos) << "stderr shows: " << text;
  }
}

INSTANTIATE_TEST_SUITE_P(Runtime,
                         RuntimeCase,
                         ::testing::ValuesIn(all_cases()),
                         [](const auto& param_info) {
                           std::string name = param_info.param.suite + "_" + param_info.param.name;
                           for (char& ch : name) {
                             if (std::isalnum(static_cast<unsigned char>(ch)) == 0)
                               ch = '_';
                           }
                           return name;
                         });

// The runner reads what it is given: a directive it does not know, or one before any NAME, is
// a failing case naming the line, never a silently skipped one.
TEST(Runtime, AMalformedSuiteIsAFailingCase) {
  testing::TempDir dir;
  std::ofstream(dir.path() / "bad") << "NAME a\nRUN true\nEXPCT x\n";
  const auto cases = parse_suite(dir.path() / "bad");
  ASSERT_EQ(cases.size(), 2U);
  EXPECT_EQ(cases[1].name, "malformed");
  EXPECT_NE(cases[1].where.find("bad:3: unknown directive 'EXPCT'"), std::string::npos)
      << cases[1].where;
  std::ofstream(dir.path() / "early") << "RUN true\n";
  EXPECT_EQ(parse_suite(dir.path() / "early").front().name, "malformed");
  std::ofstream(dir.path() / "open") << "NAME a\nRECIPE\n[recipe]\n";
  EXPECT_EQ(parse_suite(dir.path() / "open").back().name, "malformed");
}

TEST(Runtime, TheSuitesHoldTheirCases) {
  EXPECT_GE(all_cases().size(), 12U);
}

}  // namespace
}  // namespace tracer
