// Pipeline: events built in a fixed buffer, routed per record kind, stages run in order.
#include "tracer/pipeline.hpp"

#include "tracer/ext/stage.hpp"

#include <exception>

#include <fmt/format.h>

#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <map>

namespace tracer {

namespace {
std::string hex_of(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const std::byte b : bytes)
    out += fmt::format("{:02x}", static_cast<unsigned>(b));
  return out;
}
}  // namespace

// Everything the pipeline holds, behind Pipeline's pointer (its header declares only the API).
class Pipeline::Impl {
 public:
  Impl(Sink& out, PipelineOptions options);

  void add(std::unique_ptr<Stage> stage, std::string name, StageNeeds needs);
  void add(const StageRegistry& registry,
           std::string_view use,
           const ConfigValue& options,
           Diagnostics& diags);
  void bind(std::span<const ProbeInfo> probes,
            Diagnostics& diags,
            std::span<const PayloadSchema> payloads,
            const MapSource* maps);
  void rebind(std::span<const ProbeInfo> probes, Diagnostics& diags, const MapSource* maps);
  [[nodiscard]] bool rebinds() const noexcept;
  void start(std::chrono::nanoseconds now);
  void on_batch(const Batch& batch) noexcept;
  [[nodiscard]] bool comm_in_place_possible() const noexcept;
  void use_comm_in_place();
  void on_in_place(std::span<const InPlaceSample> samples) noexcept;
  void flush_order() noexcept;
  void preload_symbols();
  void on_task_records(const Batch& batch) noexcept;
  [[nodiscard]] BatchHandler handler();
  void round(bool complete) noexcept;
  [[nodiscard]] bool backlogged() const noexcept;
  [[nodiscard]] std::vector<std::pair<std::string, std::uint64_t>> counters() const;
  [[nodiscard]] std::vector<std::string> warnings() const;
  void tick(std::chrono::nanoseconds now);
  [[nodiscard]] bool output_due(std::chrono::nanoseconds now) const;
  [[nodiscard]] Table peek(std::size_t index, std::chrono::nanoseconds now);
  void stop(std::chrono::nanoseconds now);
  void stop();
  [[nodiscard]] std::vector<std::string> take_warnings();

  struct Slot {
    std::unique_ptr<Stage> stage;
    std::string name;
    StageNeeds needs;
    Aggregation* aggregation = nullptr;  // the stage's roles (Stage::aggregation, ::output,
    Output* output = nullptr;            // ::in_place)
    InPlace* in_place = nullptr;
    KindMask kinds = 0;  // needs.kinds, or what the stage's options chose at bind
    std::chrono::nanoseconds last_emit{};
    std::uint32_t emitted = 0;
  };
  std::unique_ptr<Stage> implicit_print_;  // from the registry of add(registry, ...)
  StageNeeds implicit_print_needs_{};
  void run_chunks(std::span<const RecordRef> records) noexcept;
  void run(std::span<const RecordRef> records) noexcept;
  void dispatch() noexcept;
  /// MMAP, MMAP2, FORK and exec COMM records to the schema's symbolizer (when stacks_).
  void track_maps(const perf::Record& record) noexcept;
  /// One record of on_batch into the time-order merge.
  void push_ordered(const RecordRef& r) noexcept;
  void drain_order() noexcept;
  /// A sample the engine handed on undecoded (EngineOptions::decode_samples = false), decoded
  /// into decoded_[slot]; nullptr if it does not decode.
  const RecordRef* decode_sample(const RecordRef& ref, std::size_t slot) noexcept;
  void emit(std::size_t index, std::chrono::nanoseconds now, bool reset, bool total = false);
  /// bind()'s test of the in-place path's stages, for probe `probe`.
  [[nodiscard]] bool stages_take_in_place(std::uint32_t probe) const noexcept;

