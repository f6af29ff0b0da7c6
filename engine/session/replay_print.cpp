// replay_print: a perf.data file printed the way `perf script` does (samples in time order,
// perf stat record counts at each STAT_ROUND): `tracer replay FILE` without a recipe.
#include <fmt/compile.h>
#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "tracer/ext/stage.hpp"
#include "tracer/perf/abi.hpp"
#include "tracer/perf/record_ref.hpp"
#include "tracer/perfdata/print_fmt.hpp"
#include "tracer/perfdata/reader.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/reorder.hpp"
#include "tracer/replay.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer {
namespace {

using Warn = std::function<void(const std::string&)>;

/// One of the PERF_CONTEXT_* values (a value at or above PERF_CONTEXT_MAX that is none of them
/// is no marker).
bool is_context_marker(std::uint64_t v) {
  namespace abi = perf::abi;
  return v == abi::kContextHv || v == abi::kContextKernel || v == abi::kContextUser ||
         v == abi::kContextGuest || v == abi::kContextGuestKernel || v == abi::kContextGuestUser;
}

void warn_incompatible(const std::string& path, const perfdata::Reader& r, const Warn& warn) {
  const auto& bits = r.features().bits;
  const bool no_features = std::all_of(bits.begin(), bits.end(), [](auto b) { return b == 0; });
  if (no_features) {
    warn(
        fmt::format("{}: the file has no header features (perf calls such a file "
                    "incompatible): no event names (HEADER_EVENT_DESC), so events are named "
                    "from their attrs, and nothing about the recording machine",
                    path));
  }
  std::string untraced;
  for (const auto& e : r.events()) {
    if (e.attr.raw()->type == PERF_TYPE_TRACEPOINT && !e.format)
      untraced +=
          fmt::format("{}{} (id {})", untraced.empty() ? "" : ", ", e.name, e.attr.raw()->config);
  }
  if (!untraced.empty()) {
    warn(fmt::format(
        "{}: no tracing data ({}) for tracepoint event{} {}: their fields cannot be decoded "
        "and are not printed",
        path,
        r.tracing_data()                                    ? "no format for their ids"
        : r.features().has(perfdata::Feature::kTracingData) ? "its section is unreadable"
                                                            : "HEADER_TRACING_DATA missing",
        untraced.find(',') != std::string::npos ? "s" : "", untraced));
  }
}

/// Prints samples the way `perf script` does (tools/perf/builtin-script.c process_event,
/// perf_sample__fprintf_start), released in time order by a Reorder fed by the file with its
/// FINISHED_ROUND records as the rounds, and with each thread's comm as it was at the sample's
/// time (COMM and FORK records applied as they are released).
class ScriptPrinter {
 public:
  ScriptPrinter(const perfdata::Reader& reader,
                std::FILE* out,
                bool perf_mode,
                const std::vector<std::filesystem::path>& debug_roots)
      : reader_(reader),
        out_(out),
        perf_mode_(perf_mode),
        comms_(CommCacheOptions{.capacity = std::size_t{1} << 18, .read_proc = false}),
        symbols_(symbols_options(reader, debug_roots)) {
    for (const auto& e : reader.events()) {
      name_width_ = std::max(name_width_, e.name.size());
      // perf script unwinds the user part of an event with registers and a stack copy
      // (callchain_param_setup: CALLCHAIN_DWARF).
      const auto* a = e.attr.raw();
      dwarf_.push_back((a->sample_type & PERF_SAMPLE_REGS_USER) != 0 &&
                       (a->sample_type & PERF_SAMPLE_STACK_USER) != 0 &&
                       symbols::UserRegs::unwindable(a->sample_regs_user));
      if (e.format && perf_mode_)
        fmts_.emplace_back(perfdata::PrintFmt::parse(*e.format));
      else
        fmts_.emplace_back(std::nullopt);
    }
    handler_ = [this](const Batch& b) { on_batch(b); };
    buf_.reserve(kFlushBytes + (std::size_t{64} << 10));
    if (perf_mode_)
      symbols_.preload_kernel();  // while the file is read
  }

