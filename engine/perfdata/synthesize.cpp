// The records perf record synthesizes from /proc (see synthesize.hpp).
#include "synthesize.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>

#include "record_bytes.hpp"
#include "tracer/perf/abi.hpp"

namespace tracer::perfdata::detail {
namespace {

namespace abi = perf::abi;

constexpr std::uint16_t kMiscKernel = 1;           // PERF_RECORD_MISC_KERNEL
constexpr std::uint16_t kMiscUser = 2;             // PERF_RECORD_MISC_USER
constexpr std::uint16_t kMiscMmapData = 1U << 13;  // PERF_RECORD_MISC_MMAP_DATA
constexpr std::size_t kProcBuffer = std::size_t{64} * 1024;
constexpr std::size_t kSeenCapacity = 1U << 16;  // pids/tids remembered (open addressing)

// Parses a number in `base` at the start of `s`, advancing it.
bool take_number(std::string_view& s, std::uint64_t& v, int base) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, base);
  if (ec != std::errc{})
    return false;
  s.remove_prefix(static_cast<std::size_t>(p - s.data()));
  return true;
}
/// "A<sep>B", both hex, at the start of `s` (start-end, maj:min), advancing it.
bool take_hex_pair(std::string_view& s, char sep, std::uint64_t& a, std::uint64_t& b) {
  if (!take_number(s, a, 16) || s.empty() || s.front() != sep)
    return false;
  s.remove_prefix(1);
  return take_number(s, b, 16);
}
void skip_spaces(std::string_view& s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
}

/// Calls on_line(line) for each line of `fd`, read in chunks of `buf`'s size (the last line also
/// without its newline; a line longer than the buffer is dropped), as long as more() holds
/// before each read.
template <typename OnLine, typename More>
void for_each_line(int fd, std::vector<char>& buf, OnLine&& on_line, More&& more) noexcept {
  std::size_t have = 0;
  while (more()) {
    const ssize_t n = ::read(fd, buf.data() + have, buf.size() - have);
    if (n < 0 && errno == EINTR)
      continue;
    const bool eof = n <= 0;
    if (!eof)
      have += static_cast<std::size_t>(n);
    std::size_t start = 0;
    for (;;) {
      const void* nl = std::memchr(buf.data() + start, '\n', have - start);
      if (nl == nullptr)
        break;
      const auto end = static_cast<std::size_t>(static_cast<const char*>(nl) - buf.data());
      on_line(std::string_view(buf.data() + start, end - start));
      start = end + 1;
    }
    if (eof) {
      if (start < have)
        on_line(std::string_view(buf.data() + start, have - start));
      break;
    }
    std::memmove(buf.data(), buf.data() + start, have - start);
    have -= start;
    if (have == buf.size())
      have = 0;  // a line longer than the buffer: drop it
  }
}

