#include "aggregate.hpp"

#include <fmt/format.h>

#include <bit>
#include <charconv>
#include <cstring>
#include <numeric>
#include <utility>

namespace tracer::stages {

namespace {
enum Tag : char {
  kNone = 'n',
  kInt = 'i',
  kUint = 'u',
  kDouble = 'd',
  kStr = 's',
  kIps = 'c',
  kStackRef = 'k',  // a StackInterner's stack, by index
};

// PERF_CONTEXT_* markers (>= PERF_CONTEXT_MAX as u64) separate kernel and user frames.
constexpr std::uint64_t kContextMax = static_cast<std::uint64_t>(-4095);
// x86-64: the kernel's half of the address space (what an unsymbolized frame is marked by).
constexpr std::uint64_t kKernelHalf = 0xffff800000000000ULL;

template <typename T>
void put(std::string& b, T v) noexcept {
  char raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  b.append(raw, sizeof(T));
}
template <typename T>
T take(std::string_view& b) {
  T v{};
  if (b.size() < sizeof(T))
    return v;
  // Key bytes, not text: no terminator is expected.
  std::memcpy(&v, b.data(), sizeof(T));  // NOLINT(bugprone-suspicious-stringview-data-usage)
  b.remove_prefix(sizeof(T));
  return v;
}

/// An encoded ip list after its tag: the process, then the ips.
std::pair<std::uint32_t, std::vector<std::uint64_t>> take_ip_list(std::string_view& b) {
  const auto pid = take<std::uint32_t>(b);
  const auto n = std::min<std::size_t>(take<std::uint32_t>(b), b.size() / 8);
  std::vector<std::uint64_t> ips(n);
  for (auto& ip : ips)
    ip = take<std::uint64_t>(b);
  return {pid, std::move(ips)};
}

bool g_fixed_keys_enabled = true;  // set_fixed_keys_enabled: tests and benchmarks only
}  // namespace

void set_fixed_keys_enabled(bool enabled) noexcept {
  g_fixed_keys_enabled = enabled;
}

std::vector<OptionSpec> aggregate_options() {
  return {
      {.name = "by",
       .type = OptionSpec::Type::kFieldList,
       .required = false,
       .help = R"(group by these fields: by = ["comm", "filename"])"},
      {.name = "top",
       .type = OptionSpec::Type::kInt,
       .required = false,
       .help = "keep the N largest rows"},
      {.name = "every",
       .type = OptionSpec::Type::kDuration,
       .required = false,
       .help = R"(emit and reset at this interval: every = "1s")"},
      {.name = "max_keys",
       .type = OptionSpec::Type::kInt,
       .required = false,
       .help = "placed in the kernel: keys its map holds between two reads (default 10240; "
               "tracer reads it before it fills); the events of keys that do not fit are counted "
               "as lost (map_full)"},
      {.name = "key_limit",
       .type = OptionSpec::Type::kInt,
       .required = false,
       .help = "keys the stage holds in user space at most (default 1048576; per interval with "
               "every): the events of keys past it are counted (keys_dropped), memory stays "
               "bounded"},
      {.name = "max_stacks",
       .type = OptionSpec::Type::kInt,
       .required = false,
       .help = "placed in the kernel with a stack key: distinct stacks its stack map "
               "holds for the whole run (default 16384); the events of stacks that do not fit "
               "are counted as lost"},
  };
}

void KeyEncoder::add(const Value& v) {
  // A key longer than the reserved capacity grows the buffer once (warm-up); std::string's
  // growth throwing bad_alloc would end the process, as any allocation failure does here.
  std::visit(
      [this](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          buf_.push_back(kNone);
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          buf_.push_back(kInt);
          put(buf_, x);
        } else if constexpr (std::is_same_v<T, std::uint64_t>) {
          buf_.push_back(kUint);
          put(buf_, x);
        } else if constexpr (std::is_same_v<T, double>) {
          buf_.push_back(kDouble);
          put(buf_, x);
        } else if constexpr (std::is_same_v<T, std::string_view>) {
          buf_.push_back(kStr);
          put(buf_, static_cast<std::uint32_t>(x.size()));
          buf_.append(x);
        } else {
          buf_.push_back(kIps);
          put(buf_, x.pid);
          put(buf_, static_cast<std::uint32_t>(x.ips.size));
          buf_.append(reinterpret_cast<const char*>(x.ips.data), x.ips.size * 8);
        }
      },
      v);
}

