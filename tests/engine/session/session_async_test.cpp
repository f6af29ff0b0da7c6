// Session::async_start, async_stop and async_apply: a start, a stop and a live change that leave
// the host's executor free. The host's own timers keep their schedule while tracer compiles BPF
// and opens or closes its events; the result is the one start(), stop() and apply() give;
// errors and a stop() meanwhile reach the handler.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "support/cli.hpp"
#include "support/scratch_path.hpp"
#include "tracer/session.hpp"

namespace tracer {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr std::uint64_t kAsyncCalls = 3000;

/// Open perf events of this process (anon_inode:[perf_event] descriptors).
std::size_t open_perf_events() {
  std::size_t n = 0;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    if (fs::read_symlink(e.path(), ec).string() == "anon_inode:[perf_event]")
      ++n;
  }
  return n;
}

/// A count in the kernel of the command's getppid calls, behind a filter on a constant no
/// earlier run used: its BPF program is new text, so the start generates and compiles it.
Recipe fresh_kernel_recipe(const std::string& name) {
  std::random_device rd;
  const std::uint64_t salt = (std::uint64_t{rd()} << 20) | (rd() & 0xfffff);
  const fs::path path =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << fmt::format(R"([recipe]
name = "{}"
placement = "kernel"
[[probe]]
name = "getppid"
tracepoint = "syscalls:sys_enter_getppid"
[[stage]]
use = "filter"
expr = "pid != {}"
[[stage]]
use = "count"
by = ["comm"]
)",
                                     name, 4'000'000'000ULL + salt % 1'000'000'000ULL);
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  return recipe;
}

SessionOptions command_options() {
  return {.target = {.kind = Target::Kind::kCommand,
                     .command = {TRACER_SYSCALLER_PATH, "getppid", std::to_string(kAsyncCalls)}}};
}

/// The host's own periodic work: a timer every `period`, and how late it ran at worst while
/// `watching` holds.
class HostTimer {
 public:
  HostTimer(boost::asio::io_context& io, std::chrono::milliseconds period)
      : timer_(io), period_(period) {}
  void start() {
    next_ = Clock::now() + period_;
    arm();
  }
  void cancel() { timer_.cancel(); }
  /// Meanwhile the timer ran (about one per period of the `what` under way), never held for
  /// half as long as the blocking form held the thread; the figures are printed.
  void expect_on_schedule(const std::string& what,
                          Clock::duration blocking,
                          Clock::duration async_length) const {
    const auto ms = [](Clock::duration d) {
      return std::chrono::duration<double, std::milli>(d).count();
    };
    EXPECT_GE(fired, 3u) << "async_" << what << " took " << ms(async_length) << " ms";
    EXPECT_LT(ms(worst), ms(blocking) / 2) << "worst lateness " << ms(worst) << " ms; a blocking "
                                           << what << " held the thread " << ms(blocking) << " ms";
    std::printf(
        "blocking %s() held the host %.1f ms; async_%s took %.1f ms, the host's %lld ms timer "
        "was at worst %.1f ms late (%llu runs)\n",
        what.c_str(), ms(blocking), what.c_str(), ms(async_length),
        static_cast<long long>(period_.count()), ms(worst), static_cast<unsigned long long>(fired));
  }
  bool watching = true;
  Clock::duration worst{};
  std::uint64_t fired = 0;

 private:
  void arm() {
    timer_.expires_at(next_);
    timer_.async_wait([this](const boost::system::error_code& ec) {
      if (ec)
        return;
      const auto late = Clock::now() - next_;
      if (watching)
        worst = std::max(worst, late);
      ++fired;
      next_ = std::max(next_ + period_, Clock::now());
      arm();
    });
  }
  boost::asio::steady_timer timer_;
  std::chrono::milliseconds period_;
  Clock::time_point next_{};
};

