// tracefs: locating/mounting it, listing tracepoints, parsing `format` files and reading fields
// out of PERF_SAMPLE_RAW payloads.
#include "tracer/tracefs/tracefs.hpp"
#include "tracer/common/text_file.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <fnmatch.h>
#include <grp.h>
#include <pwd.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <system_error>
#include <tuple>
#include <utility>

#include "tracer/common/edit_distance.hpp"
#include "tracer/common/proc_mounts.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::tracefs {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kDefaultMount = "/sys/kernel/tracing";
constexpr std::string_view kProcMounts = "/proc/mounts";
// A format file is a few KiB at most; sysfs/tracefs files never exceed a page or two. The cap only
// protects against reading an unexpected huge file through a fake root.
constexpr std::size_t kMaxFileBytes = 1 << 20;

/// A path component from user input must not escape events/ ("..", "a/b").
bool valid_component(std::string_view s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string_view::npos &&
         s.find('\0') == std::string_view::npos;
}

std::string tp_string(const TracepointName& tp) {
  return tp.system + ":" + tp.event;
}

std::string near_hint(const std::vector<std::string>& near) {
  return detail::did_you_mean(near, "run `tracer list tracepoints` to see what this kernel offers");
}

/// Element size of a dynamic array's element type; 0 when the type is not a known scalar.
std::uint32_t scalar_size(std::string_view type) {
  if (type.starts_with("const "))
    type.remove_prefix(6);
  if (type.ends_with("*"))
    return sizeof(void*);
  struct Entry {
    std::string_view name;
    std::uint32_t size;
  };
  static constexpr Entry kScalars[] = {
      {"char", 1},
      {"signed char", 1},
      {"unsigned char", 1},
      {"u8", 1},
      {"s8", 1},
      {"__u8", 1},
      {"__s8", 1},
      {"bool", 1},
      {"short", 2},
      {"unsigned short", 2},
      {"u16", 2},
      {"s16", 2},
      {"__u16", 2},
      {"__s16", 2},
      {"int", 4},
      {"unsigned int", 4},
      {"u32", 4},
      {"s32", 4},
      {"__u32", 4},
      {"__s32", 4},
      {"pid_t", 4},
      {"long", sizeof(long)},
      {"unsigned long", sizeof(long)},
      {"u64", 8},
      {"s64", 8},
      {"__u64", 8},
      {"__s64", 8},
      {"long long", 8},
      {"unsigned long long", 8},
  };
  for (const auto& e : kScalars)
    if (e.name == type)
      return e.size;
  return 0;
}

bool is_char_type(std::string_view type) {
  if (type.starts_with("const "))
    type.remove_prefix(6);
  return type == "char";
}

bool is_ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// Parses the declaration part of a field line ("unsigned long args[6]", "__data_loc char[] x").
/// @return an error text (empty on success).
std::string parse_decl(std::string_view decl, Field& f) {
  decl = detail::trim(decl);
  std::string_view array_suffix;
  bool has_array_suffix = false;
  if (decl.ends_with(']')) {
    const auto open = decl.rfind('[');
    if (open == std::string_view::npos)
      return "unbalanced ']' in the declaration";
    array_suffix = decl.substr(open + 1, decl.size() - open - 2);
    has_array_suffix = true;
    decl = detail::trim(decl.substr(0, open));
  }
  std::size_t name_start = decl.size();
  while (name_start > 0 && is_ident_char(decl[name_start - 1]))
    --name_start;
  if (name_start == decl.size())
    return "no field name in the declaration";
  f.name = std::string(decl.substr(name_start));
  if (f.name[0] >= '0' && f.name[0] <= '9')
    return "field name starts with a digit";
  std::string_view type = detail::trim(decl.substr(0, name_start));
  if (type.empty())
    return "no type in the declaration";
  f.type = std::string(type);

  if (type.starts_with("__data_loc ")) {
    f.is_data_loc = true;
    type.remove_prefix(11);
  } else if (type.starts_with("__rel_loc ")) {
    f.is_rel_loc = true;
    type.remove_prefix(10);
  }
  if (f.is_data_loc || f.is_rel_loc) {
    // "__data_loc char[] name": the element type carries the [] (kernel's __dynamic_array()).
    type = detail::trim(type);
    if (type.ends_with("[]"))
      type = detail::trim(type.substr(0, type.size() - 2));
    if (has_array_suffix)
      return "dynamic (__data_loc/__rel_loc) field with an array suffix";
    f.element_size = scalar_size(type);
    f.is_string = is_char_type(type);
    return {};
  }
  if (has_array_suffix) {
    f.is_string = is_char_type(type);
    if (array_suffix.empty()) {
      // Flexible trailing array ("char buf[]" in ftrace:print): runs to the end of the record.
      f.element_size = scalar_size(type);
      return {};
    }
    const auto len = detail::parse_uint<std::uint32_t>(array_suffix);
    if (!len) {
      // Very old kernels printed the macro ("comm[TASK_COMM_LEN]"); size still tells the bytes.
      f.element_size = scalar_size(type);
      return {};
    }
    f.array_len = len;
    return {};
  }
  return {};
}

