// Reorder: records queued with copies of their bytes, released in (time, arrival) order.
#include "tracer/reorder.hpp"

#include <algorithm>
#include <cstring>

namespace tracer {

Reorder::Reorder(ReorderOptions options) : options_(options) {
  options_.max_batch = std::max<std::size_t>(1, options_.max_batch);
  refs_.resize(options_.max_batch);
}

std::optional<std::uint64_t> Reorder::time_of(const perf::Record& r) noexcept {
  std::uint64_t t = 0;
  if (const auto* s = std::get_if<perf::Sample>(&r.body))
    t = s->time;
  else if (r.sample_id.present)
    t = r.sample_id.time;
  // A real CLOCK_MONOTONIC (or perf_clock) time is never 0: 0 means the layout has no TIME.
  if (t == 0)
    return std::nullopt;
  return t;
}

void Reorder::push(const RecordRef& ref,
                   const perf::SampleLayout& layout,
                   const BatchHandler& out) {
  std::uint64_t time = 0;
  if (auto t = time_of(ref.record)) {
    time = *t;
  } else {
    ++stats_.untimed;
    time = max_time_;  // placed after what came before it
  }
  if (any_released_ && time < released_upto_)
    ++stats_.late;
  max_time_ = std::max(max_time_, time);
  const auto bytes = ref.record.bytes;
  Entry e;
  e.time = time;
  e.seq = seq_++;
  std::vector<std::byte>& arena = arenas_[current_];
  e.arena = current_;
  e.offset = static_cast<std::uint32_t>(arena.size());
  e.size = static_cast<std::uint32_t>(bytes.size());
  e.probe = ref.probe;
  e.cpu = ref.cpu;
  e.itrace_pid = ref.itrace_pid;
  e.itrace_tid = ref.itrace_tid;
  e.layout = &layout;
  arena.insert(arena.end(), bytes.begin(), bytes.end());
  entries_.push_back(e);
  ++stats_.queued;
  stats_.max_queued = std::max<std::uint64_t>(stats_.max_queued, entries_.size());
  if (queued_bytes() > options_.max_bytes && entries_.size() > 1) {
    // Over budget: release the older half now (perf's OE_FLUSH__HALF). What arrives later with
    // an older time is counted as late.
    std::vector<std::uint64_t> times;
    times.reserve(entries_.size());
    for (const auto& q : entries_)
      times.push_back(q.time);
    auto mid = times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2);
    std::nth_element(times.begin(), mid, times.end());
    ++stats_.forced_flushes;
    flush_until(*mid, out);
  }
}

void Reorder::round(const BatchHandler& out, std::chrono::steady_clock::time_point yield_at) {
  ++stats_.rounds;
  safe_ = next_flush_;
  resume(out, yield_at);
  next_flush_ = max_time_;
}

void Reorder::resume(const BatchHandler& out, std::chrono::steady_clock::time_point yield_at) {
  yield_at_ = yield_at;
  if (!entries_.empty())
    flush_until(safe_, out);
  yield_at_ = std::chrono::steady_clock::time_point::max();
}

void Reorder::flush_all(const BatchHandler& out) {
  flush_until(UINT64_MAX, out);
}

void Reorder::flush_until(std::uint64_t time, const BatchHandler& out) {
  releasing_ = false;
  if (entries_.empty())
    return;
  // Entries are in arrival order; a stable partition keeps it within both parts, and the sort
  // of the released part by (time, seq) keeps each ring's records in ring order on equal times.
  // (By hand rather than std::stable_partition, which allocates a buffer on every call.)
  held_.clear();
  std::size_t count = 0;
  for (const Entry& e : entries_) {
    // `count` never passes the entry being read: it overwrites only entries already read.
    if (e.time <= time)
      entries_[count++] = e;
    else
      held_.push_back(e);
  }
  std::copy(held_.begin(), held_.end(), entries_.begin() + static_cast<std::ptrdiff_t>(count));
  if (count == 0)
    return;
  // Sorted by (time, arrival): the released part is in arrival order, so its index breaks
  // ties as seq does. The keys are sorted, not the entries (a third of their size), and a part
  // already in order (one ring's records) is not sorted at all.
  keys_.resize(count);
  for (std::size_t i = 0; i < count; ++i)
    keys_[i] = {.time = entries_[i].time, .index = i};
  const auto key_less = [](const SortKey& a, const SortKey& b) {
    return a.time != b.time ? a.time < b.time : a.index < b.index;
  };
  if (sort_keys(key_less)) {
    sorted_.resize(count);
    for (std::size_t i = 0; i < count; ++i)
      sorted_[i] = entries_[keys_[i].index];
    std::copy(sorted_.begin(), sorted_.end(), entries_.begin());
  }
  release(count, out);
}