  /// Says once per event which print fmt cannot be evaluated (perf mode).
  void warn_formats(const std::string& path, const Warn& warn) const {
    for (std::size_t i = 0; i < fmts_.size(); ++i) {
      const auto& f = fmts_[i];
      if (f.has_value() && !f->supported()) {
        warn(fmt::format("{}: {}: print fmt not evaluated ({}); its fields print as name=value",
                         path, reader_.events()[i].name, f->problem()));
      }
    }
  }

  /// A kernel record of the file, in file order.
  void push(const perfdata::Item& item) {
    const auto type = item.record.type;
    // Only what the output depends on is queued: samples, and the task records that name
    // threads and end them (perf applies every record in time order; the others print nothing
    // here). EXIT was left out, so track_threads() never saw a process end: every process of
    // the recording, its maps and its frame lines were kept to the end.
    if (type != PERF_RECORD_SAMPLE && type != PERF_RECORD_COMM && type != PERF_RECORD_FORK &&
        type != PERF_RECORD_EXIT && type != PERF_RECORD_MMAP && type != PERF_RECORD_MMAP2 &&
        type != PERF_RECORD_KSYMBOL)
      return;
    RecordRef ref;
    ref.probe = item.attr >= 0 ? static_cast<std::uint32_t>(item.attr) : kUnknown;
    ref.record = item.record;
    if (const auto* s = std::get_if<perf::Sample>(&item.record.body))
      ref.cpu = static_cast<std::int32_t>(s->cpu);
    const auto& layout =
        item.attr >= 0 ? reader_.events()[static_cast<std::size_t>(item.attr)].layout : kNone;
    order_.push(ref, layout, handler_);
  }
  void round() { order_.round(handler_); }
  void finish() {
    order_.flush_all(handler_);
    flush();
    std::fflush(out_);
  }
  [[nodiscard]] const ReorderStats& stats() const noexcept { return order_.stats(); }
  [[nodiscard]] std::vector<std::string> take_warnings() { return symbols_.take_warnings(); }

 private:
  static constexpr std::uint32_t kUnknown = UINT32_MAX;
  static inline const perf::SampleLayout kNone{};

  void on_batch(const Batch& b) {
    for (const auto& ref : b.records) {
      const auto& r = ref.record;
      if (auto pid = feed_symbolizer(symbols_, r))
        maps_changed(*pid);
      if (r.type == PERF_RECORD_KSYMBOL)
        maps_changed(kAnyPid);  // kernel text named anew: its lines are made again
      if (const auto* c = std::get_if<perf::Comm>(&r.body)) {
        comms_.update(c->tid, c->comm);
      } else if (const auto* t = std::get_if<perf::TaskEvent>(&r.body)) {
        if (r.type == PERF_RECORD_FORK)
          comms_.fork(t->ptid, t->tid);
        track_threads(r.type, *t);
      } else if (const auto* s = std::get_if<perf::Sample>(&r.body)) {
        if (!exit_order_.empty())
          forget_exited(s->time);
        if (ref.probe != kUnknown)
          sample(ref.probe, *s);
      }
    }
  }

  /// Processes born in the recording are counted by thread; a while after the last exits (by
  /// the records' clock), what is known of it goes: a recording of short processes would
  /// otherwise keep every one. Not at once: a task is still sampled, with its user stack, on
  /// its way out of do_exit() after its EXIT record. Processes that were running when the
  /// recording began have threads no record announced: they stay.
  void track_threads(std::uint32_t type, const perf::TaskEvent& t) {
    if (type == PERF_RECORD_FORK) {
      if (t.pid != t.ppid) {
        threads_[t.pid] = 1;
        exited_.erase(t.pid);  // a pid used again
      } else if (const auto it = threads_.find(t.pid); it != threads_.end()) {
        ++it->second;
      }
      return;
    }
    const auto it = threads_.find(t.pid);
    if (type != PERF_RECORD_EXIT || it == threads_.end() || --it->second != 0)
      return;
    threads_.erase(it);
    exited_[t.pid] = t.time;
    exit_order_.emplace_back(t.time, t.pid);
    // Its frame lines are left behind now: they are a cache, and a sample on its way out makes
    // the few it needs again (the symbolizer still knows the process). Kept for the second,
    // the lines of a profile of short processes filled a table of 262,144 slots.
    maps_changed(t.pid);
  }

