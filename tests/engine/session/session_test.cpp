// Session: a recipe run by the library alone on the caller's io_context (no CLI code).
#include "tracer/session.hpp"
#include "support/scratch_path.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <cmath>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <variant>
#include <vector>

namespace tracer {
namespace {

namespace fs = std::filesystem;

fs::path write_recipe(const std::string& name, const std::string& text) {
  const fs::path p =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(p) << text;
  return p;
}

/// The recipe `text`, loaded from a file written for it (and removed).
Recipe load_recipe(const std::string& name, const std::string& text) {
  const fs::path path = write_recipe(name, text);
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  return recipe;
}

// A command's exact getppid calls, counted by a recipe's count stage, through a Session on an
// io_context the test owns; the session ends by itself when the command exits.
/// Runs the count-by-comm recipe on a command making 4321 getppid calls through a Session on
/// this thread's io_context, with the stages placed as `placement` says.
void run_count_on_callers_io_context(Placement placement) {
  Recipe recipe = load_recipe("session_count", R"([recipe]
name = "session-count"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "count"
by = ["comm"]
)");
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
  std::map<std::string, std::uint64_t> counts;  // the final table, as values
  session.on_table([&](const TableUpdate& u) {
    for (const auto& row : u.table.rows)
      counts[std::get<std::string>(row.keys.at(0))] += std::get<std::uint64_t>(row.values.at(0));
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
  // The count of the command's name, as a value; the implicit print stage wrote the same table
  // to the caller's sink.
  EXPECT_EQ(counts["tracer_test_sys"], 4321u);
  EXPECT_NE(text.find("4321"), std::string::npos) << text;
  session.stop();  // idempotent
}

TEST(Session, RunsARecipeOnTheCallersIoContext) {
  run_count_on_callers_io_context(Placement::kUser);
}

// The same recipe with the count placed in the kernel: the same table, no event delivered.
TEST(Session, RunsARecipeInTheKernelOnTheCallersIoContext) {
  run_count_on_callers_io_context(Placement::kKernel);
}

// Tables as values (Session::on_table): every in-kernel aggregation kind over a known workload
// (2 children, one per CPU, 3,000 lseek calls each with offsets 0..2999), placed in the kernel
// and in user space. The values are the known answer on both placements, each row's cells are
// the ones the JSON output printed, and every table comes once, as the final one.
void expect_tables_as_values(Placement placement) {
  // One pipeline per kind: an aggregation is the end of its pipeline's events.
  std::string text_recipe = R"([recipe]
name = "values"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
)";
  for (const char* stage :
       {"use = \"count\"", "use = \"sum\"\nfield = \"offset\"", "use = \"min\"\nfield = \"offset\"",
        "use = \"max\"\nfield = \"offset\"", "use = \"avg\"\nfield = \"offset\"",
        "use = \"hist\"\nfield = \"offset\"",
        "use = \"lhist\"\nfield = \"offset\"\nmin = 0\nmax = 3000\nstep = 500",
        "use = \"quantiles\"\nfield = \"offset\"", "use = \"stats\"\nfield = \"offset\""})
    text_recipe += "[[pipeline]]\nname = \"p" + std::to_string(text_recipe.size()) +
                   "\"\n[[pipeline.stage]]\n" + stage + "\n";
  Recipe recipe = load_recipe("session_values", text_recipe);
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = {.kind = Target::Kind::kCommand,
                              .command = {TRACER_ORACLE_WORKLOAD, "tree", "2", "3000"}},
                   .json = true,
                   .placement = placement});
  std::vector<std::pair<std::size_t, Table>> tables;  // (pipeline, its table)
  session.on_table([&](const TableUpdate& u) {
    EXPECT_EQ(u.stage, 0u);
    EXPECT_TRUE(u.final) << "no `every`: the end's table only";
    tables.emplace_back(u.pipeline, u.table);
  });
  session.on_done([&] { io.stop(); });
  session.start();
  io.run_for(std::chrono::seconds(30));
  ASSERT_FALSE(session.running());
  ASSERT_EQ(tables.size(), 9u) << text;
  const auto value = [&](std::size_t i, std::size_t v = 0) -> Cell {
    EXPECT_EQ(tables[i].second.rows.size(), 1u) << tables[i].second.title;
    return tables[i].second.rows.empty() ? Cell{} : tables[i].second.rows[0].values.at(v);
  };
  constexpr std::uint64_t kCalls = 6000, kSum = 2ULL * (3000ULL * 2999 / 2);
  for (std::size_t i = 0; i < tables.size(); ++i)
    EXPECT_EQ(tables[i].first, i) << "the pipelines in recipe order";
  EXPECT_EQ(tables[0].second.stage, "count");
  EXPECT_EQ(value(0), Cell{kCalls});
  EXPECT_EQ(value(1), Cell{static_cast<std::int64_t>(kSum)});
  EXPECT_EQ(value(2), Cell{std::int64_t{0}});
  EXPECT_EQ(value(3), Cell{std::int64_t{2999}});
  EXPECT_EQ(value(4), Cell{1499.5});
  for (const std::size_t h : {5u, 6u}) {  // hist, lhist: every call in a bucket
    ASSERT_EQ(tables[h].second.rows.size(), 1u);
    std::uint64_t in_buckets = 0;
    for (const auto& b : tables[h].second.rows[0].buckets)
      in_buckets += b.count;
    EXPECT_EQ(in_buckets, kCalls) << tables[h].second.title;
    EXPECT_TRUE(tables[h].second.histogram);
  }
  // lhist [0, 3000) by 500: six buckets of 1,000 calls each.
  ASSERT_EQ(tables[6].second.rows[0].buckets.size(), 6u);
  for (const auto& b : tables[6].second.rows[0].buckets)
    EXPECT_EQ(b.count, 1000u) << b.label;
  ASSERT_EQ(tables[7].second.rows.size(), 1u);
  EXPECT_EQ(tables[7].second.value_names.front(), "count");
  EXPECT_EQ(value(7), Cell{kCalls});
  // stats: two copies of 0..2999 have the mean and the (population) spread of one.
  EXPECT_EQ(tables[8].second.value_names,
            (std::vector<std::string>{"count", "sum", "min", "max", "mean", "stddev"}));
  EXPECT_EQ(value(8, 0), Cell{kCalls});
  EXPECT_EQ(value(8, 1), Cell{static_cast<std::int64_t>(kSum)});
  EXPECT_EQ(value(8, 2), Cell{std::int64_t{0}});
  EXPECT_EQ(value(8, 3), Cell{std::int64_t{2999}});
  EXPECT_EQ(value(8, 4), Cell{1499.5});
  const double spread = std::sqrt((3000.0 * 3000.0 - 1) / 12);  // of 0..N-1: (N^2 - 1) / 12
  ASSERT_TRUE(std::holds_alternative<double>(value(8, 5)));
  EXPECT_NEAR(std::get<double>(value(8, 5)), spread, spread * 1e-12);
  // What was printed (--json: a line per row): each table's values and buckets, the same
  // numbers.
  const auto number = [](const Cell& c) {
    if (const auto* u = std::get_if<std::uint64_t>(&c))
      return fmt::format("{}", *u);
    if (const auto* i = std::get_if<std::int64_t>(&c))
      return fmt::format("{}", *i);
    if (const auto* d = std::get_if<double>(&c))
      return fmt::format("{}", *d);
    return std::string("?");
  };
  for (const auto& [pipeline, t] : tables) {
    const TableRow& row = t.rows.at(0);
    std::vector<std::string> want;
    if (t.histogram) {
      std::uint64_t n = 0;
      for (const auto& b : row.buckets) {
        want.push_back(fmt::format(R"({{"lo":{},"hi":{},"count":{}}})", b.lo, b.hi, b.count));
        n += b.count;
      }
      want.push_back(fmt::format(R"("count":{})", n));
    } else {
      for (std::size_t v = 0; v < t.value_names.size(); ++v)
        want.push_back(fmt::format(R"("{}":{})", t.value_names[v], number(row.values.at(v))));
    }
    std::string line_of_stage;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.find(R"("stage":")" + t.stage + "\"") != std::string::npos)
        line_of_stage = line;
    }
    for (const auto& w : want)
      EXPECT_NE(line_of_stage.find(w), std::string::npos)
          << t.title << ": " << w << " not in " << line_of_stage;
  }
}

