#include "tracer/engine.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bpf/libbpf.h>
#include <algorithm>
#include <bit>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/edit_distance.hpp"
#include "core/privileges.hpp"
#include "core/probe_resolver.hpp"
#include "core/ring_budget.hpp"
#include "core/ring_reader.hpp"
#include "core/ring_wait.hpp"
#include "core/tp_delivery.hpp"
#include "progs/tp_deliver.h"
#include "progs/tp_hits.h"
#include "tracer/bpf/object.hpp"
#include "tracer/bpf/output_channel.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/event.hpp"
#include "tracer/perf/software.hpp"
#include "tracer/tracefs/dynamic_probes.hpp"

namespace tracer {

namespace asio = boost::asio;

std::string_view to_string(ProbeKind k) noexcept {
  switch (k) {
    case ProbeKind::kTracepoint:
      return "tracepoint";
    case ProbeKind::kKprobe:
      return "kprobe";
    case ProbeKind::kKretprobe:
      return "kretprobe";
    case ProbeKind::kUprobe:
      return "uprobe";
    case ProbeKind::kUretprobe:
      return "uretprobe";
    case ProbeKind::kSoftware:
      return "software";
    case ProbeKind::kHardware:
      return "hardware";
    case ProbeKind::kCache:
      return "cache";
    case ProbeKind::kRawPmu:
      return "pmu";
    case ProbeKind::kBreakpoint:
      return "breakpoint";
    case ProbeKind::kAux:
      return "aux";
    case ProbeKind::kBpfOutput:
      return "bpf-output";
  }
  return "?";
}

RingStats& RingStats::operator+=(const RingStats& o) noexcept {
  records += o.records;
  samples += o.samples;
  bytes += o.bytes;
  lost += o.lost;
  lost_samples += o.lost_samples;
  aux_chunks += o.aux_chunks;
  aux_bytes += o.aux_bytes;
  aux_truncated += o.aux_truncated;
  aux_lost += o.aux_lost;
  decode_errors += o.decode_errors;
  unrouted += o.unrouted;
  wakeups += o.wakeups;
  kernel_hits += o.kernel_hits;
  missed += o.missed;
  return *this;
}

RingStats ProbeStats::total() const noexcept {
  RingStats t;
  for (const auto& [cpu, s] : per_cpu)
    t += s;
  return t;
}

namespace {

[[noreturn]] void throw_failure(ErrorCategory cat,
                                const Failure& f,
                                const std::string& prefix = {}) {
  throw Error(cat, f.code, prefix.empty() ? f.message : prefix + ": " + f.message, f.hint);
}

std::vector<pid_t> threads_of(pid_t pid) {
  std::vector<pid_t> tids;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(fmt::format("/proc/{}/task", pid), ec)) {
    tids.push_back(static_cast<pid_t>(std::stol(e.path().filename().string())));
  }
  return tids;
}

}  // namespace

struct Engine::Impl : std::enable_shared_from_this<Engine::Impl> {
  struct Reader {
    Reader(core::RingReader r,
           const asio::any_io_executor& executor,
           int fd,
           const perf::EventAttr& attr)
        : reader(std::move(r)),
          wait(executor,
               fd,
               *reader.ring().meta(),
               attr.raw()->watermark != 0 ? attr.raw()->wakeup_watermark : 0) {}
    core::RingReader reader;
    core::RingWait wait;
    BatchHandler via;  // set: this ring's batches go through it (tracepoint delivery)  // on the
                       // ring's event fd (not owned); destroyed before the ring unmaps
    bool armed = false;
  };
  // The events of one probe on one CPU (one per traced thread for a pid target): the first
  // owns the ring, the others SET_OUTPUT into it.
  struct CpuEvents {
    int cpu = -1;
    std::vector<perf::Event> events;
    Reader* reader = nullptr;
  };

  Impl(asio::any_io_executor ex, EngineOptions o)
      : serial(core::serial_executor(ex)), opts(std::move(o)), flush_timer(serial) {}

  // Every handler of the engine's runs here: a strand of the given executor, or the executor
  // itself when one thread runs its io_context (core::serial_executor).
  asio::any_io_executor serial;
  EngineOptions opts;
  BatchHandler batch_handler;
  std::function<void()> done_handler;
  std::function<void()> round_handler;
  std::vector<ProbeInfo> probes;
  std::vector<bool> counting;
  std::vector<std::vector<CpuEvents>> events;  // [probe][cpu slot]
  std::vector<std::unique_ptr<Reader>> readers;
  asio::steady_timer flush_timer;
  std::optional<asio::posix::stream_descriptor> exit_watch;  // the target's pidfd
  UniqueFd cgroup_fd;
  std::optional<tracefs::DynamicProbes> dynamic;  // removed after the events close
  std::optional<bpf::Object> bpf_object;          // closed last: programs detach with the events
  // The tracepoint hit counter (count_tracepoint_hits): the object, each probe's tracepoint id
  // (0: not counted) and the per-CPU counts when the events were enabled.
  core::TracepointHits hit_counter;  // detached in cleanup()
  std::vector<std::uint32_t> hit_ids;
  std::vector<std::vector<std::uint64_t>> hit_base, hit_final, drop_base, drop_final;
  // Tracepoint probes delivered through BPF (deliver_tracepoints_via_bpf), by probe.
  std::optional<core::TracepointDelivery> delivery;
  std::vector<bool> delivered;
  std::unique_ptr<MapSource> map_source;     // Engine::maps(), made on first use
  std::optional<bpf::OutputChannel> output;  // bpf-output events (rings moved to readers)
  std::vector<Reader*> output_readers;       // readers of the output channel, per CPU
  pid_t child = -1;
  int child_status = 0;
  int go_fd = -1;
  bool running = false;
  bool stopped = false;
  bool target_exited = false;  // the engine stopped because the command or pid target exited
  // Passes over every ring: when the last began, how many were made and how many of them the
  // flush timer woke the engine for. timer_generation counts arm_timer() calls: a timer wait
  // armed before the latest one is stale.
  std::chrono::steady_clock::time_point last_pass{};
  std::uint64_t passes = 0;
  std::uint64_t timer_passes = 0;
  std::uint64_t timer_generation = 0;
  std::string ring_note;                 // how the rings were sized (Engine::ring_note)
  std::uint32_t output_ring_pages = 0;   // the output channel's default within a budget, or 0
  std::uint32_t ring_pages_default = 0;  // core::plan_rings' pages per ring
  std::exception_ptr failure;
  Stats final_stats;

