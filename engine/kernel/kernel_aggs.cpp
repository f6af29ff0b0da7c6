// The in-kernel aggregations, one record each (kernel_aggs.hpp).
#include "kernel_aggs.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>

#include "tracer/common/buckets.hpp"

namespace tracer::kernel::gen {

namespace {

// bpf/progs/tracer_buckets.h, the C twin of tracer/common/buckets.hpp (embedded by CMake).
constexpr std::string_view kBucketsC =
#include "tracer_buckets_h.inc"
    ;

std::uint64_t load_u64(const std::byte* p) {
  std::uint64_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// ---------------------------------------------------------------------------------------------
// What the kinds share

void layout_scalar(const Aggregation& /*agg*/, Layout& l) {
  l.value_size = 16;  // count, then the sum or TR_ORDER(min/max)
}

void emit_counted_value(const Aggregation& agg, const Layout& /*l*/, Writer& w) {
  w.line("__u64 count;");
  if (kernel_agg(agg).order_xor != 0)
    w.line("__u64 v; /* the {} as TR_ORDER(v): the largest wins, 0 is none */", agg.kind);
  else
    w.line("__s64 v; /* the sum */");
}

void emit_bucket_counts(const Aggregation& /*agg*/, const Layout& l, Writer& w) {
  w.line("__u64 counts[{}];", l.buckets);
}

/// A distribution's value: its bucket counts, then the sum of its values (a histogram's and a
/// summary's `_sum`).
void emit_bucket_counts_and_sum(const Aggregation& agg, const Layout& l, Writer& w) {
  emit_bucket_counts(agg, l, w);
  w.line("__s64 sum;");
}

/// sum += v: atomic in a shared map, plain in a per-CPU one.
void emit_sum_add(const UpdateStyle& u, Writer& w) {
  if (u.cas)
    w.line("__sync_fetch_and_add(&p->sum, v);");
  else
    w.line("p->sum += v;");
}

/// `tr_bucket(v)` as `call` of bpf/progs/tracer_buckets.h.
void emit_bucket_call(Writer& w, std::string_view call) {
  w.raw(kBucketsC);
  w.blank();
  w.line("static __always_inline __u32 tr_bucket(__s64 v)");
  w.line("{{");
  w.line("\treturn {};", call);
  w.line("}}");
  w.blank();
}

/// counts[tr_bucket(v)] += 1, the index bounded for the verifier.
void emit_bucket_add(const Layout& l, const UpdateStyle& u, Writer& w) {
  w.line("__u32 b = tr_bucket(v);");
  w.line("/* Forget what clang knows of b, so that the bound the verifier needs stays. */");
  w.line(R"(asm volatile("" : "+r"(b));)");
  w.line("if (b >= {})", l.buckets);
  w.line("\tb = {};", l.buckets - 1);
  w.line("{}(&p->counts[b]);", u.vinc);
}

void emit_histogram_add(const Layout& l, const UpdateStyle& u, Writer& w) {
  emit_bucket_add(l, u, w);
  emit_sum_add(u, w);
}

void describe_as(Snapshot& s, std::string_view name) {
  s.value_names = {std::string(name)};
}

void merge_sum(const Aggregation& /*agg*/, const Layout& /*l*/, const std::byte* v, RowMerge& m) {
  m.row.count += load_u64(v);
  // Wrapping, as the stage's and the kernel's 64-bit sums.
  m.row.value =
      static_cast<std::int64_t>(static_cast<std::uint64_t>(m.row.value) + load_u64(v + 8));
}

// Sign bit flipped: signed order becomes unsigned order (max). All but the sign bit flipped:
// the order reversed (min).
constexpr std::uint64_t kMaxXor = 0x8000000000000000ULL;
constexpr std::uint64_t kMinXor = 0x7fffffffffffffffULL;

void merge_extreme(const Aggregation& agg, const Layout& /*l*/, const std::byte* v, RowMerge& m) {
  const auto c = load_u64(v);
  if (c == 0)
    return;  // this CPU saw no event of the key
  const std::uint64_t order = kernel_agg(agg).order_xor;
  const auto x = static_cast<std::int64_t>(load_u64(v + 8) ^ order);
  m.row.value = m.first            ? x
                : order == kMinXor ? std::min(m.row.value, x)
                                   : std::max(m.row.value, x);
  m.first = false;
  m.row.count += c;
}

void merge_buckets(const Aggregation& /*agg*/, const Layout& l, const std::byte* v, RowMerge& m) {
  m.row.counts.resize(l.buckets, 0);
  for (std::uint32_t b = 0; b < l.buckets; ++b) {
    const auto c = load_u64(v + (std::size_t{8} * b));
    m.row.counts[b] += c;
    m.row.count += c;
  }
}

/// The buckets, then the sum at `sum_at` bytes (wrapping, as the stages' 64-bit sums).
void merge_buckets_and_sum(const Aggregation& agg,
                           const Layout& l,
                           const std::byte* v,
                           RowMerge& m,
                           std::size_t sum_at) {
  merge_buckets(agg, l, v, m);
  m.row.value =
      static_cast<std::int64_t>(static_cast<std::uint64_t>(m.row.value) + load_u64(v + sum_at));
}

void merge_histogram(const Aggregation& agg, const Layout& l, const std::byte* v, RowMerge& m) {
  merge_buckets_and_sum(agg, l, v, m, std::size_t{8} * l.buckets);
}

void finish_value(const Aggregation& /*agg*/, const Layout& /*l*/, RowMerge& m) {
  m.row.values.emplace_back(m.row.value);
}

/// The buckets from the first to the last non-empty one, bounded and labelled by `bounds`.
template <typename Bounds>
void finish_histogram(RowMerge& m, Bounds&& bounds) {
  Row& row = m.row;
  std::size_t lo = row.counts.size(), hi = 0;
  for (std::size_t b = 0; b < row.counts.size(); ++b) {
    if (row.counts[b] != 0) {
      lo = std::min(lo, b);
      hi = b;
    }
  }
  for (std::size_t b = lo; b <= hi && lo < row.counts.size(); ++b) {
    Bucket hb;
    hb.count = row.counts[b];
    auto bb = bounds(b);
    hb.lo = bb.lo, hb.hi = bb.hi;
    hb.lo_unbounded = bb.lo_unbounded, hb.hi_unbounded = bb.hi_unbounded;
    hb.label = std::move(bb.label);
    row.buckets.push_back(std::move(hb));
  }
  row.values.emplace_back(row.count);
  row.values.emplace_back(row.value);
}

void describe_histogram(const Aggregation& agg, Snapshot& s) {
  s.value_names = {agg.value_name, "sum"};
  s.histogram = true;
}

// ---------------------------------------------------------------------------------------------
// The records

const KernelAgg kCount{
    .name = "count",
    .needs_value = false,
    .layout = [](const Aggregation&, Layout& l) { l.value_size = 8; },
    .emit_value = [](const Aggregation&, const Layout&, Writer& w) { w.line("__u64 count;"); },
    .emit_update =
        [](const Layout&, const UpdateStyle& u, Writer& w) { w.line("{}(&p->count);", u.vinc); },
    .describe = [](const Aggregation&, Snapshot& s) { describe_as(s, "count"); },
    .merge =
        [](const Aggregation&, const Layout&, const std::byte* v, RowMerge& m) {
          m.row.count += load_u64(v);
        },
    .finish = [](const Aggregation&,
                 const Layout&,
                 RowMerge& m) { m.row.values.emplace_back(m.row.count); },
};

void emit_sum_update(const Layout& /*l*/, const UpdateStyle& u, Writer& w) {
  w.line("{}(&p->count);", u.vinc);
  if (u.cas)
    w.line("__sync_fetch_and_add(&p->v, v);");
  else
    w.line("p->v += v;");
}

const KernelAgg kSum{
    .name = "sum",
    .layout = layout_scalar,
    .emit_value = emit_counted_value,
    .emit_update = emit_sum_update,
    .describe = [](const Aggregation&, Snapshot& s) { describe_as(s, "sum"); },
    .merge = merge_sum,
    .finish = finish_value,
};

const KernelAgg kAvg{
    .name = "avg",
    .layout = layout_scalar,
    .emit_value = emit_counted_value,
    .emit_update = emit_sum_update,
    .describe = [](const Aggregation&, Snapshot& s) { describe_as(s, "avg"); },
    .merge = merge_sum,
    .finish =
        [](const Aggregation&, const Layout&, RowMerge& m) {
          m.row.values.emplace_back(m.row.count == 0 ? 0.0
                                                     : static_cast<double>(m.row.value) /
                                                           static_cast<double>(m.row.count));
        },
};

void emit_extreme_update(const Layout& /*l*/, const UpdateStyle& u, Writer& w) {
  w.line("__u64 e = TR_ORDER(v);");
  emit_raise(w, "p->v", "e", u.cas, u.inc);
  w.line("{}(&p->count);", u.vinc);
}

const KernelAgg kMin{
    .name = "min",
    .layout = layout_scalar,
    .emit_value = emit_counted_value,
    .emit_update = emit_extreme_update,
    .describe = [](const Aggregation&, Snapshot& s) { describe_as(s, "min"); },
    .merge = merge_extreme,
    .finish = finish_value,
    .order_xor = kMinXor,
};

const KernelAgg kMax{
    .name = "max",
    .layout = layout_scalar,
    .emit_value = emit_counted_value,
    .emit_update = emit_extreme_update,
    .describe = [](const Aggregation&, Snapshot& s) { describe_as(s, "max"); },
    .merge = merge_extreme,
    .finish = finish_value,
    .order_xor = kMaxXor,
};

const KernelAgg kHist{
    .name = "hist",
    .layout =
        [](const Aggregation&, Layout& l) {
          l.buckets = static_cast<std::uint32_t>(detail::kLog2Buckets);
          l.value_size = 8 * l.buckets + 8;
        },
    .emit_value = emit_bucket_counts_and_sum,
    .emit_bucket = [](const Aggregation&,
                      const Layout&,
                      Writer& w) { emit_bucket_call(w, "tr_log2_bucket(v)"); },
    .emit_update = emit_histogram_add,
    .describe = describe_histogram,
    .merge = merge_histogram,
    .finish = [](const Aggregation&,
                 const Layout&,
                 RowMerge& m) { finish_histogram(m, detail::log2_bucket); },
};

/// lhist's params: [min, max) cut in steps (0, 100, 10 when unset, as the stage's defaults).
struct LinearParams {
  std::int64_t min, max, step;
  explicit LinearParams(const Aggregation& agg)
      : min(agg.params.get("min", 0)),
        max(agg.params.get("max", 100)),
        step(agg.params.get("step", 10)) {}
  [[nodiscard]] std::uint32_t inner() const {
    return static_cast<std::uint32_t>(detail::linear_inner(min, max, step, 1'000'000));
  }
};

const KernelAgg kLhist{
    .name = "lhist",
    .check = [](const Aggregation& agg) -> std::optional<std::string> {
      const LinearParams p(agg);
      if (p.step <= 0)
        return "lhist: step must be positive";
      if (p.max <= p.min)
        return "lhist: max must be above min";
      const std::uint64_t buckets = std::uint64_t{p.inner()} + 2;
      if ((buckets + 1) * 8 > kMaxValueSize)  // and the sum
        return fmt::format(
            "lhist: {} buckets per key (at most {} fit in a BPF map value): raise step or narrow "
            "[min, max)",
            buckets, (kMaxValueSize / 8) - 1);
      return std::nullopt;
    },
    .layout =
        [](const Aggregation& agg, Layout& l) {
          l.lhist_inner = LinearParams(agg).inner();
          l.buckets = l.lhist_inner + 2;
          l.value_size = 8 * l.buckets + 8;
        },
    .emit_value = emit_bucket_counts_and_sum,
    .emit_bucket =
        [](const Aggregation& agg, const Layout& l, Writer& w) {
          const LinearParams p(agg);
          emit_bucket_call(w,
                           fmt::format("tr_linear_bucket(v, {}LL, {}LL, {}ULL, {})", p.min, p.max,
                                       static_cast<std::uint64_t>(p.step), l.lhist_inner));
        },
    .emit_update = emit_histogram_add,
    .describe = describe_histogram,
    .merge = merge_histogram,
    .finish =
        [](const Aggregation& agg, const Layout& l, RowMerge& m) {
          const LinearParams p(agg);
          finish_histogram(m, [&](std::size_t b) {
            return detail::linear_bucket(b, p.min, p.max, p.step, l.lhist_inner);
          });
        },
};

const KernelAgg kQuantiles{
    .name = "quantiles",
    .layout =
        [](const Aggregation&, Layout& l) {
          // ~30 KiB a key: a per-CPU value fits the per-CPU allocator's unit (32 KiB); the
          // shared hash allocates keys as they come (BPF_F_NO_PREALLOC), not max_keys of them
          // up front.
          l.buckets = static_cast<std::uint32_t>(detail::kQuantileBuckets);
          l.value_size = 8 * l.buckets + 24;
        },
    .emit_value =
        [](const Aggregation& agg, const Layout& l, Writer& w) {
          emit_bucket_counts(agg, l, w);
          w.line("__u64 vmin; /* ~min: the largest wins, 0 is none */");
          w.line("__u64 vmax; /* max + 1: the largest wins, 0 is none */");
          w.line("__s64 sum;");
        },
    .emit_bucket = [](const Aggregation&,
                      const Layout&,
                      Writer& w) { emit_bucket_call(w, "tr_quantile_bucket(v)"); },
    .emit_update =
        [](const Layout& l, const UpdateStyle& u, Writer& w) {
          emit_histogram_add(l, u, w);
          w.line("__u64 u = v < 0 ? 0 : (__u64)v;");
          w.line("__u64 e_min = ~u, e_max = u + 1;");
          w.line("{{");
          w.in();
          emit_raise(w, "p->vmin", "e_min", u.cas, u.inc);
          w.out();
          w.line("}}");
          w.line("{{");
          w.in();
          emit_raise(w, "p->vmax", "e_max", u.cas, u.inc);
          w.out();
          w.line("}}");
        },
    .describe =
        [](const Aggregation&, Snapshot& s) {
          s.value_names = {"count", "min", "max", "sum"};
        },
    .merge =
        [](const Aggregation& agg, const Layout& l, const std::byte* v, RowMerge& m) {
          merge_buckets_and_sum(agg, l, v, m, (std::size_t{8} * l.buckets) + 16);
          m.min_enc = std::max(m.min_enc, load_u64(v + (std::size_t{8} * l.buckets)));
          m.max_enc = std::max(m.max_enc, load_u64(v + (std::size_t{8} * l.buckets) + 8));
        },
    .finish =
        [](const Aggregation&, const Layout&, RowMerge& m) {
          if (m.row.count != 0) {
            m.row.min = ~m.min_enc;
            m.row.max = m.max_enc - 1;
          }
          m.row.values.emplace_back(m.row.count);
          m.row.values.emplace_back(m.row.min);
          m.row.values.emplace_back(m.row.max);
          m.row.values.emplace_back(m.row.value);
        },
    .no_prealloc = true,
};

/// Every in-kernel aggregation: a new one is a record above and its line here.
constexpr std::array kRecords{&kCount, &kSum, &kMin, &kMax, &kAvg, &kHist, &kLhist, &kQuantiles};

}  // namespace

const KernelAgg* find_kernel_agg(std::string_view name) noexcept {
  for (const KernelAgg* r : kRecords)
    if (r->name == name)
      return r;
  return nullptr;
}

std::string kernel_agg_names() {
  std::string out;
  for (const KernelAgg* r : kRecords)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", r->name);
  return out;
}

const KernelAgg& kernel_agg(const Aggregation& agg) {
  if (const KernelAgg* r = find_kernel_agg(agg.kind))
    return *r;
  throw std::logic_error(fmt::format("no in-kernel aggregation '{}'", agg.kind));
}

}  // namespace tracer::kernel::gen
