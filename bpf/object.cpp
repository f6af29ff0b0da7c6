// bpf::Object: libbpf open/load with the verifier log captured, programs, maps and globals.
#include "tracer/bpf/object.hpp"
#include "tracer/common/errno_text.hpp"
#include "tracer/perf/event.hpp"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include <algorithm>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "libbpf_print.hpp"

namespace tracer::bpf {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names)
    out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::size_t round_up8(std::size_t n) {
  return (n + 7) & ~std::size_t{7};
}

bool is_percpu(bpf_map_type t) {
  return t == BPF_MAP_TYPE_PERCPU_ARRAY || t == BPF_MAP_TYPE_PERCPU_HASH ||
         t == BPF_MAP_TYPE_LRU_PERCPU_HASH || t == BPF_MAP_TYPE_PERCPU_CGROUP_STORAGE;
}

}  // namespace

// libbpf_print capture ------------------------------------------------------------------------

namespace detail {
namespace {
std::mutex g_print_mutex;
thread_local std::string* t_sink = nullptr;
thread_local bool t_debug = false;

int capture_print(enum libbpf_print_level level, const char* format, va_list args) {
  if (t_sink == nullptr || (level == LIBBPF_DEBUG && !t_debug))
    return 0;
  char buf[1024];
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(buf, sizeof buf, format, copy);
  va_end(copy);
  if (n < 0)
    return 0;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    t_sink->append(buf, static_cast<std::size_t>(n));
  } else {
    std::string big(static_cast<std::size_t>(n) + 1, '\0');
    std::vsnprintf(big.data(), big.size(), format, args);
    big.pop_back();
    *t_sink += big;
  }
  return n;
}
}  // namespace

// libbpf's print hook is process-wide: captures are serialized, and the previous hook restored.
PrintCapture::PrintCapture(std::string& sink, bool debug) : lock_(g_print_mutex) {
  t_sink = &sink;
  t_debug = debug;
  previous_ = reinterpret_cast<void*>(libbpf_set_print(&capture_print));
}

PrintCapture::~PrintCapture() {
  libbpf_set_print(reinterpret_cast<libbpf_print_fn_t>(previous_));
  t_sink = nullptr;
}
}  // namespace detail

// Object --------------------------------------------------------------------------------------

void Object::Closer::operator()(::bpf_object* o) const noexcept {
  bpf_object__close(o);
}

Object::Object(std::unique_ptr<::bpf_object, Closer> obj, std::string name)
    : obj_(std::move(obj)), name_(std::move(name)) {}
Object::Object(Object&&) noexcept = default;
Object& Object::operator=(Object&&) noexcept = default;
Object::~Object() = default;

Result<Object> Object::open_impl(std::span<const std::byte> bytes,
                                 const std::filesystem::path* path,
                                 std::string_view name,
                                 bool copy) {
  std::string messages;
  std::vector<std::byte> owned;
  if (copy)
    owned.assign(bytes.begin(), bytes.end());
  const std::string obj_name(name);
  ::bpf_object* raw = nullptr;
  int err = 0;
  {
    detail::PrintCapture capture(messages);
    bpf_object_open_opts opts{};  // LIBBPF_OPTS, without its designated-initializer warnings
    opts.sz = sizeof(opts);
    opts.object_name = obj_name.c_str();
    if (path != nullptr) {
      raw = bpf_object__open_file(path->c_str(), &opts);
    } else {
      const void* data = copy ? static_cast<const void*>(owned.data()) : bytes.data();
      raw = bpf_object__open_mem(data, bytes.size(), &opts);
    }
    err = errno;
  }
  if (raw == nullptr) {
    return fail(
        err,
        fmt::format("bpf: opening object '{}' failed: {}",
                    path != nullptr ? path->string() : obj_name, errno_text(err)),
        messages.empty() ? std::string("is it a BPF ELF object built with -g (BTF)?") : messages);
  }
  Object obj(std::unique_ptr<::bpf_object, Closer>(raw), obj_name);
  obj.bytes_ = std::move(owned);
  return obj;
}