  Sink* out_;
  PipelineOptions options_;
  CommCache comm_;
  std::unique_ptr<Schema> schema_;
  std::vector<PayloadSchema> payloads_;  // bind()'s, for rebind()
  void bind_stages(Diagnostics& diags, const MapSource* maps);
  std::vector<Slot> stages_;
  std::vector<Event> events_;
  std::vector<RecordRef> decoded_;
  std::vector<Event*> alive_, routed_;
  std::size_t derived_ = 0;
  /// Timebase sampling (ProbeInfo::read_members): per probe, each member's derived slot; the
  /// last count of each member counter by its id (an inherited child's counter has its own).
  std::vector<std::vector<std::uint32_t>> member_slots_;
  bool has_members_ = false;  // some probe has read members (the per-event test is this flag)
  std::unordered_map<std::uint64_t, std::uint64_t> member_last_;
  void bind_members(Diagnostics& diags);
  void set_member_deltas(Event& e) noexcept;
  bool stacks_ = false;          // a stage bound a stack field: the symbolizer tracks maps
  std::vector<bool> in_place_;   // by probe: takes_in_place()
  bool order_for_comm_ = false;  // ordered only because a stage binds comm
  std::unique_ptr<Reorder> order_;
  double ns_per_record_ = 0;  // the stages' pace through the merge's rounds (moving average)
  BatchHandler ordered_out_;
  PipelineStats stats_;
  bool stopped_ = false;
  const CounterSource* counters_ = nullptr;
  std::chrono::nanoseconds started_{};  // start(now)
  TableHandler on_table_;
  EventHandler on_event_;
  std::exception_ptr handler_failure_;
  std::uint64_t events_missed_ = 0;  // events on_event_ did not get after it threw
  /// Hands the events an output just got to on_event_.
  void tap(std::size_t stage, std::span<const FieldRef> fields) noexcept;
};

Pipeline::Impl::Impl(Sink& out, PipelineOptions options)
    : out_(&out), options_(std::move(options)), comm_(options_.comm) {
  options_.max_events = std::max<std::size_t>(1, options_.max_events);
  events_.resize(options_.max_events);
  alive_.reserve(options_.max_events);
  routed_.reserve(options_.max_events);
}

void Pipeline::Impl::add(std::unique_ptr<Stage> stage, std::string name, StageNeeds needs) {
  Slot slot;
  slot.aggregation = stage->aggregation();
  slot.output = stage->output();
  slot.in_place = stage->in_place();
  slot.stage = std::move(stage);
  slot.name = std::move(name);
  slot.needs = std::move(needs);
  stages_.push_back(std::move(slot));
}

void Pipeline::Impl::add(const StageRegistry& registry,
                         std::string_view use,
                         const ConfigValue& options,
                         Diagnostics& diags) {
  auto stage = registry.make(use);
  if (!stage) {
    std::string hint;
    if (auto s = registry.suggest(use); !s.empty())
      hint = fmt::format("did you mean '{}'?", s);
    else
      hint = "`tracer list stages` shows every stage";
    diags.add(options.where, fmt::format("unknown stage '{}'", use), std::move(hint));
    return;
  }
  stage->configure(options, diags);
  add(std::move(stage), std::string(use), registry.find(use)->needs);
  // The implicit output comes from the registry the stages do (core names no stage itself).
  if (options_.implicit_print && !implicit_print_) {
    implicit_print_ = registry.make("print");
    if (const StageSpec* spec = registry.find("print"); spec != nullptr)
      implicit_print_needs_ = spec->needs;
  }
}

void Pipeline::Impl::bind(std::span<const ProbeInfo> probes,
                          Diagnostics& diags,
                          std::span<const PayloadSchema> payloads,
                          const MapSource* maps) {
  payloads_.assign(payloads.begin(), payloads.end());
  schema_ = std::make_unique<Schema>(probes, payloads, comm_);
  schema_->set_symbolize_options(options_.symbols);
  if (options_.implicit_print && implicit_print_) {
    bool pending = false;  // an aggregation with no output of tables after it
    for (const auto& slot : stages_) {
      if (slot.aggregation != nullptr)
        pending = true;
      else if (slot.output != nullptr && slot.output->takes_tables())
        pending = false;
    }
    if (pending) {
      implicit_print_->configure(ConfigValue{.value = ConfigTable{}, .where = {}}, diags);
      add(std::move(implicit_print_), "print", implicit_print_needs_);
    }
  }
  bind_members(diags);
  bind_stages(diags, maps);
}

