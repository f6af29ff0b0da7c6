// Test support: encode records exactly as the kernel lays them out, and a synthetic ring that
// plays the kernel's side of the data_head/data_tail and aux_head/aux_tail protocols.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "tracer/perf/record.hpp"

namespace tracer::testing {

/// Appends little-endian fields to a record body; finish() prepends the header and pads to 8.
class RecordBuilder {
 public:
  RecordBuilder& u8(std::uint8_t v) { return put(v); }
  RecordBuilder& u16(std::uint16_t v) { return put(v); }
  RecordBuilder& u32(std::uint32_t v) { return put(v); }
  RecordBuilder& u64(std::uint64_t v) { return put(v); }
  RecordBuilder& bytes(std::span<const std::byte> b) {
    body_.insert(body_.end(), b.begin(), b.end());
    return *this;
  }
  /// A NUL-terminated string padded with zeros to a multiple of 8 (as perf_event_comm_event).
  RecordBuilder& padded_string(const std::string& s);
  RecordBuilder& pad_to_8() {
    while (body_.size() % 8 != 0)
      body_.push_back(std::byte{0});
    return *this;
  }
  [[nodiscard]] std::size_t size() const { return body_.size(); }
  [[nodiscard]] std::vector<std::byte> finish(std::uint32_t type, std::uint16_t misc = 0) const;

 private:
  template <typename T>
  RecordBuilder& put(T v) {
    const std::size_t at = body_.size();
    body_.resize(at + sizeof(T));
    std::memcpy(body_.data() + at, &v, sizeof(T));
    return *this;
  }
  std::vector<std::byte> body_;
};

/// Every field a SAMPLE can carry, owned; encode_sample writes those the layout selects.
struct SampleSpec {
  std::uint64_t identifier = 0, ip = 0;
  std::uint32_t pid = 0, tid = 0;
  std::uint64_t time = 0, addr = 0, id = 0, stream_id = 0;
  std::uint32_t cpu = 0, res = 0;
  std::uint64_t period = 0;
  std::uint64_t read_enabled = 0, read_running = 0;
  struct ReadValue {
    std::uint64_t value = 0, id = 0, lost = 0;
  };
  std::vector<ReadValue> read_values;  // one without GROUP
  std::vector<std::uint64_t> callchain;
  std::vector<std::byte> raw;  // payload; encode pads u32 size + payload to 8 like the kernel
  std::uint64_t branch_hw_idx = 0;
  std::vector<perf::BranchEntry> branches;
  std::vector<std::uint64_t> branch_counters;
  std::uint64_t regs_user_abi = 0;
  std::vector<std::uint64_t> regs_user;
  std::vector<std::byte> stack_user;  // size field = this size; dyn_size below
  std::uint64_t stack_user_dyn_size = 0;
  std::uint64_t weight = 0, data_src = 0, transaction = 0;
  std::uint64_t regs_intr_abi = 0;
  std::vector<std::uint64_t> regs_intr;
  std::uint64_t phys_addr = 0, cgroup = 0, data_page_size = 0, code_page_size = 0;
  std::vector<std::byte> aux;
};

/// Encodes a SAMPLE for `layout` (perf_output_sample order).
[[nodiscard]] std::vector<std::byte> encode_sample(const perf::SampleLayout& layout,
                                                   const SampleSpec& s,
                                                   std::uint16_t misc = 0);
/// Appends the sample_id trailer of `layout` to a non-SAMPLE record body.
void append_sample_id(RecordBuilder& b, const perf::SampleLayout& layout, const perf::SampleId& id);
/// Encodes the read_format blob.
void append_read(RecordBuilder& b, std::uint64_t format, const SampleSpec& s);

/// Page-aligned anonymous memory laid out like a perf mmap: one metadata page, 2^n data pages,
/// and an optional AUX area. The writer side behaves as kernel/events/ring_buffer.c does.
class SyntheticRing {
 public:
  explicit SyntheticRing(std::uint32_t data_pages, std::uint64_t aux_bytes = 0);
  ~SyntheticRing();
  SyntheticRing(const SyntheticRing&) = delete;
  SyntheticRing& operator=(const SyntheticRing&) = delete;

  [[nodiscard]] std::span<std::byte> meta_and_data() { return {base_, map_len_}; }
  [[nodiscard]] std::span<std::byte> aux() { return {aux_base_, aux_bytes_}; }
  [[nodiscard]] perf_event_mmap_page* meta() {
    return reinterpret_cast<perf_event_mmap_page*>(base_);
  }
  [[nodiscard]] std::uint64_t data_size() const { return data_size_; }

  /// Starts both head and tail at `pos` (to put a record across the wrap point).
  void set_position(std::uint64_t pos);
  /// Layout/id used for the LOST records this ring emits after a drop.
  void set_lost_record(const perf::SampleLayout& layout, const perf::SampleId& id) {
    lost_layout_ = layout;
    lost_id_ = id;
  }
  /// Writes a record at head if it fits before data_tail; else drops it and counts it lost.
  /// Like perf_output_begin(), the first write after a drop that has room for a LOST record
  /// writes one first. Returns false when `rec` was dropped.
  bool write(std::span<const std::byte> rec);
  /// Release-stores data_head (what perf_output_put_handle does).
  void publish();
  [[nodiscard]] std::uint64_t dropped_total() const { return dropped_total_; }
  [[nodiscard]] std::uint64_t head() const { return head_; }

  /// write_backward mode: head moves down, no tail check (overwrite).
  void write_backward(std::span<const std::byte> rec);

  /// Writes `data` into the AUX area at aux_head, up to the free space before aux_tail (the
  /// rest is cut and the record flagged TRUNCATED), then publishes aux_head and writes a
  /// PERF_RECORD_AUX announcing it. Returns the bytes stored.
  std::uint64_t aux_write(std::span<const std::byte> data, std::uint64_t extra_flags = 0);

 private:
  bool fits(std::size_t n);
  void put(std::span<const std::byte> rec);
  std::byte* base_ = nullptr;
  std::size_t map_len_ = 0;
  std::byte* data_ = nullptr;
  std::uint64_t data_size_ = 0;
  std::byte* aux_base_ = nullptr;
  std::uint64_t aux_bytes_ = 0;
  std::uint64_t head_ = 0;
  std::uint64_t aux_head_ = 0;
  std::uint64_t lost_pending_ = 0;
  std::uint64_t dropped_total_ = 0;
  perf::SampleLayout lost_layout_;
  perf::SampleId lost_id_;
};

/// Reads bytes from an xxd dump ("00000000: 0900 0000 ..." lines; '#' lines are comments).
[[nodiscard]] std::vector<std::byte> read_xxd(const std::string& path);

}  // namespace tracer::testing