std::uint64_t count_of(const Table& t, const std::string& comm) {
  std::uint64_t n = 0;
  for (const auto& row : t.rows) {
    if (std::get<std::string>(row.keys.at(0)) == comm)
      n += std::get<std::uint64_t>(row.values.at(0));
  }
  return n;
}

// The host's 5 ms timer during a start that compiles BPF: blocked for the whole start() (the
// reference, measured in the same run), on schedule within a fraction of it with async_start.
// Both sessions count the command's calls exactly.
TEST(SessionAsync, TheHostsTimersKeepTheirScheduleWhileAStartCompiles) {
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);

  // The reference: start() holds the thread for its whole length.
  Clock::duration blocking{};
  std::uint64_t blocking_count = 0;
  {
    Session session(io.get_executor(), fresh_kernel_recipe("blocking_start"), out,
                    command_options());
    session.on_table(
        [&](const TableUpdate& u) { blocking_count += count_of(u.table, "tracer_test_sys"); });
    session.on_done([&] { io.stop(); });
    const auto t = Clock::now();
    session.start();
    blocking = Clock::now() - t;
    io.restart();
    io.run_for(std::chrono::seconds(20));
    ASSERT_FALSE(session.running());
  }
  EXPECT_EQ(blocking_count, kAsyncCalls);

  io.restart();
  HostTimer host(io, std::chrono::milliseconds(5));
  std::exception_ptr started_with;
  bool handled = false;
  std::uint64_t async_count = 0;
  Session session(io.get_executor(), fresh_kernel_recipe("async_start"), out, command_options());
  session.on_table(
      [&](const TableUpdate& u) { async_count += count_of(u.table, "tracer_test_sys"); });
  session.on_done([&] { io.stop(); });
  Clock::duration async_length{};
  const auto t = Clock::now();
  boost::asio::post(io, [&] {
    host.start();
    session.async_start([&](std::exception_ptr e) {
      started_with = e;
      handled = true;
      async_length = Clock::now() - t;
      host.watching = false;
    });
  });
  io.run_for(std::chrono::seconds(30));
  host.cancel();
  ASSERT_TRUE(handled) << "async_start's handler never ran";
  if (started_with)
    std::rethrow_exception(started_with);
  EXPECT_EQ(async_count, kAsyncCalls);
  host.expect_on_schedule("start", blocking, async_length);
}

/// System-wide, in the kernel: this process's lseek calls on its own fd (own_fd()) counted, on
/// six tracepoints, so that a stop closes six events with programs on them (each close waits
/// for the kernel's grace periods).
Recipe six_tracepoints_recipe(const std::string& name) {
  const fs::path path =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
  std::string text = fmt::format("[recipe]\nname = \"{}\"\nplacement = \"kernel\"\n", name);
  for (const char* sc : {"lseek", "getppid", "getpid", "gettid", "getuid", "geteuid"})
    text += fmt::format("[[probe]]\nname = \"{0}\"\ntracepoint = \"syscalls:sys_enter_{0}\"\n", sc);
  text += fmt::format("[[stage]]\nuse = \"filter\"\nexpr = \"fd == {}\"\n", testing::own_fd());
  text += "[[stage]]\nuse = \"count\"\nby = [\"probe\"]\n";
  std::ofstream(path) << text;
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  return recipe;
}