void KeyEncoder::add_stack_ref(std::uint32_t index) {
  buf_.push_back(kStackRef);
  put(buf_, index);
}

std::string encode_fixed(const FixedKey& key) {
  KeyEncoder enc;
  std::size_t word = 0;
  for (std::size_t i = 0; i < FixedKey::kMaxFields; ++i) {
    const std::uint32_t code = (key.types >> (8 * i)) & 0xFFU;
    if (code == 0)
      break;  // no field i: the key has ended
    if (code >= FixedKey::kString) {
      const char* bytes = reinterpret_cast<const char*>(key.v.data()) + (word * 8);
      enc.add(Value{std::string_view(bytes, code - FixedKey::kString)});
      word += 2;
      continue;
    }
    if (code == 1)
      enc.add(Value{});
    else if (code == 2)
      enc.add(Value{static_cast<std::int64_t>(key.v[word])});
    else
      enc.add(Value{key.v[word]});
    ++word;
  }
  return std::string(enc.bytes());
}

void FixedKeyIndex::insert(const FixedKey& k, std::uint32_t index) {
  // At most half full: linear probing's runs stay short, and an empty slot always ends a find.
  if ((size_ + 1) * 2 > slots_.size()) {
    constexpr std::size_t kInitialSlots = 64;
    std::vector<Slot> old = std::move(slots_);
    const std::size_t n = old.empty() ? kInitialSlots : old.size() * 2;
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(n));
    for (const Slot& s : old) {
      if (s.types != kEmpty)
        place(s);
    }
  }
  last_ = place(Slot{.v = k.v, .types = k.types, .index = index});
  ++size_;
}

std::size_t FixedKeyIndex::place(const Slot& slot) noexcept {
  std::size_t s = slot_of(FixedKey{.v = slot.v, .types = slot.types});
  while (slots_[s].types != kEmpty)
    s = (s + 1) & mask_;
  slots_[s] = slot;
  return s;
}

std::vector<Cell> decode_key(std::string_view b, const StackInterner* stacks) {
  std::vector<Cell> out;
  while (!b.empty()) {
    const char tag = b.front();
    b.remove_prefix(1);
    switch (tag) {
      case kInt:
        out.emplace_back(take<std::int64_t>(b));
        break;
      case kUint:
        out.emplace_back(take<std::uint64_t>(b));
        break;
      case kDouble:
        out.emplace_back(take<double>(b));
        break;
      case kStr: {
        const auto n = std::min<std::size_t>(take<std::uint32_t>(b), b.size());
        out.emplace_back(std::string(b.substr(0, n)));
        b.remove_prefix(n);
        break;
      }
      case kIps: {
        const auto ips = take_ip_list(b).second;  // unsymbolized: the addresses only
        Stack stack;
        for (const auto ip : ips) {
          if (ip < kContextMax)
            stack.frames.push_back({.addr = ip, .kernel = ip >= kKernelHalf});
        }
        out.emplace_back(std::move(stack));
        break;
      }
      case kStackRef: {
        const auto index = take<std::uint32_t>(b);
        if (stacks != nullptr && index < stacks->size())
          out.emplace_back(stacks->stack(index));
        else
          out.emplace_back(std::monostate{});
        break;
      }
      default:
        out.emplace_back(std::monostate{});
        break;
    }
  }
  return out;
}

