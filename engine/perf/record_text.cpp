#include "tracer/perf/record_text.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace tracer::perf {
namespace {

struct Printer {
  const Record& rec;
  std::string& out;

  void operator()(const Unknown&) const {
    fmt::format_to(std::back_inserter(out), " size={}", rec.size);
  }
  void operator()(const Sample& s) const {
    auto it = std::back_inserter(out);
    const auto st = s.sample_type;
    if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
      fmt::format_to(it, " identifier={}", s.identifier);
    if ((st & PERF_SAMPLE_IP) != 0U)
      fmt::format_to(it, " ip={:#x}", s.ip);
    if ((st & PERF_SAMPLE_TID) != 0U)
      fmt::format_to(it, " pid={} tid={}", s.pid, s.tid);
    if ((st & PERF_SAMPLE_TIME) != 0U)
      fmt::format_to(it, " time={}", s.time);
    if ((st & PERF_SAMPLE_ADDR) != 0U)
      fmt::format_to(it, " addr={:#x}", s.addr);
    if ((st & PERF_SAMPLE_ID) != 0U)
      fmt::format_to(it, " id={}", s.id);
    if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
      fmt::format_to(it, " stream_id={}", s.stream_id);
    if ((st & PERF_SAMPLE_CPU) != 0U)
      fmt::format_to(it, " cpu={}", s.cpu);
    if ((st & PERF_SAMPLE_PERIOD) != 0U)
      fmt::format_to(it, " period={}", s.period);
    if ((st & PERF_SAMPLE_READ) != 0U) {
      fmt::format_to(it, " read=[");
      for (std::uint64_t i = 0; i < s.read.count(); ++i) {
        fmt::format_to(it, "{}{}", i == 0 ? "" : ",", s.read.value(i));
      }
      fmt::format_to(it, "]");
    }
    if ((st & PERF_SAMPLE_CALLCHAIN) != 0U) {
      fmt::format_to(it, " callchain=[");
      for (std::uint64_t i = 0; i < s.callchain.size; ++i) {
        fmt::format_to(it, "{}{:#x}", i == 0 ? "" : ",", s.callchain[i]);
      }
      fmt::format_to(it, "]");
    }
    if ((st & PERF_SAMPLE_RAW) != 0U)
      fmt::format_to(it, " raw={}B", s.raw.size());
    if ((st & PERF_SAMPLE_BRANCH_STACK) != 0U)
      fmt::format_to(it, " branches={}", s.branch_stack.nr);
    if ((st & PERF_SAMPLE_REGS_USER) != 0U) {
      fmt::format_to(it, " regs_user_abi={} regs_user={}", s.regs_user.abi, s.regs_user.regs.size);
    }
    if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
      fmt::format_to(it, " stack_user={}B dyn={}", s.stack_user.size(), s.stack_user_dyn_size);
    }
    if ((st & (PERF_SAMPLE_WEIGHT | abi::kSampleWeightStruct)) != 0U)
      fmt::format_to(it, " weight={}", s.weight);
    if ((st & PERF_SAMPLE_DATA_SRC) != 0U)
      fmt::format_to(it, " data_src={:#x}", s.data_src);
    if ((st & PERF_SAMPLE_TRANSACTION) != 0U)
      fmt::format_to(it, " transaction={:#x}", s.transaction);
    if ((st & PERF_SAMPLE_REGS_INTR) != 0U)
      fmt::format_to(it, " regs_intr={}", s.regs_intr.regs.size);
    if ((st & abi::kSamplePhysAddr) != 0U)
      fmt::format_to(it, " phys_addr={:#x}", s.phys_addr);
    if ((st & abi::kSampleCgroup) != 0U)
      fmt::format_to(it, " cgroup={}", s.cgroup);
    if ((st & abi::kSampleDataPageSize) != 0U)
      fmt::format_to(it, " data_page_size={}", s.data_page_size);
    if ((st & abi::kSampleCodePageSize) != 0U)
      fmt::format_to(it, " code_page_size={}", s.code_page_size);
    if ((st & abi::kSampleAux) != 0U)
      fmt::format_to(it, " aux={}B", s.aux.size());
  }
  void operator()(const Mmap& m) const {
    fmt::format_to(std::back_inserter(out),
                   " pid={} tid={} addr={:#x} len={:#x} pgoff={:#x} file={}", m.pid, m.tid, m.addr,
                   m.len, m.pgoff, m.filename);
  }
  void operator()(const Mmap2& m) const {
    auto it = std::back_inserter(out);
    fmt::format_to(it, " pid={} tid={} addr={:#x} len={:#x} pgoff={:#x}", m.pid, m.tid, m.addr,
                   m.len, m.pgoff);
    if (m.has_build_id) {
      // The build id's bytes, as perf and readelf -n print it (a size past the 20 bytes the
      // record holds shows what is there).
      fmt::format_to(it, " build_id=");
      for (const std::byte b :
           m.build_id.first(std::min<std::size_t>(m.build_id_size, m.build_id.size())))
        fmt::format_to(it, "{:02x}", static_cast<unsigned>(b));
    } else {
      fmt::format_to(it, " maj={} min={} ino={}", m.maj, m.min, m.ino);
    }
    fmt::format_to(it, " prot={} flags={:#x} file={}", m.prot, m.flags, m.filename);
  }
  void operator()(const Lost& l) const {
    fmt::format_to(std::back_inserter(out), " id={} lost={}", l.id, l.lost);
  }
  void operator()(const Comm& c) const {
    fmt::format_to(std::back_inserter(out), " pid={} tid={} comm={}{}", c.pid, c.tid, c.comm,
                   c.exec ? " exec" : "");
  }
  void operator()(const TaskEvent& t) const {
    fmt::format_to(std::back_inserter(out), " pid={} ppid={} tid={} ptid={} time={}", t.pid, t.ppid,
                   t.tid, t.ptid, t.time);
  }
  void operator()(const Throttle& t) const {
    fmt::format_to(std::back_inserter(out), " time={} id={} stream_id={}", t.time, t.id,
                   t.stream_id);
  }
  void operator()(const ReadRecord& r) const {
    fmt::format_to(std::back_inserter(out), " pid={} tid={} values={}", r.pid, r.tid,
                   r.values.count());
  }
  void operator()(const Aux& a) const {
    fmt::format_to(std::back_inserter(out), " offset={:#x} size={:#x} flags={:#x}", a.aux_offset,
                   a.aux_size, a.flags);
  }
  void operator()(const ItraceStart& i) const {
    fmt::format_to(std::back_inserter(out), " pid={} tid={}", i.pid, i.tid);
  }
  void operator()(const LostSamples& l) const {
    fmt::format_to(std::back_inserter(out), " lost={}", l.lost);
  }
  void operator()(const Switch& s) const {
    auto it = std::back_inserter(out);
    fmt::format_to(it, " {}{}", s.out ? "out" : "in", s.preempt ? " preempt" : "");
    if (s.cpu_wide)
      fmt::format_to(it, " next_prev_pid={} next_prev_tid={}", s.next_prev_pid, s.next_prev_tid);
  }
  void operator()(const Namespaces& n) const {
    fmt::format_to(std::back_inserter(out), " pid={} tid={} nr={}", n.pid, n.tid, n.nr);
  }
  void operator()(const Ksymbol& k) const {
    fmt::format_to(std::back_inserter(out), " addr={:#x} len={} type={} flags={} name={}", k.addr,
                   k.len, k.ksym_type, k.flags, k.name);
  }
  void operator()(const BpfEvent& b) const {
    fmt::format_to(std::back_inserter(out), " type={} flags={} id={}", b.type, b.flags, b.id);
  }
  void operator()(const Cgroup& c) const {
    fmt::format_to(std::back_inserter(out), " id={} path={}", c.id, c.path);
  }
  void operator()(const TextPoke& t) const {
    fmt::format_to(std::back_inserter(out), " addr={:#x} old_len={} new_len={}", t.addr, t.old_len,
                   t.new_len);
  }
  void operator()(const AuxOutputHwId& h) const {
    fmt::format_to(std::back_inserter(out), " hw_id={}", h.hw_id);
  }
};

}  // namespace

std::string to_text(const Record& r) {
  std::string out(record_type_name(r.type));
  if (r.misc != 0)
    fmt::format_to(std::back_inserter(out), " misc={:#x}", r.misc);
  std::visit(Printer{r, out}, r.body);
  if (r.type != abi::kSample && r.sample_id.present) {
    const auto& i = r.sample_id;
    fmt::format_to(std::back_inserter(out), " {{pid={} tid={} time={} id={} cpu={}}}", i.pid, i.tid,
                   i.time, i.id, i.cpu);
  }
  return out;
}

}  // namespace tracer::perf