  void start();
  void stop();
  void cleanup() noexcept;
  void open_probe(core::ResolvedProbe& rp,
                  const std::vector<int>& cpus,
                  const std::vector<pid_t>& pids);
  void start_command();
  void load_bpf(const BpfOptions& b, const std::vector<core::ResolvedProbe>& resolved);
  void open_output_channel(const BpfOptions& b, bpf::Object& obj);
  void attach_bpf_programs();
  void attach_hit_counters();
  /// Which probes deliver through BPF; their events then sample nothing (side-band records only).
  void plan_delivery(std::vector<core::ResolvedProbe>& resolved);
  void open_delivery();
  [[nodiscard]] std::vector<std::uint64_t> read_drops(std::size_t p) const;
  /// Per-CPU hits of probe `p`'s tracepoint so far (empty when not counted).
  [[nodiscard]] std::vector<std::uint64_t> read_hits(std::size_t p) const;
  void fill_tgids();
  void release_command();
  void arm(Reader& r);
  void arm_timer();
  /// True when a pass over every ring is due within half a flush interval.
  [[nodiscard]] bool pass_due() const noexcept;
  /// Stops the engine when `pid` exits (a started command, which is then reaped, or a pid
  /// target).
  void watch_exit(pid_t pid);
  void drain_all() noexcept;
  /// True (and `failure` set) when a batch handler threw: the engine must stop.
  bool check_handler_failure();
  Stats collect_stats() const;
};

void Engine::Impl::start_command() {
  // Forked now, held on a pipe until its events exist; enable_on_exec turns them on at exec.
  const auto& cmd = opts.target.command;
  std::vector<std::string> argv_storage(cmd.begin(), cmd.end());
  std::vector<char*> argv;
  for (auto& s : argv_storage)
    argv.push_back(s.data());
  argv.push_back(nullptr);
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) {
    throw Error(ErrorCategory::kRuntime, {errno, std::generic_category()}, "engine: pipe2 failed");
  }
  child = ::fork();
  if (child < 0) {
    const int err = errno;
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    throw Error(ErrorCategory::kRuntime, {err, std::generic_category()},
                fmt::format("engine: cannot fork for '{}': {}", cmd.front(), std::strerror(err)));
  }
  if (child == 0) {
    ::close(pipefd[1]);
    char c = 0;
    if (::read(pipefd[0], &c, 1) != 1)
      ::_exit(126);  // the engine gave up before starting it
    if (opts.target.stdout_to_stderr && ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
      ::_exit(126);
    ::execvp(argv[0], argv.data());
    const char* msg = "tracer: cannot execute the command\n";
    [[maybe_unused]] auto n = ::write(2, msg, std::strlen(msg));
    ::_exit(127);
  }
  ::close(pipefd[0]);
  go_fd = pipefd[1];
}

void Engine::Impl::release_command() {
  if (go_fd < 0)
    return;
  const char c = 'g';
  [[maybe_unused]] auto n = ::write(go_fd, &c, 1);
  ::close(go_fd);
  go_fd = -1;
}

void Engine::Impl::open_probe(core::ResolvedProbe& rp,
                              const std::vector<int>& cpus,
                              const std::vector<pid_t>& pids) {
  const auto& o = opts.probes[rp.info.index];
  auto& per_cpu = events.emplace_back();
  const bool task_target =
      opts.target.kind == Target::Kind::kPid || opts.target.kind == Target::Kind::kCommand;
  if (task_target)
    rp.attr.flag(perf::Flag::kInherit);
  if (rp.config1_is_attr_string) {
    // The probe PMU reads the path/symbol string at open time.
    rp.attr.config1(reinterpret_cast<std::uint64_t>(rp.attr_string.c_str()));
  }
  if (opts.target.kind == Target::Kind::kCommand)
    rp.attr.flag(perf::Flag::kEnableOnExec);
  for (int cpu : cpus) {
    CpuEvents ce;
    ce.cpu = cpu;
    for (pid_t pid : pids) {
      perf::OpenTarget t{.pid = pid, .cpu = cpu};
      if (opts.target.kind == Target::Kind::kCgroup) {
        t.pid = cgroup_fd.get();
        t.flags = PERF_FLAG_PID_CGROUP;
      }
      auto ev = perf::Event::open(rp.attr, t);
      if (!ev && ev.error().errno_value() == ESRCH && opts.target.kind == Target::Kind::kPid &&
          pid != opts.target.pid) {
        continue;  // a thread that exited since we listed it
      }
      if (!ev) {
        throw_failure(ev.error().errno_value() == EACCES || ev.error().errno_value() == EPERM
                          ? ErrorCategory::kPermission
                      : ev.error().errno_value() == ENOENT ? ErrorCategory::kUnsupported
                                                           : ErrorCategory::kRuntime,
                      ev.error(), fmt::format("probe '{}'", rp.info.name));
      }
      if (!o.filter.empty()) {
        if (auto st = ev->set_filter(o.filter); !st) {
          throw_failure(ErrorCategory::kUsage, st.error(), fmt::format("probe '{}'", rp.info.name));
        }
      }
      if (!rp.counting && !ce.events.empty()) {
        if (auto st = ev->set_output(ce.events.front().fd()); !st) {
          throw_failure(ErrorCategory::kRuntime, st.error(),
                        fmt::format("probe '{}'", rp.info.name));
        }
      }
      ce.events.push_back(std::move(*ev));
    }
    if (ce.events.empty())
      continue;
    if (!rp.counting) {
      auto ring = perf::Ring::map(ce.events.front().fd(), rp.ring);
      if (!ring)
        throw_failure(ErrorCategory::kRuntime, ring.error(),
                      fmt::format("probe '{}'", rp.info.name));
      auto r = std::make_unique<Reader>(
          core::RingReader(std::move(*ring), rp.info.index, cpu, &probes[rp.info.index].layout,
                           opts.max_batch, opts.decode_samples),
          serial, ce.events.front().fd(), probes[rp.info.index].attr);
      ce.reader = r.get();
      readers.push_back(std::move(r));
    }
    per_cpu.push_back(std::move(ce));
  }
}