void AggregateStage::configure_common(StageOptions& opts) {
  by_names_ = opts.list("by");
  top_ = opts.integer("top");
  if (top_ && *top_ <= 0) {
    opts.diags().add(opts.where("top"), "option 'top' must be a positive integer");
    top_.reset();
  }
  every_ = opts.duration("every");
  if (auto m = opts.integer("max_keys")) {
    if (*m <= 0 || *m > (std::int64_t{1} << 24))
      opts.diags().add(opts.where("max_keys"), "option 'max_keys' must be in 1..16777216");
    else
      max_keys_ = static_cast<std::uint32_t>(*m);
  }
  if (auto m = opts.integer("key_limit")) {
    if (*m <= 0 || *m > (std::int64_t{1} << 24))
      opts.diags().add(opts.where("key_limit"), "option 'key_limit' must be in 1..16777216");
    else
      key_limit_ = static_cast<std::uint32_t>(*m);
  }
  if (auto m = opts.integer("max_stacks")) {
    if (*m <= 0 || *m > (std::int64_t{1} << 20))
      opts.diags().add(opts.where("max_stacks"), "option 'max_stacks' must be in 1..1048576");
    else
      max_stacks_ = static_cast<std::uint32_t>(*m);
  }
  if (auto f = opts.string("field")) {
    value_name_ = *f;
    value_where_ = opts.where("field");
  }
}

StageSpec field_aggregation_spec(std::string name,
                                 std::string summary,
                                 std::vector<OptionSpec> own) {
  StageSpec s{.name = std::move(name),
              .summary = std::move(summary),
              .options = {{.name = "field",
                           .type = OptionSpec::Type::kString,
                           .required = true,
                           .help = "the numeric field: field = \"duration\""}}};
  s.options.insert(s.options.end(), own.begin(), own.end());
  auto common = aggregate_options();
  s.options.insert(s.options.end(), common.begin(), common.end());
  return s;
}

void emit_raise_block(KernelCode& c, std::string_view target, std::string_view e) {
  c.line("{");
  c.in();
  c.raise(target, e);
  c.out();
  c.line("}");
}

std::optional<std::string> DistributionKernel::check(std::uint32_t max_value_size) const {
  if (value_size() > max_value_size)
    return fmt::format(
        "{}: {} buckets per key (at most {} fit in a BPF map value): raise step or narrow "
        "[min, max)",
        name_, buckets_, (max_value_size - extra_bytes()) / 8 - 1);
  return std::nullopt;
}

void DistributionKernel::emit_value(KernelCode& c) const {
  c.line(fmt::format("__u64 counts[{}];", buckets_));
  emit_extra_value(c);
  c.line("__s64 sum;");
}

void DistributionKernel::emit_update(KernelCode& c) const {
  c.bucket_add(buckets_);
  c.add("p->sum", "v");
  emit_extra_update(c);
}

bool DistributionKernel::same(const KernelAgg& other) const {
  const auto* o = dynamic_cast<const DistributionKernel*>(&other);
  return o != nullptr && o->name_ == name_ && o->buckets_ == buckets_ && o->call_ == call_;
}

KernelForm AggregateStage::kernel_base(std::shared_ptr<const KernelAgg> agg) const {
  KernelForm f{.kind = KernelForm::Kind::kAggregate,
               .agg = std::move(agg),
               .max_keys = max_keys_,
               .max_stacks = max_stacks_};
  for (const auto& [name, where] : by_names_)
    f.by.push_back(name);
  f.value = value_name_;
  return f;
}

std::string_view AggregateStage::key_of(const KernelRow& row) {
  keys_enc_.clear();
  for (const auto& cell : row.keys) {
    std::visit(
        [this](const auto& c) {
          using T = std::decay_t<decltype(c)>;
          if constexpr (std::is_same_v<T, std::string>)
            keys_enc_.add(Value{std::string_view(c)});
          else if constexpr (std::is_same_v<T, KernelIps>)
            keys_enc_.add(
                Value{IpList{.ips = {.data = reinterpret_cast<const std::byte*>(c.ips.data()),
                                     .size = c.ips.size()},
                             .pid = c.pid}});
          else
            keys_enc_.add(Value{c});
        },
        cell);
  }
  return keys_enc_.bytes();
}