void Pipeline::Impl::bind_members(Diagnostics& diags) {
  member_slots_.assign(schema_->probes().size(), {});
  has_members_ = false;
  std::map<std::string, std::uint32_t, std::less<>> slots;
  for (std::size_t p = 0; p < schema_->probes().size(); ++p) {
    for (const auto& name : schema_->probes()[p].read_members) {
      auto it = slots.find(name);
      if (it == slots.end()) {
        auto slot = schema_->add_derived(name, FieldType::kUint);
        if (!slot) {
          diags.add({},
                    fmt::format("probe '{}': more than {} fields of 'read' (or one named "
                                "as a field a stage derives)",
                                schema_->probes()[p].name, kMaxDerived),
                    "read fewer events at each sample");
          continue;
        }
        it = slots.emplace(name, *slot).first;
      }
      member_slots_[p].push_back(it->second);
      has_members_ = true;
    }
  }
}

void Pipeline::Impl::set_member_deltas(Event& e) noexcept {
  const auto& slots = member_slots_[e.ref->probe];
  const perf::ReadView& rv = e.sample->read;
  const std::uint64_t n = rv.count();
  // The leader's count first, then the members' in the order they were opened.
  // A counter is one task's (the id an inherited copy reports is its parent's, so the thread
  // tells them apart: PERF_SAMPLE_TID, which the kernel requires with inherit).
  const std::uint64_t tid = std::uint64_t{e.sample->tid} << 32;
  for (std::size_t m = 0; m < slots.size() && m + 1 < n; ++m) {
    const std::uint64_t value = rv.value(m + 1);
    std::uint64_t& last = member_last_[tid ^ rv.id(m + 1)];
    e.derived[slots[m]] = value >= last ? value - last : value;
    last = value;
  }
}

bool Pipeline::Impl::rebinds() const noexcept {
  return std::all_of(stages_.begin(), stages_.end(),
                     [](const Slot& s) { return s.stage->rebinds(); });
}

void Pipeline::Impl::rebind(std::span<const ProbeInfo> probes,
                            Diagnostics& diags,
                            const MapSource* maps) {
  // What the time-order merge holds runs now, through the bindings it was read with.
  flush_order();
  auto schema = std::make_unique<Schema>(probes, payloads_, comm_);
  schema->set_symbolize_options(options_.symbols);
  if (schema_)
    schema->adopt_symbolizer(*schema_);
  schema_ = std::move(schema);
  bind_members(diags);
  bind_stages(diags, maps);
}

void Pipeline::Impl::bind_stages(Diagnostics& diags, const MapSource* maps) {
  bool upstream = false;
  bool ordered = options_.force_order;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    auto& slot = stages_[i];
    const std::size_t said = diags.size();
    BindContext ctx{.schema = *schema_,
                    .out = *out_,
                    .upstream_aggregates = upstream,
                    .where = {},
                    .maps = maps,
                    .kinds = slot.needs.kinds,
                    .time_order = slot.needs.time_order,
                    .dry_run = options_.dry_run,
                    .counters = counters_};
    slot.stage->bind(ctx, diags);
    diags.about_since(said, {.stage = i});
    slot.kinds = ctx.kinds;
    ordered = ordered || ctx.time_order;
    upstream = upstream || slot.aggregation != nullptr;
  }
  derived_ = schema_->derived_count();
  stacks_ = schema_->stacks_bound();
  // Stacks are symbolized when their key is first seen, through the maps the MMAP2/FORK/exec
  // records built until then: those must come first, in time order across the rings (a sample
  // right after an exec on one CPU, the new image's MMAP2 records on another).
  order_for_comm_ = !ordered && !stacks_ && schema_->comm_bound();
  ordered = ordered || schema_->comm_bound() || stacks_;
  if (schema_->comm_bound())
    comm_.seed();            // threads that exit before their events are looked at keep their names
  if (ordered && !order_) {  // (a rebind keeps the merge and its counts)
    order_ = std::make_unique<Reorder>(options_.reorder);
    ordered_out_ = [this](const Batch& b) { run_chunks(b.records); };
  }
  in_place_.assign(schema_->probes().size(), false);
  if (options_.in_place && !ordered && derived_ == 0 && diags.empty()) {
    for (std::uint32_t p = 0; p < in_place_.size(); ++p)
      in_place_[p] = stages_take_in_place(p);
  }
}

bool Pipeline::Impl::comm_in_place_possible() const noexcept {
  if (!order_for_comm_ || derived_ != 0 || !options_.in_place || stopped_)
    return false;
  const auto probes = schema_->probes();
  for (std::uint32_t p = 0; p < probes.size(); ++p) {
    if (!probes[p].delivered_comm || !stages_take_in_place(p))
      return false;
  }
  return !probes.empty();
}