void Engine::Impl::load_bpf(const BpfOptions& b, const std::vector<core::ResolvedProbe>& resolved) {
  const int sources =
      (b.builtin.empty() ? 0 : 1) + (b.object.empty() ? 0 : 1) + (b.source.empty() ? 0 : 1);
  if (sources != 1) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: BPF options need exactly one of builtin, object or source",
                R"(e.g. builtin = "syscall_output", object = "x.bpf.o" or source = "x.bpf.c")");
  }
  auto obj = !b.builtin.empty()  ? bpf::Object::open_shipped(b.builtin)
             : !b.object.empty() ? bpf::Object::open_file(b.object)
                                 : bpf::Object::compile_and_open(b.source, {});
  if (!obj) {
    throw_failure(
        obj.error().errno_value() == ENOENT ? ErrorCategory::kNotFound : ErrorCategory::kRuntime,
        obj.error(), "bpf");
  }
  bool nr_args_given = false;
  for (const auto& [name, value] : b.globals) {
    nr_args_given = nr_args_given || name == "nr_args";
    // The value goes in at the variable's size (a u32 knob takes the low 4 bytes): try 8, then
    // the narrower sizes the value fits in; only a size mismatch (EINVAL) moves on.
    auto st = obj->set_global(name, value);
    for (const std::size_t size : {4U, 2U, 1U}) {
      if (st || st.error().errno_value() != EINVAL || (size < 8 && value >> (size * 8) != 0))
        break;
      st = obj->set_global(name, std::as_bytes(std::span(&value, 1)).first(size));
    }
    if (!st)
      throw_failure(ErrorCategory::kUsage, st.error(), "bpf");
  }
  // Programs that read a syscall's arguments must not read past the tracepoint's record (the
  // kernel refuses the attach): tell them how many a syscalls:sys_enter_* record has.
  if (!nr_args_given) {
    for (const auto& rp : resolved) {
      const auto& po = opts.probes[rp.info.index];
      if (po.bpf_program.empty() || !rp.info.format || rp.info.format->system != "syscalls" ||
          !rp.info.format->name.starts_with("sys_enter_")) {
        continue;
      }
      std::uint32_t args = 0;
      for (const auto& f : rp.info.format->fields) {
        if (!f.is_common && f.name != "__syscall_nr")
          ++args;
      }
      [[maybe_unused]] auto st = obj->set_global("nr_args", args);  // absent in other programs
      break;
    }
  }
  if (auto st = obj->load(); !st) {
    Failure f = st.error();
    if (const auto& lf = obj->last_load_failure(); opts.verbose && lf.has_value()) {
      f.hint = "full verifier log:\n" + lf->verifier_log;
    }
    throw_failure(ErrorCategory::kRuntime, f, "bpf");
  }
  bpf_object.emplace(std::move(*obj));
}

namespace {
/// Whether the options ask for an output channel on `obj`.
bool wants_output(const BpfOptions& b, const bpf::Object& obj) {
  if (b.output_map.empty())
    return false;
  if (!b.output_optional)
    return true;
  const auto names = obj.map_names();
  return std::find(names.begin(), names.end(), b.output_map) != names.end();
}

/// A usage error about a [bpf] value, at the recipe position when there is one.
[[noreturn]] void throw_bpf_value_error(const std::optional<SourceRegion>& where,
                                        const std::string& message,
                                        const std::string& hint) {
  if (where) {
    Diagnostics d;
    d.add(*where, message, hint);
    d.throw_if_any();
  }
  throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument), message,
              hint);
}

/// The output channel's payload: the struct's schema (if named) and where its timestamp is.
struct OutputPayload {
  std::optional<bpf::StructSchema> schema;
  std::int32_t time_offset = -1;
};

OutputPayload output_payload(const BpfOptions& b, const bpf::Object& obj) {
  OutputPayload out;
  if (!b.payload_struct.empty()) {
    auto schema = obj.struct_schema(b.payload_struct);
    if (!schema) {
      throw_bpf_value_error(b.payload_struct_where, "[bpf] struct: " + schema.error().message,
                            schema.error().hint);
    }
    out.schema = std::move(*schema);
  }
  if (b.payload_time.empty())
    return out;
  if (!out.schema) {
    throw_bpf_value_error(b.payload_time_where,
                          fmt::format("[bpf] time = \"{}\" names a payload field, but no payload "
                                      "struct is given",
                                      b.payload_time),
                          "name the struct the programs emit: struct = \"...\" in [bpf]");
  }
  const auto& schema = *out.schema;
  const bpf::SchemaField* f = schema.field(b.payload_time);
  if (f == nullptr) {
    std::vector<std::string> names;
    for (const auto& field : schema.fields)
      names.push_back(field.name);
    const auto near = detail::nearest(b.payload_time, names, {.limit = 3});
    throw_bpf_value_error(
        b.payload_time_where,
        fmt::format("[bpf] time: struct '{}' has no field '{}'", schema.name, b.payload_time),
        near.empty() ? fmt::format("its fields: {}", fmt::join(names, ", "))
                     : fmt::format("did you mean {}?", fmt::join(near, ", ")));
  }
  if (f->kind != bpf::FieldKind::kUnsigned || f->size != 8 || f->bit_size != 0) {
    throw_bpf_value_error(
        b.payload_time_where,
        fmt::format("[bpf] time: field '{}' of struct '{}' is {} ({} bytes), not a u64", f->name,
                    schema.name, f->type_name, f->size),
        "name a __u64 field the programs set to bpf_ktime_get_ns(), or leave time out (the "
        "kernel then stamps each record)");
  }
  out.time_offset = static_cast<std::int32_t>(f->offset);
  return out;
}

bpf::OutputChannelOptions output_channel_options(const BpfOptions& b,
                                                 std::int32_t time_offset,
                                                 std::uint32_t budget_pages = 0) {
  const std::uint32_t pages = b.output_pages != 0 ? b.output_pages
                              : budget_pages != 0 ? budget_pages
                                                  : kDefaultOutputPages;
  return {.data_pages = pages,
          .wakeup_events = b.wakeup.events,
          .wakeup_watermark_bytes = b.wakeup.events != 0            ? 0
                                    : b.wakeup.watermark_bytes != 0 ? b.wakeup.watermark_bytes
                                                                    : pages * 4096 / 4,
          // A dedicated ring per CPU needs no identifier, and programs put pid/tid in their
          // payload: records stay small.
          .extra_sample_type = 0,
          .payload_time_offset = time_offset,
          .start_disabled = true};
}
}  // namespace