Result<Object> Object::open_file(const std::filesystem::path& path) {
  return open_impl({}, &path, path.filename().string(), false);
}

Result<Object> Object::open_memory(std::span<const std::byte> bytes, std::string_view name) {
  return open_impl(bytes, nullptr, name, true);
}

Result<Object> Object::open_shipped(std::string_view name) {
  std::vector<std::string> names;
  for (const auto& p : shipped_programs()) {
    // Shipped objects live in libtracer's .rodata for the life of the process: no copy.
    if (p.name == name)
      return open_impl(p.object, nullptr, name, false);
    names.emplace_back(p.name);
  }
  return fail(ENOENT, fmt::format("bpf: no shipped program '{}'", name),
              "shipped programs: " + join(names));
}

Status Object::set_global(std::string_view var, std::span<const std::byte> value) {
  if (loaded_)
    return fail(EINVAL, fmt::format("bpf: object '{}': global '{}' set after load", name_, var),
                "set globals between open and load()");
  const ::btf* btf = bpf_object__btf(obj_.get());
  if (btf == nullptr)
    return fail(ENODATA, fmt::format("bpf: object '{}' has no BTF", name_));
  const std::uint32_t n = btf__type_cnt(btf);
  for (std::uint32_t id = 1; id < n; ++id) {
    const btf_type* t = btf__type_by_id(btf, id);
    if (!btf_is_datasec(t))
      continue;
    const std::string_view sec = btf__name_by_offset(btf, t->name_off);
    const btf_var_secinfo* vs = btf_var_secinfos(t);
    for (std::uint16_t i = 0; i < btf_vlen(t); ++i, ++vs) {
      const btf_type* v = btf__type_by_id(btf, vs->type);
      if (!btf_is_var(v) || btf__name_by_offset(btf, v->name_off) != var)
        continue;
      if (vs->size != value.size())
        return fail(EINVAL, fmt::format("bpf: object '{}': global '{}' is {} bytes, not {}", name_,
                                        var, vs->size, value.size()));
      // libbpf names internal maps "<object prefix><section>", e.g. "syscall_.rodata".
      ::bpf_map* m = nullptr;
      bpf_object__for_each_map(m, obj_.get()) {
        if (bpf_map__is_internal(m) && ends_with(bpf_map__name(m), sec))
          break;
      }
      if (m == nullptr)
        return fail(ENOENT, fmt::format("bpf: object '{}': no map for section {} of '{}'", name_,
                                        sec, var));
      std::size_t size = 0;
      const auto* init = static_cast<const std::byte*>(bpf_map__initial_value(m, &size));
      if (init == nullptr || vs->offset + vs->size > size)
        return fail(EINVAL, fmt::format("bpf: object '{}': section {} has no room for '{}'", name_,
                                        sec, var));
      std::vector<std::byte> data(init, init + size);
      std::memcpy(data.data() + vs->offset, value.data(), value.size());
      if (const int err = bpf_map__set_initial_value(m, data.data(), data.size()); err != 0)
        return fail(
            -err, fmt::format("bpf: object '{}': setting '{}': {}", name_, var, errno_text(-err)));
      return {};
    }
  }
  return fail(ENOENT, fmt::format("bpf: object '{}' has no global variable '{}'", name_, var),
              "globals are the object's .rodata/.data/.bss variables (const volatile knobs)");
}