void Pipeline::Impl::use_comm_in_place() {
  if (!comm_in_place_possible())
    return;
  order_.reset();
  ordered_out_ = {};
  order_for_comm_ = false;
  in_place_.assign(schema_->probes().size(), true);
}

bool Pipeline::Impl::stages_take_in_place(std::uint32_t probe) const noexcept {
  bool any = false;
  for (const auto& slot : stages_) {
    if ((slot.kinds & kind_bit(RecordKind::kSample)) == 0)
      continue;
    if (slot.in_place == nullptr || !slot.in_place->takes(probe))
      return false;  // a stage that reads Events (it may drop them, or writes them out)
    any = true;
  }
  return any;
}

void Pipeline::Impl::on_in_place(std::span<const InPlaceSample> samples) noexcept {
  stats_.records += samples.size();
  stats_.by_kind[static_cast<std::size_t>(RecordKind::kSample)] += samples.size();
  stats_.in_place += samples.size();
  for (auto& slot : stages_) {
    if ((slot.kinds & kind_bit(RecordKind::kSample)) != 0)
      slot.in_place->on_samples(samples);
  }
}

void Pipeline::Impl::start(std::chrono::nanoseconds now) {
  started_ = now;
  for (auto& slot : stages_) {
    slot.last_emit = now;
    slot.stage->start();
  }
}

BatchHandler Pipeline::Impl::handler() {
  return [this](const Batch& batch) { on_batch(batch); };
}

void Pipeline::Impl::round(bool complete) noexcept {
  if (stopped_)
    return;
  if (order_) {
    const std::uint64_t before = order_->stats().released;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      // 20 ms a round: a signal reaches its handler through three reactor hops, each behind
      // a round when the stages are behind (50 ms rounds made SIGINT wait 180 ms for them).
      const auto yield_at = t0 + std::chrono::milliseconds(20);
      if (complete)
        order_->round(ordered_out_, yield_at);
      else
        order_->resume(ordered_out_, yield_at);
    } catch (...) {  // out of memory while compacting: release everything instead
      drain_order();
    }
    // The stages' pace, from rounds that ran enough records to tell.
    const std::uint64_t n = order_->stats().released - before;
    if (n >= 256) {
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
          static_cast<double>(n);
      ns_per_record_ = ns_per_record_ == 0 ? ns : 0.75 * ns_per_record_ + 0.25 * ns;
    }
  }
  if (!complete)
    return;
  for (auto& slot : stages_) {
    if (slot.output != nullptr)
      slot.output->on_round();
  }
}

bool Pipeline::Impl::backlogged() const noexcept {
  // Behind: the last release of what was safe ran out of its time. Records queued past that
  // (waiting for a round to make them safe) are no backlog: holding the rings for them would
  // hold them for good.
  if (order_ == nullptr || !order_->releasing())
    return false;
  if (order_->queued_bytes() * 2 > order_->max_bytes())
    return true;
  const double budget_ns = std::chrono::duration<double, std::nano>(kBacklogTime).count();
  return ns_per_record_ > 0 && static_cast<double>(order_->queued()) * ns_per_record_ > budget_ns;
}

void Pipeline::Impl::drain_order() noexcept {
  if (!order_)
    return;
  try {
    order_->flush_all(ordered_out_);
  } catch (...) {
    ++stats_.decode_errors;
  }
}

void Pipeline::Impl::on_batch(const Batch& batch) noexcept {
  if (order_ && schema_ != nullptr) {
    for (const RecordRef& r : batch.records)
      push_ordered(r);
    return;
  }
  run_chunks(batch.records);
}

void Pipeline::Impl::push_ordered(const RecordRef& r) noexcept {
  const auto probes = schema_->probes();
  const RecordRef* ref = &r;
  // AUX chunks are not copied, and a record without bytes (a counter's reading the session
  // made, ProbeInfo::counts_to_stages) has none to copy: handed on as they come.
  if (ref->probe >= probes.size() || !Reorder::queueable(*ref) || ref->record.bytes.empty()) {
    run_chunks({ref, 1});
    return;
  }
  if (kind_of(ref->record) == RecordKind::kSample &&
      !std::holds_alternative<perf::Sample>(ref->record.body)) {
    ref = decode_sample(*ref, 0);  // its time decides its place
    if (ref == nullptr) {
      ++stats_.decode_errors;
      return;
    }
  }
  try {
    order_->push(*ref, probes[ref->probe].layout, ordered_out_);
  } catch (...) {  // out of memory: release what is queued, then this one as it is
    drain_order();
    run_chunks({ref, 1});
  }
}

