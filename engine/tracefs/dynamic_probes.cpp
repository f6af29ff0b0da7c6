// Dynamic kprobe/uprobe events through tracefs (kernel/trace/trace_kprobe.c, trace_uprobe.c).
#include "tracer/tracefs/dynamic_probes.hpp"
#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <optional>
#include <ranges>
#include <system_error>
#include <thread>
#include <utility>

#include "tracer/unique_fd.hpp"

namespace tracer::tracefs {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kGroupPrefix = "tracer_";
constexpr std::string_view kUprobeEvents = "uprobe_events";
constexpr std::string_view kKprobeEvents = "kprobe_events";
// trace_probe.h MAX_EVENT_NAME_LEN: group and event names are at most 64 bytes with the NUL.
constexpr std::size_t kMaxNameLen = 63;
// Removing a probe whose last perf user has just gone can briefly still see it busy
// (trace_probe_unregister_event_call() checks the event's refcount); retry this often.
constexpr int kBusyRetries = 20;
constexpr auto kBusyDelay = std::chrono::milliseconds(10);
// procfs/tracefs text files here are at most a few pages; the cap guards a runaway read.
constexpr std::size_t kMaxFileBytes = 8 << 20;

/// trace_probe.c is_good_name(): [A-Za-z_][A-Za-z0-9_]*.
bool is_good_name(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLen)
    return false;
  const auto alpha = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  };
  if (!alpha(s[0]))
    return false;
  for (const char c : s)
    if (!alpha(c) && !(c >= '0' && c <= '9'))
      return false;
  return true;
}

struct ProcStat {
  char state = '?';
  std::uint64_t starttime = 0;
};

/// Fields 3 (state) and 22 (starttime, clock ticks after boot) of /proc/<pid>/stat. The comm
/// field may hold spaces and parentheses, so fields are counted after the last ')'.
Result<ProcStat> read_proc_stat(pid_t pid) {
  TRACER_ASSIGN_OR_RETURN(const std::string text,
                          detail::read_text_file(fs::path("/proc") / std::to_string(pid) / "stat",
                                                 "tracefs", kMaxFileBytes));
  const auto close = text.rfind(')');
  if (close == std::string::npos)
    return fail(EINVAL, fmt::format("tracefs: /proc/{}/stat has no ')'", pid));
  std::string_view rest = std::string_view(text).substr(close + 1);
  ProcStat out;
  // rest = " S ppid ...": field 3 is index 0, field 22 is index 19.
  for (int index = 0; index <= 19; ++index) {
    const auto start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos)
      return fail(EINVAL, fmt::format("tracefs: /proc/{}/stat is too short", pid));
    rest.remove_prefix(start);
    const auto end = rest.find(' ');
    const std::string_view field = rest.substr(0, end);
    if (index == 0)
      out.state = field.empty() ? '?' : field[0];
    if (index == 19) {
      const auto v = detail::parse_uint<std::uint64_t>(field);
      if (!v)
        return fail(EINVAL, fmt::format("tracefs: /proc/{}/stat starttime is '{}'", pid, field));
      out.starttime = *v;
    }
    rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  }
  return out;
}

/// "tracer_<pid>_<starttime>" -> {pid, starttime}; nullopt for any other name.
std::optional<std::pair<pid_t, std::uint64_t>> parse_group(std::string_view group) {
  if (!group.starts_with(kGroupPrefix))
    return std::nullopt;
  group.remove_prefix(kGroupPrefix.size());
  const auto sep = group.find('_');
  if (sep == std::string_view::npos)
    return std::nullopt;
  const auto pid = detail::parse_uint<pid_t>(group.substr(0, sep));
  const auto start = detail::parse_uint<std::uint64_t>(group.substr(sep + 1));
  if (!pid || !start || *pid <= 0)
    return std::nullopt;
  return std::pair{*pid, *start};
}

/// Dead: no /proc/<pid>, another process under that pid (a different starttime), or a zombie
/// (its probes can no longer be removed by it). Unreadable for other reasons: assume alive.
bool owner_is_dead(pid_t pid, std::uint64_t starttime) {
  auto st = read_proc_stat(pid);
  if (!st)
    return st.error().errno_value() == ENOENT || st.error().errno_value() == ESRCH;
  return st->starttime != starttime || st->state == 'Z' || st->state == 'X';
}

/// The last entry of <tracefs>/error_log (the kernel's explanation of a rejected command,
/// trace_probe_log_err()), or empty.
std::string last_error_log(const fs::path& root) {
  auto text = detail::read_text_file(root / "error_log", "tracefs", kMaxFileBytes);
  if (!text || text->empty())
    return {};
  std::string_view all = *text;
  // Entries start with "[timestamp]" at the beginning of a line.
  auto at = all.rfind("\n[");
  at = at == std::string_view::npos ? 0 : at + 1;
  std::string entry(all.substr(at));
  while (!entry.empty() && entry.back() == '\n')
    entry.pop_back();
  return entry;
}