std::string_view StackInterner::canonical(std::string_view raw) {
  if (auto it = canonical_.find(raw); it != canonical_.end()) [[likely]]
    return it->second;
  auto made = make_canonical(raw);
  // A cache, bounded: raw keys hold a process's exact addresses, so a machine starting short
  // processes makes new ones for as long as it runs (a raw key seen again is made again).
  if (canonical_.size() >= kMaxRawKeys)
    canonical_.clear();
  return canonical_.emplace(std::string(raw), std::move(made)).first->second;
}

std::string StackInterner::make_canonical(std::string_view b) {
  // The raw key's fields in order (KeyEncoder's layout), each ip list replaced by a reference.
  KeyEncoder out;
  while (!b.empty()) {
    const char tag = b.front();
    const std::string_view field = b;
    b.remove_prefix(1);
    std::size_t len = 0;
    switch (tag) {
      case kInt:
      case kUint:
      case kDouble:
        len = 8;
        break;
      case kStr:
        len = take<std::uint32_t>(b);
        break;
      case kIps: {
        const auto [pid, ips] = take_ip_list(b);
        if (pid != 0)
          symbolizer_->note_process(pid);
        Stack stack{.frames = symbolizer_->symbolize(pid, ips)};
        for (auto& f : stack.frames) {
          if (!f.symbol.empty()) {  // by function: the symbol's start, no offset
            f.addr -= f.offset;
            f.offset = 0;
          }
        }
        out.add_stack_ref(intern(std::move(stack)));
        continue;
      }
      default:
        break;
    }
    len = std::min(len, b.size());
    const std::size_t whole = static_cast<std::size_t>(b.data() - field.data()) + len;
    out.append_raw(field.substr(0, whole));
    b.remove_prefix(len);
  }
  return std::string(out.bytes());
}

std::uint32_t StackInterner::intern(Stack stack) {
  // Made for every new raw key (a profile of short processes makes one per sample): appended,
  // not formatted, into a buffer kept between calls.
  std::string& identity = identity_;
  identity.clear();
  const auto put_num = [&identity](std::uint64_t v) {
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, v, 16).ptr;
    identity.append(digits, end);
  };
  for (const auto& f : stack.frames) {
    if (f.symbol.empty()) {
      identity += "0x";
      put_num(f.addr);
    } else {
      identity += f.symbol;
    }
    identity += '\x1f';
    identity += f.module;
    identity += '\x1f';
    identity += f.file;
    identity += '\x1f';
    put_num(f.line);
    identity += f.inlined ? "\x1f"
                            "1"
                          : "\x1f"
                            "0";
    identity += f.kernel ? "\x1f"
                           "1\x1e"
                         : "\x1f"
                           "0\x1e";
  }
  if (const auto it = index_.find(identity); it != index_.end())
    return it->second;
  const auto index = static_cast<std::uint32_t>(stacks_.size());
  index_.emplace(identity, index);
  stacks_.push_back(std::move(stack));
  return index;
}

bool AggregateStage::fixed_key_of(const KernelRow& row, FixedKey& k) const noexcept {
  if (row.keys.size() > FixedKey::kMaxFields)
    return false;
  for (std::size_t i = 0; i < row.keys.size(); ++i) {
    const auto& cell = row.keys[i];
    Value v;
    if (const auto* x = std::get_if<std::int64_t>(&cell))
      v = *x;
    else if (const auto* u = std::get_if<std::uint64_t>(&cell))
      v = *u;
    else if (const auto* str = std::get_if<std::string>(&cell))
      v = std::string_view(*str);
    else if (!std::holds_alternative<std::monostate>(cell))
      return false;
    if (!k.set(i, v))
      return false;
  }
  return true;
}

