// bpf::Object::compile_and_open: a recipe's .bpf.c compiled by clang at run time, cached by
// content hash; vmlinux.h generated from the running kernel's BTF on first use.
#include <bpf/btf.h>
#include <fcntl.h>
#include <pwd.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <span>
#include <sstream>

#include <fmt/format.h>

#include "tracer/bpf/object.hpp"
#include "tracer/common/errno_text.hpp"
#include "tracer/unique_fd.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX, not in a header

namespace tracer::bpf {
namespace {

namespace fs = std::filesystem;

// The cache key only has to tell inputs apart, not resist an attacker: 128-bit FNV-1a.
class Hasher {
 public:
  void add(std::string_view bytes) {
    // Length-prefixed, so ("ab","c") and ("a","bc") differ.
    const std::uint64_t n = bytes.size();
    mix(std::string_view(reinterpret_cast<const char*>(&n), sizeof n));
    mix(bytes);
  }
  [[nodiscard]] std::string hex() const {
    return fmt::format("{:016x}{:016x}", static_cast<std::uint64_t>(h_ >> 64),
                       static_cast<std::uint64_t>(h_));
  }

 private:
  void mix(std::string_view bytes) {
    constexpr unsigned __int128 kPrime =
        (static_cast<unsigned __int128>(0x0000000001000000ULL) << 64) | 0x000000000000013BULL;
    for (const char c : bytes) {
      h_ ^= static_cast<unsigned char>(c);
      h_ *= kPrime;
    }
  }
  unsigned __int128 h_ =
      (static_cast<unsigned __int128>(0x6c62272e07bb0142ULL) << 64) | 0x62b821756295c58dULL;
};

Result<std::string> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno != 0 ? errno : ENOENT;
    return fail(err, fmt::format("bpf: cannot read {}: {}", path.string(), errno_text(err)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return std::move(ss).str();
}

// Writes `data` to a temporary file beside `path` and renames it into place, so that a
// concurrent reader never sees half a file.
Status write_atomically(const fs::path& path, std::string_view data) {
  const fs::path tmp = path.string() + fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!out) {
      const int err = errno != 0 ? errno : EIO;
      return fail(err, fmt::format("bpf: cannot write {}: {}", tmp.string(), errno_text(err)));
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return fail(ec.value(), fmt::format("bpf: cannot rename {} to {}: {}", tmp.string(),
                                        path.string(), ec.message()));
  return {};
}

// The cache as a root process may trust it (tracer loads what it finds there into the kernel):
// a directory, not a link, owned by this user and writable by no one else.
Status check_private_dir(const fs::path& dir) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    const int err = errno;
    return fail(err,
                fmt::format("bpf: cannot use the cache {}: {}", dir.string(), errno_text(err)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail(
        ENOTDIR,
        fmt::format("bpf: the cache {} is not a directory (a symbolic link?)", dir.string()),
        "remove it: tracer creates its cache itself");
  }
  if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fail(EPERM,
                fmt::format("bpf: the cache {} is owned by uid {} with mode {:o}: others could "
                            "replace the BPF objects tracer loads from it",
                            dir.string(), st.st_uid, st.st_mode & 07777),
                "chown it to this user and chmod 700 it, or remove it (tracer recreates it)");
  }
  return {};
}

Status make_private_dir(const fs::path& dir) {
  std::error_code ec;
  if (fs::create_directories(dir, ec))
    fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec)
    return fail(ec.value(), fmt::format("bpf: cannot create {}: {}", dir.string(), ec.message()));
  return check_private_dir(dir);
}

// An object is at most this big (the largest generated one is under 1 MiB).
constexpr std::size_t kMaxObjectBytes = std::size_t{64} << 20;
// What a cache directory keeps (objects there, generated sources in its gen/), the most
// recently used first; older ones are evicted. A command target's in-kernel program names its
// pid, so each such run adds an object.
constexpr std::uintmax_t kCacheCapBytes = std::uintmax_t{64} << 20;
constexpr std::size_t kCacheCapFiles = 512;

std::string content_sum(std::string_view bytes) {
  Hasher h;
  h.add("tracer-bpf-object-v1");
  h.add(bytes);
  return h.hex();
}

// A cached object's bytes, when they are what this cache wrote: a regular file (not a link)
// of this user's that no one else may write, whose content hash is the one in its ".sum".
std::optional<std::string> read_verified(const fs::path& object) {
  const auto read_private = [](const fs::path& path) -> std::optional<std::string> {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    struct stat st {};
    if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() ||
        (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 || st.st_size <= 0 ||
        static_cast<std::uint64_t>(st.st_size) > kMaxObjectBytes)
      return std::nullopt;
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < bytes.size()) {
      const ssize_t n = ::read(fd.get(), bytes.data() + got, bytes.size() - got);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return std::nullopt;
      got += static_cast<std::size_t>(n);
    }
    return bytes;
  };
  auto bytes = read_private(object);
  const auto sum = read_private(object.string() + ".sum");
  if (!bytes || !sum || *sum != content_sum(*bytes))
    return std::nullopt;
  return bytes;
}