// The host's 5 ms timer during a stop: stop() holds the thread while the events close (the
// reference, measured in the same run); async_stop closes them on a thread of its own, and the
// final table (read after the programs detached) counts the calls exactly as stop()'s does.
TEST(SessionAsync, TheHostsTimersKeepTheirScheduleWhileAStopCloses) {
  constexpr std::uint64_t kSeeks = 5000;
  const std::string workload =
      testing::own_fd_env() + TRACER_SYSCALLER_PATH + " lseek " + std::to_string(kSeeks);
  std::string text;
  Sink out = Sink::to_string(&text);
  const auto lseeks = [](std::uint64_t& n) {
    return [&n](const TableUpdate& u) {
      for (const auto& row : u.table.rows) {
        if (std::get<std::string>(row.keys.at(0)) == "lseek")
          n += std::get<std::uint64_t>(row.values.at(0));
      }
    };
  };

  boost::asio::io_context io(1);
  Clock::duration blocking{};
  std::uint64_t blocking_count = 0;
  {
    Session session(io.get_executor(), six_tracepoints_recipe("blocking_stop"), out);
    session.on_table(lseeks(blocking_count));
    session.start();
    ASSERT_EQ(std::system(workload.c_str()), 0);
    const auto t = Clock::now();
    session.stop();
    blocking = Clock::now() - t;
  }
  EXPECT_EQ(blocking_count, kSeeks);

  io.restart();
  HostTimer host(io, std::chrono::milliseconds(5));
  std::uint64_t async_count = 0;
  bool handled = false, done = false;
  std::exception_ptr stopped_with;
  Clock::duration async_length{};
  Session session(io.get_executor(), six_tracepoints_recipe("async_stop"), out);
  session.on_table(lseeks(async_count));
  session.on_done([&] { done = true; });
  session.start();
  ASSERT_EQ(std::system(workload.c_str()), 0);
  const auto t = Clock::now();
  boost::asio::post(io, [&] {
    host.start();
    session.async_stop([&](std::exception_ptr e) {
      stopped_with = e;
      handled = true;
      async_length = Clock::now() - t;
      host.watching = false;
      host.cancel();
    });
    // Meanwhile the stop is under way: a blocking stop() returns at once, collect() reads
    // nothing, and a second async_stop completes with the first.
    session.stop();
    session.collect([&](const TableUpdate&) { ADD_FAILURE() << "collect() during a stop"; });
  });
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(handled) << "async_stop's handler never ran";
  if (stopped_with)
    std::rethrow_exception(stopped_with);
  EXPECT_TRUE(done) << "on_done observers run before the handler";
  EXPECT_FALSE(session.running());
  EXPECT_EQ(async_count, kSeeks);
  host.expect_on_schedule("stop", blocking, async_length);
}

// An async_stop while an async_start prepares: the start gives up (its handler gets
// operation_canceled), then the stop's handler runs with nullptr; nothing stays open.
TEST(SessionAsync, AnAsyncStopDuringAnAsyncStartCancelsIt) {
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  const std::size_t before = open_perf_events();
  Session session(io.get_executor(), fresh_kernel_recipe("stop_while_starting"), out);
  std::vector<std::string> order;
  std::exception_ptr start_error;
  boost::asio::post(io, [&] {
    session.async_start([&](std::exception_ptr e) {
      start_error = e;
      order.emplace_back("start");
    });
    session.async_stop([&](std::exception_ptr e) {
      EXPECT_FALSE(e);
      order.emplace_back("stop");
      io.stop();
    });
  });
  io.run_for(std::chrono::seconds(30));
  ASSERT_EQ(order, (std::vector<std::string>{"start", "stop"}));
  ASSERT_TRUE(start_error);
  try {
    std::rethrow_exception(start_error);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), std::make_error_code(std::errc::operation_canceled)) << e.what();
  }
  EXPECT_FALSE(session.running());
  EXPECT_EQ(open_perf_events(), before);
}