/// The entries of `dir` named by a number (pids in /proc, tids in /proc/PID/task), sorted.
std::vector<std::uint32_t> numbered_entries(const char* dir) {
  std::vector<std::uint32_t> out;
  DIR* d = ::opendir(dir);
  if (d == nullptr)
    return out;
  while (const dirent* e = ::readdir(d)) {
    std::uint32_t n = 0;
    const std::string_view name = e->d_name;
    const auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec == std::errc{} && p == name.data() + name.size())
      out.push_back(n);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

/// An executable mapping, as MMAP2 announces it.
struct Mapping {
  std::uint64_t start = 0, len = 0, pgoff = 0;
  std::uint32_t maj = 0, min = 0;
  std::uint64_t ino = 0;
  std::uint32_t prot = 0, flags = 0;
  std::string_view file;
};

/// One line of /proc/PID/maps, "start-end perms offset maj:min inode   path": false when it is
/// not a mapping perf record would announce: an executable one, or with `data` (events with
/// mmap_data) a readable one (synthetic-events.c perf_event__synthesize_mmap_events).
bool parse_map_line(std::string_view s, Mapping& m, bool data) noexcept {
  std::uint64_t start = 0, end = 0, maj = 0, min = 0;
  if (!take_hex_pair(s, '-', start, end))
    return false;
  skip_spaces(s);
  if (s.size() < 4)
    return false;
  const std::string_view perms = s.substr(0, 4);
  s.remove_prefix(4);
  const bool exec = perms[2] == 'x';
  if (!exec && (!data || perms[0] != 'r'))
    return false;  // perf record synthesizes executable mappings only (without mmap_data)
  skip_spaces(s);
  if (!take_number(s, m.pgoff, 16))
    return false;
  skip_spaces(s);
  if (!take_hex_pair(s, ':', maj, min))
    return false;
  skip_spaces(s);
  if (!take_number(s, m.ino, 10))
    return false;
  skip_spaces(s);
  m.file = s;
  if (m.file.empty())
    m.file = "//anon";
  if (m.file == "[vsyscall]")
    return false;
  m.prot = 0;
  if (perms[0] == 'r')
    m.prot |= PROT_READ;
  if (perms[1] == 'w')
    m.prot |= PROT_WRITE;
  if (exec)
    m.prot |= PROT_EXEC;
  m.flags = perms[3] == 's' ? MAP_SHARED : MAP_PRIVATE;
  m.start = start;
  m.len = end - start;
  m.maj = static_cast<std::uint32_t>(maj);
  m.min = static_cast<std::uint32_t>(min);
  return true;
}

// Synthesized records end with a zeroed sample_id trailer of `trailer` bytes, as the first attr
// has it: perf maps records with id 0 to the first attr.

/// COMM of thread `tid` of `pid` (TASK_COMM_LEN: at most 15 characters).
void put_comm(RecordSink& sink,
              std::uint32_t trailer,
              std::uint32_t pid,
              std::uint32_t tid,
              std::string_view comm) noexcept {
  comm = comm.substr(0, 15);
  const std::size_t name = align8(comm.size() + 1);
  const std::size_t size = 8 + 8 + name + trailer;
  std::vector<std::byte>* buf = sink.synthesized_record(size);
  if (buf == nullptr)
    return;
  put(*buf, header(abi::kComm, 0, size));
  put(*buf, pid);
  put(*buf, tid);
  put_raw(*buf, comm.data(), comm.size());
  put_zeros(*buf, name - comm.size());
  put_zeros(*buf, trailer);
}

/// MMAP2 of mapping `m` of process `pid` (none when it would not fit a record).
void put_mmap2(RecordSink& sink,
               std::uint32_t trailer,
               std::uint32_t pid,
               const Mapping& m) noexcept {
  const std::size_t name = align8(m.file.size() + 1);
  const std::size_t size = 8 + 8 + 24 + 24 + 8 + name + trailer;
  std::vector<std::byte>* buf = size <= 0xffff ? sink.synthesized_record(size) : nullptr;
  if (buf == nullptr)
    return;
  // A data mapping says so in its misc, as the kernel's and perf's do.
  const auto misc =
      static_cast<std::uint16_t>(kMiscUser | ((m.prot & PROT_EXEC) != 0 ? 0 : kMiscMmapData));
  put(*buf, header(abi::kMmap2, misc, size));
  put(*buf, pid);
  put(*buf, pid);
  put(*buf, m.start);
  put(*buf, m.len);
  put(*buf, m.pgoff);
  put(*buf, m.maj);
  put(*buf, m.min);
  put(*buf, m.ino);
  put<std::uint64_t>(*buf, 0);  // ino_generation
  put(*buf, m.prot);
  put(*buf, m.flags);
  put_raw(*buf, m.file.data(), m.file.size());
  put_zeros(*buf, name - m.file.size());
  put_zeros(*buf, trailer);
}

}  // namespace

SeenSet::SeenSet() : keys_(kSeenCapacity, kEmpty) {}

bool SeenSet::check_insert(std::uint32_t key) noexcept {
  if (key == kEmpty || used_ * 4 >= keys_.size() * 3)
    return true;
  std::size_t i = static_cast<std::size_t>(key * 2654435761U) & (keys_.size() - 1);
  while (keys_[i] != kEmpty) {
    if (keys_[i] == key)
      return true;
    i = (i + 1) & (keys_.size() - 1);
  }
  keys_[i] = key;
  ++used_;
  return false;
}

ProcSynthesizer::ProcSynthesizer(std::string proc_root,
                                 std::uint32_t trailer,
                                 RecordSink& sink,
                                 bool data)
    : proc_root_(std::move(proc_root)),
      trailer_(trailer),
      sink_(sink),
      data_(data),
      proc_buf_(kProcBuffer) {}

std::string_view ProcSynthesizer::read_proc_small(const char* file) noexcept {
  const int f = ::open(file, O_RDONLY | O_CLOEXEC);
  if (f < 0)
    return {};
  const ssize_t n = ::read(f, proc_buf_.data(), 255);
  ::close(f);
  if (n <= 0)
    return {};
  std::string_view s(proc_buf_.data(), static_cast<std::size_t>(n));
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0'))
    s.remove_suffix(1);
  return s;
}