  /// Forgets the processes that exited more than kExitedFor before `now`.
  void forget_exited(std::uint64_t now) {
    while (!exit_order_.empty() && exit_order_.front().first + kExitedFor < now) {
      const auto [time, pid] = exit_order_.front();
      exit_order_.pop_front();
      const auto it = exited_.find(pid);
      if (it == exited_.end() || it->second != time)
        continue;  // used again since
      exited_.erase(it);
      symbols_.forget_process(pid);
      maps_changed(pid);  // its lines are left behind (its entry goes with them, not before)
    }
  }
  static constexpr std::uint64_t kExitedFor = 1'000'000'000;  // ns

  /// perf's evlist__deliver_sample: a sample with PERF_SAMPLE_READ is delivered once per value
  /// it reads (each group member), as the member's event, with the change of that value since
  /// the previous sample of the same id (and thread, for inherited per-thread counts) as its
  /// period; a zero change is not delivered (session.c deliver_sample_value).
  void sample(std::uint32_t event, const perf::Sample& s) {
    const auto& ev = reader_.events()[event];
    if ((s.sample_type & PERF_SAMPLE_READ) == 0) {
      // Without PERF_SAMPLE_PERIOD a sample's period is the attr's fixed one (perf's
      // evsel__parse_sample), which perf script prints all the same.
      const auto* attr = ev.attr.raw();
      const bool fixed = (s.sample_type & PERF_SAMPLE_PERIOD) == 0 && attr->freq == 0;
      print(event, s, fixed ? attr->sample_period : s.period);
      return;
    }
    const auto* a = ev.attr.raw();
    const bool per_thread = a->inherit != 0 && (a->sample_type & PERF_SAMPLE_TID) != 0;
    for (std::uint64_t i = 0; i < s.read.count(); ++i) {
      const std::uint64_t id = s.read.id(i);
      const std::int32_t member = reader_.event_of_id(id);
      if (member < 0)
        continue;  // perf counts it as an unknown id
      auto& last = periods_[{id, per_thread ? s.tid : 0}];
      const std::uint64_t value = s.read.value(i);
      const std::uint64_t period = value - last;
      last = value;
      if (period != 0)
        print(static_cast<std::uint32_t>(member), s, period);
    }
  }

