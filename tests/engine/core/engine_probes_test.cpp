// Engine with uprobes/uretprobes (through the uprobe PMU and through tracefs dynamic events),
// on a command it starts, and kprobes on this kernel (a clear error when unsupported).
#include <asm/perf_regs.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/probe_backend.hpp"
#include "tracer/engine.hpp"
#include "tracer/error.hpp"

#include "support/temp_dir.hpp"

namespace tracer {
namespace {

using namespace std::chrono_literals;

struct UprobeRun {
  std::vector<std::uint64_t> entry_args;  // rdi of each uprobe hit
  std::vector<std::uint64_t> returns;     // rax of each uretprobe hit
  std::uint64_t foreign = 0;
  std::string pmu_entry, pmu_return;
  bool group_seen_while_running = false;
};

using tracer::testing::slurp;

UprobeRun run_uprobes(const std::string& binary,
                      const std::string& symbol,
                      int calls,
                      bool prefer_tracefs) {
  boost::asio::io_context io;
  // Through tracefs: on a command the engine starts. Through the probe PMU: system-wide, the
  // binary run by the test (a task target places its uprobes through tracefs: the PMU cannot
  // inherit them into the tasks a target creates).
  EngineOptions opts{
      .target = prefer_tracefs ? Target{.kind = Target::Kind::kCommand,
                                        .command = {binary, std::to_string(calls)}}
                               : Target{.kind = Target::Kind::kAllCpus},
      .probes = {{.name = "entry", .kind = ProbeKind::kUprobe, .spec = binary + ":" + symbol},
                 {.name = "return", .kind = ProbeKind::kUretprobe, .spec = binary + ":" + symbol}},
      .prefer_tracefs_probes = prefer_tracefs};
  Engine engine(io.get_executor(), opts);
  UprobeRun run;
  pid_t command = -1;
  int di = -1, ax = -1;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      const auto* s = std::get_if<perf::Sample>(&r.record.body);
      if (s == nullptr)
        continue;
      if (static_cast<pid_t>(s->pid) != command)
        ++run.foreign;
      if (s->regs_user.regs.empty())
        continue;
      if (r.probe == 0) {
        run.entry_args.push_back(s->regs_user.regs[di]);
      } else {
        run.returns.push_back(s->regs_user.regs[ax]);
      }
    }
  });
  engine.start();
  if (prefer_tracefs) {
    command = engine.command_pid();
  } else {
    command = ::fork();
    if (command == 0) {
      const std::string n = std::to_string(calls);
      ::execl(binary.c_str(), binary.c_str(), n.c_str(), nullptr);
      ::_exit(127);
    }
  }
  run.pmu_entry = engine.probes()[0].pmu;
  run.pmu_return = engine.probes()[1].pmu;
  di = perf::reg_slot(engine.probes()[0].sample_regs_user, PERF_REG_X86_DI);
  ax = perf::reg_slot(engine.probes()[1].sample_regs_user, PERF_REG_X86_AX);
  EXPECT_GE(di, 0);
  EXPECT_EQ(ax, 0);
  run.group_seen_while_running =
      slurp("/sys/kernel/tracing/uprobe_events").find("tracer_") != std::string::npos;
  if (prefer_tracefs) {
    io.run_for(10s);
  } else {
    for (int i = 0; i < 1000 && ::waitpid(command, nullptr, WNOHANG) != command; ++i)
      io.run_for(10ms);
    io.run_for(100ms);
    engine.stop();
  }
  EXPECT_FALSE(engine.running()) << "the command should have exited";
  return run;
}

void expect_exact(const UprobeRun& run, int calls, std::uint64_t factor) {
  ASSERT_EQ(run.entry_args.size(), static_cast<std::size_t>(calls));
  ASSERT_EQ(run.returns.size(), static_cast<std::size_t>(calls));
  EXPECT_EQ(run.foreign, 0U);
  for (int i = 0; i < calls; ++i) {
    EXPECT_EQ(run.entry_args[i], static_cast<std::uint64_t>(i + 1)) << "argument of call " << i;
    EXPECT_EQ(run.returns[i], factor * (i + 1)) << "return value of call " << i;
  }
}

TEST(EngineUprobes, PmuPathOnAPieBinaryExactCountsArgsAndReturnValues) {
  const auto run = run_uprobes(TRACER_UPROBE_TARGET, "tracer_test_fn", 9, false);
  EXPECT_EQ(run.pmu_entry, "uprobe");
  EXPECT_FALSE(run.group_seen_while_running) << "the PMU path creates no tracefs probe";
  expect_exact(run, 9, 3);
}

TEST(EngineUprobes, PmuPathOnASharedLibraryFunction) {
  // lib_user calls tracer_lib_fn in libtracer_target.so: probe the library itself.
  boost::asio::io_context io;
  const std::string lib = TRACER_TARGET_LIB;
  Engine engine(
      io.get_executor(),
      {.target = {.kind = Target::Kind::kCommand, .command = {TRACER_LIB_USER, "6"}},
       .probes = {{.name = "ret", .kind = ProbeKind::kUretprobe, .spec = lib + ":tracer_lib_fn"}}});
  std::vector<std::uint64_t> returns;
  engine.on_batch([&](const Batch& b) {
    for (const auto& r : b.records) {
      if (const auto* s = std::get_if<perf::Sample>(&r.record.body)) {
        if (!s->regs_user.regs.empty())
          returns.push_back(s->regs_user.regs[0]);
      }
    }
  });
  engine.start();
  io.run_for(10s);
  ASSERT_EQ(returns.size(), 6U);
  for (std::size_t i = 0; i < returns.size(); ++i)
    EXPECT_EQ(returns[i], 5 * (i + 1));
}

TEST(EngineUprobes, TracefsPathExactCountsAndRemovesItsProbes) {
  const auto run = run_uprobes(TRACER_UPROBE_TARGET, "tracer_test_fn", 7, true);
  EXPECT_NE(run.pmu_entry.find("uprobe_events"), std::string::npos) << run.pmu_entry;
  EXPECT_TRUE(run.group_seen_while_running);
  expect_exact(run, 7, 3);
  EXPECT_EQ(slurp("/sys/kernel/tracing/uprobe_events").find("tracer_"), std::string::npos)
      << "the engine removed its dynamic probes at stop";
}

TEST(EngineUprobes, UnknownSymbolSuggestsNearNames) {
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.probes = {{.name = "u",
                             .kind = ProbeKind::kUprobe,
                             .spec = std::string(TRACER_UPROBE_TARGET) + ":tracer_test_fm"}}});
  try {
    engine.start();
    FAIL() << "start() succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kNotFound) << e.what();
    EXPECT_NE(e.hint().find("tracer_test_fn"), std::string::npos) << e.hint();
  }
}

TEST(EngineKprobes, ClearErrorWhenTheKernelHasNoKprobes) {
  const auto backend = core::choose_probe_backend(core::ProbeFamily::kKprobe,
                                                  {.tracefs_root = "/sys/kernel/tracing"});
  if (backend.kind != core::ProbeBackendKind::kUnsupported) {
    GTEST_SKIP() << "this kernel supports kprobes; the unsupported path is covered with fake trees";
  }
  boost::asio::io_context io;
  Engine engine(io.get_executor(),
                {.probes = {{.name = "k", .kind = ProbeKind::kKprobe, .spec = "do_nanosleep"}}});
  try {
    engine.start();
    FAIL() << "start() succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.category(), ErrorCategory::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("do_nanosleep"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(backend.reason), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("CONFIG_KPROBES"), std::string::npos) << e.hint();
  }
}

}  // namespace
}  // namespace tracer
