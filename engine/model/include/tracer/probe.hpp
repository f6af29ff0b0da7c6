// What a probe is: the options it is opened with (ProbeOptions, its Target and wakeups) and what
// it resolved to (ProbeInfo: its sample layout, tracefs format, payload schema and attr). The
// engine, recipes, the perf.data writer and the stages share these.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/bpf/schema.hpp"
#include "tracer/perf/event_attr.hpp"
#include "tracer/perf/record.hpp"
#include "tracer/tracefs/tracefs.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer {

/// The channel that carries what BPF programs deliver to user space (EngineOptions::channel).
enum class DeliveryChannel : std::uint8_t {
  kRingbuf,  // one BPF_MAP_TYPE_RINGBUF for every CPU, batched wakeups (kernel 5.8+)
  kPerf,     // a PERF_EVENT_ARRAY of bpf-output events, a perf ring per CPU
};
/// "ringbuf" / "perf".
[[nodiscard]] std::string_view to_string(DeliveryChannel c) noexcept;
[[nodiscard]] std::optional<DeliveryChannel> parse_delivery_channel(std::string_view text) noexcept;

enum class ProbeKind : std::uint8_t {
  kTracepoint,  // "system:event"
  kKprobe,      // "symbol[+offset]"
  kKretprobe,
  kUprobe,  // "path:symbol[+off]", "path:0xoffset", "lib:symbol" (with a pid target)
  kUretprobe,
  kSoftware,    // "cpu-clock", "page-faults", ... (perf's names)
  kHardware,    // "cycles", "instructions", ...
  kCache,       // "L1-dcache-load-misses", ...
  kRawPmu,      // perf syntax "pmu/term=value,.../"
  kBreakpoint,  // "0xADDR[:rwx[:len]]" or "symbol[:rwx[:len]]" (symbol of the traced binary)
  kAux,         // an AUX-capable PMU: "intel_pt/cyc=1/" (AUX area mapped, chunks delivered)
  kBpfOutput,   // the BPF output channel: what programs emit with bpf_perf_event_output
  kUsdt,        // "path:provider:name": every call site of a USDT probe (a uprobe each)
};
/// A uprobe, a uretprobe or a USDT probe (placed as uprobes): the kinds that probe user code.
[[nodiscard]] constexpr bool is_user_probe(ProbeKind k) noexcept {
  return k == ProbeKind::kUprobe || k == ProbeKind::kUretprobe || k == ProbeKind::kUsdt;
}
[[nodiscard]] std::string_view to_string(ProbeKind k) noexcept;

/// Who is traced.
struct Target {
  enum class Kind : std::uint8_t { kAllCpus, kPid, kCgroup, kCommand };
  Kind kind = Kind::kAllCpus;
  pid_t pid = -1;  // kPid: the process (its threads and future children too); its exit ends it
  std::string cgroup{};                // kCgroup: a cgroup v2 directory (/sys/fs/cgroup/...)
  std::vector<std::string> command{};  // kCommand: argv of a command tracer starts and waits for
  /// kCommand: the command's stdout goes to tracer's stderr (its fd 1 is a dup of fd 2), for when
  /// tracer's own stdout carries machine output (JSON lines, a perf.data stream).
  bool stdout_to_stderr = false;
};

/// When the kernel wakes the reactor for a ring.
struct WakeupPolicy {
  std::uint32_t events = 0;           // wake every N samples (wakeup_events), if > 0
  std::uint32_t watermark_bytes = 0;  // else wake at this fill level; 0: a quarter of the ring
  friend bool operator==(const WakeupPolicy&, const WakeupPolicy&) = default;
};

