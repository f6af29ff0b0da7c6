// kernel::gen::Reader: flips a generated program's generation and reads the old one back.
//
// Why the flip is exact (docs/architecture.md, "In-kernel recipes (codegen)"):
//   1. Each program run reads tr_gen once, at entry, and sends every update of that event to
//      tr_agg<gen>. An event is therefore counted whole in exactly one generation.
//   2. User space stores the new tr_gen (an ARRAY map write, bpf_map_update_elem), then updates
//      the ARRAY_OF_MAPS tr_sync: the kernel's map-in-map update waits for every BPF program
//      running at that time to return (kernel/bpf/syscall.c maybe_wait_bpf_programs:
//      synchronize_rcu(); tracepoint and kprobe programs run under rcu_read_lock() in
//      trace_call_bpf, uprobe programs too when they are not sleepable). A program that read
//      the old generation started before the grace period, so it has finished; one that starts
//      after it sees the new tr_gen (RCU's guarantee that stores before synchronize_rcu() are
//      seen by readers that begin after it).
//   3. The old generation is then quiescent: read, summed over CPUs, and cleared (keys deleted,
//      so the capacity max_keys is per interval) before it becomes the one written again at the
//      next flip.
// tr_gen only ever holds 0 or 1, so even a torn store could only be read as 0 or 1.
#include "tracer/kernel/reader.hpp"
#include "tracer/common/errno_text.hpp"

#include <bpf/bpf.h>

#include <bpf/libbpf.h>
#include "tracer/common/buckets.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace tracer::kernel::gen {
namespace {

std::size_t round_up8(std::size_t n) {
  return (n + 7) & ~std::size_t{7};
}

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

std::int64_t load_int(const std::byte* p, std::uint32_t size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? load<std::int8_t>(p) : load<std::uint8_t>(p);
    case 2:
      return is_signed ? load<std::int16_t>(p) : load<std::uint16_t>(p);
    case 4:
      return is_signed ? load<std::int32_t>(p) : load<std::uint32_t>(p);
    default:
      return load<std::int64_t>(p);
  }
}

// The kernel's ENOTSUPP (include/linux/errno.h), which a missing batch operation returns.
constexpr int kKernelNotSupp = 524;

// The Stats fields in tr_stats' order.
constexpr std::size_t kStatsFields = 13;
Stats stats_from(const std::uint64_t* v) {
  return {.hits = v[0],
          .map_full = v[1],
          .truncated = v[2],
          .contended = v[3],
          .paired = v[4],
          .unmatched_exits = v[5],
          .unmatched_entries = v[6],
          .out_of_order = v[7],
          .entries_dropped = v[8],
          .targets_dropped = v[9],
          .stacks_lost = v[10],
          .keys_added = v[11],
          .read_faults = v[12]};
}
void add(Stats& a, const Stats& b) {
  a.hits += b.hits;
  a.map_full += b.map_full;
  a.truncated += b.truncated;
  a.contended += b.contended;
  a.paired += b.paired;
  a.unmatched_exits += b.unmatched_exits;
  a.unmatched_entries += b.unmatched_entries;
  a.out_of_order += b.out_of_order;
  a.entries_dropped += b.entries_dropped;
  a.targets_dropped += b.targets_dropped;
  a.stacks_lost += b.stacks_lost;
  a.keys_added += b.keys_added;
  a.read_faults += b.read_faults;
}

// PERF_CONTEXT_* (include/uapi/linux/perf_event.h): markers at or above PERF_CONTEXT_MAX.
constexpr std::uint64_t kContextMax = static_cast<std::uint64_t>(-4095);
constexpr std::uint64_t kContextKernel = static_cast<std::uint64_t>(-128);
constexpr std::uint64_t kContextUser = static_cast<std::uint64_t>(-512);

// The internal map of .bss (libbpf names it "<object prefix>.bss").
::bpf_map* bss_map(::bpf_object* obj) {
  ::bpf_map* m = nullptr;
  bpf_object__for_each_map(m, obj) {
    const std::string_view name = bpf_map__name(m);
    if (bpf_map__is_internal(m) && name.size() >= 4 && name.substr(name.size() - 4) == ".bss")
      return m;
  }
  return nullptr;
}

}  // namespace

Reader::Reader(bpf::Object& obj, GeneratedProgram prog, ReaderOptions opts)
    : obj_(&obj), prog_(std::move(prog)), opts_(std::move(opts)) {
  const int n = libbpf_num_possible_cpus();
  cpus_ = n > 0 ? static_cast<std::uint32_t>(n) : 1;
}