void Pipeline::Impl::preload_symbols() {
  if (stacks_ && schema_ != nullptr)
    schema_->symbolizer().preload_kernel();
}

void Pipeline::Impl::flush_order() noexcept {
  drain_order();
}

void Pipeline::Impl::on_task_records(const Batch& batch) noexcept {
  if (!stacks_)
    return;
  // In time order, as every record of an ordered pipeline: a FORK applied after the child's
  // MMAP2 would replace the child's maps with its parent's.
  for (const RecordRef& r : batch.records) {
    const RecordKind k = kind_of(r.record);
    if (k != RecordKind::kMmap && k != RecordKind::kFork && k != RecordKind::kComm)
      continue;
    if (order_ && schema_ != nullptr)
      push_ordered(r);
    else
      run_chunks({&r, 1});
  }
}

void Pipeline::Impl::run_chunks(std::span<const RecordRef> records) noexcept {
  while (!records.empty()) {
    const std::size_t n = std::min(records.size(), events_.size());
    run(records.first(n));
    records = records.subspan(n);
  }
}

const RecordRef* Pipeline::Impl::decode_sample(const RecordRef& ref, std::size_t slot) noexcept {
  if (schema_ == nullptr || ref.probe >= schema_->probes().size())
    return nullptr;
  if (decoded_.size() < events_.size()) {
    try {
      decoded_.resize(events_.size());  // once, at the first undecoded sample
    } catch (...) {
      return nullptr;
    }
  }
  RecordRef& out = decoded_[slot];
  out.probe = ref.probe;
  out.cpu = ref.cpu;
  out.itrace_pid = ref.itrace_pid;
  out.itrace_tid = ref.itrace_tid;
  const auto& layout = schema_->probes()[ref.probe].layout;
  if (perf::decode(ref.record.bytes, layout, out.record) != perf::DecodeError::kOk)
    return nullptr;
  return &out;
}

void Pipeline::Impl::run(std::span<const RecordRef> records) noexcept {
  alive_.clear();
  for (std::size_t i = 0; i < records.size(); ++i) {
    const RecordRef* ref = &records[i];
    if (ref->probe >= schema_->probes().size())
      continue;  // a probe added while running that this pipeline was not bound to
    Event& e = events_[i];
    e.kind = kind_of(ref->record);
    e.sample = nullptr;
    if (e.kind == RecordKind::kSample) {
      if (!std::holds_alternative<perf::Sample>(ref->record.body)) {
        ref = decode_sample(*ref, i);  // the engine handed it on undecoded
        if (ref == nullptr) {
          ++stats_.decode_errors;
          continue;
        }
      }
      e.sample = std::get_if<perf::Sample>(&ref->record.body);
    }
    const RecordRef& r = *ref;
    e.ref = ref;
    e.dropped = false;
    e.weight = e.sample != nullptr && schema_->probes()[ref->probe].counts_to_stages
                   ? e.sample->period
                   : 1;
    for (std::size_t d = 0; d < derived_; ++d)
      e.derived[d] = std::monostate{};
    if (has_members_ && e.sample != nullptr && !member_slots_[ref->probe].empty())
      set_member_deltas(e);
    ++stats_.records;
    ++stats_.by_kind[static_cast<std::size_t>(e.kind)];
    if (stacks_ &&
        (e.kind == RecordKind::kMmap || e.kind == RecordKind::kFork || e.kind == RecordKind::kComm))
      track_maps(r.record);
    if (e.kind == RecordKind::kComm || e.kind == RecordKind::kFork) {
      // Every stage sees comm by thread, whether or not it asked for COMM records. The events
      // before this record run first, so each sees the name its thread had at its time.
      dispatch();
      if (const auto* c = std::get_if<perf::Comm>(&r.record.body))
        comm_.update(c->tid, c->comm);
      else if (const auto* f = std::get_if<perf::TaskEvent>(&r.record.body))
        comm_.fork(f->ptid, f->tid);
    }
    alive_.push_back(&e);
  }
  dispatch();
}