TEST(Session, TablesAsValuesInTheKernel) {
  expect_tables_as_values(Placement::kKernel);
}

TEST(Session, TablesAsValuesInUserSpace) {
  expect_tables_as_values(Placement::kUser);
}

// Events as values (Session::on_event): the workload's 2 x 3,000 lseek calls through a filter
// and a per-event jsonl output with two fields. The handler gets each event the output writes,
// once, with the output's fields in its order: every offset 0..2999 twice, the same values the
// printed lines hold, and nothing the filter dropped.
TEST(Session, EventsAsValuesAreTheEventsTheOutputWrites) {
  Recipe recipe = load_recipe("session_events", R"([recipe]
name = "events"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
[[stage]]
use = "filter"
expr = "offset < 2000"
[[stage]]
use = "print"
fields = ["offset", "pid"]
)");
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = {.kind = Target::Kind::kCommand,
                              .command = {TRACER_ORACLE_WORKLOAD, "tree", "2", "3000"}},
                   .json = true});
  std::map<std::int64_t, int> offsets;  // offset -> events
  std::map<std::int64_t, int> pids;
  std::size_t events = 0;
  session.on_event([&](const EventUpdate& u) {
    ++events;
    EXPECT_EQ(u.pipeline, 0u);
    EXPECT_EQ(u.stage, 1u);
    ASSERT_EQ(u.fields.size(), 2u);
    EXPECT_EQ(u.fields[0].name(), "offset");
    EXPECT_EQ(u.fields[1].name(), "pid");
    // An integer field reads as int64 or uint64 as the tracepoint declares it signed or not.
    const auto integer = [&](const FieldRef& f) -> std::optional<std::int64_t> {
      const Value v = f.read(u.event);
      if (const auto* i = std::get_if<std::int64_t>(&v))
        return *i;
      if (const auto* n = std::get_if<std::uint64_t>(&v))
        return static_cast<std::int64_t>(*n);
      return std::nullopt;
    };
    const auto offset = integer(u.fields[0]), pid = integer(u.fields[1]);
    ASSERT_TRUE(offset && pid);
    ++offsets[*offset];
    ++pids[*pid];
  });
  session.on_done([&] { io.stop(); });
  session.start();
  io.run_for(std::chrono::seconds(30));
  ASSERT_FALSE(session.running());
  ASSERT_EQ(session.stats().engine.lost(), 0u);
  EXPECT_EQ(events, 4000u);
  ASSERT_EQ(offsets.size(), 2000u);
  EXPECT_EQ(offsets.begin()->first, 0);
  EXPECT_EQ(offsets.rbegin()->first, 1999);
  for (const auto& [offset, n] : offsets)
    EXPECT_EQ(n, 2) << "offset " << offset;
  EXPECT_EQ(pids.size(), 2u) << "one per child";
  // The printed lines hold the same values.
  std::map<std::int64_t, int> printed;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto at = line.find("\"offset\":");
    if (at != std::string::npos)
      ++printed[std::stoll(line.substr(at + 9))];
  }
  EXPECT_EQ(printed, offsets);
}