void ProcSynthesizer::synthesize_comm(std::uint32_t pid, std::uint32_t tid) noexcept {
  char file[96];
  std::snprintf(file, sizeof(file), "%s/%u/task/%u/comm", proc_root_.c_str(), pid, tid);
  const std::string_view comm = read_proc_small(file);
  if (!comm.empty())
    put_comm(sink_, trailer_, pid, tid, comm);
}

void ProcSynthesizer::synthesize_maps(std::uint32_t pid) noexcept {
  char file[96];
  std::snprintf(file, sizeof(file), "%s/%u/maps", proc_root_.c_str(), pid);
  const int f = ::open(file, O_RDONLY | O_CLOEXEC);
  if (f < 0)
    return;
  for_each_line(
      f, proc_buf_,
      [&](std::string_view line) {
        Mapping m;
        if (parse_map_line(line, m, data_))
          put_mmap2(sink_, trailer_, pid, m);
      },
      [] { return true; });
  ::close(f);
}

void ProcSynthesizer::thread(std::uint32_t pid, std::uint32_t tid) noexcept {
  if (pid == 0 || pid == 0xffffffffU || tid == 0xffffffffU)
    return;
  if (!seen_tids_.check_insert(tid))
    synthesize_comm(pid, tid);
  if (!seen_pids_.check_insert(pid)) {
    if (tid != pid && !seen_tids_.check_insert(pid))
      synthesize_comm(pid, pid);
    synthesize_maps(pid);
  }
}

void ProcSynthesizer::all() {
  for (const std::uint32_t pid : numbered_entries(proc_root_.c_str())) {
    if (pid == 0)
      continue;
    const std::string task = proc_root_ + "/" + std::to_string(pid) + "/task";
    const std::vector<std::uint32_t> tids = numbered_entries(task.c_str());
    if (tids.empty())
      continue;  // gone
    for (const std::uint32_t tid : tids) {
      seen_tids_.check_insert(tid);
      synthesize_comm(pid, tid);
    }
    seen_pids_.check_insert(pid);
    // A child of this process is a command that has not exec'd yet (a target tracer started):
    // its maps are this program's until the exec, after which the kernel announces the new
    // image's. Announced now, they would stay in perf's view of it (perf keeps a process's maps
    // across exec, and its libunwind takes a module's base from the lowest mapping of its file),
    // as perf record, which announces no maps for its own workload, never has them.
    if (!own_child(pid))
      synthesize_maps(pid);
  }
}

bool ProcSynthesizer::own_child(std::uint32_t pid) noexcept {
  char file[96];
  std::snprintf(file, sizeof(file), "%s/%u/stat", proc_root_.c_str(), pid);
  // "pid (comm) state ppid ...": the comm may hold anything, ") " after the last ')'.
  std::string_view stat = read_proc_small(file);
  const auto close = stat.rfind(')');
  if (close == std::string_view::npos || close + 4 >= stat.size())
    return false;
  stat.remove_prefix(close + 4);  // ") S "
  std::uint64_t ppid = 0;
  return take_number(stat, ppid, 10) && ppid == static_cast<std::uint64_t>(::getpid());
}

void ProcSynthesizer::kernel() {
  const int f = ::open("/proc/kallsyms", O_RDONLY | O_CLOEXEC);
  if (f < 0)
    return;
  std::uint64_t text = 0, etext = 0;
  for_each_line(
      f, proc_buf_,
      [&](std::string_view line) {
        std::uint64_t addr = 0;
        if (!take_number(line, addr, 16) || line.size() < 3)
          return;
        const std::string_view name = line.substr(3);
        if (name == "_text" && text == 0)
          text = addr;
        else if (name == "_etext")
          etext = addr;
      },
      [&] { return text == 0 || etext == 0; });
  ::close(f);
  if (text == 0)
    return;  // kptr_restrict hides addresses
  const std::uint64_t len = etext > text ? etext - text : ~std::uint64_t{0} - text;
  constexpr std::string_view kName = "[kernel.kallsyms]_text";
  const std::size_t name = align8(kName.size() + 1);
  const std::size_t size = 8 + 8 + 24 + name + trailer_;
  std::vector<std::byte>* buf = sink_.synthesized_record(size);
  if (buf == nullptr)
    return;
  put(*buf, header(abi::kMmap, kMiscKernel, size));
  put<std::uint32_t>(*buf, 0xffffffffU);  // HOST_KERNEL_ID
  put<std::uint32_t>(*buf, 0);
  put(*buf, text);
  put(*buf, len);
  put(*buf, text);  // pgoff: the address of the reference symbol (_text)
  put_raw(*buf, kName.data(), kName.size());
  put_zeros(*buf, name - kName.size());
  put_zeros(*buf, trailer_);
}

}  // namespace tracer::perfdata::detail
