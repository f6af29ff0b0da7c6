// Test support for the code generator's tests: tracepoint fields as plan fields, plans,
// building and attaching a generated program, a child running the syscaller, rows by key.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "support/child.hpp"
#include "support/stage_batches.hpp"
#include "support/temp_dir.hpp"
#include "tracer/bpf/object.hpp"
#include "tracer/common/buckets.hpp"
#include "tracer/ext/stage.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/kernel/codegen.hpp"
#include "tracer/kernel/reader.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/pmu.hpp"
#include "tracer/perf/ring.hpp"
#include "tracer/symbols/uprobe_target.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::kernel::gen::harness {

using bpf::Object;
using testing::cv;
using testing::cv_table;
using namespace std::chrono_literals;

/// The compile cache the CLI and the sessions use (bpf::default_cache_dir(): root's
/// ~/.cache/tracer/bpf, each object verified by its content sum before it is loaded): each test
/// runs in a process of its own, and a cache of the process's own was never hit. A directory of
/// the test binary's lifetime when there is none.
inline const std::filesystem::path& cache_dir() {
  static const std::filesystem::path dir = [] {
    if (auto shared = bpf::default_cache_dir())
      return *shared;
    static testing::TempDir own;
    return own.path();
  }();
  return dir;
}

inline bool is_root() {
  return ::geteuid() == 0;
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// A tracefs field as the generator reads it.
inline Field field_of(const tracefs::Format& f, std::string_view name) {
  const tracefs::Field* x = f.field(name);
  if (x == nullptr) {
    ADD_FAILURE() << f.name << " has no field " << name;
    return Field::missing(std::string(name));
  }
  if (x->is_data_loc || x->is_rel_loc)
    return Field::tp_data_loc(x->name, x->offset, x->is_rel_loc);
  if (x->is_string)
    return Field::tp_string(x->name, x->offset, x->size);
  return Field::tp_int(x->name, x->offset, x->size, x->is_signed);
}

inline std::uint32_t record_size(const tracefs::Format& f) {
  std::uint32_t end = 0;
  for (const auto& x : f.fields)
    end = std::max(end, x.offset + x.size);
  return end;
}

inline tracefs::Format format(std::string_view sys, std::string_view event) {
  auto fs = tracefs::Tracefs::open();
  if (!fs) {
    ADD_FAILURE() << fs.error().describe();
    return {};
  }
  auto f = fs->format({std::string(sys), std::string(event)});
  if (!f) {
    ADD_FAILURE() << f.error().describe();
    return {};
  }
  return *f;
}

/// A program forked now and exec'd on go(): its pid is known before it makes any call.
class Spawn {
 public:
  explicit Spawn(std::vector<std::string> argv) : argv_(std::move(argv)) {
    std::vector<char*> args;
    for (auto& a : argv_)
      args.push_back(a.data());
    args.push_back(nullptr);
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
      throw std::runtime_error("pipe2");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[1]);
      char c;
      if (::read(p[0], &c, 1) < 0)
        ::_exit(126);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
    ::close(p[0]);
    go_ = p[1];
  }
  Spawn(const Spawn&) = delete;
  Spawn& operator=(const Spawn&) = delete;
  ~Spawn() {
    if (pid_ > 0 && !waited_) {
      ::kill(pid_, SIGKILL);
      wait();
    }
    if (go_ >= 0)
      ::close(go_);
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  void go() {
    ::close(go_);  // EOF: the child execs
    go_ = -1;
  }
  /// The exit status (or -1).
  int wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    waited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  /// Whether it exited (reaped then).
  bool exited() {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      waited_ = true;
      return true;
    }
    return false;
  }

 private:
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
  int go_ = -1;
  bool waited_ = false;
};

inline std::vector<std::string> syscaller(std::string_view mode, long n) {
  return {TRACER_SYSCALLER_PATH, std::string(mode), std::to_string(n)};
}

/// A generated, compiled and loaded pipeline.
struct Built {
  GeneratedProgram prog;
  std::unique_ptr<Object> obj;
};