// Housekeeping of a cache directory after a compile: temporary files of compiles that died
// (".tmp.<pid>" of a process that is gone) go, and the least recently used files ending in
// `suffix` (a hit touches its object) go, with their ".sum", until the rest fit
// kCacheCapBytes and kCacheCapFiles.
void tidy_cache(const fs::path& dir, const fs::path& keep, std::string_view suffix) {
  std::error_code ec;
  struct Entry {
    fs::path path;
    std::uintmax_t size;
    fs::file_time_type used;
  };
  std::vector<Entry> objects;
  std::uintmax_t total = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (const auto at = name.rfind(".tmp."); at != std::string::npos) {
      const auto pid = std::strtol(name.c_str() + at + 5, nullptr, 10);
      if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
        fs::remove(e.path(), ec);
      continue;
    }
    if (!name.ends_with(suffix) || !e.is_regular_file(ec))
      continue;
    const auto size = e.file_size(ec);
    objects.push_back({e.path(), ec ? 0 : size, e.last_write_time(ec)});
    total += objects.back().size;
  }
  std::sort(objects.begin(), objects.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  std::size_t files = objects.size();
  for (const auto& o : objects) {
    if (total <= kCacheCapBytes && files <= kCacheCapFiles)
      break;
    if (o.path == keep)
      continue;
    fs::remove(o.path, ec);
    fs::remove(o.path.string() + ".sum", ec);
    total -= o.size;
    --files;
  }
}

struct ProcessOutput {
  int exit_code = -1;  // -1: killed by a signal
  std::string out;
  std::string err;
};

// Runs argv[0] (an absolute path) and collects its stdout and stderr. posix_spawn, not fork:
// the caller may be a multi-threaded server.
Result<ProcessOutput> run(const std::vector<std::string>& argv) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0)
    return fail(errno, "bpf: pipe2: " + errno_text(errno));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0)
    return fail(errno, "bpf: pipe2: " + errno_text(errno));
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out_w.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, err_w.get(), STDERR_FILENO);
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const auto& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return fail(rc, fmt::format("bpf: cannot run {}: {}", argv[0], errno_text(rc)));
  out_w.reset();
  err_w.reset();

  ProcessOutput result;
  std::array<pollfd, 2> fds{{{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}}};
  std::array<std::string*, 2> sinks{&result.out, &result.err};
  int open = 2;
  while (open > 0) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR)
        continue;
      break;
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0)
        continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        sinks[i]->append(buf, static_cast<std::size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        fds[i].fd = -1;  // EOF
        --open;
      }
    }
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

bool is_executable(const fs::path& p) {
  return !p.empty() && ::access(p.c_str(), X_OK) == 0 && !fs::is_directory(p);
}

// `name` as given if it has a slash, else the first hit on $PATH (then /usr/sbin, /usr/bin).
fs::path find_program(std::string_view name) {
  if (name.find('/') != std::string_view::npos)
    return is_executable(fs::path(name)) ? fs::path(name) : fs::path();
  std::string path = std::getenv("PATH") != nullptr ? std::getenv("PATH") : "";
  path += ":/usr/local/bin:/usr/bin:/usr/sbin";
  std::istringstream dirs(path);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty())
      continue;
    if (const fs::path p = fs::path(dir) / name; is_executable(p))
      return p;
  }
  return {};
}

Result<fs::path> find_clang(const std::string& wanted) {
  if (!wanted.empty()) {
    if (fs::path p = find_program(wanted); !p.empty())
      return p;
    return fail(ENOENT, fmt::format("bpf: clang '{}' not found", wanted));
  }
#ifdef TRACER_BPF_CLANG_PATH
  if (is_executable(TRACER_BPF_CLANG_PATH))
    return fs::path(TRACER_BPF_CLANG_PATH);
#endif
  for (const char* name : {"clang-14", "clang"}) {
    if (fs::path p = find_program(name); !p.empty())
      return p;
  }
  return fail(ENOENT, "bpf: no clang to compile BPF C with",
              "install clang (Debian: apt-get install clang-14), or set CompileOptions::clang");
}