// A recipe error comes to the handler as start() throws it: at its position.
TEST(SessionAsync, ARecipeErrorReachesTheHandlerAtItsPosition) {
  const fs::path path =
      tracer::testing::scratch_path("async_typo_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << R"([recipe]
name = "typo"
[[probe]]
name = "x"
tracepoint = "syscalls:sys_enter_getppidd"
)";
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), recipe, out);
  std::exception_ptr got;
  bool handled = false;
  session.async_start([&](std::exception_ptr e) {
    got = e;
    handled = true;
  });
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(handled);
  ASSERT_TRUE(got);
  try {
    std::rethrow_exception(got);
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kRecipe);
    EXPECT_NE(std::string(e.what()).find(path.string() + ":5:"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(session.running());
  EXPECT_EQ(open_perf_events(), 0u);
}

// stop() while the start prepares: the start gives up, the handler says so, on_done runs, and
// nothing of the start stays open.
void stop_while_starting(std::chrono::milliseconds delay) {
  const std::size_t before = open_perf_events();
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  Session session(io.get_executor(), fresh_kernel_recipe("async_cancel"), out, command_options());
  bool done = false;
  session.on_done([&] { done = true; });
  std::exception_ptr got;
  bool handled = false;
  session.async_start([&](std::exception_ptr e) {
    got = e;
    handled = true;
  });
  boost::asio::steady_timer later(io, delay);
  if (delay.count() == 0)
    session.stop();
  else
    later.async_wait([&](const boost::system::error_code&) { session.stop(); });
  io.run_for(std::chrono::seconds(20));
  ASSERT_TRUE(handled);
  if (got) {
    try {
      std::rethrow_exception(got);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), std::make_error_code(std::errc::operation_canceled)) << e.what();
    }
  } else {  // the start was done first: the stop was an ordinary one
    EXPECT_GT(delay.count(), 0);
  }
  EXPECT_TRUE(done);
  EXPECT_FALSE(session.running());
  EXPECT_EQ(open_perf_events(), before);
}

TEST(SessionAsync, StopAtOnceCancelsTheStart) {
  stop_while_starting(std::chrono::milliseconds(0));
}

// Later stops land in the resolution, the compile, or after the events opened (a start takes
// about 200 ms here): whichever step is under way, the same outcome.
TEST(SessionAsync, StopWhileItResolvesCompilesOrOpensCancelsTheStartAndLeavesNothingOpen) {
  for (const int ms : {20, 60, 120, 180}) {
    SCOPED_TRACE(ms);
    stop_while_starting(std::chrono::milliseconds(ms));
  }
}

// A session destroyed while its start prepares: the destructor waits for the step under way, and
// the completion it had posted never runs the handler.
TEST(SessionAsync, ASessionDestroyedWhileStartingNeverRunsTheHandler) {
  const std::size_t before = open_perf_events();
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  bool handled = false;
  {
    Session session(io.get_executor(), fresh_kernel_recipe("async_destroyed"), out,
                    command_options());
    session.async_start([&](std::exception_ptr) { handled = true; });
  }
  io.run_for(std::chrono::seconds(2));
  EXPECT_FALSE(handled);
  EXPECT_EQ(open_perf_events(), before);
}

/// System-wide, in the kernel: this process's lseek calls on its own fd counted by pipeline
/// "seeks"; with `fresh`, a second pipeline "fresh" behind a filter on a constant no earlier run
/// used (new program text: applying it compiles).
Recipe change_recipe(const std::string& name, bool fresh) {
  std::random_device rd;
  const std::uint64_t salt = (std::uint64_t{rd()} << 20) | (rd() & 0xfffff);
  const fs::path path =
      tracer::testing::scratch_path(name + "_" + std::to_string(::getpid()) + ".toml");
  std::string text = fmt::format(R"([recipe]
name = "{}"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[pipeline]]
name = "seeks"
[[pipeline.stage]]
use = "filter"
expr = "fd == {}"
[[pipeline.stage]]
use = "count"
by = ["probe"]
)",
                                 name, testing::own_fd());
  if (fresh) {
    text += fmt::format(R"([[pipeline]]
name = "fresh"
[[pipeline.stage]]
use = "filter"
expr = "fd == {} && pid != {}"
[[pipeline.stage]]
use = "count"
by = ["probe"]
)",
                        testing::own_fd(), 4'000'000'000ULL + salt % 1'000'000'000ULL);
  }
  std::ofstream(path) << text;
  Recipe recipe = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  return recipe;
}

