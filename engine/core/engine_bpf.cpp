// Engine::Impl's BPF object: loading it (shipped, file or compiled source; globals), the
// programs probes name, the output channel, the `tgids` map, and Engine::maps().
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <linux/perf_event.h>

#include <algorithm>

#include "engine_impl.hpp"
#include "tracer/bpf/maps.hpp"
#include "tracer/common/edit_distance.hpp"
#include "tracer/common/trusted_file.hpp"
#include "tracer/diagnostics.hpp"

namespace tracer {

using core::throw_failure;

void Engine::Impl::load_bpf(const BpfOptions& b,
                            const std::vector<core::ResolvedProbe>& resolved,
                            bool scratch) {
  // An object and its source together: the source built ahead (the shipped configs' objects
  // are built with tracer), the object loaded when it is there, else the source compiled.
  const bool built_ahead = !b.object.empty() && !b.source.empty();
  const int sources = (b.builtin.empty() ? 0 : 1) + (b.object.empty() && b.source.empty() ? 0 : 1);
  if (sources != 1) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                "engine: BPF options need exactly one of builtin, object or source",
                R"(e.g. builtin = "syscall_output", object = "x.bpf.o" or source = "x.bpf.c")");
  }
  std::error_code ec;
  const bool object_there =
      !b.object.empty() &&
      std::filesystem::symlink_status(b.object, ec).type() != std::filesystem::file_type::not_found;
  const bool use_object = !b.object.empty() && (!built_ahead || object_there);
  // A [bpf] object or source is code loaded into the kernel on tracer's privileges: used only
  // when no other user can change it (tracer/common/trusted_file.hpp), the object from the bytes
  // of the descriptor checked, the source compiled at its resolved path (every directory of it
  // checked: no one else can swap it between the check and clang's read).
  Result<bpf::Object> obj = fail(EINVAL, "bpf: nothing to load");
  if (!b.builtin.empty()) {
    obj = bpf::Object::open_shipped(b.builtin);
  } else if (use_object) {
    constexpr std::size_t kMaxBpfObjectBytes = std::size_t{64} << 20;
    auto bytes = trust::read_trusted(b.object, "bpf object", kMaxBpfObjectBytes);
    if (bytes && bytes->size() > kMaxBpfObjectBytes)
      bytes = fail(EFBIG, fmt::format("bpf object: '{}' is over 64 MiB", b.object));
    obj = !bytes ? Result<bpf::Object>(fail(bytes.error()))
                 : bpf::Object::open_memory(std::as_bytes(std::span(*bytes)),
                                            std::filesystem::path(b.object).stem().string());
  } else {
    auto file = trust::open_trusted(b.source, "bpf source");
    obj = !file ? Result<bpf::Object>(fail(file.error()))
                : bpf::Object::compile_and_open(file->path, {.scratch = scratch});
  }
  if (!obj) {
    throw_failure(obj.error().errno_value() == ENOENT ? ErrorCategory::kNotFound
                  : trust::is_refusal(obj.error())    ? ErrorCategory::kUsage
                                                      : ErrorCategory::kRuntime,
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
  // tracer_target.h: what the target is (absent in programs that do not include it).
  {
    const std::uint8_t all = opts.target.kind == Target::Kind::kAllCpus ? 1 : 0;
    [[maybe_unused]] auto a = obj->set_global("tracer_target_all", all);
    [[maybe_unused]] auto s = obj->set_global("tracer_self_tgid", self_tgid());
    size_targets(*obj);
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
                                                 std::uint32_t budget_pages) {
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

/// The output channel `b` asks for on `obj`: the options OutputChannel opens with and the
/// payload's schema (nullopt: no channel).
struct OutputPlan {
  bpf::OutputChannelOptions options;
  std::optional<bpf::StructSchema> payload;
};

std::optional<OutputPlan> plan_output(const BpfOptions& b,
                                      const bpf::Object& obj,
                                      std::uint32_t budget_pages) {
  if (!wants_output(b, obj))
    return std::nullopt;
  OutputPayload payload = output_payload(b, obj);
  return OutputPlan{.options = output_channel_options(b, payload.time_offset, budget_pages),
                    .payload = std::move(payload.schema)};
}

/// The output channel's probe, as check() and start() describe it.
ProbeInfo output_probe(const BpfOptions& b,
                       std::uint32_t index,
                       const perf::SampleLayout& layout,
                       const perf::EventAttr& attr,
                       std::optional<bpf::StructSchema> payload) {
  ProbeInfo info;
  info.index = index;
  info.name = b.output_name;
  info.kind = ProbeKind::kBpfOutput;
  info.spec = b.output_map;
  info.layout = layout;
  info.attr = attr;
  info.pmu = "software (bpf-output)";
  info.payload = std::move(payload);
  return info;
}
}  // namespace

std::optional<ProbeInfo> Engine::Impl::check_output_channel(const BpfOptions& b,
                                                            std::uint32_t index) const {
  // Before start() sizes the rings (output_ring_pages is 0): the channel's default size.
  if (!bpf_object)
    return std::nullopt;
  auto plan = plan_output(b, *bpf_object, output_ring_pages);
  if (!plan)
    return std::nullopt;
  // What OutputChannel opens with the options start() uses.
  return output_probe(b, index, bpf::OutputChannel::layout_for(plan->options),
                      bpf::OutputChannel::attr_for(plan->options), std::move(plan->payload));
}

void Engine::Impl::open_output_channel(const BpfOptions& b, bpf::Object& obj) {
  auto plan = plan_output(b, obj, output_ring_pages);
  if (!plan)
    return;
  auto channel = bpf::OutputChannel::open(obj, b.output_map, plan->options);
  if (!channel)
    throw_failure(ErrorCategory::kRuntime, channel.error(), "bpf output channel");
  output.emplace(std::move(*channel));
  auto info = output_probe(b, static_cast<std::uint32_t>(probes.size()), output->layout(),
                           output->attr(), std::move(plan->payload));
  probes.push_back(std::move(info));  // capacity reserved: layouts do not move
  counting.push_back(false);
  const auto& out_info = probes.back();
  for (auto& slot : output->cpus()) {
    if (!slot)
      continue;
    auto r = std::make_unique<Reader>(
        perf::RingReader(std::move(slot->ring), out_info.index, slot->cpu, &out_info.layout,
                         opts.max_batch, opts.decode_samples),
        serial, slot->event.fd(), out_info.attr);
    output_readers.push_back(r.get());
    readers.push_back(std::move(r));
  }
}

int Engine::Impl::program_fd(std::size_t p) const {
  const auto& name = opts.probes[p].bpf_program;
  if (!bpf_object) {
    Error e(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
            fmt::format("probe '{}': program '{}' but no BPF object", opts.probes[p].name, name),
            "give the engine BPF options (a recipe's [bpf] section)");
    e.subject() = about(p, "program");
    throw e;
  }
  auto fd = bpf_object->program_fd(name);
  if (!fd)
    throw_failure(ErrorCategory::kUsage, fd.error(), fmt::format("probe '{}'", opts.probes[p].name),
                  about(p));
  return *fd;
}

void Engine::Impl::attach_bpf_programs() {
  for (std::size_t p = 0; p < events.size(); ++p) {
    if (opts.probes[p].bpf_program.empty())
      continue;
    const int fd = program_fd(p);
    if (events[p].empty() || events[p].front().events.empty())
      continue;
    // A task target's events are inherited, and an inherited copy carries the program: the
    // first child's exit would detach it from the tracepoint for the rest of the run. The
    // program goes on an event of its own, system-wide and never inherited (it runs for every
    // task; tracer_target.h's tracer_in_target() tests the target).
    if (opts.target.kind != Target::Kind::kAllCpus &&
        probes[p].attr.type() == PERF_TYPE_TRACEPOINT) {
      const auto& sites = probes[p].sites;  // a tracefs uprobe's: a tracepoint each
      for (std::size_t s = 0; s < std::max<std::size_t>(1, sites.size()); ++s) {
        perf::EventAttr a;
        a.type(PERF_TYPE_TRACEPOINT)
            .config(sites.empty() ? probes[p].attr.config() : sites[s].config)
            .flag(perf::Flag::kDisabled);
        auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
        if (!ev)
          throw_failure(ErrorCategory::kRuntime, ev.error(),
                        fmt::format("probe '{}': an event for its program", opts.probes[p].name),
                        about(p));
        if (auto st = ev->set_bpf(fd); !st)
          throw_failure(ErrorCategory::kRuntime, st.error(),
                        fmt::format("probe '{}'", opts.probes[p].name), about(p));
        follow_events.push_back(std::move(*ev));
      }
      continue;
    }
    // One attach per tracepoint: the program belongs to the tracepoint and runs on every CPU
    // (a second SET_BPF on another CPU's event of it fails with EEXIST). TOOLCHAIN.md.
    if (auto st = events[p].front().events.front().set_bpf(fd); !st) {
      throw_failure(ErrorCategory::kRuntime, st.error(),
                    fmt::format("probe '{}'", opts.probes[p].name), about(p));
    }
  }
}

void Engine::attach_bpf(std::uint32_t probe, int prog_fd, bool every_event) {
  auto& im = *impl_;
  if (probe >= im.events.size() || im.events[probe].empty() ||
      im.events[probe].front().events.empty()) {
    throw Error(ErrorCategory::kUsage, std::make_error_code(std::errc::invalid_argument),
                fmt::format("attach_bpf: probe {} has no open event (call after start())", probe));
  }
  Status st;
  if (every_event) {
    for (const auto& cpu : im.events[probe]) {
      for (const auto& ev : cpu.events) {
        if (st = ev.set_bpf(prog_fd); !st)
          break;
      }
      if (!st)
        break;
    }
  } else {
    // An event holds one program: the first may carry the engine's own (the hit counter), so
    // the program goes on the first event that has none, of each site (a uprobe's overloads
    // are probes of their own in the kernel).
    std::uint32_t sites = 1;
    for (const auto& cpu : im.events[probe]) {
      for (const auto s : cpu.site_of)
        sites = std::max(sites, s + 1);
    }
    for (std::uint32_t site = 0; site < sites && (site == 0 || st); ++site) {
      bool placed = false;
      for (const auto& cpu : im.events[probe]) {
        for (std::size_t i = 0; i < cpu.events.size(); ++i) {
          if (i < cpu.site_of.size() && cpu.site_of[i] != site)
            continue;
          st = cpu.events[i].set_bpf(prog_fd);
          if (st || st.error().errno_value() != EEXIST) {
            placed = true;
            break;
          }
        }
        if (placed)
          break;
      }
    }
  }
  if (!st) {
    throw_failure(
        ErrorCategory::kRuntime, st.error(),
        fmt::format("probe '{}': attaching its in-kernel program", im.opts.probes[probe].name),
        im.about(probe));
  }
}

void Engine::Impl::size_targets(bpf::Object& obj) const {
  if (opts.target.kind != Target::Kind::kPid && opts.target.kind != Target::Kind::kCommand)
    return;
  [[maybe_unused]] auto st = obj.set_map_max_entries("tgids", std::max(1U, opts.max_targets));
}

void Engine::Impl::follow_target(bpf::Object& obj, std::vector<pid_t> tgids) {
  const auto maps = obj.map_names();
  if (std::find(maps.begin(), maps.end(), "tgids") == maps.end())
    return;
  // Convention of tracer's programs: a hash `tgids` (u32 tgid -> u8) names the processes whose
  // events they emit or pass (tracer_target.h: 1 in the target, 2 joining at its exec).
  constexpr std::uint8_t kInTarget = 1, kAtExec = 2;
  const bool task =
      opts.target.kind == Target::Kind::kPid || opts.target.kind == Target::Kind::kCommand;
  const bool exec_follower = static_cast<bool>(obj.program_fd("tracer_follow_exec"));
  if (opts.target.kind == Target::Kind::kPid)
    tgids.push_back(opts.target.pid);
  for (pid_t tgid : tgids) {
    if (tgid <= 0)
      continue;
    auto st = obj.update_elem<std::uint32_t, std::uint8_t>(
        "tgids", static_cast<std::uint32_t>(tgid), kInTarget);
    if (!st)
      throw_failure(ErrorCategory::kRuntime, st.error(), "bpf tgids");
  }
  if (opts.target.kind == Target::Kind::kCommand) {
    auto st = obj.update_elem<std::uint32_t, std::uint8_t>(
        "tgids", static_cast<std::uint32_t>(targets.command_pid()),
        exec_follower ? kAtExec : kInTarget);
    if (!st)
      throw_failure(ErrorCategory::kRuntime, st.error(), "bpf tgids");
  }
  if (!task)
    return;
  // tracer_target.h: children of the target join its `tgids` map, dead processes leave (their
  // leader's task freed), the command joins at its exec.
  for (const auto& [prog, event] : {std::pair{"tracer_follow_fork", "sched_process_fork"},
                                    std::pair{"tracer_follow_free", "sched_process_free"},
                                    std::pair{"tracer_follow_exec", "sched_process_exec"}}) {
    auto fd = obj.program_fd(prog);
    if (!fd)
      continue;  // the program does not include tracer_target.h
    auto fs = tracefs::Tracefs::open();
    auto format = fs ? fs->format({.system = "sched", .event = event})
                     : Result<tracefs::Format>(std::unexpected(fs.error()));
    if (!format)
      throw_failure(ErrorCategory::kRuntime, format.error(), "bpf: following the target");
    perf::EventAttr a;
    a.type(PERF_TYPE_TRACEPOINT).config(format->id).flag(perf::Flag::kDisabled);
    auto ev = perf::Event::open(a, {.pid = -1, .cpu = 0});
    if (!ev)
      throw_failure(ErrorCategory::kRuntime, ev.error(), "bpf: following the target");
    if (auto st = ev->set_bpf(*fd); !st)
      throw_failure(ErrorCategory::kRuntime, st.error(), "bpf: following the target");
    follow_events.push_back(std::move(*ev));
  }
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

Result<MapSnapshot> EngineMaps::read(std::string_view map, bool clear) const {
  TRACER_ASSIGN_OR_RETURN(bpf::MapSchema schema, this->schema(map));
  if (!*obj_)  // schema() said so already; the check is for the reader of this line
    return fail(ENOENT, fmt::format("bpf: no BPF object is loaded (map '{}')", map));
  TRACER_ASSIGN_OR_RETURN(auto entries, bpf::read_map(**obj_, map, schema, clear));
  return MapSnapshot{.schema = std::move(schema), .entries = std::move(entries)};
}

}  // namespace

const MapSource& Engine::maps() const noexcept {
  if (!impl_->map_source)
    impl_->map_source = std::make_unique<EngineMaps>(impl_->bpf_object);
  return *impl_->map_source;
}

}  // namespace tracer