void AggregateStage::bind_keys(BindContext& ctx, Diagnostics& diags) {
  by_.clear();  // (a rebind keeps stacks_: the keys interned so far name its stacks)
  for (const auto& [name, where] : by_names_) {
    if (auto f = ctx.schema.bind(name, where, diags)) {
      if (f->type() == FieldType::kIps && !stacks_)
        stacks_ = std::make_unique<StackInterner>(ctx.schema.symbolizer());
      by_.push_back(std::move(*f));
    }
  }
  // The fixed-width path where the fields say every key is integers or strings (short ones fit
  // it: a comm, a char[16] field). The types are those of the first probe with each field; a
  // probe that gives another type (or no value), or a longer string, still works: FixedKey::set
  // refuses it and that key takes the encoded path.
  fixed_keys_ = g_fixed_keys_enabled && by_.size() <= FixedKey::kMaxFields &&
                std::all_of(by_.begin(), by_.end(), [](const FieldRef& f) {
                  return f.type() == FieldType::kInt || f.type() == FieldType::kUint ||
                         f.type() == FieldType::kString;
                });
  int_keys_.clear();
  if (!fixed_keys_)
    return;
  int_keys_.resize(ctx.schema.probes().size());
  for (std::uint32_t p = 0; p < int_keys_.size(); ++p) {
    IntKeys& keys = int_keys_[p];
    keys.ok = true;
    keys.words = true;
    for (std::size_t i = 0; i < by_.size() && keys.ok; ++i) {
      const auto r = by_[i].int_reader(p);
      keys.ok = r.has_value();
      if (r)
        keys.readers[i] = *r;
      keys.words = keys.words && (!r || !r->is_string);
    }
    // Laid out when the probe has every field (a field it lacks is a missing value: the key is
    // then laid out by the cursor, and integer-only keys by the word path).
    std::size_t w = 0;
    bool has_all = keys.ok;
    for (std::size_t i = 0; i < by_.size() && keys.ok; ++i) {
      keys.at[i] = static_cast<std::uint8_t>(w);
      w += keys.readers[i].is_string ? 2 : 1;
      has_all = has_all && keys.readers[i].size != 0;
    }
    keys.laid_out = has_all && w <= FixedKey::kMaxWords;
    keys.fields = static_cast<std::uint8_t>(by_.size());
  }
}

std::optional<FieldRef> AggregateStage::bind_value(BindContext& ctx, Diagnostics& diags) {
  auto f = ctx.schema.bind(value_name_, value_where_, diags);
  if (f && (f->type() == FieldType::kString || f->type() == FieldType::kIps)) {
    diags.add(value_where_, fmt::format("stage '{}' needs a numeric field; '{}' is a {}",
                                        stage_name_, value_name_, to_string(f->type())));
    return std::nullopt;
  }
  return f;
}

void AggregateStage::describe(Table& t, std::string_view what) const {
  t.stage = stage_name_;
  t.field = value_name_;
  for (const auto& [name, where] : by_names_)
    t.key_names.push_back(name);
  t.title = std::string(what);
  if (!t.key_names.empty())
    t.title += fmt::format(" by {}", fmt::join(t.key_names, ", "));
}

void AggregateStage::order(Table& t, std::vector<double>& scores) const {
  std::vector<std::size_t> idx(t.rows.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<std::string> texts(t.rows.size());
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    for (const auto& k : t.rows[i].keys)
      texts[i] += to_text(k) + '\x1f';
  }
  std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
    if (scores[a] != scores[b])
      return scores[a] > scores[b];
    if (texts[a] != texts[b])
      return texts[a] < texts[b];
    return a < b;
  });
  std::size_t keep = idx.size();
  if (top_)
    keep = std::min<std::size_t>(keep, static_cast<std::size_t>(*top_));
  std::vector<TableRow> rows;
  rows.reserve(keep);
  for (std::size_t i = 0; i < keep; ++i)
    rows.push_back(std::move(t.rows[idx[i]]));
  t.rest.clear();
  t.rest.reserve(idx.size() - keep);
  for (std::size_t i = keep; i < idx.size(); ++i)
    t.rest.push_back(std::move(t.rows[idx[i]]));
  t.rows = std::move(rows);
}

}  // namespace tracer::stages