/// The final counts of each pipeline's lseek row, by pipeline index.
auto final_lseeks(std::map<std::size_t, std::uint64_t>& into) {
  return [&into](const TableUpdate& u) {
    if (!u.final)
      return;
    for (const auto& row : u.table.rows) {
      if (std::get<std::string>(row.keys.at(0)) == "lseek")
        into[u.pipeline] += std::get<std::uint64_t>(row.values.at(0));
    }
  };
}

// The host's 5 ms timer during a live change that compiles a new in-kernel pipeline: apply()
// holds the thread for its whole length (the reference, measured in the same run); async_apply
// compiles on a thread of its own and the timer keeps its schedule. Either way the kept pipeline
// counts the calls before and after the change and the new one exactly those after it.
TEST(SessionAsync, TheHostsTimersKeepTheirScheduleWhileALiveChangeCompiles) {
  constexpr std::uint64_t kSeeks = 3000;
  const std::string workload =
      testing::own_fd_env() + TRACER_SYSCALLER_PATH + " lseek " + std::to_string(kSeeks);
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);

  Clock::duration blocking{};
  std::map<std::size_t, std::uint64_t> blocking_counts;
  {
    Session session(io.get_executor(), change_recipe("blocking_apply", false), out);
    session.on_table(final_lseeks(blocking_counts));
    session.start();
    ASSERT_EQ(std::system(workload.c_str()), 0);
    const auto t = Clock::now();
    const RecipeChanges changes = session.apply(change_recipe("blocking_apply", true));
    blocking = Clock::now() - t;
    EXPECT_EQ(changes.pipelines_added, std::vector<std::string>{"fresh"});
    ASSERT_EQ(std::system(workload.c_str()), 0);
    session.stop();
  }
  EXPECT_EQ(blocking_counts[0], 2 * kSeeks);
  EXPECT_EQ(blocking_counts[1], kSeeks);

  io.restart();
  HostTimer host(io, std::chrono::milliseconds(5));
  std::map<std::size_t, std::uint64_t> async_counts;
  Session session(io.get_executor(), change_recipe("async_apply", false), out);
  session.on_table(final_lseeks(async_counts));
  session.start();
  ASSERT_EQ(std::system(workload.c_str()), 0);
  bool handled = false;
  std::exception_ptr failure;
  RecipeChanges changes;
  Clock::duration async_length{};
  const Recipe next = change_recipe("async_apply", true);
  const auto t = Clock::now();
  boost::asio::post(io, [&] {
    host.start();
    session.async_apply(next, [&](std::exception_ptr e, RecipeChanges c) {
      failure = e;
      changes = std::move(c);
      handled = true;
      async_length = Clock::now() - t;
      host.watching = false;
      host.cancel();
    });
    // Meanwhile no other change: apply() is refused.
    try {
      session.apply(next);
      ADD_FAILURE() << "apply() during async_apply";
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kUsage) << e.what();
    }
  });
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (!handled && Clock::now() < until)
    io.run_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(handled) << "async_apply's handler never ran";
  if (failure)
    std::rethrow_exception(failure);
  EXPECT_EQ(changes.pipelines_added, std::vector<std::string>{"fresh"});
  ASSERT_EQ(std::system(workload.c_str()), 0);
  session.stop();
  EXPECT_EQ(async_counts[0], 2 * kSeeks);
  EXPECT_EQ(async_counts[1], kSeeks);
  host.expect_on_schedule("apply", blocking, async_length);
}