/// Which clang `clang` is, for the cache key, without running it (`clang --version` took
/// 160-240 ms of every start, compile or cache hit): its real binary's path, device, inode,
/// size and change time. An upgraded clang is another file (dpkg writes a new one), so its
/// objects are made again; an object of an older clang is never taken for one of this one.
Result<std::string> clang_identity(const fs::path& clang) {
  std::error_code ec;
  fs::path real = fs::canonical(clang, ec);
  if (ec)
    real = clang;
  struct stat st {};
  if (::stat(real.c_str(), &st) != 0) {
    const int err = errno;
    return fail(err, fmt::format("bpf: cannot stat clang {}: {}", real.string(), errno_text(err)));
  }
  return fmt::format("{} dev {} ino {} size {} mtime {}.{:09} ctime {}.{:09}", real.string(),
                     st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                     st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

// llvm-strip of the same LLVM as clang: beside clang's real binary, else by name.
fs::path find_llvm_strip(const fs::path& clang) {
  std::error_code ec;
  const fs::path real = fs::canonical(clang, ec);
  if (!ec && is_executable(real.parent_path() / "llvm-strip"))
    return real.parent_path() / "llvm-strip";
  for (const char* name : {"llvm-strip-14", "llvm-strip"}) {
    if (fs::path p = find_program(name); !p.empty())
      return p;
  }
  return {};
}

// clang's diagnostics, cut to what it says about `src`, the recipe's own source. tracer runs as
// root: a source that includes any file (`#include "/etc/shadow"`) would otherwise have clang echo
// that file's lines, and its tokens in the messages, to whoever ran the recipe. A diagnostic about
// another file keeps its location and severity only; the lines under it (the quoted source and
// caret) go with it. "In file included from" lines name positions in the including files.
std::string own_diagnostics(std::string_view err, const fs::path& src) {
  static const std::regex kHeader(
      R"(^(.+?):(\d+):(\d+): (fatal error|error|warning|note|remark): .*$)");
  const std::string own = src.string();
  std::string out;
  bool keep = true;  // driver messages before any diagnostic ("clang: error: ...") are kept
  std::size_t at = 0;
  while (at < err.size()) {
    const std::size_t nl = err.find('\n', at);
    const std::string line(err.substr(at, nl == std::string_view::npos ? err.npos : nl - at));
    at = nl == std::string_view::npos ? err.size() : nl + 1;
    std::smatch m;
    if (std::regex_match(line, m, kHeader)) {
      keep = m[1].str() == own;
      if (!keep) {
        out += fmt::format("{}:{}:{}: {} (not shown: tracer quotes clang only about {})\n",
                           m[1].str(), m[2].str(), m[3].str(), m[4].str(), src.filename().string());
        continue;
      }
    } else if (line.starts_with("In file included from ") ||
               line.starts_with("                 from ") ||
               line.find(" generated.") != std::string::npos) {
      keep = true;
    }
    if (keep)
      out += line + "\n";
  }
  return out;
}

// Adds every `#include "x"` reachable from `text` that resolves in `dirs` to the hash, so that
// editing a header beside the source is a cache miss too.
void hash_local_includes(std::string_view text,
                         const std::vector<fs::path>& dirs,
                         Hasher& h,
                         std::set<fs::path>& seen) {
  std::size_t at = 0;
  while ((at = text.find("#include", at)) != std::string_view::npos) {
    at += 8;
    const auto open = text.find_first_not_of(" \t", at);
    if (open == std::string_view::npos || text[open] != '"')
      continue;
    const auto close = text.find('"', open + 1);
    if (close == std::string_view::npos)
      break;
    const std::string_view rel = text.substr(open + 1, close - open - 1);
    for (const auto& dir : dirs) {
      std::error_code ec;
      const fs::path p = fs::weakly_canonical(dir / rel, ec);
      if (ec || !fs::is_regular_file(p))
        continue;
      if (seen.insert(p).second && p.filename() != "vmlinux.h") {  // vmlinux.h: keyed by dir
        if (auto body = read_file(p)) {
          h.add(p.string());
          h.add(*body);
          hash_local_includes(*body, dirs, h, seen);
        }
      }
      break;
    }
  }
}

void dump_printf(void* ctx, const char* format, va_list args) {
  auto* out = static_cast<std::string*>(ctx);
  char buf[512];
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(buf, sizeof buf, format, copy);
  va_end(copy);
  if (n < 0)
    return;
  if (static_cast<std::size_t>(n) < sizeof buf) {
    out->append(buf, static_cast<std::size_t>(n));
    return;
  }
  std::string big(static_cast<std::size_t>(n) + 1, '\0');
  std::vsnprintf(big.data(), big.size(), format, args);
  big.pop_back();
  *out += big;
}

}  // namespace

Status make_cache_dir(const fs::path& dir) {
  return make_private_dir(dir);
}

Result<fs::path> default_cache_dir() {
  fs::path base;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && xdg[0] == '/') {
    base = xdg;
  } else if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0') {
    base = fs::path(home) / ".cache";
  } else if (const passwd* pw = ::getpwuid(::getuid()); pw != nullptr) {
    base = fs::path(pw->pw_dir) / ".cache";
  } else {
    return fail(ENOENT, "bpf: no cache directory: neither XDG_CACHE_HOME nor HOME is set");
  }
  return base / "tracer" / "bpf";
}