struct ProbeOptions {
  std::string name{};  // shown in stats; unique per engine
  /// The recipe's [[probe]] this one comes from (its index; a glob gives several): errors
  /// about the probe carry it (ErrorSubject::recipe_probe).
  std::optional<std::size_t> origin{};
  ProbeKind kind = ProbeKind::kTracepoint;
  std::string spec{};
  /// Sampling: every `period` events, or `freq` times a second. Neither: every event for
  /// tracepoints, probes, breakpoints, AUX events and non-clock software events; 4000 Hz for
  /// cpu-clock/task-clock, hardware, cache and raw PMU events.
  std::optional<std::uint64_t> period{};
  std::optional<std::uint64_t> freq{};
  bool counting = false;  // open as a counter: no ring; its count is in stats()
  /// Timebase sampling: events counted in a group this probe's event leads (perf's names, as
  /// `tracer stat -e`); each sample carries their counts (PERF_SAMPLE_READ, PERF_FORMAT_GROUP)
  /// and the stages read each one's count since the stream's previous sample as a field
  /// (ProbeInfo::read_members).
  std::vector<std::string> read_events{};
  std::uint64_t extra_sample_type = 0;  // e.g. PERF_SAMPLE_CALLCHAIN | PERF_SAMPLE_REGS_USER
  std::uint64_t sample_regs_user = 0;
  std::uint32_t sample_stack_user = 0;
  /// Callchains (PERF_SAMPLE_CALLCHAIN): at most this many frames (sample_max_stack; 0: the
  /// kernel's kernel.perf_event_max_stack), without the kernel's or the user's part.
  std::uint16_t max_stack = 0;
  bool exclude_callchain_kernel = false;
  bool exclude_callchain_user = false;
  bool task_records = false;  // COMM/FORK/EXIT/MMAP2 records (for symbolization)
  /// With task_records: MMAP2 records of data mappings too (mmap_data), what a DWARF unwind of
  /// another probe's stack copies reads .eh_frame_hdr through (perf record --call-graph dwarf).
  bool data_mappings = false;
  bool context_switches = false;  // SWITCH records
  std::string filter{};           // tracefs filter expression (tracepoints, probes)
  /// A usdt probe's arguments that are `char *` ("arg1"): their fields hold the strings they
  /// point to, read at the event (the others are integers of the note's size).
  std::vector<std::string> string_args{};
  std::string bpf_program{};     // program of the engine's BPF object to attach (SET_BPF)
  std::uint32_t ring_pages = 0;  // data pages per CPU ring (power of two); 0: from the
                                 // locked-memory budget (Engine::ring_note), 2 MiB unlimited
  /// COMM/FORK/EXIT records only (no MMAP): thread names at event time. A sampling probe with
  /// them on every CPU covers every task the engine traces.
  bool comm_records = false;
  WakeupPolicy wakeup{};
  std::uint64_t aux_bytes = 0;  // kAux: AUX area size (power-of-two pages); 0: 4 MiB
  bool aux_snapshot = false;    // kAux: overwrite (snapshot) mode

  /// The same probe: every option equal but `origin` (where the recipe wrote it).
  [[nodiscard]] bool same_probe(const ProbeOptions& other) const;
  friend bool operator==(const ProbeOptions&, const ProbeOptions&) = default;
};

/// What a probe resolved to, for stages that bind field names once.
/// One of a probe's places in the kernel, when it has several (a uprobe of a C++ name's
/// overloads or a pattern's matches): what it is and the attr fields that differ from
/// ProbeInfo::attr's.
struct ProbeSite {
  std::string symbol{};       // as matched: "shop::Cache::get(int)"
  std::uint64_t config = 0;   // a tracefs event's id (PERF_TYPE_TRACEPOINT), else attr's
  std::uint64_t config2 = 0;  // a probe PMU's offset
};

struct ProbeInfo {
  std::uint32_t index = 0;
  std::string name{};
  ProbeKind kind = ProbeKind::kTracepoint;
  std::string spec{};
  perf::SampleLayout layout{};
  std::optional<tracefs::Format> format{};  // tracepoints and tracefs-backed probes
  std::string pmu{};                        // PMU name the events were opened on
  /// PERF_SAMPLE_REGS_USER mask (perf_regs.h order): uprobes carry their arguments (x86-64:
  /// rdi, rsi, rdx, rcx, r8, r9) and uretprobes their return value (rax) by default.
  std::uint64_t sample_regs_user = 0;
  /// A counting probe (counting = true) without a BPF program of its own: the session hands
  /// its count since the last reading to the user-space stages at each tick and at the end, as
  /// one sample per CPU slot (probe, cpu, time, and the count as its period and weight).
  bool counts_to_stages = false;
  /// Its samples come through the engine's BPF delivery channel: read in place they have the
  /// delivered form (a DeliveredHeader, then the tracepoint's record), not its layout's.
  bool delivered = false;
  /// Its delivered samples carry the task's name at the hit (EngineOptions::deliver_comm).
  bool delivered_comm = false;
  /// Removed while the engine ran (Engine::remove_probe): nothing of it is open any more and no
  /// record of it comes; its index stays taken, so that the other probes keep theirs.
  bool removed = false;
  /// kBpfOutput: the emitted struct's fields (from BTF), when BpfOptions::payload_struct is set.
  std::optional<bpf::StructSchema> payload{};
  /// The fields of ProbeOptions::read_events, in order: each event's name with every character
  /// other than a letter, a digit or '_' made '_' ("page-faults" -> "page_faults"). Their
  /// values are the counts since the previous sample of the same event stream.
  std::vector<std::string> read_members{};
  /// The attr the events were opened with (sample_type, read_format, clockid...): what a
  /// perf.data writer stores for this probe.
  perf::EventAttr attr{};
  /// Every place of a probe of several, the first attr's own (each has events of its own on
  /// every CPU, writing to the probe's ring); empty for a probe of one place.
  std::vector<ProbeSite> sites{};
  /// A usdt probe's: each call site's argument text ("-4@%edi 8@-8(%rbp)"), in `sites` order
  /// (one for a probe of one site). Its arguments are the fields argN of its tracefs event.
  std::vector<std::string> usdt_args{};
};

}  // namespace tracer

#pragma GCC visibility pop