Status Object::load(const LoadOptions& opts) {
  if (loaded_)
    return fail(EALREADY, fmt::format("bpf: object '{}' is already loaded", name_));
  if (load_failure_)
    return fail(EINVAL,
                fmt::format("bpf: object '{}' failed to load before; open it again", name_));

  // One log buffer per program. With log_level 0 libbpf loads without a log first and, when the
  // kernel rejects a program, retries it at level 1 into this buffer (bpf_object_load_prog).
  // Not zeroed: 4 MiB a program written with zeros (12 MiB of page faults for 3 programs) was
  // most of a start; the kernel writes a log only for a rejected program, and an empty log
  // needs its first byte alone.
  struct ProgLog {
    ::bpf_program* prog;
    std::unique_ptr<char[]> buf;
    std::size_t size;
  };
  std::vector<ProgLog> logs;
  ::bpf_program* p = nullptr;
  const std::size_t log_size = std::max<std::uint32_t>(opts.log_bytes, 4096);
  bpf_object__for_each_program(p, obj_.get()) {
    logs.push_back({p, std::make_unique_for_overwrite<char[]>(log_size), log_size});
    logs.back().buf[0] = '\0';
    bpf_program__set_log_buf(p, logs.back().buf.get(), logs.back().size);
    if (opts.log_level > 1)
      bpf_program__set_log_level(p, opts.log_level);
  }

  std::string messages;
  int err = 0;
  {
    detail::PrintCapture capture(messages);
    err = bpf_object__load(obj_.get());
  }
  for (auto& l : logs)
    bpf_program__set_log_buf(l.prog, nullptr, 0);
  if (err == 0) {
    loaded_ = true;
    return {};
  }
  err = -err;

  LoadFailure failure;
  failure.libbpf_messages = messages;
  for (auto& l : logs) {
    if (l.buf[0] != '\0') {
      failure.program = bpf_program__name(l.prog);
      failure.verifier_log.assign(l.buf.get(), ::strnlen(l.buf.get(), l.size));
      break;
    }
  }
  if (failure.program.empty()) {
    // No verifier log: libbpf failed before the kernel (maps, CO-RE relocation, BTF).
    static constexpr std::string_view kProgTag = "prog '";
    if (auto at = messages.find(kProgTag); at != std::string::npos) {
      const auto start = at + kProgTag.size();
      failure.program = messages.substr(start, messages.find('\'', start) - start);
    }
  }
  failure.trimmed_log = trim_verifier_log(failure.verifier_log, opts.hint_lines);

  std::string message =
      failure.verifier_log.empty()
          ? fmt::format("bpf: loading object '{}' failed{}: {}", name_,
                        failure.program.empty() ? "" : " at program '" + failure.program + "'",
                        errno_text(err))
          : fmt::format("bpf: object '{}': program '{}' rejected by the verifier: {}", name_,
                        failure.program, errno_text(err));
  std::string hint = failure.verifier_log.empty() ? trim_verifier_log(messages, opts.hint_lines)
                                                  : failure.trimmed_log;
  // EPERM before any verifier log: the process may not load BPF at all. Say which capability.
  constexpr int kCapSysAdmin = 21, kCapBpf = 39;
  if (err == EPERM && failure.verifier_log.empty() &&
      !perf::has_capability(kCapBpf).value_or(true) &&
      !perf::has_capability(kCapSysAdmin).value_or(true)) {
    message += " (this process lacks CAP_BPF)";
    hint =
        "loading BPF programs needs CAP_BPF (with CAP_PERFMON for tracing programs): run as "
        "root, or grant them (setcap cap_bpf,cap_perfmon,cap_dac_read_search+ep tracer; "
        "AmbientCapabilities= in a systemd unit); placement = \"user\" needs no BPF for "
        "the stages\n" +
        hint;
  }
  load_failure_ = std::move(failure);
  return fail(err, std::move(message), std::move(hint));
}

std::vector<std::string> Object::program_names() const {
  std::vector<std::string> out;
  ::bpf_program* p = nullptr;
  bpf_object__for_each_program(p, obj_.get()) out.emplace_back(bpf_program__name(p));
  return out;
}

Result<int> Object::program_fd(std::string_view prog) const {
  const std::string name(prog);
  ::bpf_program* p = bpf_object__find_program_by_name(obj_.get(), name.c_str());
  if (p == nullptr)
    return fail(ENOENT, fmt::format("bpf: object '{}' has no program '{}'", name_, prog),
                "programs: " + join(program_names()));
  const int fd = bpf_program__fd(p);
  if (fd < 0)
    return fail(EBADF, fmt::format("bpf: program '{}' of '{}' is not loaded", prog, name_),
                "call load() first");
  return fd;
}