  void print(std::uint32_t event, const perf::Sample& s, std::uint64_t period) {
    const auto& ev = reader_.events()[event];
    const auto st = s.sample_type;
    if (buf_.size() >= kFlushBytes)
      flush();
    auto out = std::back_inserter(buf_);
    std::string_view comm = comms_.lookup(s.tid);
    std::string unknown;
    if (comm.empty()) {
      // perf's name for a thread it saw no COMM of; a tid of -1 (a task the kernel could not
      // name in the sampling namespace, e.g. exiting) prints signed, as perf prints it.
      unknown = fmt::format(":{}", static_cast<std::int32_t>(s.tid));
      comm = unknown;
    }
    const bool tracepoint = ev.attr.raw()->type == PERF_TYPE_TRACEPOINT;
    // A sample with a callchain prints its frames after its line, as perf script does (a
    // tracepoint's too: perf script then prints its ip and symbols), in both modes. In perf's
    // (perf_sample__fprintf_start) such a sample has its comm unpadded.
    const bool has_chain = (st & PERF_SAMPLE_CALLCHAIN) != 0 &&
                           (s.callchain.size != 0 || (dwarf_[event] && s.regs_user.abi != 0));
    const bool chain = has_chain && (tracepoint || (st & PERF_SAMPLE_IP) != 0 || !perf_mode_);
    // Written by hand: a profile prints hundreds of thousands of these headers.
    if (!chain || !perf_mode_)
      pad(16, comm.size());
    buf_.append(comm);
    buf_.push_back(' ');
    put_int(static_cast<std::int32_t>(s.tid), 5, ' ');
    buf_.push_back(' ');
    if ((st & PERF_SAMPLE_CPU) != 0) {
      buf_.push_back('[');
      put_int(s.cpu, 3, '0');
      buf_.append(std::string_view("] "));
    }
    if ((st & PERF_SAMPLE_TIME) != 0) {
      put_int(s.time / 1000000000, 5, ' ');
      buf_.push_back('.');
      put_int(s.time % 1000000000 / 1000, 6, '0');
      buf_.append(std::string_view(": "));
    }
    if (perf_mode_) {
      // perf script's default fields: the period for events that are not tracepoints, the name
      // right-aligned to the longest, then the tracepoint's text or the sampled ip.
      if (!tracepoint && ((st & (PERF_SAMPLE_PERIOD | PERF_SAMPLE_READ)) != 0 || period != 0)) {
        put_int(period, 10, ' ');
        buf_.push_back(' ');
      }
      pad(name_width_, ev.name.size());
      buf_.append(ev.name);
      buf_.append(std::string_view(": "));
      if (tracepoint) {
        if (const auto& f = fmts_[event]; f.has_value()) {
          line_.clear();
          f->print(s.raw, line_);
          buf_.append(line_);
        }
        if (chain) {
          callchain(event, s);
          return;
        }
      } else if (chain) {
        callchain(event, s);  // the frames on lines of their own, the sampled ip first
        return;
      } else if ((st & PERF_SAMPLE_IP) != 0) {
        fmt::format_to(out, " {:>16x}", s.ip);
      }
    } else {
      fmt::format_to(out, "{}:", ev.name);
      if (ev.format) {
        line_.assign(1, ' ');
        perfdata::PrintFmt::print_fields(*ev.format, s.raw, line_);
        buf_.append(line_);
      } else if (period != 0) {
        fmt::format_to(out, " period={}", period);
      }
      if (chain) {
        callchain(event, s);  // perf script's frame lines (as --perf prints them)
        return;
      }
    }
    buf_.push_back('\n');
  }

 public:
  /// Writes what print() buffered (before any other output to the stream).
  void flush() {
    if (buf_.size() != 0)
      std::fwrite(buf_.data(), 1, buf_.size(), out_);
    buf_.clear();
  }

  /// `n` spaces before a field of `len` characters right-aligned in `width`.
  void pad(std::size_t width, std::size_t len) { fill(' ', width > len ? width - len : 0); }
  void fill(char c, std::size_t n) {
    static constexpr std::string_view kSpaces = "                                ";
    static constexpr std::string_view kZeros = "00000000000000000000000000000000";
    const std::string_view run = c == '0' ? kZeros : kSpaces;
    for (; n > run.size(); n -= run.size())
      buf_.append(run);
    buf_.append(run.substr(0, n));
  }
  /// An integer right-aligned in `width`, padded with `fill` (' ' or '0', after the sign).
  template <typename T>
  void put_int(T v, std::size_t width, char fill) {
    char digits[24] = {};
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
    auto len = static_cast<std::size_t>(end - digits);
    const char* at = digits;
    if (fill == '0' && len != 0 && digits[0] == '-') {
      buf_.push_back('-');
      ++at, --len, --width;
    }
    this->fill(fill, width > len ? width - len : 0);
    buf_.append(std::string_view(at, len));
  }