Snapshot Reader::empty_snapshot() const {
  Snapshot s;
  s.key_names = prog_.plan.aggregation.key_names;
  return s;
}

Status Reader::set_generation(std::uint32_t gen) {
  ::bpf_map* m = bss_map(obj_->raw());
  if (m == nullptr)
    return fail(ENOENT,
                fmt::format("bpf: object '{}' has no .bss map ({})", obj_->name(), kGenerationVar));
  if (bpf_map__value_size(m) != sizeof(std::uint32_t))
    return fail(EINVAL, fmt::format("bpf: object '{}': .bss is {} bytes, not tr_gen's 4",
                                    obj_->name(), bpf_map__value_size(m)));
  const std::uint32_t zero = 0;
  if (bpf_map_update_elem(bpf_map__fd(m), &zero, &gen, BPF_ANY) != 0) {
    const int err = errno;
    return fail(err, fmt::format("bpf: object '{}': writing {}: {}", obj_->name(), kGenerationVar,
                                 errno_text(err)));
  }
  return {};
}

Status Reader::wait_for_programs() const {
  TRACER_ASSIGN_OR_RETURN(const int outer, obj_->map_fd(kSyncMap));
  TRACER_ASSIGN_OR_RETURN(const int inner, obj_->map_fd(kSyncInnerMap));
  const std::uint32_t zero = 0;
  // kernel/bpf/syscall.c map_update_elem -> maybe_wait_bpf_programs(): synchronize_rcu() for
  // ARRAY_OF_MAPS and HASH_OF_MAPS, "so that userspace, when we return to it, knows that all
  // non-sleepable programs that could be running use the new map value".
  if (bpf_map_update_elem(outer, &zero, &inner, BPF_ANY) != 0) {
    const int err = errno;
    return fail(err, fmt::format("bpf: object '{}': the grace-period update of {}: {}",
                                 obj_->name(), kSyncMap, errno_text(err)));
  }
  return {};
}

Cell Reader::decode_key(const KeyColumn& c, const std::byte* key) const {
  const Layout& l = prog_.layout;
  if (c.missing_bit >= 0) {
    const auto bits = static_cast<unsigned>(load<std::uint8_t>(key + l.missing_offset));
    if ((bits & (1U << static_cast<unsigned>(c.missing_bit))) != 0)
      return std::monostate{};
  }
  const std::byte* p = key + c.offset;
  if (c.probe_name) {
    const auto i = load<std::uint32_t>(p);
    return i < prog_.plan.probes.size() ? Cell{prog_.plan.probes[i].name} : Cell{};
  }
  switch (c.type) {
    case KeyColumn::Type::kString: {
      const auto* s = reinterpret_cast<const char*>(p);
      return std::string(s, ::strnlen(s, c.size));
    }
    case KeyColumn::Type::kInt: {
      const std::int64_t v = load_int(p, c.size, c.is_signed);
      if (c.syscall_id && opts_.syscall_name) {
        if (std::string name = opts_.syscall_name(v); !name.empty())
          return name;
      }
      return v;
    }
    case KeyColumn::Type::kUint:
      return static_cast<std::uint64_t>(load_int(p, c.size, c.is_signed));
    case KeyColumn::Type::kStack:
      return decode_stack(c, p);
  }
  return std::monostate{};
}

const std::vector<std::uint64_t>& Reader::stack_of(std::uint64_t hash) const {
  static const std::vector<std::uint64_t> kNone;
  if (hash == 0)
    return kNone;  // no stack: a user stack of a kernel thread, a kernel stack of a user sample
  if (auto it = stacks_.find(hash); it != stacks_.end())
    return it->second;
  auto fd = obj_->map_fd(kStacksMap);
  std::vector<std::uint64_t> ips(prog_.plan.aggregation.stack_depth, 0);
  std::vector<std::uint64_t> out;
  if (fd && bpf_map_lookup_elem(*fd, &hash, ips.data()) == 0) {
    // bpf_get_stack zero-fills past the last frame. A perf event's program takes its stack from
    // the sample's own callchain, which may hold PERF_CONTEXT_* markers: dropped here, and
    // written again where a callchain key wants them.
    for (const std::uint64_t ip : ips) {
      if (ip == 0)
        break;
      if (ip < kContextMax)
        out.push_back(ip);
    }
  }
  return stacks_.emplace(hash, std::move(out)).first->second;
}