Result<fs::path> ensure_vmlinux_h(const fs::path& cache_dir, const fs::path& btf_path) {
  // Keyed by the BTF's bytes: a new kernel gets a new header, the same one reuses it.
  TRACER_ASSIGN_OR_RETURN(const std::string btf_bytes, read_file(btf_path));
  Hasher h;
  h.add(btf_bytes);
  const fs::path dir = cache_dir / ("vmlinux-" + h.hex().substr(0, 16));
  const fs::path header = dir / "vmlinux.h";
  if (fs::is_regular_file(header)) {
    TRACER_TRY(check_private_dir(dir));  // what compiles against it must be ours
    return dir;
  }
  TRACER_TRY(make_private_dir(dir));
  ::btf* btf = btf__new(btf_bytes.data(), static_cast<std::uint32_t>(btf_bytes.size()));
  if (btf == nullptr) {
    const int err = errno;
    return fail(err,
                fmt::format("bpf: cannot parse BTF {}: {}", btf_path.string(), errno_text(err)));
  }
  // What `bpftool btf dump file ... format c` writes (bpftool/btf.c dump_btf_c).
  std::string text =
      "#ifndef __VMLINUX_H__\n#define __VMLINUX_H__\n\n"
      "#ifndef BPF_NO_PRESERVE_ACCESS_INDEX\n"
      "#pragma clang attribute push (__attribute__((preserve_access_index)), apply_to = record)\n"
      "#endif\n\n";
  btf_dump* d = btf_dump__new(btf, &dump_printf, &text, nullptr);
  int err = d == nullptr ? errno : 0;
  const std::uint32_t n = btf__type_cnt(btf);
  for (std::uint32_t id = 1; err == 0 && id < n; ++id)
    err = -btf_dump__dump_type(d, id);
  btf_dump__free(d);
  btf__free(btf);
  if (err != 0)
    return fail(err, fmt::format("bpf: dumping BTF {} as C failed: {}", btf_path.string(),
                                 errno_text(err)));
  text +=
      "#ifndef BPF_NO_PRESERVE_ACCESS_INDEX\n#pragma clang attribute pop\n#endif\n\n"
      "#endif /* __VMLINUX_H__ */\n";
  TRACER_TRY(write_atomically(header, text));
  return dir;
}