 private:
  /// perf script's callchain lines (builtin-script.c, sample__fprintf_callchain): after the
  /// header, each frame as "\t ADDR sym+0xoff (module)", ADDR being the address in its module,
  /// then a blank line. A frame's line is made once per (process, address, context) and kept
  /// until the process's maps change: a profile repeats its frames many times over. An event
  /// with registers and a stack copy (perf record --call-graph dwarf) has its user part
  /// unwound with the binaries' CFI, as perf does, after the kernel's part.
  void callchain(std::uint32_t event, const perf::Sample& s) {
    buf_.push_back('\n');
    const bool dwarf = dwarf_[event] && s.regs_user.abi != 0;
    // A value in the markers' range that is no marker (a user stack word the kernel's frame
    // walk took for a return address: 0xffffffffffffffb8 was seen) makes perf take the
    // callchain for corrupt and drop all of it (machine.c, add_callchain_ip: "invalid
    // callchain context", the cursor reset): no frame is printed from it, before or after.
    std::uint64_t walked = s.callchain.size;
    for (std::uint64_t i = 0; i < s.callchain.size; ++i) {
      const std::uint64_t ip = s.callchain[i];
      if (ip < perf::abi::kContextMax)
        continue;
      if (dwarf && ip == perf::abi::kContextUser) {
        walked = i;  // the unwind's from here
        break;
      }
      if (!is_context_marker(ip)) {
        walked = 0;
        break;
      }
    }
    std::uint64_t marker = 0;  // the context of the ips that follow (0: none yet)
    for (std::uint64_t i = 0; i < walked; ++i) {
      const std::uint64_t ip = s.callchain[i];
      if (ip >= perf::abi::kContextMax)
        marker = ip;
      else
        frame_line(s.pid, marker, ip);
    }
    if (dwarf) {
      const auto regs = symbols::UserRegs::from_perf(
          s.regs_user.regs, reader_.events()[event].attr.raw()->sample_regs_user);
      const auto stack =
          s.stack_user.first(std::min<std::size_t>(s.stack_user.size(), s.stack_user_dyn_size));
      unwound_.resize(kMaxUnwound);
      std::size_t n = 0;
      try {
        n = symbols_.unwind_user(s.pid, regs, stack, unwound_);
      } catch (const std::exception&) {  // NOLINT(bugprone-empty-catch): out of memory: no frames
      }
      // perf's unwinders give each caller's frame the address of its call, the return address
      // less one (unwind-libdw.c entry(): a pc that is not an activation).
      for (std::size_t i = 0; i < n; ++i)
        frame_line(s.pid, perf::abi::kContextUser, i == 0 ? unwound_[i] : unwound_[i] - 1);
    }
    buf_.push_back('\n');
  }

  struct PidLines {
    std::uint32_t gen = 0;  // of its lines in frame_lines_ (older ones are left behind)
    std::size_t lines = 0;  // its lines of this generation
  };

  /// The line of one frame at `ip` in context `marker` of process `pid`, made once.
  void frame_line(std::uint32_t pid, std::uint64_t marker, std::uint64_t ip) {
    const bool kernel = marker == perf::abi::kContextKernel;
    const std::uint32_t owner = kernel ? kAnyPid : pid;
    PidLines& lines = pid_lines(owner);
    const FrameKey key{.ip = ip, .pid = owner, .gen = lines.gen, .marker = marker};
    if (const auto line = frame_lines_.find(key)) {
      buf_.append(*line);
      return;
    }
    const std::array<std::uint64_t, 2> one = {marker, ip};
    const auto ips = marker == 0 ? std::span(one).subspan(1) : std::span(one);
    fmt::memory_buffer text;
    for (const auto& f : symbols_.symbolize(pid, ips)) {
      fmt::format_to(fmt::appender(text), "\t{:>16x} ", f.rel);
      if (f.symbol.empty())
        text.append(std::string_view("[unknown]"));
      else  // a C++ name as perf script prints it: no parameters, no return type
        fmt::format_to(fmt::appender(text), "{}+{:#x}", symbols::cxx_function_name(f.symbol),
                       f.offset);
      fmt::format_to(fmt::appender(text), " ({})\n", f.module.empty() ? "[unknown]" : f.module);
    }
    ++lines.lines;
    const std::string_view line(text.data(), text.size());
    frame_lines_.insert(key, line);
    buf_.append(line);
  }