Cell Reader::decode_stack(const KeyColumn& c, const std::byte* p) const {
  Ips cell;
  const auto& k = stack_of(load<std::uint64_t>(p));
  const auto& u = stack_of(load<std::uint64_t>(p + 8));
  cell.pid = load<std::uint32_t>(p + 16);
  if (c.stack == Source::kCallchain) {
    if (!k.empty()) {
      cell.ips.push_back(kContextKernel);
      cell.ips.insert(cell.ips.end(), k.begin(), k.end());
    }
    if (!u.empty()) {
      cell.ips.push_back(kContextUser);
      cell.ips.insert(cell.ips.end(), u.begin(), u.end());
    }
  } else {
    cell.ips = c.stack == Source::kKernelStack ? k : u;
  }
  return cell;
}

Row Reader::make_row(const std::byte* key,
                     std::span<const std::byte> values,
                     std::uint32_t slot) const {
  const Layout& l = prog_.layout;
  Row row;
  if (key == nullptr && !l.keyless) {
    // An array slot (by_probe, own_slot): the slot is the probe; its key fields are the target
    // pid, its name, or none.
    const ProbePlan& p = prog_.plan.probes[slot];
    for (const Field& f : p.keys) {
      if (f.source == Source::kPid && !prog_.plan.tgids.empty())
        row.keys.emplace_back(std::int64_t{prog_.plan.tgids[0]});
      else if (f.source == Source::kProbe)
        row.keys.emplace_back(p.name);
      else
        row.keys.emplace_back(std::monostate{});
    }
  } else if (!l.keyless) {
    for (const KeyColumn& c : l.columns)
      row.keys.push_back(decode_key(c, key));
  }
  const std::size_t n = l.percpu ? cpus_ : 1;
  row.stride = static_cast<std::uint32_t>(l.percpu ? round_up8(l.value_size) : l.value_size);
  row.values = static_cast<std::uint32_t>(n);
  const auto used = values.first(std::min(values.size(), n * row.stride));
  row.bytes.assign(used.begin(), used.end());
  return row;
}

bool Reader::has_events(const Row& row) noexcept {
  return std::any_of(row.bytes.begin(), row.bytes.end(),
                     [](std::byte b) { return b != std::byte{0}; });
}

Result<std::vector<Row>> Reader::read_rows(std::uint32_t gen, bool clear) const {
  const Layout& l = prog_.layout;
  const char* const map = kAggMaps[gen & 1];
  TRACER_ASSIGN_OR_RETURN(const int fd, obj_->map_fd(map));
  const std::size_t value_bytes = l.percpu ? round_up8(l.value_size) * cpus_ : l.value_size;
  std::vector<std::byte> value(value_bytes);
  std::vector<Row> rows;
  const auto failed_in = [&](std::string_view name, std::string_view what) {
    const int err = errno;
    return fail(err, fmt::format("bpf: object '{}': map '{}': {}: {}", obj_->name(), name, what,
                                 errno_text(err)));
  };
  const auto failed = [&](std::string_view what) { return failed_in(map, what); };
  // An array: one slot, or one per probe.
  const auto read_array = [&](int array_fd, std::uint32_t slots,
                              const char* name) -> Result<std::vector<Row>> {
    std::vector<Row> out;
    for (std::uint32_t slot = 0; slot < slots; ++slot) {
      if (bpf_map_lookup_elem(array_fd, &slot, value.data()) != 0)
        return failed_in(name, "lookup");
      Row row = make_row(nullptr, value, slot);
      if (clear && has_events(row)) {
        std::fill(value.begin(), value.end(), std::byte{0});
        if (bpf_map_update_elem(array_fd, &slot, value.data(), BPF_ANY) != 0)
          return failed_in(name, "clear");
      }
      if (has_events(row))
        out.push_back(std::move(row));
    }
    return out;
  };
  if (l.keyless || l.by_probe)
    return read_array(fd, l.keyless ? 1 : l.probes, map);
  if (l.own_slot) {
    // The target's own rows; its children's (other pids: no key is in both) follow from the
    // hash below.
    TRACER_ASSIGN_OR_RETURN(const int own_fd, obj_->map_fd(kOwnMaps[gen & 1]));
    TRACER_ASSIGN_OR_RETURN(rows, read_array(own_fd, l.probes, kOwnMaps[gen & 1]));
  }
  // Batched (BPF_MAP_LOOKUP[_AND_DELETE]_BATCH, 5.6+): a few calls for the whole map instead
  // of three per key. Nothing writes this generation while it is read (peek(): a key added
  // meanwhile is simply not in this view).
  if (auto batched = read_batched(fd, map, clear); batched) {
    for (auto& r : *batched)
      rows.push_back(std::move(r));
    return rows;
  } else if (batched.error().errno_value() != ENOTSUP) {
    return fail(batched.error());
  }
  // Keys first, then their values, as the batch does.
  std::vector<std::byte> keys;
  std::vector<std::byte> cur(l.key_size), next(l.key_size);
  const void* prev = nullptr;
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    keys.insert(keys.end(), next.begin(), next.end());
    cur = next;
    prev = cur.data();
  }
  if (errno != ENOENT)
    return failed("iterating keys");
  for (std::size_t at = 0; at < keys.size(); at += l.key_size) {
    const std::byte* key = keys.data() + at;
    if (bpf_map_lookup_elem(fd, key, value.data()) != 0) {
      if (errno == ENOENT)
        continue;
      return failed("lookup");
    }
    Row row = make_row(key, value, 0);
    if (has_events(row))
      rows.push_back(std::move(row));
  }
  if (clear) {
    for (std::size_t at = 0; at < keys.size(); at += l.key_size) {
      if (bpf_map_delete_elem(fd, keys.data() + at) != 0 && errno != ENOENT)
        return failed("delete");
    }
  }
  return rows;
}