inline Built build(const KernelPlan& plan) {
  Built b;
  auto prog = generate(plan);
  if (!prog) {
    ADD_FAILURE() << prog.error().describe();
    return b;
  }
  b.prog = std::move(*prog);
  auto obj = compile(b.prog, {.cache_dir = cache_dir()});
  if (!obj) {
    ADD_FAILURE() << obj.error().describe() << "\n" << b.prog.source;
    return b;
  }
  if (auto st = load(*obj, b.prog); !st) {
    ADD_FAILURE() << st.error().describe() << "\n" << b.prog.source;
    return b;
  }
  b.obj = std::make_unique<Object>(std::move(*obj));
  if (b.prog.tgid_map && !plan.tgids.empty()) {
    auto st = set_targets(*b.obj, b.prog, plan.tgids);
    EXPECT_TRUE(st.has_value()) << st.error().describe();
  }
  return b;
}

/// The tracepoint's perf event on CPU 0 (disabled: the program runs on every CPU's hits all the
/// same, as long as the event exists) with `prog` attached. One event per program: the kernel
/// keeps one program array per tracepoint, so a program attached to every CPU's event would run
/// once per event for each hit.
inline perf::Event attach_tracepoint(const Object& obj, const std::string& prog, std::uint32_t id) {
  perf::EventAttr a;
  a.type(PERF_TYPE_TRACEPOINT).config(id).sample_period(1).flag(perf::Flag::kDisabled);
  auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
  if (!ev) {
    ADD_FAILURE() << ev.error().describe();
    return {};
  }
  auto fd = obj.program_fd(prog);
  EXPECT_TRUE(fd.has_value());
  if (fd) {
    auto st = ev->set_bpf(*fd);
    EXPECT_TRUE(st.has_value()) << st.error().describe();
  }
  return std::move(*ev);
}

// ---------------------------------------------------------------------------------------------
// Aggregations: the stages' own kernel parts, and their rows read back through the stages

/// The options of aggregation stage `use` for a plan's kernel part: `extra`, and a field when it
/// aggregates one (the kernel part does not depend on its name).
inline ConfigTable part_options(std::string_view use, ConfigTable extra) {
  const bool has_field =
      std::any_of(extra.begin(), extra.end(), [](const auto& kv) { return kv.first == "field"; });
  if (use != "count" && use != "rate" && !has_field)
    extra.emplace_back("field", cv("value"));
  if (use == "lhist" && extra.size() == 1)  // the field alone: [0, 100) by 10
    extra.insert(extra.end(), {{"min", cv(0)}, {"max", cv(100)}, {"step", cv(10)}});
  return extra;
}

/// Stage `use` of the registry, configured with `extra` (lhist: min, max, step).
inline std::unique_ptr<Stage> aggregation_stage(std::string_view use, ConfigTable extra = {}) {
  auto stage = stage_registry().make(use);
  Diagnostics diags;
  stage->configure(cv_table(part_options(use, std::move(extra))), diags);
  EXPECT_TRUE(diags.empty()) << diags.format();
  return stage;
}

/// The kernel part of stage `use` (KernelForm::agg): what a plan's aggregation computes. The
/// generator knows no aggregation of its own: its tests take the stages'.
inline std::shared_ptr<const KernelAgg> agg_of(std::string_view use, ConfigTable extra = {}) {
  auto agg = kernel_form_of(*aggregation_stage(use, std::move(extra))).agg;
  EXPECT_NE(agg, nullptr) << use;
  return agg;
}

/// A row read back as its stage renders it: the key cells the reader decoded, the stage's table
/// values and buckets, and the events of the key.
struct Rendered {
  std::vector<Cell> keys;
  std::uint64_t count = 0;
  std::vector<tracer::Cell> values;
  std::vector<HistBucket> buckets;
};

