#include "support/synthetic_ring.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace tracer::testing {

using perf::SampleLayout;

RecordBuilder& RecordBuilder::padded_string(const std::string& s) {
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  body_.insert(body_.end(), p, p + s.size());
  body_.push_back(std::byte{0});
  return pad_to_8();
}

std::vector<std::byte> RecordBuilder::finish(std::uint32_t type, std::uint16_t misc) const {
  perf_event_header h{type, misc, static_cast<std::uint16_t>(8 + body_.size())};
  if ((8 + body_.size()) % 8 != 0)
    throw std::logic_error("record body not padded to 8");
  std::vector<std::byte> out(sizeof(h) + body_.size());
  std::memcpy(out.data(), &h, sizeof(h));
  if (!body_.empty())
    std::memcpy(out.data() + sizeof(h), body_.data(), body_.size());
  return out;
}

void append_read(RecordBuilder& b, std::uint64_t f, const SampleSpec& s) {
  const bool group = (f & PERF_FORMAT_GROUP) != 0U;
  auto entry = [&](const SampleSpec::ReadValue& v) {
    b.u64(v.value);
    if (group) {
      if ((f & PERF_FORMAT_ID) != 0U)
        b.u64(v.id);
      if ((f & perf::abi::kFormatLost) != 0U)
        b.u64(v.lost);
    }
  };
  if (group) {
    b.u64(s.read_values.size());
  } else {
    entry(s.read_values.at(0));
  }
  if ((f & PERF_FORMAT_TOTAL_TIME_ENABLED) != 0U)
    b.u64(s.read_enabled);
  if ((f & PERF_FORMAT_TOTAL_TIME_RUNNING) != 0U)
    b.u64(s.read_running);
  if (group) {
    for (const auto& v : s.read_values)
      entry(v);
  } else {
    if ((f & PERF_FORMAT_ID) != 0U)
      b.u64(s.read_values.at(0).id);
    if ((f & perf::abi::kFormatLost) != 0U)
      b.u64(s.read_values.at(0).lost);
  }
}