/// Parses one "field:...;\toffset:N;\tsize:N;\tsigned:N;" line.
std::string parse_field_line(std::string_view line, Field& f) {
  // The declaration can't contain ';', so splitting on ';' is exact.
  bool have_offset = false;
  bool have_size = false;
  std::size_t pos = 0;
  bool first = true;
  while (pos < line.size()) {
    auto semi = line.find(';', pos);
    if (semi == std::string_view::npos) {
      if (!detail::trim(line.substr(pos)).empty())
        return "missing ';' after the last attribute";
      break;
    }
    const std::string_view part = detail::trim(line.substr(pos, semi - pos));
    pos = semi + 1;
    if (part.empty())
      continue;
    const auto colon = part.find(':');
    if (colon == std::string_view::npos)
      return fmt::format("attribute '{}' has no ':'", part);
    const std::string_view key = part.substr(0, colon);
    const std::string_view value = detail::trim(part.substr(colon + 1));
    if (first) {
      if (key != "field")
        return "a field line must start with 'field:'";
      if (auto err = parse_decl(value, f); !err.empty())
        return err;
      first = false;
      continue;
    }
    if (key == "offset" || key == "size" || key == "signed") {
      const auto v = detail::parse_uint<std::uint32_t>(value);
      if (!v)
        return fmt::format("bad {} value '{}'", key, value);
      if (key == "offset") {
        f.offset = *v;
        have_offset = true;
      } else if (key == "size") {
        f.size = *v;
        have_size = true;
      } else {
        if (*v > 1)
          return fmt::format("bad signed value '{}'", value);
        f.is_signed = *v == 1;
      }
    }
    // Other attributes are ignored so that a future kernel's additions don't break parsing.
  }
  if (first)
    return "empty field line";
  if (!have_offset)
    return "no offset";
  if (!have_size)
    return "no size";
  if (static_cast<std::uint64_t>(f.offset) + f.size > std::numeric_limits<std::uint32_t>::max())
    return "offset + size overflows";
  f.is_common = f.name.starts_with("common_");
  if ((f.is_data_loc || f.is_rel_loc) && f.size != 4)
    return fmt::format("{} field must have size 4, not {}",
                       f.is_data_loc ? "__data_loc" : "__rel_loc", f.size);
  if (f.array_len) {
    if (*f.array_len == 0) {
      f.element_size = 0;
    } else {
      if (f.size % *f.array_len != 0)
        return fmt::format("size {} is not a multiple of the array length {}", f.size,
                           *f.array_len);
      f.element_size = f.size / *f.array_len;
    }
  } else if (!f.is_data_loc && !f.is_rel_loc && f.element_size == 0) {
    f.element_size = f.size;
  }
  return {};
}

/// Loads `n` bytes at `off` of `raw` into an unsigned integer, bounds-checked, via memcpy (the
/// payload is not aligned: the u32 size precedes it in the ring record).
template <typename T>
std::optional<T> load(std::span<const std::byte> raw, std::uint64_t off) noexcept {
  if (off > raw.size() || raw.size() - off < sizeof(T))
    return std::nullopt;
  T v;
  std::memcpy(&v, raw.data() + off, sizeof(T));
  return v;
}