  /// The lines of `pid` (kAnyPid: the kernel's), the last process's at hand: a sample's frames
  /// are of one process.
  PidLines& pid_lines(std::uint32_t pid) {
    if (last_lines_ == nullptr || last_pid_ != pid) {
      last_lines_ = &pid_lines_[pid];
      last_pid_ = pid;
    }
    return *last_lines_;
  }

  /// The maps of `pid` changed (kAnyPid: the kernel's symbols): its frames' lines are made
  /// again. Its lines are left behind by a new generation, and dropped with the others left
  /// behind once they are half the table: a profile of many short processes changes maps at
  /// every exec and mmap, and must not rebuild the table each time.
  void maps_changed(std::uint32_t pid) {
    const auto it = pid_lines_.find(pid);
    if (it == pid_lines_.end() || it->second.lines == 0)
      return;
    stale_ += std::exchange(it->second.lines, 0);
    ++it->second.gen;
    // A rebuild costs the whole table: it waits for a quarter of it to be left behind (waiting
    // for half of the lines grew the table at every rebuild and cleared it for a few lines).
    if (stale_ * 4 < frame_lines_.capacity())
      return;
    frame_lines_.keep_if([this](const FrameKey& k) {
      const auto p = pid_lines_.find(k.pid);
      return p != pid_lines_.end() && p->second.gen == k.gen;
    });
    stale_ = 0;
    std::erase_if(pid_lines_, [](const auto& e) { return e.second.lines == 0; });
    last_lines_ = nullptr;
  }

  static constexpr std::uint32_t kAnyPid = UINT32_MAX;
  struct FrameKey {
    std::uint64_t ip = 0;
    std::uint32_t pid = 0;
    std::uint32_t gen = 0;  // the process's PidLines::gen when the line was made
    std::uint64_t marker = 0;
    bool operator==(const FrameKey&) const = default;
  };
  /// Frame lines by (ip, pid, context): open addressing over one flat array (a profile looks up
  /// every frame of every sample here), the lines in blocks that never move (a growing string
  /// copied itself at each doubling); keep_if() rebuilds both, the table sized to what it keeps.
  class FrameLines {
   public:
    [[nodiscard]] std::optional<std::string_view> find(const FrameKey& k) const noexcept {
      if (slots_.empty())
        return std::nullopt;
      for (std::size_t i = hash(k) & mask_;; i = (i + 1) & mask_) {
        const Slot& s = slots_[i];
        if (s.len == 0)
          return std::nullopt;
        if (s.key == k)
          return std::string_view(s.text, s.len);
      }
    }
    void insert(const FrameKey& k, std::string_view line) {
      if ((used_ + 1) * 2 > slots_.size())
        grow(slots_.empty() ? kMinSlots : slots_.size() * 2);
      place({.key = k, .text = keep(line), .len = static_cast<std::uint32_t>(line.size())});
    }
    /// Drops the lines whose key fails `keep`, and their text.
    template <typename Keep>
    void keep_if(const Keep& keep_it) {
      std::vector<Slot> old;
      old.swap(slots_);
      std::vector<std::unique_ptr<char[]>> old_blocks;
      old_blocks.swap(blocks_);
      room_ = 0;
      std::size_t kept = 0;
      for (const Slot& s : old)
        kept += s.len != 0 && keep_it(s.key) ? 1 : 0;
      std::size_t n = kMinSlots;
      while (n < kept * 4)
        n *= 2;
      slots_.assign(n, Slot{});
      mask_ = n - 1;
      used_ = 0;
      for (Slot s : old) {
        if (s.len == 0 || !keep_it(s.key))
          continue;
        s.text = keep({s.text, s.len});
        place(s);
      }
    }
    [[nodiscard]] std::size_t size() const noexcept { return used_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return slots_.size(); }

