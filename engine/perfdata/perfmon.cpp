// The perfmon buffer format: writing and reading (see perfmon.hpp).
#include "tracer/perfdata/perfmon.hpp"

#include <fmt/format.h>

#include <cstring>

namespace tracer::perfmon {

namespace {

template <typename T>
void put_at(std::vector<std::byte>& out, std::size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof v);  // little-endian hosts only (x86-64, arm64)
}

template <typename T>
T get(std::span<const std::byte> in, std::size_t at) {
  T v{};
  std::memcpy(&v, in.data() + at, sizeof v);
  return v;
}

void write_header(std::vector<std::byte>& out, const BufferHeader& h) {
  put_at(out, 0, h.version);
  put_at(out, 2, static_cast<std::uint16_t>(h.arch));
  put_at(out, 4, h.flags);
  put_at(out, 8, h.ticks_per_second);
  put_at(out, 16, h.capture_end);
}

}  // namespace

std::size_t record_size(RecordType type, std::uint32_t branches) noexcept {
  switch (type) {
    case RecordType::kTime:
      return 12;
    case RecordType::kTick:
      return 4;
    case RecordType::kCount:
    case RecordType::kValue:
      return 12;
    case RecordType::kPc:
      return 20;
    case RecordType::kLastBranch:
      return 16 + std::size_t{24} * branches;
    case RecordType::kReserved:
      break;
  }
  return 0;
}

Arch this_arch() noexcept {
#if defined(__x86_64__)
  return Arch::kX86_64;
#elif defined(__aarch64__)
  return Arch::kArm64;
#else
  return Arch::kUnknown;
#endif
}

BufferWriter::BufferWriter(std::size_t capacity, Arch arch, std::uint64_t ticks_per_second)
    : capacity_(std::max(capacity, kHeaderSize)), bytes_(kHeaderSize) {
  write_header(bytes_, {.version = kBufferVersion,
                        .arch = arch,
                        .flags = 0,
                        .ticks_per_second = ticks_per_second,
                        .capture_end = kHeaderSize});
}

bool BufferWriter::room(std::size_t n) {
  if (bytes_.size() + n <= capacity_)
    return true;
  ++dropped_;
  std::uint32_t flags = get<std::uint32_t>(bytes_, 4) | kFlagFull;
  put_at(bytes_, 4, flags);
  return false;
}

void BufferWriter::put_header(RecordType type, std::uint16_t event) {
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 4);
  put_at(bytes_, at, static_cast<std::uint8_t>(type));
  put_at(bytes_, at + 1, flags_);
  put_at(bytes_, at + 2, event);
}

void BufferWriter::finish_record() {
  put_at(bytes_, 16, static_cast<std::uint64_t>(bytes_.size()));  // capture_end
}

bool BufferWriter::time(std::uint64_t time, std::uint16_t event) {
  if (!room(12))
    return false;
  put_header(RecordType::kTime, event);
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 8);
  put_at(bytes_, at, time);
  last_time_ = time;
  finish_record();
  return true;
}

bool BufferWriter::tick(std::uint16_t event) {
  if (!room(4))
    return false;
  put_header(RecordType::kTick, event);
  finish_record();
  return true;
}

bool BufferWriter::count(std::uint16_t event, std::uint64_t count) {
  if (!room(12))
    return false;
  put_header(RecordType::kCount, event);
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 8);
  put_at(bytes_, at, count);
  finish_record();
  return true;
}

bool BufferWriter::value(std::uint16_t event, std::uint64_t value) {
  if (!room(12))
    return false;
  put_header(RecordType::kValue, event);
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 8);
  put_at(bytes_, at, value);
  finish_record();
  return true;
}

bool BufferWriter::pc(std::uint16_t event, std::uint64_t aspace, std::uint64_t pc) {
  if (!room(20))
    return false;
  put_header(RecordType::kPc, event);
  const std::size_t at = bytes_.size();
  bytes_.resize(at + 16);
  put_at(bytes_, at, aspace);
  put_at(bytes_, at + 8, pc);
  finish_record();
  return true;
}

bool BufferWriter::last_branch(std::uint16_t event,
                               std::uint64_t aspace,
                               std::span<const LastBranch> b) {
  if (b.size() > kMaxLastBranches) {
    ++dropped_;
    return false;
  }
  const auto n = static_cast<std::uint32_t>(b.size());
  if (!room(record_size(RecordType::kLastBranch, n)))
    return false;
  put_header(RecordType::kLastBranch, event);
  std::size_t at = bytes_.size();
  bytes_.resize(at + 12 + std::size_t{24} * n);
  put_at(bytes_, at, n);
  put_at(bytes_, at + 4, aspace);
  at += 12;
  for (const auto& br : b) {
    put_at(bytes_, at, br.from);
    put_at(bytes_, at + 8, br.to);
    put_at(bytes_, at + 16, br.info);
    at += 24;
  }
  finish_record();
  return true;
}