template <typename Less>
bool Reorder::sort_keys(const Less& less) {
  // A round holds each ring's records in order, one ring after another: a few ascending runs,
  // merged pairwise (linear per pass) rather than sorted. Many runs: a plain sort. One run:
  // nothing to do (false).
  constexpr std::size_t kMaxRuns = 16;
  runs_.clear();
  runs_.push_back(0);
  for (std::size_t i = 1; i < keys_.size(); ++i) {
    if (less(keys_[i], keys_[i - 1])) {
      runs_.push_back(i);
      if (runs_.size() > kMaxRuns) {
        std::sort(keys_.begin(), keys_.end(), less);
        return true;
      }
    }
  }
  if (runs_.size() == 1)
    return false;
  runs_.push_back(keys_.size());
  merged_.resize(keys_.size());
  while (runs_.size() > 2) {
    std::size_t kept = 0;
    for (std::size_t r = 0; r + 1 < runs_.size(); r += 2) {
      const auto b = static_cast<std::ptrdiff_t>(runs_[r]);
      const auto m = static_cast<std::ptrdiff_t>(runs_[r + 1]);
      const auto e =
          static_cast<std::ptrdiff_t>(r + 2 < runs_.size() ? runs_[r + 2] : runs_[r + 1]);
      std::merge(keys_.begin() + b, keys_.begin() + m, keys_.begin() + m, keys_.begin() + e,
                 merged_.begin() + b, less);
      runs_[kept++] = runs_[r];
    }
    runs_[kept++] = keys_.size();
    runs_.resize(kept);
    keys_.swap(merged_);
  }
  return true;
}

void Reorder::release(std::size_t count, const BatchHandler& out) {
  for (std::size_t i = 0; i < count;) {
    std::size_t n = 0;
    for (; i < count && n < options_.max_batch; ++i, ++n) {
      const Entry& e = entries_[i];
      // A slot of the last batch: every field is rewritten (decode() rewrites the record).
      RecordRef& r = refs_[n];
      r.probe = e.probe;
      r.cpu = e.cpu;
      r.itrace_pid = e.itrace_pid;
      r.itrace_tid = e.itrace_tid;
      const std::span<const std::byte> copy(arenas_[e.arena].data() + e.offset, e.size);
      if (perf::decode(copy, *e.layout, r.record) != perf::DecodeError::kOk) {
        // It decoded when it was pushed (or was handed on header-only): keep the header.
        perf::Record header;
        std::memcpy(&header.type, copy.data(), sizeof(header.type));
        std::memcpy(&header.misc, copy.data() + 4, sizeof(header.misc));
        std::memcpy(&header.size, copy.data() + 6, sizeof(header.size));
        header.bytes = copy;
        r.record = header;
      }
      released_upto_ = std::max(released_upto_, e.time);
    }
    any_released_ = true;
    stats_.released += n;
    if (out)
      out(Batch{std::span<const RecordRef>(refs_.data(), n)});
    if (give_up_at_ != std::chrono::steady_clock::time_point::max() && i < count &&
        std::chrono::steady_clock::now() >= give_up_at_) [[unlikely]] {
      // Past the stop's time: what is left (released or held) is dropped, and counted.
      stats_.unprocessed += entries_.size() - i;
      entries_.clear();
      arenas_[0].clear();
      arenas_[1].clear();
      return;
    }
    if (yield_at_ != std::chrono::steady_clock::time_point::max() && i < count &&
        std::chrono::steady_clock::now() >= yield_at_) [[unlikely]] {
      count = i;  // the rest stays queued (sorted, before the held ones) for the next round
      releasing_ = true;
      break;
    }
  }
  entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(count));
  recycle();
}

void Reorder::recycle() {
  const auto older = static_cast<std::uint8_t>(1 - current_);
  std::vector<std::byte>& from = arenas_[older];
  std::vector<std::byte>& to = arenas_[current_];
  for (Entry& e : entries_) {
    if (e.arena != older)
      continue;
    const auto* bytes = from.data() + e.offset;
    e.arena = current_;
    e.offset = static_cast<std::uint32_t>(to.size());
    to.insert(to.end(), bytes, bytes + e.size);
  }
  from.clear();  // keeps its capacity: no allocation once warm
  current_ = older;
}

}  // namespace tracer