std::optional<std::uint32_t> feed_symbolizer(symbols::Symbolizer& sym, const perf::Record& record) {
  if (const auto* m = std::get_if<perf::Mmap2>(&record.body)) {
    sym.on_mmap({.pid = m->pid,
                 .start = m->addr,
                 .len = m->len,
                 .pgoff = m->pgoff,
                 .path = std::string(m->filename),
                 .build_id = m->has_build_id ? hex_of(m->build_id.first(std::min<std::size_t>(
                                                   m->build_id_size, m->build_id.size())))
                                             : std::string(),
                 .exec = (m->prot & PROT_EXEC) != 0});
    return m->pid;
  }
  if (const auto* m1 = std::get_if<perf::Mmap>(&record.body)) {
    sym.on_mmap({.pid = m1->pid,
                 .start = m1->addr,
                 .len = m1->len,
                 .pgoff = m1->pgoff,
                 .path = std::string(m1->filename),
                 .build_id = {},
                 .exec = (record.misc & PERF_RECORD_MISC_MMAP_DATA) == 0});
    return m1->pid;
  }
  if (const auto* f = std::get_if<perf::TaskEvent>(&record.body)) {
    if (record.type == PERF_RECORD_FORK && f->pid != f->ppid) {  // a new process, not a thread
      sym.on_fork(f->ppid, f->pid);
      return f->pid;
    }
  } else if (const auto* c = std::get_if<perf::Comm>(&record.body)) {
    if (c->exec && c->pid == c->tid) {
      sym.on_exec(c->pid);
      return c->pid;
    }
  } else if (const auto* k = std::get_if<perf::Ksymbol>(&record.body)) {
    sym.on_ksymbol(k->addr, k->len, k->name,
                   (k->flags & PERF_RECORD_KSYMBOL_FLAGS_UNREGISTER) != 0);
  }
  return std::nullopt;
}

void Pipeline::Impl::track_maps(const perf::Record& record) noexcept {
  // The symbolizer learns every process's maps from the task records (the stacks of a process
  // that exits before its table is made still resolve). Its own failures (out of memory) lose a
  // mapping, not the run.
  try {
    (void)feed_symbolizer(schema_->symbolizer(), record);
  } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): see above
  }
}

std::vector<std::string> Pipeline::Impl::take_warnings() {
  std::vector<std::string> out;
  if (!schema_ || !schema_->stacks_bound())
    return out;
  for (auto& w : schema_->symbolizer().take_warnings())
    out.push_back(std::move(w));
  return out;
}

void Pipeline::Impl::tap(std::size_t stage, std::span<const FieldRef> fields) noexcept {
  for (const Event* e : routed_) {
    if (e->dropped)
      continue;
    if (handler_failure_) {
      ++events_missed_;
      continue;
    }
    try {
      on_event_(stage, *e, fields);
    } catch (...) {
      handler_failure_ = std::current_exception();
      ++events_missed_;
    }
  }
}

void Pipeline::Impl::dispatch() noexcept {
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    auto& slot = stages_[i];
    if (alive_.empty())
      break;
    routed_.clear();
    for (Event* e : alive_) {
      if ((slot.kinds & kind_bit(e->kind)) != 0)
        routed_.push_back(e);
    }
    if (routed_.empty())
      continue;
    slot.stage->on_events(routed_);
    if (on_event_ && slot.output != nullptr) {
      if (const auto fields = slot.output->event_fields(); !fields.empty())
        tap(i, fields);
    }
    const auto before = alive_.size();
    std::erase_if(alive_, [](const Event* e) { return e->dropped; });
    stats_.dropped += before - alive_.size();
  }
  alive_.clear();
}

std::vector<std::string> Pipeline::Impl::warnings() const {
  std::vector<std::string> out;
  // With the stages' own, which every path reports (the summary's warnings: `tracer run`,
  // `serve`, a Session's stats); take_warnings() is read by `tracer run` alone, and not when its
  // stop fails, so records the stop's time cut were counted there but said nowhere else.
  if (order_ && order_->stats().unprocessed != 0) {
    out.push_back(fmt::format(
        "{} records were still queued for the stages when the stop's time ({} ms) ran out: "
        "not processed (the stages are slower than the events; see order.unprocessed)",
        order_->stats().unprocessed, kStopBudget.count()));
  }
  for (const auto& slot : stages_)
    slot.stage->warnings(out);
  return out;
}