   private:
    static constexpr std::size_t kMinSlots = 4096;
    static constexpr std::size_t kBlock = std::size_t{64} << 10;
    struct Slot {
      FrameKey key;
      const char* text = nullptr;
      std::uint32_t len = 0;  // 0: empty (a frame's line is never empty)
    };
    static std::size_t hash(const FrameKey& k) noexcept {
      std::uint64_t h =
          (k.ip ^ (std::uint64_t{k.pid} << 32) ^ k.marker ^ (std::uint64_t{k.gen} << 20)) *
          0x9E3779B97F4A7C15ULL;
      return static_cast<std::size_t>(h ^ (h >> 29));
    }
    /// A copy of `line` in the blocks (a line longer than a block gets a block of its own).
    const char* keep(std::string_view line) {
      if (line.size() > room_) {
        const std::size_t n = std::max(kBlock, line.size());
        blocks_.push_back(std::make_unique_for_overwrite<char[]>(n));
        at_ = blocks_.back().get();
        room_ = n;
      }
      char* const out = at_;
      std::memcpy(out, line.data(), line.size());
      at_ += line.size();
      room_ -= line.size();
      return out;
    }
    void place(const Slot& s) {
      std::size_t i = hash(s.key) & mask_;
      while (slots_[i].len != 0)
        i = (i + 1) & mask_;
      slots_[i] = s;
      ++used_;
    }
    void grow(std::size_t n) {
      std::vector<Slot> old;
      old.swap(slots_);
      slots_.assign(n, Slot{});
      mask_ = n - 1;
      used_ = 0;
      for (const Slot& s : old) {
        if (s.len != 0)
          place(s);
      }
    }
    std::vector<Slot> slots_;
    std::size_t mask_ = 0, used_ = 0;
    std::vector<std::unique_ptr<char[]>> blocks_;
    char* at_ = nullptr;    // where the next line goes in the last block
    std::size_t room_ = 0;  // bytes left there
  };

  struct KeyHash {
    std::size_t operator()(const std::pair<std::uint64_t, std::uint32_t>& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.first * 0x9E3779B97F4A7C15ULL ^ k.second);
    }
  };

  const perfdata::Reader& reader_;
  std::FILE* out_;
  bool perf_mode_;
  CommCache comms_;
  /// Frames from the file's MMAP records and this machine's files (not its /proc).
  static symbols::SymbolizeOptions symbols_options(
      const perfdata::Reader& reader,
      const std::vector<std::filesystem::path>& debug_roots) {
    symbols::SymbolizeOptions o{.read_proc = false};
    o.recorded_kallsyms = perfdata::cached_kallsyms(reader.features());
    o.recorded_kernel_build_id = perfdata::kernel_build_id(reader.features());
    o.debug_roots.insert(o.debug_roots.end(), debug_roots.begin(), debug_roots.end());
    return o;
  }
  symbols::Symbolizer symbols_;
  std::vector<std::optional<perfdata::PrintFmt>> fmts_;
  std::vector<bool> dwarf_;                        // by event: its user stacks are unwound (DWARF)
  static constexpr std::size_t kMaxUnwound = 127;  // perf's kernel.perf_event_max_stack
  std::vector<std::uint64_t> unwound_;
  std::size_t name_width_ = 0;
  Reorder order_;
  BatchHandler handler_;
  std::string line_;
  std::string buf_;  // the output of print(), flushed every kFlushBytes
  FrameLines frame_lines_;
  static constexpr std::size_t kFlushBytes = std::size_t{1} << 20;
  std::unordered_map<std::uint32_t, PidLines> pid_lines_;  // by process (kAnyPid: the kernel)
  std::uint32_t last_pid_ = 0;
  PidLines* last_lines_ = nullptr;                            // pid_lines_[last_pid_]
  std::size_t stale_ = 0;                                     // lines left behind in frame_lines_
  std::unordered_map<std::uint32_t, std::uint32_t> threads_;  // track_threads()'s
  std::unordered_map<std::uint32_t, std::uint64_t> exited_;   // pid -> its exit's time
  std::deque<std::pair<std::uint64_t, std::uint32_t>> exit_order_;  // (time, pid)
  std::unordered_map<std::pair<std::uint64_t, std::uint32_t>, std::uint64_t, KeyHash> periods_;
};