// A change that cannot apply (an unknown tracepoint) reaches the handler as apply() throws it,
// at its position, and the session goes on as it was, counting exactly.
TEST(SessionAsync, ALiveChangeErrorReachesTheHandlerAndTheSessionGoesOn) {
  constexpr std::uint64_t kSeeks = 2000;
  const std::string workload =
      testing::own_fd_env() + TRACER_SYSCALLER_PATH + " lseek " + std::to_string(kSeeks);
  const fs::path path =
      tracer::testing::scratch_path("async_apply_typo_" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << R"([recipe]
name = "typo"
placement = "kernel"
[[probe]]
name = "lseek"
tracepoint = "syscalls:sys_enter_lseek"
[[probe]]
name = "x"
tracepoint = "syscalls:sys_enter_getppidd"
[[pipeline]]
name = "seeks"
[[pipeline.stage]]
use = "count"
by = ["probe"]
)";
  Recipe typo = Recipe::load(path.string(), {.stages = stage_catalog()});
  fs::remove(path);
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  const std::size_t before = open_perf_events();
  std::map<std::size_t, std::uint64_t> counts;
  {
    Session session(io.get_executor(), change_recipe("apply_error", false), out);
    session.on_table(final_lseeks(counts));
    session.start();
    const std::size_t running = open_perf_events();
    std::exception_ptr got;
    bool handled = false;
    session.async_apply(typo, [&](std::exception_ptr e, RecipeChanges) {
      got = e;
      handled = true;
    });
    EXPECT_FALSE(handled) << "never inside async_apply";
    io.run_for(std::chrono::seconds(2));
    ASSERT_TRUE(handled);
    ASSERT_TRUE(got);
    try {
      std::rethrow_exception(got);
    } catch (const Error& e) {
      EXPECT_EQ(e.category(), ErrorCategory::kRecipe) << e.what();
      EXPECT_NE(std::string(e.what()).find(path.string() + ":9:"), std::string::npos) << e.what();
    }
    EXPECT_EQ(open_perf_events(), running) << "nothing of the change stays open";
    ASSERT_EQ(std::system(workload.c_str()), 0);
    session.stop();
  }
  EXPECT_EQ(counts[0], kSeeks);
  EXPECT_EQ(open_perf_events(), before);
}

// stop() while the change compiles: the change is given up (its handler gets
// operation_canceled), the session's final tables are those of the recipe that ran, and nothing
// stays open; a session destroyed meanwhile never runs the handler.
TEST(SessionAsync, AStopWhileALiveChangeCompilesCancelsIt) {
  const std::size_t before = open_perf_events();
  std::string text;
  Sink out = Sink::to_string(&text);
  boost::asio::io_context io(1);
  {
    std::map<std::size_t, std::uint64_t> counts;
    Session session(io.get_executor(), change_recipe("apply_stopped", false), out);
    session.on_table(final_lseeks(counts));
    session.start();
    ASSERT_EQ(std::system((testing::own_fd_env() + TRACER_SYSCALLER_PATH + " lseek 500").c_str()),
              0);
    std::exception_ptr got;
    bool handled = false;
    session.async_apply(change_recipe("apply_stopped", true),
                        [&](std::exception_ptr e, RecipeChanges) {
                          got = e;
                          handled = true;
                        });
    session.stop();
    io.run_for(std::chrono::seconds(20));
    ASSERT_TRUE(handled);
    ASSERT_TRUE(got);
    try {
      std::rethrow_exception(got);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), std::make_error_code(std::errc::operation_canceled)) << e.what();
    }
    EXPECT_FALSE(session.running());
    EXPECT_EQ(counts, (std::map<std::size_t, std::uint64_t>{{0, 500}}))
        << "the final tables of the recipe that ran";
  }
  EXPECT_EQ(open_perf_events(), before);
  io.restart();
  bool handled = false;
  {
    Session session(io.get_executor(), change_recipe("apply_destroyed", false), out);
    session.start();
    session.async_apply(change_recipe("apply_destroyed", true),
                        [&](std::exception_ptr, RecipeChanges) { handled = true; });
  }
  io.run_for(std::chrono::seconds(2));
  EXPECT_FALSE(handled);
  EXPECT_EQ(open_perf_events(), before);
}

}  // namespace
}  // namespace tracer