void Engine::Impl::open_output_channel(const BpfOptions& b, bpf::Object& obj) {
  if (!wants_output(b, obj))
    return;
  OutputPayload payload = output_payload(b, obj);
  auto channel = bpf::OutputChannel::open(
      obj, b.output_map, output_channel_options(b, payload.time_offset, output_ring_pages));
  if (!channel)
    throw_failure(ErrorCategory::kRuntime, channel.error(), "bpf output channel");
  output.emplace(std::move(*channel));
  ProbeInfo info;
  info.index = static_cast<std::uint32_t>(probes.size());
  info.name = b.output_name;
  info.kind = ProbeKind::kBpfOutput;
  info.spec = b.output_map;
  info.layout = output->layout();
  info.attr = output->attr();
  info.pmu = "software (bpf-output)";
  info.payload = std::move(payload.schema);
  probes.push_back(std::move(info));  // capacity reserved: layouts do not move
  counting.push_back(false);
  const auto& out_info = probes.back();
  for (auto& slot : output->cpus()) {
    if (!slot)
      continue;
    auto r = std::make_unique<Reader>(
        core::RingReader(std::move(slot->ring), out_info.index, slot->cpu, &out_info.layout,
                         opts.max_batch, opts.decode_samples),
        serial, slot->event.fd(), out_info.attr);
    output_readers.push_back(r.get());
    readers.push_back(std::move(r));
  }
}

void Engine::Impl::attach_bpf_programs() {
  for (std::size_t p = 0; p < events.size(); ++p) {
    const auto& name = opts.probes[p].bpf_program;
    if (name.empty())
      continue;
    if (!bpf_object) {
      throw Error(
          ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
          fmt::format("probe '{}': program '{}' but no BPF object", opts.probes[p].name, name),
          "give the engine BPF options (a recipe's [bpf] section)");
    }
    auto fd = bpf_object->program_fd(name);
    if (!fd)
      throw_failure(ErrorCategory::kUsage, fd.error(),
                    fmt::format("probe '{}'", opts.probes[p].name));
    if (events[p].empty() || events[p].front().events.empty())
      continue;
    // One attach per tracepoint: the program belongs to the tracepoint and runs on every CPU
    // (a second SET_BPF on another CPU's event of it fails with EEXIST). TOOLCHAIN.md.
    if (auto st = events[p].front().events.front().set_bpf(*fd); !st) {
      throw_failure(ErrorCategory::kRuntime, st.error(),
                    fmt::format("probe '{}'", opts.probes[p].name));
    }
  }
}

void Engine::Impl::attach_hit_counters() {
  hit_ids.assign(events.size(), 0);
  for (std::size_t p = 0; p < events.size() && p < delivered.size(); ++p)
    hit_ids[p] = delivered[p] ? 1 : 0;  // the delivery program counts their hits
  if (!opts.count_tracepoint_hits || opts.target.kind != Target::Kind::kAllCpus)
    return;
  for (std::size_t p = 0; p < events.size() && p < TP_HITS_MAX_TRACEPOINTS; ++p) {
    const auto& o = opts.probes[p];
    if (hit_ids[p] != 0)
      continue;
    // A probe with its own program keeps the tracepoint's single attach of ours for it; a
    // filtered probe's events see fewer than the tracepoint's hits by design.
    if (o.kind != ProbeKind::kTracepoint || !o.bpf_program.empty() || !o.filter.empty() ||
        !probes[p].format || events[p].empty() || events[p].front().events.empty())
      continue;
    // One program counts every probe's tracepoint, each link's cookie its slot.
    if (hit_counter.attach(static_cast<std::uint32_t>(p), events[p].front().events.front().fd()))
      hit_ids[p] = 1;
  }
}

std::vector<std::uint64_t> Engine::Impl::read_drops(std::size_t p) const {
  if (!delivery || p >= delivered.size() || !delivered[p])
    return {};
  return delivery->drops(static_cast<std::uint32_t>(p));
}

void Engine::Impl::plan_delivery(std::vector<core::ResolvedProbe>& resolved) {
  delivered.assign(resolved.size(), false);
  if (!opts.deliver_tracepoints_via_bpf || opts.target.kind != Target::Kind::kAllCpus)
    return;
  for (std::size_t p = 0; p < resolved.size(); ++p) {
    auto& rp = resolved[p];
    const auto& o = opts.probes[p];
    const auto* a = rp.attr.raw();
    // What the delivery rebuilds: a tracepoint's default samples, every hit.
    // A tracefs filter gates the perf event's samples, not a BPF program's view: such probes
    // sample through their events (a filter compiled to BPF would lift this).
    if (o.kind != ProbeKind::kTracepoint || rp.counting || !o.bpf_program.empty() ||
        !o.filter.empty() || !rp.info.format || a->sample_type != core::kDeliveredSampleType ||
        a->freq != 0 || a->sample_period != 1 || p >= TP_DELIVER_MAX_SLOTS)
      continue;
    delivered[p] = true;
    // The probe's own events sample nothing (their ring carries side-band records only: COMM,
    // FORK, EXIT when they were asked for); they remain the attach point of the program.
    constexpr std::uint32_t kSideBandPages = 16;
    rp.attr.sample_period(0);
    rp.ring.data_pages = std::min(rp.ring.data_pages, kSideBandPages);
    if (a->watermark != 0)
      rp.attr.wakeup_watermark(kSideBandPages * 4096 / 4);
  }
}

constexpr std::uint32_t kMaxDeliveryPages = 4096;  // 16 MiB per CPU

void Engine::Impl::open_delivery() {
  if (std::find(delivered.begin(), delivered.end(), true) == delivered.end())
    return;
  // One ring per CPU carries every delivered probe: the share each probe's own ring would have
  // had, times their number (at most 16 MiB).
  const auto n = static_cast<std::uint32_t>(std::count(delivered.begin(), delivered.end(), true));
  const std::uint32_t share = ring_pages_default != 0 ? ring_pages_default : kDefaultOutputPages;
  const std::uint32_t pages =
      std::bit_floor(std::min<std::uint32_t>(share * std::max(1U, n), kMaxDeliveryPages));
  auto d =
      core::TracepointDelivery::open(delivered.size(), {.data_pages = pages,
                                                        .wakeup_events = 0,
                                                        .wakeup_watermark_bytes = pages * 4096 / 4,
                                                        .extra_sample_type = 0,
                                                        .payload_time_offset = 0,
                                                        .start_disabled = false});
  if (!d) {
    // Without BPF delivery the probes sample through their own events, as before.
    throw_failure(ErrorCategory::kRuntime, d.error(), "tracepoint delivery (BPF)");
  }
  delivery.emplace(std::move(*d));
  for (auto& slot : delivery->channel().cpus()) {
    if (!slot)
      continue;
    auto r = std::make_unique<Reader>(
        core::RingReader(std::move(slot->ring), UINT32_MAX, slot->cpu,
                         &delivery->channel().layout(), opts.max_batch, true),
        serial, slot->event.fd(), delivery->channel().attr());
    r->via = [this](const Batch& b) { delivery->convert(b, probes, batch_handler); };
    readers.push_back(std::move(r));
  }
  for (std::size_t p = 0; p < delivered.size(); ++p) {
    const auto& format = probes[p].format;
    if (!delivered[p] || events[p].empty() || events[p].front().events.empty() ||
        !format.has_value())
      continue;
    if (auto st = delivery->attach(static_cast<std::uint32_t>(p), *format,
                                   events[p].front().events.front().fd());
        !st) {
      throw_failure(ErrorCategory::kRuntime, st.error(),
                    fmt::format("probe '{}': tracepoint delivery (BPF)", probes[p].name));
    }
  }
}