std::uint64_t Object::program_skips(std::string_view prog) const {
  const std::string name(prog);
  ::bpf_program* p = bpf_object__find_program_by_name(obj_.get(), name.c_str());
  return p != nullptr ? program_skips(bpf_program__fd(p)) : 0;
}

std::uint64_t Object::program_skips(int prog_fd) noexcept {
  if (prog_fd < 0)
    return 0;
  bpf_prog_info info{};
  std::uint32_t len = sizeof info;
  return bpf_obj_get_info_by_fd(prog_fd, &info, &len) == 0 ? info.recursion_misses : 0;
}

Result<bpf_prog_type> Object::program_type(std::string_view prog) const {
  const std::string name(prog);
  ::bpf_program* p = bpf_object__find_program_by_name(obj_.get(), name.c_str());
  if (p == nullptr)
    return fail(ENOENT, fmt::format("bpf: object '{}' has no program '{}'", name_, prog),
                "programs: " + join(program_names()));
  return bpf_program__type(p);
}

std::vector<std::string> Object::map_names() const {
  std::vector<std::string> out;
  ::bpf_map* m = nullptr;
  bpf_object__for_each_map(m, obj_.get()) out.emplace_back(bpf_map__name(m));
  return out;
}

Result<::bpf_map*> Object::find_map(std::string_view map) const {
  const std::string name(map);
  ::bpf_map* m = bpf_object__find_map_by_name(obj_.get(), name.c_str());
  if (m == nullptr)
    return fail(ENOENT, fmt::format("bpf: object '{}' has no map '{}'", name_, map),
                "maps: " + join(map_names()));
  return m;
}

Result<int> Object::loaded_map_fd(std::string_view map) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  const int fd = bpf_map__fd(m);
  if (fd < 0)
    return fail(EBADF, fmt::format("bpf: map '{}' of '{}' is not created", map, name_),
                "call load() first");
  return fd;
}

Result<int> Object::map_fd(std::string_view map) const {
  return loaded_map_fd(map);
}

Result<bpf_map_type> Object::map_type(std::string_view map) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  return bpf_map__type(m);
}

Result<std::uint32_t> Object::map_max_entries(std::string_view map) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  return bpf_map__max_entries(m);
}

Status Object::set_map_max_entries(std::string_view map, std::uint32_t n) {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  if (const int err = bpf_map__set_max_entries(m, n); err != 0)
    return fail(-err,
                fmt::format("bpf: map '{}' of '{}': setting max_entries {}: {}", map, name_, n,
                            errno_text(-err)),
                loaded_ ? "set it before load()" : "");
  return {};
}

namespace {
Status check_size(std::string_view map, std::string_view what, std::size_t got, std::size_t want) {
  if (got == want)
    return {};
  return fail(EINVAL,
              fmt::format("bpf: map '{}': {} is {} bytes, the map's is {}", map, what, got, want));
}
}  // namespace

Status Object::update_elem(std::string_view map,
                           std::span<const std::byte> key,
                           std::span<const std::byte> value,
                           std::uint64_t flags) {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  TRACER_ASSIGN_OR_RETURN(const int fd, loaded_map_fd(map));
  TRACER_TRY(check_size(map, "key", key.size(), bpf_map__key_size(m)));
  std::size_t want = bpf_map__value_size(m);
  if (is_percpu(bpf_map__type(m)))
    want = round_up8(want) * static_cast<std::size_t>(libbpf_num_possible_cpus());
  TRACER_TRY(check_size(map, "value", value.size(), want));
  if (bpf_map_update_elem(fd, key.data(), value.data(), flags) != 0) {
    const int err = errno;
    return fail(
        err, fmt::format("bpf: map '{}': update failed: {}", map, errno_text(err)),
        err == E2BIG ? fmt::format("the map is full ({} entries)", bpf_map__max_entries(m)) : "");
  }
  return {};
}

