// The stack outputs (folded, flamegraph) on tables with stack keys: the collapsed lines parse back
// to the rows' counts, rows naming the same functions merge, and the SVG is well-formed XML with
// one rect per frame whose sample counts add up.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "plugins/stages/flamegraph.hpp"
#include "plugins/stages/folded.hpp"
#include "support/stage_batches.hpp"
#include "support/temp_dir.hpp"

namespace tracer::stages {
namespace {

using testing::cv;
using testing::cv_table;

symbols::Frame user(std::string name, std::uint64_t addr) {
  return {.addr = addr, .symbol = std::move(name), .module = "/bin/prog"};
}
symbols::Frame kern(std::string name, std::uint64_t addr) {
  return {.addr = addr, .symbol = std::move(name), .module = "[kernel.kallsyms]", .kernel = true};
}

/// count by comm, ustack, kstack: leaf-first stacks as the stages make them.
Table stack_table() {
  Table t;
  t.stage = "count";
  t.key_names = {"comm", "ustack", "kstack"};
  t.value_names = {"count"};
  const auto row = [&](std::string comm, std::vector<symbols::Frame> u,
                       std::vector<symbols::Frame> k, std::uint64_t n) {
    TableRow r;
    r.keys = {Cell{std::move(comm)}, Cell{Stack{std::move(u)}}, Cell{Stack{std::move(k)}}};
    r.values = {Cell{n}};
    t.rows.push_back(std::move(r));
  };
  row("prog", {user("inner", 0x1010), user("outer", 0x1100), user("main", 0x1200)}, {}, 70);
  // The same functions at other addresses (another process of the same binary): one line.
  row("prog", {user("inner", 0x5010), user("outer", 0x5100), user("main", 0x5200)}, {}, 5);
  row("prog", {user("outer", 0x1104), user("main", 0x1200)},
      {kern("clear_page", 0xffffffff81001000), kern("asm_exc_page_fault", 0xffffffff81002000)}, 20);
  row("sh", {user("0x7f00", 0x7f00)}, {}, 5);
  return t;
}

struct Bound {
  std::vector<ProbeInfo> probes;
  CommCache comm{CommCacheOptions{.read_proc = false}};
  Schema schema{probes, {}, comm};
  std::string out;
  Sink sink = Sink::to_string(&out);
  Diagnostics diags;