Result<std::vector<Row>> Reader::read_batched(int fd, const char* map, bool clear) const {
  const Layout& l = prog_.layout;
  const std::size_t value_bytes = l.percpu ? round_up8(l.value_size) * cpus_ : l.value_size;
  // A bucket's keys come whole: ENOSPC when the first bucket does not fit, then a larger batch.
  std::uint32_t batch = std::clamp<std::uint32_t>(prog_.plan.aggregation.max_keys, 64, 4096);
  std::vector<std::byte> keys, values;
  std::vector<Row> rows;
  std::uint32_t cursor = 0;
  bool first = true;
  for (;;) {
    keys.resize(std::size_t{batch} * l.key_size);
    values.resize(std::size_t{batch} * value_bytes);
    std::uint32_t count = batch;
    bpf_map_batch_opts opts{};
    opts.sz = sizeof(opts);
    std::uint32_t next = 0;
    const int rc = clear
                       ? bpf_map_lookup_and_delete_batch(fd, first ? nullptr : &cursor, &next,
                                                         keys.data(), values.data(), &count, &opts)
                       : bpf_map_lookup_batch(fd, first ? nullptr : &cursor, &next, keys.data(),
                                              values.data(), &count, &opts);
    const int err = rc == 0 ? 0 : errno;
    if (rc != 0 && err == ENOSPC && count == 0) {
      batch *= 2;
      continue;
    }
    if (rc != 0 && err != ENOENT) {
      if (first && (err == EINVAL || err == EOPNOTSUPP || err == kKernelNotSupp || err == ENOSYS))
        return fail(ENOTSUP, "batched map operations are not supported");
      return fail(err, fmt::format("bpf: object '{}': map '{}': batched {}: {}", obj_->name(), map,
                                   clear ? "lookup and delete" : "lookup", errno_text(err)));
    }
    for (std::uint32_t i = 0; i < count; ++i) {
      Row row = make_row(
          keys.data() + std::size_t{i} * l.key_size,
          std::span<const std::byte>(values.data() + std::size_t{i} * value_bytes, value_bytes), 0);
      if (has_events(row))
        rows.push_back(std::move(row));
    }
    if (rc != 0)  // ENOENT: the last batch
      return rows;
    cursor = next;
    first = false;
  }
}

Result<std::vector<std::byte>> Reader::read_stats() const {
  TRACER_ASSIGN_OR_RETURN(const int fd, obj_->map_fd(kStatsMap));
  const std::size_t stride = round_up8(kStatsFields * 8) * cpus_;
  const auto slots = static_cast<std::uint32_t>(prog_.plan.probes.size() + 1);
  std::vector<std::byte> buf(stride * slots);
  // Every slot in one call (an array's batch returns its keys in order), else one per slot.
  std::vector<std::uint32_t> keys(slots);
  std::uint32_t count = slots, next = 0;
  bpf_map_batch_opts opts{};
  opts.sz = sizeof(opts);
  const int rc = bpf_map_lookup_batch(fd, nullptr, &next, keys.data(), buf.data(), &count, &opts);
  if ((rc == 0 || errno == ENOENT) && count == slots) {
    bool in_order = true;
    for (std::uint32_t i = 0; i < slots; ++i)
      in_order = in_order && keys[i] == i;
    if (in_order)
      return buf;
  }
  for (std::uint32_t slot = 0; slot < slots; ++slot) {
    if (bpf_map_lookup_elem(fd, &slot, buf.data() + slot * stride) != 0) {
      const int err = errno;
      return fail(err, fmt::format("bpf: object '{}': map '{}': lookup: {}", obj_->name(),
                                   kStatsMap, errno_text(err)));
    }
  }
  return buf;
}