/// "drwx------ root:root" for `path`, or "" when it cannot be stat'ed.
std::string mode_of(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    return {};
  std::string m = S_ISDIR(st.st_mode) ? "d" : "-";
  constexpr std::pair<mode_t, char> kBits[] = {{S_IRUSR, 'r'}, {S_IWUSR, 'w'}, {S_IXUSR, 'x'},
                                               {S_IRGRP, 'r'}, {S_IWGRP, 'w'}, {S_IXGRP, 'x'},
                                               {S_IROTH, 'r'}, {S_IWOTH, 'w'}, {S_IXOTH, 'x'}};
  for (const auto& [bit, c] : kBits)
    m.push_back((st.st_mode & bit) != 0 ? c : '-');
  const passwd* pw = ::getpwuid(st.st_uid);
  const group* gr = ::getgrgid(st.st_gid);
  return fmt::format("{} {}:{}", m, pw != nullptr ? pw->pw_name : std::to_string(st.st_uid),
                     gr != nullptr ? gr->gr_name : std::to_string(st.st_gid));
}

/// A tracefs file tracer may not read (EACCES, EPERM): which file, its mode and the mount's,
/// and the two ways out.
Unexpected access_failure(const fs::path& root, const fs::path& path, int err) {
  const std::string file_mode = mode_of(path);
  const std::string root_mode = mode_of(root);
  std::string where;
  if (!file_mode.empty())
    where = fmt::format(": {} is {}", path.string(), file_mode);
  if (!root_mode.empty())
    where += fmt::format("{} {} is {}", where.empty() ? ":" : ";", root.string(), root_mode);
  return fail(err,
              fmt::format("tracefs: cannot read {} as uid {}: {}{}", path.string(), ::geteuid(),
                          std::strerror(err), where),
              fmt::format("tracepoints need read access to tracefs: give tracer "
                          "CAP_DAC_READ_SEARCH beside CAP_BPF and CAP_PERFMON (setcap "
                          "cap_bpf,cap_perfmon,cap_dac_read_search+ep on the binary, or "
                          "AmbientCapabilities= in its systemd unit), or let a group read it "
                          "(mount -o remount,gid=GROUP,mode=0750 {} and run tracer in that "
                          "group). Profiles (cpu-clock) and tracer stat of software events "
                          "need neither",
                          root.string()));
}
}  // namespace

const Field* Format::field(std::string_view field_name) const noexcept {
  for (const auto& f : fields)
    if (f.name == field_name)
      return &f;
  return nullptr;
}

std::string kernel_filter(std::string_view filter, const Format& format) {
  if (format.system != "syscalls")
    return std::string(filter);
  const auto ident = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
  };
  std::string out;
  out.reserve(filter.size() + 16);
  std::size_t i = 0;
  while (i < filter.size()) {
    const char c = filter[i];
    if (c == '"' || c == '\'') {  // a quoted string, copied whole (a backslash escapes)
      std::size_t j = i + 1;
      while (j < filter.size() && filter[j] != c)
        j += filter[j] == '\\' ? 2 : 1;
      j = std::min(j + 1, filter.size());
      out.append(filter.substr(i, j - i));
      i = j;
      continue;
    }
    if (!ident(c) || (i > 0 && (ident(filter[i - 1]) || filter[i - 1] == '.'))) {
      out += c;
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < filter.size() && ident(filter[j]))
      ++j;
    const std::string_view name = filter.substr(i, j - i);
    out.append(name);
    i = j;
    // `name <op> "string"` where name is a char * field without a suffix of its own.
    const Field* f = format.field(name);
    if (f == nullptr || !is_string_pointer(*f) || (j < filter.size() && filter[j] == '.'))
      continue;
    std::size_t k = j;
    while (k < filter.size() && filter[k] == ' ')
      ++k;
    const std::string_view rest = filter.substr(k);
    std::size_t op = rest.starts_with("==") || rest.starts_with("!=") ? 2
                     : rest.starts_with("~")                          ? 1
                                                                      : 0;
    if (op == 0)
      continue;
    k += op;
    while (k < filter.size() && filter[k] == ' ')
      ++k;
    if (k < filter.size() && (filter[k] == '"' || filter[k] == '\''))
      out += ".ustring";
  }
  return out;
}

bool is_string_pointer(const Field& f) noexcept {
  if (f.size != 8 || f.array_len || f.is_data_loc || f.is_rel_loc)
    return false;
  // "const char *", "char *", "const char __user *", "const unsigned char *": one '*', a char.
  std::string_view t = f.type;
  if (std::count(t.begin(), t.end(), '*') != 1 || !t.ends_with('*'))
    return false;
  t.remove_suffix(1);
  std::size_t words = 0;
  bool is_char = false;
  for (std::size_t i = 0; i < t.size();) {
    while (i < t.size() && t[i] == ' ')
      ++i;
    std::size_t j = i;
    while (j < t.size() && t[j] != ' ')
      ++j;
    const auto w = t.substr(i, j - i);
    if (w.empty())
      break;
    if (w == "char")
      is_char = true;
    else if (w != "const" && w != "unsigned" && w != "signed" && w != "__user")
      return false;
    ++words;
    i = j;
  }
  return is_char && words >= 1;
}