std::vector<std::uint64_t> Engine::Impl::read_hits(std::size_t p) const {
  if (p < delivered.size() && delivered[p] && delivery)
    return delivery->hits(static_cast<std::uint32_t>(p));
  if (p >= hit_ids.size() || hit_ids[p] == 0)
    return {};
  return hit_counter.read(static_cast<std::uint32_t>(p));
}

void Engine::Impl::fill_tgids() {
  if (!bpf_object)
    return;
  const auto maps = bpf_object->map_names();
  if (std::find(maps.begin(), maps.end(), "tgids") == maps.end())
    return;
  // Convention of tracer's programs: a hash `tgids` (u32 tgid -> u8) names the processes whose
  // events they emit or pass. The engine fills it with the pid or command target and the
  // processes the options list.
  std::vector<pid_t> tgids;
  if (opts.bpf)
    tgids = opts.bpf->tgids;
  if (opts.target.kind == Target::Kind::kPid)
    tgids.push_back(opts.target.pid);
  if (opts.target.kind == Target::Kind::kCommand)
    tgids.push_back(child);
  for (pid_t tgid : tgids) {
    if (tgid <= 0)
      continue;
    auto st = bpf_object->update_elem<std::uint32_t, std::uint8_t>(
        "tgids", static_cast<std::uint32_t>(tgid), 1);
    if (!st)
      throw_failure(ErrorCategory::kRuntime, st.error(), "bpf tgids");
  }
}

void Engine::Impl::start() {
  if (running || stopped) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: start() may be called once");
  }
  if (opts.probes.empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: no probes to start", "add at least one probe");
  }
  if (opts.flush_interval_ms == 0) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: flush_interval_ms is 0",
                "give the longest time a record may wait in a quiet ring, in milliseconds");
  }
  for (std::size_t i = 0; i < opts.probes.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (opts.probes[i].name == opts.probes[j].name) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    fmt::format("engine: two probes are named '{}'", opts.probes[i].name),
                    "probe names must be unique");
      }
    }
  }
  const auto& target = opts.target;
  core::Needs needs;
  needs.cpu_wide = target.kind == Target::Kind::kAllCpus || target.kind == Target::Kind::kCgroup;
  for (const auto& p : opts.probes) {
    if (p.kind == ProbeKind::kTracepoint || p.kind == ProbeKind::kKprobe ||
        p.kind == ProbeKind::kKretprobe || p.kind == ProbeKind::kUprobe ||
        p.kind == ProbeKind::kUretprobe) {
      needs.tracepoints = true;
    }
    if (!p.bpf_program.empty())
      needs.bpf = true;
  }
  if (opts.bpf)
    needs.bpf = true;
  if (auto st = core::check_privileges(needs); !st)
    throw_failure(ErrorCategory::kPermission, st.error());

  // Resolve every probe before opening anything: a typo fails fast and opens nothing.
  core::ResolveContext ctx;
  ctx.prefer_tracefs_probes = opts.prefer_tracefs_probes;
  if (target.kind == Target::Kind::kPid)
    ctx.pid = target.pid;
  if (target.kind == Target::Kind::kCommand && !target.command.empty())
    ctx.command = target.command.front();
  // Dynamic probes a crashed or killed run left behind go first (their owner is dead).
  if (auto fs = tracefs::Tracefs::open()) {
    [[maybe_unused]] auto removed = tracefs::DynamicProbes::remove_stale(*fs);
  }
  // Ring sizes: the locked-memory budget shared by every ring (each sampling probe's per CPU,
  // and the BPF output channel's).
  {
    std::size_t rings = 0;
    for (const auto& p : opts.probes)
      rings += p.counting || p.ring_pages != 0 ? 0 : 1;
    const bool channel = opts.bpf && !opts.bpf->output_map.empty() && opts.bpf->output_pages == 0;
    rings += channel ? 1 : 0;
    const auto cpus = perf::online_cpus();
    rings *= cpus ? std::max<std::size_t>(1, cpus->size()) : 1;
    const auto budget = core::mlock_budget();
    const auto plan = core::plan_rings(rings, budget);
    ctx.default_ring_pages = plan.data_pages;
    ring_pages_default = plan.data_pages;
    ring_note = plan.why;
    // The output channel keeps its measured default where no limit applies (kDefaultOutputPages).
    output_ring_pages = budget.unlimited ? 0 : std::min(plan.data_pages, kDefaultOutputPages);
  }
  std::vector<core::ResolvedProbe> resolved;
  resolved.reserve(opts.probes.size());
  for (std::size_t i = 0; i < opts.probes.size(); ++i) {
    resolved.push_back(core::resolve_probe(opts.probes[i], static_cast<std::uint32_t>(i), ctx));
  }
  probes.clear();
  // RingReaders keep pointers to the layouts: no reallocation (+1: the BPF output channel).
  probes.reserve(resolved.size() + 1);
  for (const auto& r : resolved) {
    probes.push_back(r.info);
    counting.push_back(r.counting);
  }
  if (ctx.dynamic)
    dynamic.emplace(std::move(*ctx.dynamic));

  auto online = perf::online_cpus();
  if (!online)
    throw_failure(ErrorCategory::kRuntime, online.error());
  std::vector<pid_t> pids = {-1};
  switch (target.kind) {
    case Target::Kind::kAllCpus:
      break;
    case Target::Kind::kPid:
      if (target.pid <= 0 || ::kill(target.pid, 0) != 0) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::no_such_process),
                    fmt::format("engine: no process with pid {}", target.pid));
      }
      pids = threads_of(target.pid);
      if (pids.empty())
        pids = {target.pid};
      break;
    case Target::Kind::kCgroup: {
      const int fd = ::open(target.cgroup.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0) {
        throw Error(
            ErrorCategory::kUsage, {errno, std::generic_category()},
            fmt::format("engine: cannot open cgroup '{}': {}", target.cgroup, std::strerror(errno)),
            "give a cgroup v2 directory, e.g. /sys/fs/cgroup/system.slice/foo.service");
      }
      cgroup_fd.reset(fd);
      break;
    }
    case Target::Kind::kCommand:
      if (target.command.empty()) {
        throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                    "engine: empty command");
      }
      break;
  }

  try {
    if (target.kind == Target::Kind::kCommand) {
      start_command();
      pids = {child};
    }
    plan_delivery(resolved);
    for (auto& rp : resolved)
      open_probe(rp, *online, pids);
    open_delivery();
    if (opts.bpf) {
      load_bpf(*opts.bpf, resolved);
      if (bpf_object)
        open_output_channel(*opts.bpf, *bpf_object);
      fill_tgids();
      attach_bpf_programs();
    } else {
      attach_bpf_programs();  // reports probes that name a program without a BPF object
    }
    attach_hit_counters();
    if (target.kind != Target::Kind::kCommand) {
      for (auto& per_cpu : events) {
        for (auto& ce : per_cpu) {
          for (auto& ev : ce.events) {
            if (auto st = ev.enable(); !st)
              throw_failure(ErrorCategory::kRuntime, st.error());
          }
        }
      }
    }
    hit_base.assign(hit_ids.size(), {});
    drop_base.assign(hit_ids.size(), {});
    for (std::size_t p = 0; p < hit_ids.size(); ++p) {
      hit_base[p] = read_hits(p);
      drop_base[p] = read_drops(p);
    }
    if (output) {
      if (auto st = output->enable(); !st)
        throw_failure(ErrorCategory::kRuntime, st.error(), "bpf output channel");
    }
  } catch (...) {
    cleanup();
    throw;
  }
  running = true;
  last_pass = std::chrono::steady_clock::now();
  for (auto& r : readers)
    arm(*r);
  arm_timer();
  if (target.kind == Target::Kind::kCommand) {
    watch_exit(child);
    // The command starts once the reactor runs (the caller binds its pipelines first): its
    // first burst then finds a consumer waiting on the rings.
    asio::post(serial, [self = shared_from_this()] { self->release_command(); });
  } else if (target.kind == Target::Kind::kPid) {
    watch_exit(target.pid);  // as perf record -p: the trace ends with the process
  }
}