Result<std::vector<ProbeStats>> Reader::probe_stats() const {
  TRACER_ASSIGN_OR_RETURN(const auto buf, read_stats());
  const std::size_t stride = round_up8(kStatsFields * 8);
  std::vector<ProbeStats> out;
  for (std::uint32_t slot = 0; slot <= prog_.plan.probes.size(); ++slot) {
    ProbeStats ps;
    ps.name = slot < prog_.plan.probes.size() ? prog_.plan.probes[slot].name : "";
    for (std::uint32_t cpu = 0; cpu < cpus_; ++cpu) {
      std::uint64_t v[kStatsFields];
      std::memcpy(v, buf.data() + (std::size_t{slot} * cpus_ + cpu) * stride, sizeof v);
      const Stats s = stats_from(v);
      ps.hits_per_cpu.push_back(s.hits);
      add(ps.total, s);
    }
    if (slot < prog_.programs.size())
      ps.recursion_misses = obj_->program_skips(prog_.programs[slot]);
    out.push_back(std::move(ps));
  }
  return out;
}

Result<std::uint64_t> Reader::keys_added() const {
  TRACER_ASSIGN_OR_RETURN(const auto buf, read_stats());
  const std::size_t stride = round_up8(kStatsFields * 8);
  std::uint64_t total = 0;
  for (std::size_t at = 0; at + stride <= buf.size(); at += stride) {
    std::uint64_t v[kStatsFields];
    std::memcpy(v, buf.data() + at, sizeof v);
    total += stats_from(v).keys_added;
  }
  return total;
}

Result<bool> Reader::filling() const {
  const Layout& l = prog_.layout;
  if (l.keyless || l.by_probe)
    return false;  // an array: its slots never run out
  TRACER_ASSIGN_OR_RETURN(const std::uint64_t now, keys_added());
  return now - keys_at_flip_ >= std::max<std::uint32_t>(prog_.plan.aggregation.max_keys / 2, 1);
}

Status Reader::fill_counters(Snapshot& s) const {
  TRACER_ASSIGN_OR_RETURN(auto all, probe_stats());
  s.pipeline = all.back().total;
  all.pop_back();
  for (const auto& p : all) {
    s.map_full += p.total.map_full;
    s.truncated += p.total.truncated;
    s.stacks_lost += p.total.stacks_lost;
  }
  s.probes = std::move(all);
  if (prog_.plan.latency) {
    TRACER_ASSIGN_OR_RETURN(const int fd, obj_->map_fd(kStartMap));
    std::uint64_t cur = 0, next = 0;
    const void* prev = nullptr;
    while (bpf_map_get_next_key(fd, prev, &next) == 0) {
      ++s.pending;
      cur = next;
      prev = &cur;
    }
  }
  return {};
}

Result<Snapshot> Reader::flip_and_read() {
  const std::uint32_t old = gen_;
  if (!prog_.layout.keyless && !prog_.layout.by_probe) {
    // Before the flip: every key of the new generation is added after it.
    TRACER_ASSIGN_OR_RETURN(keys_at_flip_, keys_added());
  }
  TRACER_TRY(set_generation(old ^ 1U));
  gen_ = old ^ 1U;
  TRACER_TRY(wait_for_programs());
  Snapshot s = empty_snapshot();
  s.generation = old;
  TRACER_ASSIGN_OR_RETURN(s.rows, read_rows(old, /*clear=*/true));
  TRACER_TRY(fill_counters(s));
  return s;
}

Result<Snapshot> Reader::peek() const {
  Snapshot s = empty_snapshot();
  s.generation = gen_;
  TRACER_ASSIGN_OR_RETURN(s.rows, read_rows(gen_, /*clear=*/false));
  TRACER_TRY(fill_counters(s));
  return s;
}

}  // namespace tracer::kernel::gen