std::vector<std::byte> encode_sample(const SampleLayout& l,
                                     const SampleSpec& s,
                                     std::uint16_t misc) {
  RecordBuilder b;
  const std::uint64_t st = l.sample_type;
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    b.u64(s.identifier);
  if ((st & PERF_SAMPLE_IP) != 0U)
    b.u64(s.ip);
  if ((st & PERF_SAMPLE_TID) != 0U)
    b.u32(s.pid).u32(s.tid);
  if ((st & PERF_SAMPLE_TIME) != 0U)
    b.u64(s.time);
  if ((st & PERF_SAMPLE_ADDR) != 0U)
    b.u64(s.addr);
  if ((st & PERF_SAMPLE_ID) != 0U)
    b.u64(s.id);
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    b.u64(s.stream_id);
  if ((st & PERF_SAMPLE_CPU) != 0U)
    b.u32(s.cpu).u32(s.res);
  if ((st & PERF_SAMPLE_PERIOD) != 0U)
    b.u64(s.period);
  if ((st & PERF_SAMPLE_READ) != 0U)
    append_read(b, l.read_format, s);
  if ((st & PERF_SAMPLE_CALLCHAIN) != 0U) {
    b.u64(s.callchain.size());
    for (auto ip : s.callchain)
      b.u64(ip);
  }
  if ((st & PERF_SAMPLE_RAW) != 0U) {
    // Kernel: raw size is padded so that u32 size + data ends 8-aligned.
    std::size_t padded = s.raw.size();
    while ((padded + 4) % 8 != 0)
      ++padded;
    b.u32(static_cast<std::uint32_t>(padded)).bytes(s.raw);
    for (std::size_t i = s.raw.size(); i < padded; ++i)
      b.u8(0);
  }
  if ((st & PERF_SAMPLE_BRANCH_STACK) != 0U) {
    b.u64(s.branches.size());
    if ((l.branch_sample_type & perf::abi::kBranchHwIndex) != 0U)
      b.u64(s.branch_hw_idx);
    for (const auto& e : s.branches)
      b.u64(e.from).u64(e.to).u64(e.flags);
    if ((l.branch_sample_type & perf::abi::kBranchCounters) != 0U) {
      for (auto c : s.branch_counters)
        b.u64(c);
    }
  }
  if ((st & PERF_SAMPLE_REGS_USER) != 0U) {
    b.u64(s.regs_user_abi);
    if (s.regs_user_abi != 0) {
      for (auto r : s.regs_user)
        b.u64(r);
    }
  }
  if ((st & PERF_SAMPLE_STACK_USER) != 0U) {
    b.u64(s.stack_user.size());
    if (!s.stack_user.empty())
      b.bytes(s.stack_user).u64(s.stack_user_dyn_size);
  }
  if ((st & (PERF_SAMPLE_WEIGHT | perf::abi::kSampleWeightStruct)) != 0U)
    b.u64(s.weight);
  if ((st & PERF_SAMPLE_DATA_SRC) != 0U)
    b.u64(s.data_src);
  if ((st & PERF_SAMPLE_TRANSACTION) != 0U)
    b.u64(s.transaction);
  if ((st & PERF_SAMPLE_REGS_INTR) != 0U) {
    b.u64(s.regs_intr_abi);
    if (s.regs_intr_abi != 0) {
      for (auto r : s.regs_intr)
        b.u64(r);
    }
  }
  if ((st & perf::abi::kSamplePhysAddr) != 0U)
    b.u64(s.phys_addr);
  if ((st & perf::abi::kSampleCgroup) != 0U)
    b.u64(s.cgroup);
  if ((st & perf::abi::kSampleDataPageSize) != 0U)
    b.u64(s.data_page_size);
  if ((st & perf::abi::kSampleCodePageSize) != 0U)
    b.u64(s.code_page_size);
  if ((st & perf::abi::kSampleAux) != 0U)
    b.u64(s.aux.size()).bytes(s.aux);
  b.pad_to_8();
  return b.finish(perf::abi::kSample, misc);
}

void append_sample_id(RecordBuilder& b, const SampleLayout& l, const perf::SampleId& id) {
  if (!l.sample_id_all)
    return;
  const std::uint64_t st = l.sample_type;
  if ((st & PERF_SAMPLE_TID) != 0U)
    b.u32(id.pid).u32(id.tid);
  if ((st & PERF_SAMPLE_TIME) != 0U)
    b.u64(id.time);
  if ((st & PERF_SAMPLE_ID) != 0U)
    b.u64(id.id);
  if ((st & PERF_SAMPLE_STREAM_ID) != 0U)
    b.u64(id.stream_id);
  if ((st & PERF_SAMPLE_CPU) != 0U)
    b.u32(id.cpu).u32(id.res);
  if ((st & PERF_SAMPLE_IDENTIFIER) != 0U)
    b.u64(id.id);
}

namespace {
std::size_t page() {
  return static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}
void* map_anon(std::size_t n) {
  void* p = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error("mmap");
  return p;
}
}  // namespace

SyntheticRing::SyntheticRing(std::uint32_t data_pages, std::uint64_t aux_bytes) {
  map_len_ = (1 + static_cast<std::size_t>(data_pages)) * page();
  base_ = static_cast<std::byte*>(map_anon(map_len_));
  data_ = base_ + page();
  data_size_ = static_cast<std::uint64_t>(data_pages) * page();
  meta()->data_offset = page();
  meta()->data_size = data_size_;
  if (aux_bytes != 0) {
    aux_bytes_ = aux_bytes;
    aux_base_ = static_cast<std::byte*>(map_anon(aux_bytes));
    meta()->aux_offset = map_len_;
    meta()->aux_size = aux_bytes;
  }
}