void Engine::Impl::arm(Reader& r) {
  if (r.armed || !running)
    return;
  r.armed = true;
  r.wait.async_wait(
      [self = shared_from_this(), &r](const boost::system::error_code& ec, bool kernel_wakeup) {
        // After stop() the reader may be gone: look at `running` before `r`.
        if (ec || !self->running)
          return;
        r.armed = false;
        if (kernel_wakeup)
          r.reader.count_wakeup();
        r.reader.drain(r.via ? r.via : self->batch_handler);
        // Every ring gets a pass at least once per flush interval. One due within half an
        // interval is made now, on this wakeup, and the timer pushed back: the wakeups of busy
        // rings flush the quiet ones too, and the timer wakes the engine only when no ring has
        // for half an interval (a timer wakeup costs as much as a ring's).
        if (self->pass_due()) {
          self->drain_all();
          self->arm_timer();
        }

        if (self->check_handler_failure()) {
          self->stop();

          return;
        }
        self->arm(r);
      });
}

bool Engine::Impl::pass_due() const noexcept {
  return std::chrono::steady_clock::now() - last_pass >=
         std::chrono::microseconds(std::uint64_t{opts.flush_interval_ms} * 500);
}

void Engine::Impl::arm_timer() {
  if (!running)
    return;
  // Re-arming cancels a pending wait (it completes with operation_aborted); one that had
  // already expired and is queued completes without error, and is told apart by generation.
  const std::uint64_t generation = ++timer_generation;
  flush_timer.expires_after(std::chrono::milliseconds(opts.flush_interval_ms));
  flush_timer.async_wait(
      [self = shared_from_this(), generation](const boost::system::error_code& ec) {
        if (ec || !self->running || generation != self->timer_generation)
          return;
        ++self->timer_passes;
        self->drain_all();

        if (self->check_handler_failure()) {
          self->stop();

          return;
        }
        self->arm_timer();
      });
}

void Engine::Impl::watch_exit(pid_t pid) {
  // A pidfd becomes readable when the process exits (Linux 5.3+).
  const long pidfd = ::syscall(SYS_pidfd_open, pid, 0);
  if (pidfd < 0) {
    if (errno == ESRCH) {
      // Gone already (between opening its events and now): what it left is drained at once.
      asio::post(serial, [self = shared_from_this()] {
        if (self->running) {
          self->target_exited = true;
          self->stop();
        }
      });
    }
    return;  // no pidfds (or a thread's id): a started command is reaped at stop()
  }
  exit_watch.emplace(serial, static_cast<int>(pidfd));
  exit_watch->async_wait(
      asio::posix::stream_descriptor::wait_read,
      [self = shared_from_this()](const boost::system::error_code& ec) {
        if (ec || !self->running)
          return;
        self->target_exited = true;
        if (self->child > 0 && ::waitpid(self->child, &self->child_status, 0) == self->child) {
          self->child = -1;
        }
        self->stop();
      });
}

void Engine::Impl::drain_all() noexcept {
  last_pass = std::chrono::steady_clock::now();
  ++passes;
  for (auto& r : readers)
    r->reader.drain(r->via ? r->via : batch_handler);
  if (round_handler) {
    try {
      round_handler();
    } catch (...) {
      if (!failure)
        failure = std::current_exception();
    }
  }
}

bool Engine::Impl::check_handler_failure() {
  for (auto& r : readers) {
    if (auto e = r->reader.handler_failure()) {
      if (!failure)
        failure = e;
    }
  }
  return failure != nullptr;
}