Result<Format> parse_format(std::string_view text,
                            std::string_view system,
                            std::string_view event) {
  Format out;
  out.system = std::string(system);
  out.name = std::string(event);
  const std::string what = system.empty() && event.empty()
                               ? std::string("format")
                               : fmt::format("{}:{} format", system, event);
  auto error = [&](std::size_t lineno, std::string_view line, std::string_view why) {
    // Quote the line, shortened: a runaway line would otherwise drown the message.
    constexpr std::size_t kMaxQuote = 160;
    std::string_view quoted = detail::trim(line);
    const bool cut = quoted.size() > kMaxQuote;
    if (cut)
      quoted = quoted.substr(0, kMaxQuote);
    return fail(EINVAL, fmt::format("tracefs: {} line {}: {}: '{}{}'", what, lineno, why, quoted,
                                    cut ? "..." : ""));
  };

  bool seen_format = false;
  bool seen_any = false;
  std::size_t pos = 0;
  std::size_t lineno = 0;
  while (pos < text.size()) {
    auto eol = text.find('\n', pos);
    if (eol == std::string_view::npos)
      eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++lineno;
    const std::string_view t = detail::trim(line);
    if (t.empty())
      continue;
    seen_any = true;
    if (t.starts_with("name:")) {
      const auto n = detail::trim(t.substr(5));
      if (n.empty())
        return error(lineno, line, "empty name");
      if (out.name.empty())
        out.name = std::string(n);
    } else if (t.starts_with("ID:")) {
      const auto id = detail::parse_uint<std::uint32_t>(detail::trim(t.substr(3)));
      if (!id)
        return error(lineno, line, "bad ID");
      out.id = *id;
    } else if (t == "format:") {
      seen_format = true;
    } else if (t.starts_with("field:")) {
      if (!seen_format)
        return error(lineno, line, "field line before 'format:'");
      Field f;
      if (auto err = parse_field_line(t, f); !err.empty())
        return error(lineno, line, err);
      if (out.field(f.name))
        return error(lineno, line, "duplicate field name");
      out.fields.push_back(std::move(f));
    } else if (t.starts_with("print fmt:")) {
      // The kernel prints the format string verbatim, and a literal "\n" inside it (ext4's
      // ext4_fc_stats, ext4_fsmap_*) breaks it over several lines: it runs to the end of the file.
      const auto start = static_cast<std::size_t>(t.data() - text.data()) + 10;
      out.print_fmt = std::string(detail::trim(text.substr(start)));
      break;
    } else {
      return error(lineno, line, "unrecognised line");
    }
  }
  if (!seen_any)
    return fail(EINVAL, fmt::format("tracefs: {} is empty", what));
  if (!seen_format)
    return fail(EINVAL, fmt::format("tracefs: {} has no 'format:' line", what));
  return out;
}

std::optional<std::span<const std::byte>> read_bytes(const Field& f,
                                                     std::span<const std::byte> raw) noexcept {
  if (f.is_data_loc || f.is_rel_loc) {
    const auto desc = load<std::uint32_t>(raw, f.offset);
    if (!desc)
      return std::nullopt;
    // include/trace/stages/stage6_event_callback.h: __data_loc = len << 16 | offset from the
    // record start; __rel_loc = len << 16 | offset from the end of the __rel_loc field itself.
    std::uint64_t off = *desc & 0xffffu;
    const std::uint64_t len = *desc >> 16;
    if (f.is_rel_loc)
      off += static_cast<std::uint64_t>(f.offset) + f.size;
    if (off > raw.size() || raw.size() - off < len)
      return std::nullopt;
    return raw.subspan(static_cast<std::size_t>(off), static_cast<std::size_t>(len));
  }
  if (f.offset > raw.size())
    return std::nullopt;
  if (f.size == 0)
    return raw.subspan(f.offset);  // flexible trailing array ("char buf[]")
  if (raw.size() - f.offset < f.size)
    return std::nullopt;
  return raw.subspan(f.offset, f.size);
}