/// Row `r` absorbed by a new stage `use` (configured with `extra`), then its table's one row.
inline tracer::TableRow table_row(std::string_view use, const Row& r, const ConfigTable& extra) {
  auto stage = aggregation_stage(use, extra);
  stage->in_kernel()->absorb({r});
  Table t;
  t.time = std::chrono::seconds(1);
  stage->aggregation()->snapshot(t, true);
  EXPECT_EQ(t.rows.size(), 1U) << use;
  return t.rows.empty() ? tracer::TableRow{} : t.rows[0];
}

/// The snapshot's rows, in its order, through stage `use`. Events: the table's count (count,
/// rate, the distributions' first value); the other scalar stages' values begin with their
/// events (plugins/stages/scalar.cpp: `__u64 count`), which a count stage reads.
inline std::vector<Rendered> render(std::string_view use,
                                    const Snapshot& s,
                                    const ConfigTable& extra = {}) {
  const bool scalar = use == "sum" || use == "min" || use == "max" || use == "avg";
  std::vector<Rendered> out;
  for (const Row& r : s.rows) {
    const tracer::TableRow t = table_row(use, r, extra);
    Rendered x{.keys = r.keys, .values = t.values, .buckets = t.buckets};
    const tracer::TableRow c = scalar ? table_row("count", r, {}) : t;
    if (!c.values.empty()) {
      if (const auto* n = std::get_if<std::uint64_t>(&c.values[0]))
        x.count = *n;
    }
    out.push_back(std::move(x));
  }
  return out;
}

/// Rows as key text -> row (keys joined by '|').
inline std::string key_text(const std::vector<Cell>& keys) {
  std::string out;
  for (const Cell& c : keys) {
    if (!out.empty())
      out += '|';
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::monostate>)
            out += "-";
          else if constexpr (std::is_same_v<T, std::string>)
            out += x;
          else if constexpr (std::is_same_v<T, Ips>)
            out += fmt::format("{}@{:x}", x.pid, fmt::join(x.ips, ","));
          else
            out += std::to_string(x);
        },
        c);
  }
  return out;
}
inline std::string key_text(const Rendered& r) {
  return key_text(r.keys);
}
inline std::string key_text(const Row& r) {
  return key_text(r.keys);
}
inline std::map<std::string, Rendered> by_key(std::string_view use,
                                              const Snapshot& s,
                                              const ConfigTable& extra = {}) {
  std::map<std::string, Rendered> out;
  for (Rendered& r : render(use, s, extra))
    out[key_text(r)] = std::move(r);
  return out;
}

inline KernelPlan count_plan(const tracefs::Format& f,
                             std::vector<Field> keys,
                             std::vector<std::string> names) {
  KernelPlan plan;
  plan.probes.push_back(ProbePlan{.name = f.name,
                                  .kind = ProbeKind::kTracepoint,
                                  .keys = std::move(keys),
                                  .record_size = record_size(f)});
  plan.aggregation.agg = agg_of("count");
  plan.aggregation.key_names = std::move(names);
  return plan;
}

#define REQUIRE_ROOT()                                            \
  do {                                                            \
    if (!is_root())                                               \
      GTEST_SKIP() << "needs root (BPF programs on tracepoints)"; \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Plans that cannot run in the kernel say why

inline FilterNode cmp(Operand a, Cmp op, Operand b) {
  return {.kind = FilterNode::Kind::kCmp, .op = op, .a = std::move(a), .b = std::move(b)};
}
inline Operand fld(Field f) {
  return {.kind = Operand::Kind::kField, .field = std::move(f)};
}
inline Operand str(std::string s, bool glob = false) {
  return {.kind = Operand::Kind::kString, .text = std::move(s), .glob = glob};
}
inline Operand num(std::int64_t v) {
  return {.kind = Operand::Kind::kInt, .ival = v};
}

inline KernelPlan simple_plan() {
  KernelPlan plan;
  plan.probes.push_back({.name = "p", .kind = ProbeKind::kTracepoint, .keys = {Field::pid()}});
  plan.aggregation = {.agg = agg_of("count"), .key_names = {"pid"}};
  return plan;
}

}  // namespace tracer::kernel::gen::harness