std::string errno_hint(int err, bool kprobe) {
  switch (err) {
    case EINVAL:
      return kprobe ? "the kernel rejected the line: check the symbol+offset (kretprobes need "
                      "offset 0) and the name"
                    : "the kernel rejected the line: check the path and that the offset is inside "
                      "an executable mapping of the file";
    case ENOENT:
      return kprobe ? "no such kernel symbol (see /proc/kallsyms), or no kprobe_events"
                    : "the file does not exist (the path is resolved by the kernel)";
    case EEXIST:
      return "a probe with this name already exists in this group; pick another name";
    case EBUSY:
      return "a perf event or ftrace still uses this probe: close its perf events first";
    case EACCES:
    case EPERM:
      return "writing tracefs probe files needs root (or CAP_SYS_ADMIN)";
    default:
      return {};
  }
}

/// Writes one command to kprobe_events/uprobe_events, opened O_APPEND and never O_TRUNC:
/// probes_open() in trace_uprobe.c/trace_kprobe.c deletes every probe of every tool when the
/// file is opened for writing with O_TRUNC (what a shell's '>' does).
Status write_command(const fs::path& file, const std::string& line, bool kprobe) {
  UniqueFd fd(::open(file.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(err, fmt::format("tracefs: cannot open {}: {}", file.string(), std::strerror(err)),
                err == ENOENT ? fmt::format("this kernel has no {} (CONFIG_{}_EVENTS off?)",
                                            file.filename().string(), kprobe ? "KPROBE" : "UPROBE")
                              : errno_hint(err, kprobe));
  }
  const std::string text = line + "\n";
  ssize_t n = 0;
  do {
    n = ::write(fd.get(), text.data(), text.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int err = errno;
    std::string hint = errno_hint(err, kprobe);
    if (const auto log = last_error_log(file.parent_path()); !log.empty() && err != EBUSY)
      hint += (hint.empty() ? "" : "\n  ") + fmt::format("kernel error_log: {}", log);
    return fail(err,
                fmt::format("tracefs: writing '{}' to {} failed: {}", line, file.string(),
                            std::strerror(err)),
                std::move(hint));
  }
  if (static_cast<std::size_t>(n) != text.size())
    return fail(EIO, fmt::format("tracefs: short write of '{}' to {}", line, file.string()));
  return {};
}

/// "-:GROUP/NAME", retrying EBUSY for a short while.
Status remove_probe(const fs::path& file,
                    const std::string& group,
                    const std::string& event,
                    bool kprobe) {
  const std::string line = fmt::format("-:{}/{}", group, event);
  for (int attempt = 0;; ++attempt) {
    auto st = write_command(file, line, kprobe);
    if (st || st.error().errno_value() != EBUSY || attempt == kBusyRetries)
      return st;
    std::this_thread::sleep_for(kBusyDelay);
  }
}

}  // namespace

Result<std::string> owner_group_name(pid_t pid) {
  TRACER_ASSIGN_OR_RETURN(const ProcStat st, read_proc_stat(pid));
  return fmt::format("{}{}_{}", kGroupPrefix, pid, st.starttime);
}

Result<DynamicProbes> DynamicProbes::create(const Tracefs& fs) {
  TRACER_ASSIGN_OR_RETURN(std::string group, owner_group_name(::getpid()));
  return DynamicProbes(fs.root(), std::move(group));
}

DynamicProbes::DynamicProbes(DynamicProbes&& other) noexcept
    : root_(std::move(other.root_)),
      group_(std::move(other.group_)),
      probes_(std::exchange(other.probes_, {})) {}

DynamicProbes& DynamicProbes::operator=(DynamicProbes&& other) noexcept {
  if (this != &other) {
    if (auto st = remove_all(); !st) {
      // Left in the kernel under our group; remove_stale() takes them once we are gone.
    }
    root_ = std::move(other.root_);
    group_ = std::move(other.group_);
    probes_ = std::exchange(other.probes_, {});
  }
  return *this;
}

DynamicProbes::~DynamicProbes() {
  if (auto st = remove_all(); !st) {
    // Left in the kernel under our group; remove_stale() takes them once we are gone.
  }
}

Result<DynamicProbe> DynamicProbes::add_uprobe(std::string_view name,
                                               const fs::path& path,
                                               std::uint64_t offset,
                                               bool retprobe,
                                               std::uint64_t ref_ctr_offset,
                                               std::string_view fetch_args) {
  const std::string p = path.string();
  if (!path.is_absolute() || p.find_first_of(" \t\n") != std::string::npos)
    return fail(EINVAL,
                fmt::format("tracefs: uprobe path '{}' must be absolute and free of "
                            "whitespace",
                            p),
                "uprobe_events splits its commands at whitespace; use a path without spaces");
  if (fetch_args.find_first_of("\n\r") != std::string_view::npos)
    return fail(EINVAL, "tracefs: uprobe fetch arguments hold a line break");
  return add(false, name,
             (ref_ctr_offset == 0 ? fmt::format("{}:{:#x}", p, offset)
                                  : fmt::format("{}:{:#x}({:#x})", p, offset, ref_ctr_offset)) +
                 std::string(fetch_args),
             retprobe);
}

Result<DynamicProbe> DynamicProbes::add_kprobe(std::string_view name,
                                               std::string_view symbol,
                                               std::uint64_t offset,
                                               bool retprobe) {
  if (symbol.find_first_of(" \t\n") != std::string_view::npos)
    return fail(EINVAL, fmt::format("tracefs: bad kprobe symbol '{}'", symbol));
  std::string target =
      symbol.empty() ? fmt::format("{:#x}", offset) : fmt::format("{}+{:#x}", symbol, offset);
  return add(true, name, std::move(target), retprobe);
}

Result<DynamicProbe> DynamicProbes::add(bool kprobe,
                                        std::string_view name,
                                        std::string target,
                                        bool retprobe) {
  if (!is_good_name(name))
    return fail(EINVAL, fmt::format("tracefs: bad probe name '{}'", name),
                "probe names are C identifiers of at most 63 characters: [A-Za-z_][A-Za-z0-9_]*");
  DynamicProbe probe;
  probe.name = {group_, std::string(name)};
  probe.kprobe = kprobe;
  probe.retprobe = retprobe;
  probe.definition = fmt::format("{}:{}/{} {}", retprobe ? 'r' : 'p', group_, name, target);
  const fs::path file = root_ / (kprobe ? kKprobeEvents : kUprobeEvents);
  TRACER_TRY(write_command(file, probe.definition, kprobe));
  auto id = Tracefs::at(root_).tracepoint_id(probe.name);
  if (!id) {
    // Do not leave a probe behind that the caller cannot use; if even that fails, the id
    // failure is the one worth reporting.
    if (auto st = remove_probe(file, group_, probe.name.event, kprobe); !st) {
    }
    return fail(std::move(id).error());
  }
  probe.id = *id;
  probes_.push_back(probe);
  return probe;
}

Status DynamicProbes::remove_all() {
  std::optional<Failure> first;
  std::vector<DynamicProbe> kept;
  // Newest first, the reverse of creation, as perf probe -d does.
  for (const auto& probe : std::ranges::reverse_view(probes_)) {
    const fs::path file = root_ / (probe.kprobe ? kKprobeEvents : kUprobeEvents);
    auto st = remove_probe(file, probe.name.system, probe.name.event, probe.kprobe);
    if (!st && st.error().errno_value() != ENOENT) {  // ENOENT: someone removed it already
      if (!first)
        first = std::move(st).error();
      kept.insert(kept.begin(), probe);
    }
  }
  probes_ = std::move(kept);
  if (first) {
    first->message += fmt::format(" ({} probe{} of group {} could not be removed)", probes_.size(),
                                  probes_.size() == 1 ? "" : "s", group_);
    return fail(std::move(*first));
  }
  return {};
}

Result<std::size_t> DynamicProbes::remove_named(std::string_view prefix) {
  std::size_t removed = 0;
  std::optional<Failure> first;
  std::vector<DynamicProbe> kept;
  for (const auto& probe : probes_) {
    if (!probe.name.event.starts_with(prefix)) {
      kept.push_back(probe);
      continue;
    }
    const fs::path file = root_ / (probe.kprobe ? kKprobeEvents : kUprobeEvents);
    auto st = remove_probe(file, probe.name.system, probe.name.event, probe.kprobe);
    if (!st && st.error().errno_value() != ENOENT) {
      if (!first)
        first = std::move(st).error();
      kept.push_back(probe);
      continue;
    }
    ++removed;
  }
  probes_ = std::move(kept);
  if (first)
    return fail(std::move(*first));
  return removed;
}

Result<std::size_t> DynamicProbes::remove_stale(const Tracefs& fs) {
  std::size_t removed = 0;
  std::optional<Failure> first;
  for (const auto file_name : {kUprobeEvents, kKprobeEvents}) {
    const fs::path file = fs.root() / file_name;
    const bool kprobe = file_name == kKprobeEvents;
    auto text = detail::read_text_file(file, "tracefs", kMaxFileBytes);
    if (!text) {
      if (text.error().errno_value() == ENOENT)
        continue;  // this kernel lacks this kind of dynamic event
      if (!first)
        first = std::move(text).error();
      continue;
    }
    // Lines read "p:GROUP/EVENT /path:0x..." or "r:GROUP/EVENT sym+0" (trace_uprobe.c
    // probes_seq_show(), trace_kprobe.c trace_kprobe_show()).
    for (const std::string_view line : detail::lines(*text)) {
      const auto colon = line.find(':');
      const auto space = line.find(' ');
      if (colon == std::string_view::npos || space == std::string_view::npos || colon > space)
        continue;
      const std::string_view full = line.substr(colon + 1, space - colon - 1);
      const auto slash = full.find('/');
      if (slash == std::string_view::npos)
        continue;
      const std::string group(full.substr(0, slash));
      const std::string event(full.substr(slash + 1));
      const auto owner = parse_group(group);
      if (!owner || !owner_is_dead(owner->first, owner->second))
        continue;
      if (auto st = remove_probe(file, group, event, kprobe)) {
        ++removed;
      } else if (st.error().errno_value() != ENOENT && !first) {
        first = std::move(st).error();
      }
    }
  }
  if (first)
    return fail(std::move(*first));
  return removed;
}

}  // namespace tracer::tracefs