std::optional<std::string_view> read_string(const Field& f,
                                            std::span<const std::byte> raw) noexcept {
  if (!f.is_string)
    return std::nullopt;
  const auto bytes = read_bytes(f, raw);
  if (!bytes)
    return std::nullopt;
  const auto* chars = reinterpret_cast<const char*>(bytes->data());
  const auto* nul = static_cast<const char*>(std::memchr(chars, '\0', bytes->size()));
  return std::string_view(chars, nul ? static_cast<std::size_t>(nul - chars) : bytes->size());
}

std::optional<std::int64_t> read_int(const Field& f, std::span<const std::byte> raw) noexcept {
  if (f.is_data_loc || f.is_rel_loc || f.array_len)
    return std::nullopt;
  switch (f.size) {
    case 1:
      if (auto v = load<std::uint8_t>(raw, f.offset))
        return f.is_signed ? std::int64_t{static_cast<std::int8_t>(*v)} : std::int64_t{*v};
      return std::nullopt;
    case 2:
      if (auto v = load<std::uint16_t>(raw, f.offset))
        return f.is_signed ? std::int64_t{static_cast<std::int16_t>(*v)} : std::int64_t{*v};
      return std::nullopt;
    case 4:
      if (auto v = load<std::uint32_t>(raw, f.offset))
        return f.is_signed ? std::int64_t{static_cast<std::int32_t>(*v)} : std::int64_t{*v};
      return std::nullopt;
    case 8:
      // Unsigned 64-bit values above INT64_MAX come back two's-complement wrapped.
      if (auto v = load<std::uint64_t>(raw, f.offset))
        return static_cast<std::int64_t>(*v);
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

std::optional<TracepointName> split_tracepoint(std::string_view spec) {
  const auto sep = spec.find_first_of(":/");
  if (sep == std::string_view::npos)
    return std::nullopt;
  const auto sys = spec.substr(0, sep);
  const auto ev = spec.substr(sep + 1);
  if (!valid_component(sys) || !valid_component(ev) || ev.find(':') != std::string_view::npos)
    return std::nullopt;
  return TracepointName{std::string(sys), std::string(ev)};
}

Result<Tracefs> Tracefs::open() {
  TRACER_ASSIGN_OR_RETURN(
      const std::string mounts,
      detail::read_text_file(std::string(kProcMounts), "tracefs", detail::kMaxMountsBytes));
  if (auto root = detail::find_mounted_tracefs(mounts))
    return Tracefs(std::move(*root));

  const fs::path target{kDefaultMount};
  // mkdir is a no-op on a running kernel (sysfs provides the directory when CONFIG_TRACING=y).
  if (::mkdir(target.c_str(), 0700) != 0 && errno != EEXIST) {
    const int err = errno;
    return fail(err,
                fmt::format("tracefs: not mounted, and creating {} failed: {}", target.string(),
                            std::strerror(err)),
                "mount tracefs somewhere (mount -t tracefs nodev /sys/kernel/tracing)");
  }
  if (::mount("nodev", target.c_str(), "tracefs", 0, nullptr) != 0) {
    const int err = errno;
    std::string hint;
    switch (err) {
      case EPERM:
      case EACCES:
        hint =
            "mounting tracefs needs CAP_SYS_ADMIN: run as root, or ask an administrator to "
            "run `mount -t tracefs nodev /sys/kernel/tracing`";
        break;
      case ENODEV:
        hint = "this kernel has no tracefs (built without CONFIG_TRACING / CONFIG_FTRACE)";
        break;
      default:
        hint = "mount it by hand: mount -t tracefs nodev /sys/kernel/tracing";
        break;
    }
    return fail(err,
                fmt::format("tracefs: not mounted (no tracefs or debugfs in {}), and mounting it "
                            "at {} failed: {}",
                            kProcMounts, target.string(), std::strerror(err)),
                std::move(hint));
  }
  return Tracefs(target);
}

Result<std::vector<TracepointName>> Tracefs::list_tracepoints(std::string_view glob) const {
  const fs::path events = root_ / "events";
  std::error_code ec;
  fs::directory_iterator sys_it(events, ec);
  if (ec)
    return fail(ec.value(),
                fmt::format("tracefs: cannot list {}: {}", events.string(), ec.message()));
  // Accept "sys/event" globs too, like split_tracepoint() does for names.
  std::string pattern(glob);
  if (pattern.find(':') == std::string::npos)
    if (auto slash = pattern.find('/'); slash != std::string::npos)
      pattern[slash] = ':';

  std::vector<TracepointName> out;
  std::string full;
  // increment(ec) rather than range-for: operator++ throws, and this layer does not.
  const fs::directory_iterator end;
  for (; sys_it != end; sys_it.increment(ec)) {
    if (ec)
      break;
    const auto& sys = *sys_it;
    if (!sys.is_directory(ec))
      continue;  // header_page, enable, filter, ...
    const std::string sys_name = sys.path().filename().string();
    std::error_code ev_ec;
    fs::directory_iterator ev_it(sys.path(), ev_ec);
    // A system that vanished (module unload) or is unreadable is skipped, as perf does.
    for (; !ev_ec && ev_it != end; ev_it.increment(ev_ec)) {
      const auto& ev = *ev_it;
      if (!ev.is_directory(ev_ec))
        continue;
      if (!fs::exists(ev.path() / "id", ev_ec))
        continue;
      TracepointName tp{sys_name, ev.path().filename().string()};
      if (!pattern.empty()) {
        full = tp_string(tp);
        if (::fnmatch(pattern.c_str(), full.c_str(), 0) != 0)
          continue;
      }
      out.push_back(std::move(tp));
    }
  }
  if (ec)
    return fail(ec.value(),
                fmt::format("tracefs: error while listing {}: {}", events.string(), ec.message()));
  std::sort(out.begin(), out.end(), [](const TracepointName& a, const TracepointName& b) {
    return std::tie(a.system, a.event) < std::tie(b.system, b.event);
  });
  return out;
}

std::vector<std::string> Tracefs::near_matches(const TracepointName& tp, std::size_t max) const {
  auto all = list_tracepoints();
  if (!all || max == 0)
    return {};
  const std::string query = tp_string(tp);
  // Ties in name order; the name asked for is no suggestion for itself.
  std::vector<std::string> names;
  names.reserve(all->size());
  for (const auto& c : *all) {
    if (auto name = tp_string(c); name != query)
      names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  // Beyond a third of the name (at least 3) a suggestion is noise rather than a likely typo; the
  // same event filed under another system ("sched_switch" asked as "sys:sched_switch") is near.
  return detail::nearest(
      query, names, {.max_distance = 3, .limit = max, .related_only = false, .separator = ':'});
}

Result<std::uint32_t> Tracefs::tracepoint_id(const TracepointName& tp) const {
  if (!valid_component(tp.system) || !valid_component(tp.event))
    return fail(EINVAL, fmt::format("tracefs: invalid tracepoint name '{}'", tp_string(tp)),
                "write it as system:event, e.g. sched:sched_switch");
  const fs::path path = root_ / "events" / tp.system / tp.event / "id";
  auto text = detail::read_text_file(path, "tracefs", kMaxFileBytes);
  if (!text) {
    if (text.error().errno_value() == ENOENT)
      return fail(ENOENT,
                  fmt::format("tracefs: no tracepoint {} (no {})", tp_string(tp), path.string()),
                  near_hint(near_matches(tp)));
    if (const int err = text.error().errno_value(); err == EACCES || err == EPERM)
      return access_failure(root_, path, err);
    return fail(std::move(text).error());
  }
  const auto id = detail::parse_uint<std::uint32_t>(detail::trim(*text));
  if (!id)
    return fail(EINVAL, fmt::format("tracefs: {} does not hold a number: '{}'", path.string(),
                                    detail::trim(*text)));
  return *id;
}

Result<Format> Tracefs::format(const TracepointName& tp) const {
  if (!valid_component(tp.system) || !valid_component(tp.event))
    return fail(EINVAL, fmt::format("tracefs: invalid tracepoint name '{}'", tp_string(tp)),
                "write it as system:event, e.g. sched:sched_switch");
  const fs::path path = root_ / "events" / tp.system / tp.event / "format";
  auto text = detail::read_text_file(path, "tracefs", kMaxFileBytes);
  if (!text) {
    if (text.error().errno_value() == ENOENT)
      return fail(ENOENT,
                  fmt::format("tracefs: no tracepoint {} (no {})", tp_string(tp), path.string()),
                  near_hint(near_matches(tp)));
    if (const int err = text.error().errno_value(); err == EACCES || err == EPERM)
      return access_failure(root_, path, err);
    return fail(std::move(text).error());
  }
  return parse_format(*text, tp.system, tp.event);
}

}  // namespace tracer::tracefs