Stats Engine::Impl::collect_stats() const {
  Stats s;
  for (std::size_t p = 0; p < probes.size(); ++p) {
    ProbeStats ps;
    ps.name = probes[p].name;
    if (p < events.size()) {
      for (const auto& ce : events[p]) {
        RingStats rs = ce.reader != nullptr ? ce.reader->reader.stats() : RingStats{};
        // PERF_FORMAT_LOST (6.0+) is the kernel's own count per event, including drops whose
        // LOST record has not been written yet: the authoritative number when it is there.
        std::uint64_t read_lost = 0;
        for (const auto& ev : ce.events) {
          if (auto c = ev.read(); c && !c->values.empty()) {
            read_lost += c->values[0].lost;
            if (counting[p])
              rs.samples += static_cast<std::uint64_t>(c->values[0].scaled);
          }
        }
        rs.lost = std::max(rs.lost, read_lost);
        if (p < delivered.size() && delivered[p] && delivery) {
          // Its samples came through the delivery channel; what did not fit there was counted
          // per slot and CPU by the program.
          rs.samples = delivery->delivered(static_cast<std::uint32_t>(p), ce.cpu);
          const auto d =
              p < drop_final.size() && !drop_final[p].empty() ? drop_final[p] : read_drops(p);
          const auto c = static_cast<std::size_t>(std::max(ce.cpu, 0));
          const std::uint64_t base =
              p < drop_base.size() && c < drop_base[p].size() ? drop_base[p][c] : 0;
          rs.lost = c < d.size() ? d[c] - std::min(d[c], base) : 0;
        }
        const auto now =
            p < hit_final.size() && !hit_final[p].empty() ? hit_final[p] : read_hits(p);
        if (!now.empty() && p < hit_base.size() && ce.cpu >= 0 &&
            static_cast<std::size_t>(ce.cpu) < now.size()) {
          const auto c = static_cast<std::size_t>(ce.cpu);
          const std::uint64_t base = c < hit_base[p].size() ? hit_base[p][c] : 0;
          rs.kernel_hits = now[c] - std::min(now[c], base);
          const std::uint64_t got = rs.samples + rs.lost + rs.lost_samples;
          rs.missed = rs.kernel_hits > got ? rs.kernel_hits - got : 0;
        }
        ps.per_cpu.emplace_back(ce.cpu, rs);
      }
    }
    if (probes[p].kind == ProbeKind::kBpfOutput) {
      for (const auto* r : output_readers)
        ps.per_cpu.emplace_back(r->reader.cpu(), r->reader.stats());
      if (bpf_object) {
        const auto maps = bpf_object->map_names();
        if (std::find(maps.begin(), maps.end(), "output_drops") != maps.end()) {
          if (auto drops = bpf_object->percpu_array_sum<std::uint64_t>("output_drops")) {
            ps.bpf_output_drops = *drops;
          }
        }
      }
    }
    s.probes.push_back(std::move(ps));
  }
  s.passes = passes;
  s.timer_passes = timer_passes;
  return s;
}

void Engine::Impl::stop() {
  if (stopped)
    return;
  const bool was_running = running;
  // The hit counters' last read comes just before the events stop (and their first just after
  // the events started): a hit they count was one the events were on for, so `missed` never
  // counts the edges.
  hit_final.assign(hit_ids.size(), {});
  drop_final.assign(hit_ids.size(), {});
  for (std::size_t p = 0; p < hit_ids.size(); ++p) {
    hit_final[p] = read_hits(p);
    drop_final[p] = read_drops(p);
  }
  // Stop producing, then read everything that was produced.
  for (auto& per_cpu : events) {
    for (auto& ce : per_cpu) {
      for (auto& ev : ce.events) {
        [[maybe_unused]] const auto st = ev.disable();  // best effort: the fd closes anyway
      }
    }
  }
  if (output) {
    [[maybe_unused]] const auto st = output->disable();
  }
  drain_all();
  check_handler_failure();
  final_stats = collect_stats();
  running = false;
  stopped = true;
  cleanup();
  if (was_running && done_handler)
    asio::post(serial, done_handler);
}

void Engine::Impl::cleanup() noexcept {
  boost::system::error_code ignored;
  [[maybe_unused]] const auto n = flush_timer.cancel(ignored);
  for (auto& r : readers)
    r->wait.cancel();
  if (exit_watch) {
    [[maybe_unused]] const auto& c = exit_watch->cancel(ignored);
    [[maybe_unused]] const auto& d = exit_watch->close(ignored);
  }
  // Readers before events: the rings unmap, then the fds close.
  readers.clear();
  for (auto& per_cpu : events) {
    for (auto& ce : per_cpu)
      ce.reader = nullptr;
  }
  output_readers.clear();
  output.reset();        // clears its PERF_EVENT_ARRAY entries, closes the bpf-output events
  hit_counter.detach();  // a link holds its event: detach before the events close
  if (delivery)
    delivery->detach();
  events.clear();
  // Dynamic tracefs probes can only be removed once no perf event holds them (EBUSY).
  dynamic.reset();
  delivery.reset();  // its rings were unmapped with the readers
  // The BPF object stays: its programs were detached with their events, and its maps stay
  // readable until the engine is destroyed (the final read of in-kernel aggregations comes
  // after stop(): Engine::maps()).
  cgroup_fd.reset();
  if (go_fd >= 0) {  // never started: closing the pipe makes it exit
    ::close(go_fd);
    go_fd = -1;
  }
  if (child > 0) {
    // Stopped before the command finished (signal, duration): do not leave it behind.
    ::kill(child, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (::waitpid(child, &child_status, WNOHANG) == child) {
        child = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (child > 0) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &child_status, 0);
      child = -1;
    }
  }
}

Engine::Engine(asio::any_io_executor executor, EngineOptions options)
    : impl_(std::make_shared<Impl>(std::move(executor), std::move(options))) {}

Engine::~Engine() {
  if (impl_)
    impl_->stop();
}

void Engine::on_batch(BatchHandler handler) {
  impl_->batch_handler = std::move(handler);
}

void Engine::on_done(std::function<void()> handler) {
  impl_->done_handler = std::move(handler);
}

void Engine::on_round(std::function<void()> handler) {
  impl_->round_handler = std::move(handler);
}

void Engine::start() {
  impl_->start();
}

void Engine::stop() {
  impl_->stop();
}

bool Engine::target_exited() const noexcept {
  return impl_->target_exited;
}

bool Engine::running() const noexcept {
  return impl_->running;
}

namespace {

/// Engine::maps(): the maps of the engine's BPF object.
class EngineMaps final : public MapSource {
 public:
  explicit EngineMaps(std::optional<bpf::Object>& obj) : obj_(&obj) {}
  [[nodiscard]] std::vector<std::string> map_names() const override {
    return *obj_ ? (*obj_)->map_names() : std::vector<std::string>{};
  }
  [[nodiscard]] Result<bpf::MapSchema> schema(std::string_view map) const override {
    if (!*obj_)
      return fail(ENOENT, fmt::format("bpf: no BPF object is loaded (map '{}')", map),
                  "add a [bpf] section with the program that fills the map");
    return (*obj_)->map_schema(map);
  }
  [[nodiscard]] Result<MapSnapshot> read(std::string_view map, bool clear) const override;