Result<Object> Object::compile_and_open(const fs::path& bpf_c, const CompileOptions& opts) {
  if (opts.scratch) {
    // A fresh directory nobody else can name or enter; removed whatever the compile gives.
    std::string tmpl = (fs::temp_directory_path() / "tracer-check-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      const int err = errno;
      return fail(
          err,
          fmt::format("bpf: cannot create a temporary directory {}: {}", tmpl, errno_text(err)),
          "set TMPDIR to a writable directory");
    }
    const fs::path dir = tmpl;
    CompileOptions in_dir = opts;
    in_dir.scratch = false;
    in_dir.cache_dir = dir;
    in_dir.vmlinux_dir.clear();
    auto obj = compile_and_open(bpf_c, in_dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (!obj)
      return obj;
    if (auto& info = obj->compile_info_; info.has_value())
      info->object_path.clear();  // gone with the directory
    return obj;
  }
  TRACER_ASSIGN_OR_RETURN(const std::string source, read_file(bpf_c));
  fs::path cache_dir = opts.cache_dir;
  if (cache_dir.empty()) {
    TRACER_ASSIGN_OR_RETURN(cache_dir, default_cache_dir());
  }
  std::error_code ec;
  TRACER_TRY(make_private_dir(cache_dir));
  fs::path vmlinux_dir = opts.vmlinux_dir;
  if (vmlinux_dir.empty()) {
    TRACER_ASSIGN_OR_RETURN(vmlinux_dir, ensure_vmlinux_h(cache_dir, opts.btf_path));
  }
  TRACER_ASSIGN_OR_RETURN(const fs::path clang, find_clang(opts.clang));
  TRACER_ASSIGN_OR_RETURN(const std::string clang_id, clang_identity(clang));

  // tracer_target.h beside vmlinux.h: a source includes it to test "is this task the target".
  {
    static constexpr std::string_view kTargetHeader =
#include "tracer_target_h.inc"
        ;
    const fs::path header = vmlinux_dir / "tracer_target.h";
    const auto have = read_file(header);
    if (!have || *have != kTargetHeader)
      TRACER_TRY(write_atomically(header, std::string(kTargetHeader)));
  }
  const fs::path src = fs::absolute(bpf_c);
  std::vector<fs::path> include_dirs{src.parent_path(), vmlinux_dir};
  include_dirs.insert(include_dirs.end(), opts.include_dirs.begin(), opts.include_dirs.end());
  // The flags TOOLCHAIN.md measured: -g is mandatory for CO-RE.
  std::vector<std::string> flags{"-target", "bpf", "-O2", "-g", "-D__TARGET_ARCH_x86"};
  for (const auto& dir : include_dirs)
    flags.push_back("-I" + dir.string());
  flags.insert(flags.end(), opts.extra_flags.begin(), opts.extra_flags.end());

  Hasher h;
  h.add("tracer-bpf-cache-v1");
  h.add(source);
  std::set<fs::path> seen;
  hash_local_includes(source, include_dirs, h, seen);
  for (const auto& f : flags)
    h.add(f);
  h.add(clang.string());
  h.add(clang_id);
  std::string name = bpf_c.filename().string();
  for (const std::string_view ext : {".c", ".bpf"}) {
    if (name.size() > ext.size() && name.ends_with(ext))
      name.resize(name.size() - ext.size());
  }
  CompileInfo info;
  info.key = h.hex();
  info.object_path = cache_dir / (name + "-" + info.key + ".bpf.o");

  std::optional<std::string> bytes;
  if (!opts.force)
    bytes = read_verified(info.object_path);
  if (bytes) {
    info.cache_hit = true;
    // Recently used: the last to be evicted.
    fs::last_write_time(info.object_path, fs::file_time_type::clock::now(), ec);
  } else {
    const fs::path tmp = info.object_path.string() + fmt::format(".tmp.{}", ::getpid());
    std::vector<std::string> argv{clang.string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    // `-x c`: a source whose name does not end in .c is still C (clang would take it for a
    // linker input, compile nothing, and leave no object).
    argv.insert(argv.end(), {"-x", "c", "-c", src.string(), "-o", tmp.string()});
    TRACER_ASSIGN_OR_RETURN(const ProcessOutput cc, run(argv));
    if (cc.exit_code != 0) {
      fs::remove(tmp, ec);
      return fail(
          EINVAL,
          fmt::format("bpf: clang failed to compile {} (exit {})", bpf_c.string(), cc.exit_code),
          own_diagnostics(cc.err.empty() ? cc.out : cc.err, src));
    }
    // DWARF is only needed by clang for CO-RE; BTF survives the strip (TOOLCHAIN.md).
    if (const fs::path strip = find_llvm_strip(clang); !strip.empty()) {
      TRACER_ASSIGN_OR_RETURN(const ProcessOutput st, run({strip.string(), "-g", tmp.string()}));
      if (st.exit_code != 0) {
        fs::remove(tmp, ec);
        return fail(EINVAL, fmt::format("bpf: llvm-strip failed on {}", tmp.string()), st.err);
      }
    }
    // The sum first: an object is never in place without the sum that vouches for it.
    TRACER_ASSIGN_OR_RETURN(bytes, read_file(tmp));
    TRACER_TRY(write_atomically(info.object_path.string() + ".sum", content_sum(*bytes)));
    fs::rename(tmp, info.object_path, ec);
    if (ec)
      return fail(ec.value(), fmt::format("bpf: cannot rename {} to {}: {}", tmp.string(),
                                          info.object_path.string(), ec.message()));
    tidy_cache(cache_dir, info.object_path, ".bpf.o");
    if (src.parent_path().parent_path() == cache_dir)  // generated sources (codegen: gen/)
      tidy_cache(src.parent_path(), src, ".bpf.c");
  }
  // Loaded from the bytes that were verified (or just compiled), not from the path again.
  TRACER_ASSIGN_OR_RETURN(Object obj, open_memory(std::as_bytes(std::span(*bytes)), name));
  obj.name_ = std::move(name);
  obj.compile_info_ = std::move(info);
  return obj;
}

}  // namespace tracer::bpf