bool BufferWriter::write(const Record& r) {
  flags_ = r.flags;
  bool ok = false;
  switch (r.type) {
    case RecordType::kTime:
      ok = time(r.time, r.event);
      break;
    case RecordType::kTick:
      ok = tick(r.event);
      break;
    case RecordType::kCount:
      ok = count(r.event, r.count);
      break;
    case RecordType::kValue:
      ok = value(r.event, r.value);
      break;
    case RecordType::kPc:
      ok = pc(r.event, r.aspace, r.pc);
      break;
    case RecordType::kLastBranch:
      ok = last_branch(r.event, r.aspace, r.branches);
      break;
    case RecordType::kReserved:
      ++dropped_;
      break;
  }
  flags_ = 0;
  return ok;
}

namespace {

Unexpected damaged(std::size_t buffer, std::size_t offset, const std::string& what) {
  return fail(EINVAL, fmt::format("perfmon: buffer {} at offset {}: {}", buffer, offset, what),
              "the file is not a perfmon buffer file, or it was cut or damaged");
}

}  // namespace

bool looks_like_perfmon(std::span<const std::byte> file) noexcept {
  if (file.size() < kHeaderSize)
    return false;
  if (std::memcmp(file.data(), "PERFILE2", 8) == 0)
    return false;
  const auto version = get<std::uint16_t>(file, 0);
  const auto arch = get<std::uint16_t>(file, 2);
  const auto end = get<std::uint64_t>(file, 16);
  return version == kBufferVersion && arch <= static_cast<std::uint16_t>(Arch::kArm64) &&
         end >= kHeaderSize && end <= file.size();
}

Result<std::vector<Buffer>> parse(std::span<const std::byte> file) {
  std::vector<Buffer> out;
  std::size_t start = 0;
  while (start < file.size()) {
    const std::size_t index = out.size();
    const auto rest = file.subspan(start);
    if (rest.size() < kHeaderSize)
      return damaged(index, start, fmt::format("{} bytes left, a header needs 24", rest.size()));
    Buffer b;
    b.header.version = get<std::uint16_t>(rest, 0);
    b.header.arch = static_cast<Arch>(get<std::uint16_t>(rest, 2));
    b.header.flags = get<std::uint32_t>(rest, 4);
    b.header.ticks_per_second = get<std::uint64_t>(rest, 8);
    b.header.capture_end = get<std::uint64_t>(rest, 16);
    if (b.header.version != kBufferVersion)
      return damaged(index, start,
                     fmt::format("buffer version {} (this reader knows 0)", b.header.version));
    if (b.header.capture_end < kHeaderSize || b.header.capture_end > rest.size()) {
      return damaged(index, start,
                     fmt::format("capture_end {} outside the {} bytes there", b.header.capture_end,
                                 rest.size()));
    }
    const auto data = rest.first(static_cast<std::size_t>(b.header.capture_end));
    std::size_t at = kHeaderSize;
    while (at < data.size()) {
      if (data.size() - at < 4)
        return damaged(index, start + at, "a record header cut short");
      Record r;
      r.type = static_cast<RecordType>(get<std::uint8_t>(data, at));
      r.flags = get<std::uint8_t>(data, at + 1);
      r.event = get<std::uint16_t>(data, at + 2);
      std::uint32_t branches = 0;
      if (r.type == RecordType::kLastBranch) {
        if (data.size() - at < 16)
          return damaged(index, start + at, "a last-branch record cut short");
        branches = get<std::uint32_t>(data, at + 4);
        if (branches > kMaxLastBranches)
          return damaged(index, start + at,
                         fmt::format("{} last branches (at most {})", branches, kMaxLastBranches));
      }
      const std::size_t size = record_size(r.type, branches);
      if (size == 0) {
        return damaged(index, start + at,
                       fmt::format("record type {}", static_cast<unsigned>(r.type)));
      }
      if (data.size() - at < size)
        return damaged(index, start + at, fmt::format("a record of {} bytes cut short", size));
      switch (r.type) {
        case RecordType::kTime:
          r.time = get<std::uint64_t>(data, at + 4);
          break;
        case RecordType::kCount:
          r.count = get<std::uint64_t>(data, at + 4);
          break;
        case RecordType::kValue:
          r.value = get<std::uint64_t>(data, at + 4);
          break;
        case RecordType::kPc:
          r.aspace = get<std::uint64_t>(data, at + 4);
          r.pc = get<std::uint64_t>(data, at + 12);
          break;
        case RecordType::kLastBranch:
          r.aspace = get<std::uint64_t>(data, at + 8);
          for (std::uint32_t i = 0; i < branches; ++i) {
            const std::size_t e = at + 16 + std::size_t{24} * i;
            r.branches.push_back({.from = get<std::uint64_t>(data, e),
                                  .to = get<std::uint64_t>(data, e + 8),
                                  .info = get<std::uint64_t>(data, e + 16)});
          }
          break;
        case RecordType::kTick:
        case RecordType::kReserved:
          break;
      }
      b.records.push_back(std::move(r));
      at += size;
    }
    out.push_back(std::move(b));
    start += static_cast<std::size_t>(data.size());
    start = (start + 3) & ~std::size_t{3};  // the next buffer, 4-byte aligned
  }
  return out;
}

}  // namespace tracer::perfmon