/// perf stat record files: perf script keeps the last counts of every (event, thread, cpu) and
/// prints them all at each STAT_ROUND, by event in file order, then thread, then CPU
/// (builtin-script.c process_stat_round_event / process_stat), zero counts included.
class StatPrinter {
 public:
  StatPrinter(const perfdata::Reader& reader, std::FILE* out) : reader_(reader), out_(out) {}

  void add(const perfdata::UserRecord& user) {
    if (const auto* tm = std::get_if<perfdata::ThreadMap>(&user)) {
      threads_.clear();
      for (std::uint64_t i = 0; i < tm->nr; ++i)
        threads_.push_back(static_cast<std::int32_t>(tm->pid(i)));
    } else if (const auto* cm = std::get_if<perfdata::CpuMapData>(&user)) {
      std::vector<std::int32_t> cpus;
      if (cm->cpus(cpus))
        cpus_ = std::move(cpus);
    } else if (const auto* st = std::get_if<perfdata::Stat>(&user)) {
      const auto cpu = static_cast<std::int32_t>(st->cpu);
      if (std::find(seen_cpus_.begin(), seen_cpus_.end(), cpu) == seen_cpus_.end())
        seen_cpus_.push_back(cpu);
      counts_[{st->id, st->thread, cpu}] = *st;
    } else if (const auto* round = std::get_if<perfdata::StatRound>(&user)) {
      print(round->time);
    }
  }

 private:
  void print(std::uint64_t time) {
    if (!header_) {
      fmt::print(out_, "{:>3} {:>8} {:>15} {:>15} {:>15} {:>15} {}\n", "CPU", "THREAD", "VAL",
                 "ENA", "RUN", "TIME", "EVENT");
      header_ = true;
    }
    const auto& cpus = cpus_.empty() ? seen_cpus_ : cpus_;
    const std::size_t nthreads = std::max<std::size_t>(1, threads_.size());
    for (const auto& ev : reader_.events()) {
      for (std::uint32_t t = 0; t < nthreads; ++t) {
        for (const auto cpu : cpus) {
          perfdata::Stat st;
          for (const auto id : ev.ids) {  // the id of this event on this CPU and thread
            const auto it = counts_.find({id, t, cpu});
            if (it != counts_.end()) {
              st = it->second;
              break;
            }
          }
          const std::int32_t pid = t < threads_.size() ? threads_[t] : -1;
          fmt::print(out_, "{:>3} {:>8} {:>15} {:>15} {:>15} {:>15} {}\n", cpu, pid, st.val, st.ena,
                     st.run, time, ev.name);
        }
      }
    }
  }

  const perfdata::Reader& reader_;
  std::FILE* out_;
  std::vector<std::int32_t> threads_, cpus_, seen_cpus_;
  std::map<std::tuple<std::uint64_t, std::uint32_t, std::int32_t>, perfdata::Stat> counts_;
  bool header_ = false;
};

}  // namespace

void replay_print(perfdata::Reader& reader, std::FILE* out, const ReplayPrintOptions& options) {
  const Warn warn = options.warn ? options.warn : [](const std::string&) {};
  warn_incompatible(options.file, reader, warn);
  // Output in large writes: a profile's callchains are millions of short lines.
  std::setvbuf(out, nullptr, _IOFBF, std::size_t{1} << 20);
  ScriptPrinter printer(reader, out, options.perf, options.debug_roots);
  printer.warn_formats(options.file, warn);
  StatPrinter stat(reader, out);
  perfdata::Item item;
  while (reader.next(item)) {
    if (item.record.type < perfdata::kHeaderAttr) {
      printer.push(item);
      continue;
    }
    if (std::holds_alternative<perfdata::FinishedRound>(item.user)) {
      printer.round();
      continue;
    }
    printer.flush();  // the stat lines follow the samples before them
    stat.add(item.user);
  }
  // Everything read before a damaged record is delivered, in order, before the error.
  printer.finish();
  std::fflush(out);
  for (const auto& w : printer.take_warnings())
    warn(w);
}

}  // namespace tracer