  void bind(Stage& stage, bool upstream) {
    BindContext ctx{.schema = schema, .out = sink, .upstream_aggregates = upstream};
    stage.bind(ctx, diags);
  }
};

std::map<std::string, std::uint64_t> parse_folded(const std::string& text) {
  std::map<std::string, std::uint64_t> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const auto space = line.rfind(' ');
    EXPECT_NE(space, std::string::npos) << line;
    if (space == std::string::npos)
      continue;
    lines[line.substr(0, space)] += std::stoull(line.substr(space + 1));
  }
  return lines;
}

TEST(Folded, LinesParseBackToTheRowCountsRootFirstUserBeforeKernel) {
  Bound b;
  Folded folded;
  folded.configure(cv_table({}), b.diags);
  b.bind(folded, true);
  ASSERT_TRUE(b.diags.empty()) << b.diags.format();
  folded.on_table(stack_table());
  const auto lines = parse_folded(b.out);
  const std::map<std::string, std::uint64_t> want = {
      {"prog;main;outer;inner", 75},
      {"prog;main;outer;asm_exc_page_fault;clear_page", 20},
      {"sh;0x7f00", 5},
  };
  EXPECT_EQ(lines, want) << b.out;
  std::uint64_t total = 0;
  for (const auto& [line, n] : lines)
    total += n;
  EXPECT_EQ(total, 100u);
}

TEST(Folded, NeedsAnAggregationBeforeIt) {
  Bound b;
  Folded folded;
  folded.configure(cv_table({}), b.diags);
  b.bind(folded, false);
  EXPECT_NE(b.diags.format().find("none precedes it"), std::string::npos) << b.diags.format();
}

TEST(Folded, SeparatorsInsideNamesDoNotSplitFrames) {
  std::vector<PathFrame> path = {{.name = "a;b"}, {.name = "operator()"}};
  EXPECT_EQ(folded_line(path), "a:b;operator()");
}

/// Minimal XML well-formedness: every tag closed in order, attributes quoted, no raw '<' or '&'
/// outside markup and CDATA.
bool well_formed(const std::string& x, std::string& why) {
  std::vector<std::string> open;
  std::size_t i = 0;
  while (i < x.size()) {
    if (x.compare(i, 9, "<![CDATA[") == 0) {
      const auto end = x.find("]]>", i);
      if (end == std::string::npos)
        return why = "unterminated CDATA", false;
      i = end + 3;
    } else if (x.compare(i, 2, "<?") == 0) {
      i = x.find("?>", i) + 2;
    } else if (x[i] == '<') {
      const auto end = x.find('>', i);
      if (end == std::string::npos)
        return why = "unterminated tag", false;
      std::string tag = x.substr(i + 1, end - i - 1);
      if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
        return why = "odd quotes in <" + tag + ">", false;
      if (tag.front() == '/') {
        if (open.empty() || open.back() != tag.substr(1))
          return why = "mismatched </" + tag.substr(1) + ">", false;
        open.pop_back();
      } else if (tag.back() != '/') {
        open.push_back(tag.substr(0, tag.find_first_of(" \n")));
      }
      i = end + 1;
    } else if (x[i] == '&') {
      const auto end = x.find(';', i);
      const std::string ent = x.substr(i, end - i + 1);
      if (ent != "&amp;" && ent != "&lt;" && ent != "&gt;" && ent != "&quot;")
        return why = "bad entity " + ent, false;
      i = end + 1;
    } else {
      ++i;
    }
  }
  if (!open.empty())
    return why = "unclosed <" + open.back() + ">", false;
  return true;
}

TEST(Flamegraph, WellFormedSvgWithOneRectPerFrameAndCountsThatAddUp) {
  testing::TempDir dir;
  const std::string path = (dir.path() / "p.svg").string();
  Bound b;
  Flamegraph fg;
  fg.configure(cv_table({{"path", cv(path)}, {"title", cv("a <test> & more")}}), b.diags);
  b.bind(fg, true);
  ASSERT_TRUE(b.diags.empty()) << b.diags.format();
  Table t = stack_table();
  fg.on_table(t);
  fg.on_table(t);  // a second interval: counts add
  fg.stop();
  std::ifstream in(path);
  const std::string svg((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string why;
  ASSERT_TRUE(well_formed(svg, why)) << why;
  // Frames: all, prog, sh, main, 0x7f00, outer, inner, asm_exc_page_fault, clear_page.
  const std::regex frame(
      R"re(<g class="f" data-name="([^"]*)" data-x="[0-9.]+" data-w="[0-9.]+" data-d="(\d+)"><title>[^<]* \((\d+) samples)re");
  std::map<std::string, std::uint64_t> count;
  std::map<int, std::uint64_t> by_depth;
  std::size_t frames = 0;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), frame); it != std::sregex_iterator();
       ++it) {
    ++frames;
    count[(*it)[1]] = std::stoull((*it)[3]);
    by_depth[std::stoi((*it)[2])] += std::stoull((*it)[3]);
  }
  std::size_t rects = 0;
  for (auto p = svg.find("<rect"); p != std::string::npos; p = svg.find("<rect", p + 1))
    ++rects;
  EXPECT_EQ(frames, 9u);
  EXPECT_EQ(rects, frames);
  EXPECT_EQ(count["all"], 200u);
  EXPECT_EQ(count["prog"], 190u);
  EXPECT_EQ(count["outer"], 190u);
  EXPECT_EQ(count["inner"], 150u);
  EXPECT_EQ(count["clear_page"], 40u);
  EXPECT_EQ(by_depth[1], 200u);  // the comms partition the root
  EXPECT_EQ(by_depth[2], 200u);  // main and 0x7f00 under them
  EXPECT_NE(svg.find("a &lt;test&gt; &amp; more"), std::string::npos);
  // Python's XML parser, where the machine has it, agrees.
  if (std::system("command -v python3 >/dev/null 2>&1") == 0) {
    const std::string cmd =
        "python3 -c 'import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])' " + path;
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
}

}  // namespace
}  // namespace tracer::stages