std::vector<std::pair<std::string, std::uint64_t>> Pipeline::Impl::counters() const {
  std::vector<std::pair<std::string, std::uint64_t>> out, one;
  for (const auto& slot : stages_) {
    one.clear();
    slot.stage->counters(one);
    for (auto& [name, value] : one)
      out.emplace_back(slot.name + "." + name, value);
  }
  if (order_ != nullptr) {
    const auto& o = order_->stats();
    out.emplace_back("order.late", o.late);
    out.emplace_back("order.forced_flushes", o.forced_flushes);
    if (o.unprocessed != 0)
      out.emplace_back("order.unprocessed", o.unprocessed);
  }
  if (handler_failure_)
    out.emplace_back("on_event.missed", events_missed_);
  return out;
}

void Pipeline::Impl::emit(std::size_t index, std::chrono::nanoseconds now, bool reset, bool total) {
  Slot& slot = stages_[index];
  Table table;
  table.since = total ? started_ : slot.last_emit;
  table.time = now;
  table.interval = slot.emitted;
  table.total = total;
  slot.aggregation->snapshot(table, reset);
  if (table.rows.empty() && slot.aggregation->every())
    return;  // quiet intervals print nothing (as bpftrace's interval probes with empty maps)
  ++slot.emitted;
  if (on_table_)
    on_table_(index, table, stopped_);  // stop() sets stopped_ before its final tables
  for (std::size_t j = index + 1; j < stages_.size(); ++j) {
    if (Output* out = stages_[j].output; out != nullptr && out->takes_tables())
      out->on_table(table);
  }
}

Table Pipeline::Impl::peek(std::size_t index, std::chrono::nanoseconds now) {
  Slot& slot = stages_[index];
  Table table;
  table.total = slot.aggregation->total_at_stop();
  table.since = table.total ? started_ : slot.last_emit;
  table.time = now;
  table.interval = slot.emitted;
  slot.aggregation->snapshot(table, false);
  return table;
}

bool Pipeline::Impl::output_due(std::chrono::nanoseconds now) const {
  if (stopped_)
    return false;
  return std::ranges::any_of(stages_, [now](const Slot& slot) {
    if (slot.aggregation == nullptr)
      return false;
    const auto every = slot.aggregation->every();
    return every && now - slot.last_emit >= *every;
  });
}

void Pipeline::Impl::tick(std::chrono::nanoseconds now) {
  if (stopped_)
    return;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    Slot& slot = stages_[i];
    if (slot.aggregation == nullptr)
      continue;
    const auto every = slot.aggregation->every();
    if (!every || now - slot.last_emit < *every)
      continue;
    emit(i, now, true);
    slot.last_emit += *every * ((now - slot.last_emit) / *every);
  }
  for (auto& slot : stages_) {
    if (slot.output != nullptr)
      slot.output->flush();
  }
  out_->flush();
}

void Pipeline::Impl::stop(std::chrono::nanoseconds now) {
  if (stopped_)
    return;
  // The last records, in time order, before the final tables: for kStopBudget at most, so that
  // a stop is honoured however slow the stages (what is left is counted, and said).
  if (order_)
    order_->give_up_at(std::chrono::steady_clock::now() + kStopBudget);
  drain_order();
  stopped_ = true;
  // Every stage's final table, every stage's stop and the sink's flush run whatever one of them
  // throws (a stage that fails must not cost the others their results); the first error is
  // rethrown after.
  std::exception_ptr first;
  const auto guarded = [&first](auto&& step) {
    try {
      step();
    } catch (...) {
      if (!first)
        first = std::current_exception();
    }
  };
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    if (stages_[i].aggregation != nullptr) {
      // An aggregation that keeps a total (the counters stage): the last interval's table,
      // then the whole run's; without `every` the one table is the whole run's.
      // (A run shorter than one interval: its total alone.)
      const bool total = stages_[i].aggregation->total_at_stop();
      if (!total || (stages_[i].aggregation->every() && stages_[i].emitted > 0))
        guarded([&] { emit(i, now, true); });
      if (total)
        guarded([&] { emit(i, now, true, true); });
      stages_[i].last_emit = now;
    }
  }
  for (auto& slot : stages_)
    guarded([&] { slot.stage->stop(); });
  guarded([&] { out_->flush(); });
  if (first)
    std::rethrow_exception(first);
}

void Pipeline::Impl::stop() {
  stop(std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()));
}

// ---------------------------------------------------------------------------------------------
// Pipeline: the API, each call handed to its Impl.