// A handler that throws ends the session: failure() is its exception, and it gets no more
// events (the output's missed events are counted).
TEST(Session, AnEventHandlerThatThrowsStopsTheSession) {
  Recipe recipe = load_recipe("session_events_throw", R"([recipe]
name = "events"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
filter = "fd == 12345"
[[stage]]
use = "print"
fields = ["offset"]
)");
  Sink out = Sink::discard();  // the values only
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out,
                  {.target = {.kind = Target::Kind::kCommand,
                              .command = {TRACER_ORACLE_WORKLOAD, "tree", "2", "3000"}}});
  int calls = 0;
  session.on_event([&](const EventUpdate&) {
    if (++calls == 10)
      throw std::runtime_error("host gave up");
  });
  bool done = false;
  session.on_done([&] {
    done = true;
    io.stop();
  });
  session.start();
  io.run_for(std::chrono::seconds(30));
  ASSERT_TRUE(done);
  EXPECT_EQ(calls, 10);
  ASSERT_TRUE(session.failure());
  try {
    std::rethrow_exception(session.failure());
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "host gave up");
  }
  std::uint64_t missed = 0;
  for (const auto& [name, value] : session.stats().counters) {
    if (name == "on_event.missed")
      missed = value;
  }
  EXPECT_GT(missed, 0u);
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