 private:
  std::optional<bpf::Object>* obj_;
};

/// Sums the integer fields of `value`'s per-CPU copies (each padded to 8 bytes) into the first.
std::vector<std::byte> sum_per_cpu(const bpf::StructSchema& value, std::span<const std::byte> all) {
  const std::size_t stride = (std::size_t{value.size} + 7) / 8 * 8;
  const auto first = all.first(std::min(all.size(), std::size_t{value.size}));
  std::vector<std::byte> out(first.begin(), first.end());
  if (stride == 0 || out.size() < value.size)
    return out;
  for (const auto& f : value.fields) {
    const bool integer = f.kind == bpf::FieldKind::kSigned || f.kind == bpf::FieldKind::kUnsigned;
    if (!integer || f.bit_size != 0 || (f.size != 1 && f.size != 2 && f.size != 4 && f.size != 8) ||
        f.offset + f.size > value.size)
      continue;
    std::uint64_t sum = 0;
    for (std::size_t base = 0; base + value.size <= all.size(); base += stride) {
      std::uint64_t v = 0;
      std::memcpy(&v, all.data() + base + f.offset, f.size);  // little-endian: low bytes
      sum += v;
    }
    std::memcpy(out.data() + f.offset, &sum, f.size);
  }
  return out;
}

Result<MapSnapshot> EngineMaps::read(std::string_view map, bool clear) const {
  TRACER_ASSIGN_OR_RETURN(bpf::MapSchema schema, this->schema(map));
  auto& loaded = *obj_;
  if (!loaded)
    return fail(ENOENT, fmt::format("bpf: no BPF object is loaded (map '{}')", map));
  bpf::Object& obj = *loaded;
  TRACER_ASSIGN_OR_RETURN(auto entries, obj.entries(map));
  MapSnapshot snap;
  snap.entries.reserve(entries.size());
  for (auto& [key, value] : entries) {
    if (clear) {
      if (schema.array) {
        std::vector<std::byte> zero(value.size());
        [[maybe_unused]] const auto st =
            obj.update_elem(map, std::span<const std::byte>(key), std::span<const std::byte>(zero));
      } else {
        // Races with the program: increments between the read and the delete are lost, as
        // with bpftrace's clear().
        [[maybe_unused]] const auto st = obj.delete_elem(map, std::span<const std::byte>(key));
      }
    }
    if (schema.per_cpu)
      value = sum_per_cpu(schema.value, value);
    snap.entries.emplace_back(std::move(key), std::move(value));
  }
  snap.schema = std::move(schema);
  return snap;
}

}  // namespace

const MapSource& Engine::maps() const noexcept {
  if (!impl_->map_source)
    impl_->map_source = std::make_unique<EngineMaps>(impl_->bpf_object);
  return *impl_->map_source;
}

std::span<const ProbeInfo> Engine::probes() const noexcept {
  return impl_->probes;
}

Stats Engine::stats() const {
  return impl_->stopped ? impl_->final_stats : impl_->collect_stats();
}

std::vector<ProbeInfo> Engine::check(std::vector<std::string>* notes) {
  if (impl_->running || impl_->stopped) {
    // Its BPF object would replace the one start() attached (and whose maps stay readable).
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::operation_not_permitted),
                "engine: check() goes before start()");
  }
  auto& o = impl_->opts;
  core::ResolveContext ctx;
  ctx.prefer_tracefs_probes = o.prefer_tracefs_probes;
  if (o.target.kind == Target::Kind::kPid)
    ctx.pid = o.target.pid;
  if (o.target.kind == Target::Kind::kCommand && !o.target.command.empty())
    ctx.command = o.target.command.front();
  std::vector<core::ResolvedProbe> resolved;
  std::vector<ProbeInfo> out;
  for (std::size_t i = 0; i < o.probes.size(); ++i) {
    resolved.push_back(core::resolve_probe(o.probes[i], static_cast<std::uint32_t>(i), ctx));
    out.push_back(resolved.back().info);
  }
  if (o.bpf) {
    const BpfOptions& b = *o.bpf;
    impl_->load_bpf(b, resolved);
    auto& loaded = impl_->bpf_object;
    if (!loaded.has_value())
      throw Error(ErrorCategory::kRuntime, std::make_error_code(std::errc::invalid_argument),
                  "bpf: no object after load");
    auto& obj = *loaded;
    for (const auto& p : o.probes) {
      if (p.bpf_program.empty())
        continue;
      if (auto fd = obj.program_fd(p.bpf_program); !fd) {
        throw_failure(ErrorCategory::kUsage, fd.error(), fmt::format("probe '{}'", p.name));
      }
      if (notes != nullptr && p.kind == ProbeKind::kTracepoint) {
        notes->push_back(fmt::format(
            "probe '{}': program '{}' runs on every {} event system-wide, and its return value "
            "gates the samples of every perf consumer of that tracepoint (a 0 silences perf "
            "record too); tracer's shipped programs return 1 and filter by tgid inside",
            p.name, p.bpf_program, p.spec));
      }
    }
    if (wants_output(b, obj)) {
      ProbeInfo info;
      info.index = static_cast<std::uint32_t>(out.size());
      info.name = b.output_name;
      info.kind = ProbeKind::kBpfOutput;
      info.spec = b.output_map;
      info.pmu = "software (bpf-output)";
      // What OutputChannel opens with the options start() uses.
      OutputPayload payload = output_payload(b, obj);
      const auto co = output_channel_options(b, payload.time_offset);
      info.layout = bpf::OutputChannel::layout_for(co);
      info.attr = bpf::OutputChannel::attr_for(co);
      info.payload = std::move(payload.schema);
      out.push_back(std::move(info));
    }
    // The loaded object stays (nothing is attached to it) so that maps() can answer the
    // pipelines' questions about map names and layouts; start() loads a fresh one.
  }
  return out;  // ctx's dynamic tracefs probes, if any, are removed here
}

std::exception_ptr Engine::failure() const noexcept {
  return impl_->failure;
}

std::string Engine::ring_note() const {
  return impl_->ring_note;
}

pid_t Engine::command_pid() const noexcept {
  return impl_->child;
}

}  // namespace tracer