SyntheticRing::~SyntheticRing() {
  ::munmap(base_, map_len_);
  if (aux_base_ != nullptr)
    ::munmap(aux_base_, aux_bytes_);
}

void SyntheticRing::set_position(std::uint64_t pos) {
  head_ = pos;
  meta()->data_head = pos;
  meta()->data_tail = pos;
}

bool SyntheticRing::fits(std::size_t n) {
  // Kernel counterpart: perf_output_begin() reads data_tail (READ_ONCE + smp_mb) for free space.
  const std::uint64_t tail =
      std::atomic_ref<__u64>(meta()->data_tail).load(std::memory_order_acquire);
  return head_ - tail + n <= data_size_;
}

void SyntheticRing::put(std::span<const std::byte> rec) {
  const std::uint64_t mask = data_size_ - 1;
  for (std::size_t i = 0; i < rec.size(); ++i)
    data_[(head_ + i) & mask] = rec[i];
  head_ += rec.size();
}

bool SyntheticRing::write(std::span<const std::byte> rec) {
  std::vector<std::byte> lost_rec;
  if (lost_pending_ != 0) {
    RecordBuilder b;
    b.u64(lost_id_.id).u64(lost_pending_);
    append_sample_id(b, lost_layout_, lost_id_);
    lost_rec = b.finish(perf::abi::kLost);
  }
  if (!fits(lost_rec.size() + rec.size())) {
    ++lost_pending_;
    ++dropped_total_;
    return false;
  }
  if (!lost_rec.empty()) {
    put(lost_rec);
    lost_pending_ = 0;
  }
  put(rec);
  return true;
}

void SyntheticRing::publish() {
  std::atomic_ref<__u64>(meta()->data_head).store(head_, std::memory_order_release);
}

void SyntheticRing::write_backward(std::span<const std::byte> rec) {
  head_ -= rec.size();
  const std::uint64_t mask = data_size_ - 1;
  for (std::size_t i = 0; i < rec.size(); ++i)
    data_[(head_ + i) & mask] = rec[i];
  publish();
}

std::uint64_t SyntheticRing::aux_write(std::span<const std::byte> data, std::uint64_t extra_flags) {
  const std::uint64_t tail =
      std::atomic_ref<__u64>(meta()->aux_tail).load(std::memory_order_acquire);
  const std::uint64_t space = aux_bytes_ - (aux_head_ - tail);
  const std::uint64_t n = std::min<std::uint64_t>(space, data.size());
  for (std::uint64_t i = 0; i < n; ++i)
    aux_base_[(aux_head_ + i) & (aux_bytes_ - 1)] = data[i];
  const std::uint64_t offset = aux_head_;
  aux_head_ += n;
  std::atomic_ref<__u64>(meta()->aux_head).store(aux_head_, std::memory_order_release);
  std::uint64_t flags = extra_flags;
  if (n < data.size())
    flags |= perf::abi::kAuxFlagTruncated;
  RecordBuilder b;
  b.u64(offset).u64(n).u64(flags);
  append_sample_id(b, lost_layout_, lost_id_);
  write(b.finish(perf::abi::kAux));
  publish();
  return n;
}

std::vector<std::byte> read_xxd(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw std::runtime_error("cannot open " + path);
  std::vector<std::byte> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#')
      continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos)
      continue;
    // "00000000: 0900 0000 3800 0000  ........": hex groups end at two spaces.
    std::string hex = line.substr(colon + 1);
    const auto ascii = hex.find("  ");
    if (ascii != std::string::npos)
      hex.resize(ascii);
    std::string digits;
    for (char c : hex) {
      if (std::isxdigit(static_cast<unsigned char>(c)) != 0)
        digits += c;
    }
    for (std::size_t i = 0; i + 1 < digits.size(); i += 2) {
      out.push_back(static_cast<std::byte>(std::stoi(digits.substr(i, 2), nullptr, 16)));
    }
  }
  return out;
}

}  // namespace tracer::testing