Status Object::delete_elem(std::string_view map, std::span<const std::byte> key) {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  TRACER_ASSIGN_OR_RETURN(const int fd, loaded_map_fd(map));
  TRACER_TRY(check_size(map, "key", key.size(), bpf_map__key_size(m)));
  if (bpf_map_delete_elem(fd, key.data()) != 0) {
    const int err = errno;
    return fail(err, fmt::format("bpf: map '{}': delete failed: {}", map, errno_text(err)));
  }
  return {};
}

Result<std::vector<std::byte>> Object::lookup_elem(std::string_view map,
                                                   std::span<const std::byte> key) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  TRACER_ASSIGN_OR_RETURN(const int fd, loaded_map_fd(map));
  TRACER_TRY(check_size(map, "key", key.size(), bpf_map__key_size(m)));
  std::size_t size = bpf_map__value_size(m);
  if (is_percpu(bpf_map__type(m)))
    size = round_up8(size) * static_cast<std::size_t>(libbpf_num_possible_cpus());
  std::vector<std::byte> value(size);
  if (bpf_map_lookup_elem(fd, key.data(), value.data()) != 0) {
    const int err = errno;
    return fail(err, fmt::format("bpf: map '{}': lookup failed: {}", map, errno_text(err)));
  }
  return value;
}

Result<std::vector<std::vector<std::byte>>> Object::percpu_values(
    std::string_view map,
    std::span<const std::byte> key) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  if (!is_percpu(bpf_map__type(m)))
    return fail(EINVAL, fmt::format("bpf: map '{}' is not a per-CPU map", map));
  TRACER_ASSIGN_OR_RETURN(auto all, lookup_elem(map, key));
  // The kernel copies each CPU's value rounded up to 8 bytes (bpf_percpu_array_copy).
  const std::size_t size = bpf_map__value_size(m), stride = round_up8(size);
  std::vector<std::vector<std::byte>> out;
  for (std::size_t at = 0; at + stride <= all.size(); at += stride)
    out.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                     all.begin() + static_cast<std::ptrdiff_t>(at + size));
  return out;
}

Result<std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>>> Object::entries(
    std::string_view map) const {
  TRACER_ASSIGN_OR_RETURN(::bpf_map * m, find_map(map));
  TRACER_ASSIGN_OR_RETURN(const int fd, loaded_map_fd(map));
  const std::size_t key_size = bpf_map__key_size(m);
  std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>> out;
  std::vector<std::byte> key(key_size), next(key_size);
  const void* prev = nullptr;  // NULL: the first key
  while (bpf_map_get_next_key(fd, prev, next.data()) == 0) {
    auto value = lookup_elem(map, next);
    if (value) {
      out.emplace_back(next, std::move(*value));
    } else if (value.error().errno_value() != ENOENT) {  // ENOENT: deleted meanwhile
      return fail(value.error());
    }
    key.swap(next);
    prev = key.data();
  }
  if (errno != ENOENT) {
    const int err = errno;
    return fail(err, fmt::format("bpf: map '{}': iteration failed: {}", map, errno_text(err)));
  }
  return out;
}

std::string trim_verifier_log(std::string_view log, std::size_t max_lines) {
  std::vector<std::string_view> lines;
  for (std::size_t at = 0; at < log.size();) {
    const auto nl = log.find('\n', at);
    const auto end = nl == std::string_view::npos ? log.size() : nl;
    lines.push_back(log.substr(at, end - at));
    at = end + 1;
  }
  // The kernel ends a log with its statistics (check_max_stack_depth, print_verification_stats):
  // the error is the last line before them.
  const auto is_trailer = [](std::string_view l) {
    return l.find_first_not_of(" \t") == std::string_view::npos || l.starts_with("processed ") ||
           l.starts_with("verification time ") || l.starts_with("stack depth ") ||
           l.starts_with("-- END");
  };
  std::size_t end = lines.size();
  while (end > 0 && is_trailer(lines[end - 1]))
    --end;
  const std::size_t begin = end > max_lines ? end - max_lines : 0;
  std::string out;
  for (std::size_t i = begin; i < end; ++i) {
    out += lines[i];
    out += '\n';
  }
  return out;
}

}  // namespace tracer::bpf