Pipeline::Pipeline(Sink& out, PipelineOptions options)
    : impl_(std::make_unique<Impl>(out, std::move(options))) {}
Pipeline::~Pipeline() = default;

void Pipeline::add(std::unique_ptr<Stage> stage, std::string name, StageNeeds needs) {
  impl_->add(std::move(stage), std::move(name), std::move(needs));
}
void Pipeline::add(const StageRegistry& registry,
                   std::string_view use,
                   const ConfigValue& options,
                   Diagnostics& diags) {
  impl_->add(registry, use, options, diags);
}
void Pipeline::bind(std::span<const ProbeInfo> probes,
                    Diagnostics& diags,
                    std::span<const PayloadSchema> payloads,
                    const MapSource* maps) {
  impl_->bind(probes, diags, payloads, maps);
}
void Pipeline::rebind(std::span<const ProbeInfo> probes,
                      Diagnostics& diags,
                      const MapSource* maps) {
  impl_->rebind(probes, diags, maps);
}
bool Pipeline::rebinds() const noexcept {
  return impl_->rebinds();
}
void Pipeline::start(std::chrono::nanoseconds now) {
  impl_->start(now);
}
void Pipeline::on_batch(const Batch& batch) noexcept {
  impl_->on_batch(batch);
}
bool Pipeline::takes_in_place(std::uint32_t probe) const noexcept {
  return probe < impl_->in_place_.size() && impl_->in_place_[probe];
}
bool Pipeline::comm_in_place_possible() const noexcept {
  return impl_->comm_in_place_possible();
}
void Pipeline::use_comm_in_place() {
  impl_->use_comm_in_place();
}
void Pipeline::on_in_place(std::span<const InPlaceSample> samples) noexcept {
  impl_->on_in_place(samples);
}
void Pipeline::flush_order() noexcept {
  impl_->flush_order();
}
bool Pipeline::tracks_maps() const noexcept {
  return impl_->stacks_;
}
void Pipeline::preload_symbols() {
  impl_->preload_symbols();
}
void Pipeline::on_task_records(const Batch& batch) noexcept {
  impl_->on_task_records(batch);
}
BatchHandler Pipeline::handler() {
  return impl_->handler();
}
void Pipeline::round(bool complete) noexcept {
  impl_->round(complete);
}
bool Pipeline::backlogged() const noexcept {
  return impl_->backlogged();
}
bool Pipeline::ordered() const noexcept {
  return impl_->order_ != nullptr;
}
const ReorderStats* Pipeline::order_stats() const noexcept {
  return impl_->order_ ? &impl_->order_->stats() : nullptr;
}
std::vector<std::pair<std::string, std::uint64_t>> Pipeline::counters() const {
  return impl_->counters();
}
std::vector<std::string> Pipeline::warnings() const {
  return impl_->warnings();
}
void Pipeline::tick(std::chrono::nanoseconds now) {
  impl_->tick(now);
}
bool Pipeline::output_due(std::chrono::nanoseconds now) const {
  return impl_->output_due(now);
}
Table Pipeline::peek(std::size_t index, std::chrono::nanoseconds now) {
  return impl_->peek(index, now);
}
void Pipeline::stop(std::chrono::nanoseconds now) {
  impl_->stop(now);
}
void Pipeline::on_table(TableHandler handler) {
  impl_->on_table_ = std::move(handler);
}
void Pipeline::on_event(EventHandler handler) {
  impl_->on_event_ = std::move(handler);
}
std::exception_ptr Pipeline::handler_failure() const noexcept {
  return impl_->handler_failure_;
}
void Pipeline::stop() {
  impl_->stop();
}
void Pipeline::set_counters(const CounterSource* counters) noexcept {
  impl_->counters_ = counters;
}
CommCache& Pipeline::comm() noexcept {
  return impl_->comm_;
}
std::vector<std::string> Pipeline::take_warnings() {
  return impl_->take_warnings();
}
const PipelineStats& Pipeline::stats() const noexcept {
  return impl_->stats_;
}
std::size_t Pipeline::size() const noexcept {
  return impl_->stages_.size();
}
Stage& Pipeline::stage(std::size_t i) noexcept {
  return *impl_->stages_[i].stage;
}
const std::string& Pipeline::stage_name(std::size_t i) const noexcept {
  return impl_->stages_[i].name;
}

}  // namespace tracer
