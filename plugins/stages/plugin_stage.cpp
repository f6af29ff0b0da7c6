#include "plugin_stage.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>
#include <utility>

#include "tracer/common/text_file.hpp"
#include "tracer/common/trusted_file.hpp"
#include "tracer/error.hpp"
#include "tracer/ext/stage_options.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/unique_fd.hpp"

namespace tracer::stages {

namespace fs = std::filesystem;

/// A loaded shared object. Its descriptor stays open while it is loaded: /proc/self/task/T/fd/N
/// is the object's name to the dynamic loader.
struct PluginLibrary {
  void* handle = nullptr;
  UniqueFd fd;
  PluginLibrary() = default;
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;
  ~PluginLibrary() {
    if (handle != nullptr)
      ::dlclose(handle);
  }
};

/// Everything a call into the plugin reads or writes. The plugin's thread holds it too: a call
/// that never returns keeps it (and the library) alive after the stage is gone.
struct PluginCore {
  std::shared_ptr<PluginLibrary> lib = std::make_shared<PluginLibrary>();
  std::string path;
  const tracer_plugin_descriptor* desc = nullptr;
  std::uint32_t desc_size = 0;
  void* self = nullptr;

  // A call's result: its return code, whether an exception crossed the boundary.
  int rc = 0;
  bool threw = false;
  // load
  std::string load_error, load_hint;
  // create
  std::vector<std::string> keys, values;
  std::string create_error;
  // fields, columns, last_error (copied on the plugin's thread: its pointers are its own)
  std::vector<std::string> field_names, key_names, value_names;
  std::string last_error;
  // on_events: the batch, readable only while `open` (a call over budget closes it before the
  // events go away; a late read then fails instead of touching them).
  std::vector<FieldRef> fields;
  std::atomic<bool> open{false};
  std::atomic<int> readers{0};
  std::vector<const tracer_event*> batch;
  std::vector<std::unique_ptr<char[]>> chunks;  // the batch's strings, copied (see keep())
  std::size_t chunk = 0, used = 0;
  tracer_host host{};
  // snapshot
  std::vector<TableRow> rows;
  std::size_t n_keys = 0, n_values = 0;
  bool reset = false;

  static constexpr std::size_t kChunk = std::size_t{64} << 10;
  /// A copy of `s` that lives until the next batch (and as long as the core: a late reader of a
  /// string never reads an event that is gone).
  const char* keep(std::string_view s) {
    if (s.size() > kChunk)
      s = s.substr(0, kChunk);
    if (chunks.empty() || used + s.size() > kChunk) {
      if (!chunks.empty())
        ++chunk;
      if (chunk == chunks.size())
        chunks.push_back(std::make_unique<char[]>(kChunk));
      used = 0;
    }
    char* at = chunks[chunk].get() + used;
    std::memcpy(at, s.data(), s.size());
    used += s.size();
    return at;
  }
  void new_batch() {
    chunk = 0;
    used = 0;
  }
  /// A read of the batch begins (on the plugin's thread): false when the batch is closed.
  /// (Dekker's order: both sides store, then load the other's, sequentially consistent.)
  bool enter() noexcept {
    readers.fetch_add(1);
    if (open.load())
      return true;
    readers.fetch_sub(1);
    return false;
  }
  void leave() noexcept { readers.fetch_sub(1); }
  /// No read starts after this, and one under way has ended when it returns.
  void close() noexcept {
    open.store(false);
    while (readers.load() != 0)
      __builtin_ia32_pause();
  }
};

/// Plugin threads abandoned in a call (abandoned_plugin_threads()).
std::atomic<int> g_abandoned{0};

/// The thread a plugin's calls run on, one call at a time; the caller waits for each at most
/// its budget. A hand-over is an atomic store and a short spin on each side before either
/// blocks: batches that come back to back never pay a sleep and a wake-up (two cross-CPU
/// wake-ups a batch cost the stage 5 times its plain call on a VM).
class PluginThread {
 public:
  explicit PluginThread(std::shared_ptr<PluginCore> core) : s_(std::make_shared<Shared>()) {
    thread_ = std::thread([s = s_, core = std::move(core)] { s->loop(*core); });
  }
  PluginThread(const PluginThread&) = delete;
  PluginThread& operator=(const PluginThread&) = delete;
  ~PluginThread() {
    s_->quit.store(true);
    s_->wake();
    if (stuck_)
      thread_.detach();  // inside the plugin for good: abandoned, it keeps its core alive
    else
      thread_.join();
  }

  /// True when `job` finished within `budget`; false (and every later call) when it did not.
  bool run(void (*job)(PluginCore&), std::chrono::milliseconds budget) noexcept {
    if (stuck_)
      return false;
    auto& s = *s_;
    s.job.store(job);
    const std::uint64_t ticket = s.posted.fetch_add(1) + 1;
    s.wake();
    const auto done = [&] { return s.finished.load() == ticket; };
    if (!spin(done)) {
      std::unique_lock lock(s.mu);
      if (!s.cv.wait_for(lock, budget, done)) {
        stuck_ = true;
        g_abandoned.fetch_add(1);
      }
    }
    return !stuck_;
  }

 private:
  /// Spins on `ready` for about kSpin (pausing, then yielding the CPU to whoever shares it).
  template <typename Ready>
  static bool spin(const Ready& ready) {
    constexpr std::chrono::microseconds kSpin{50};
    for (int i = 0; i < 256; ++i) {
      if (ready())
        return true;
      __builtin_ia32_pause();
    }
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (std::chrono::steady_clock::now() < until) {
      if (ready())
        return true;
      std::this_thread::yield();
    }
    return ready();
  }

  struct Shared {
    std::mutex mu;  // for the blocking waits only: the hand-over itself is the atomics
    std::condition_variable cv;
    std::atomic<void (*)(PluginCore&)> job{nullptr};
    std::atomic<std::uint64_t> posted{0}, finished{0};
    std::atomic<bool> quit{false};

    /// After a store the other side waits for: one that checked before the store and is about
    /// to block sees it under the lock, one that blocks already is woken.
    void wake() {
      { const std::lock_guard lock(mu); }
      cv.notify_all();
    }

    void loop(PluginCore& core) {
      std::uint64_t done = 0;
      const auto work = [&] { return quit.load() || posted.load() != done; };
      for (;;) {
        if (!spin(work)) {
          std::unique_lock lock(mu);
          cv.wait(lock, work);
        }
        if (posted.load() == done)
          return;              // quit
        job.load()(core);      // each job catches what the plugin throws
        done = posted.load();  // one call at a time: the one just run
        finished.store(done);
        wake();
      }
    }
  };
  std::shared_ptr<Shared> s_;
  std::thread thread_;
  bool stuck_ = false;
};

namespace {

/// The end of a descriptor field: a plugin's `size` must reach it for tracer to read it.
#define TRACER_END_OF(field)                   \
  (offsetof(tracer_plugin_descriptor, field) + \
   sizeof(static_cast<tracer_plugin_descriptor*>(nullptr)->field))

/// A recipe option as the text a plugin gets (numbers in decimal, booleans true/false, a list
/// joined by ','), or nullopt for a table.
std::optional<std::string> option_text(const ConfigValue& v) {
  if (const auto* s = v.string())
    return *s;
  if (const auto* b = std::get_if<bool>(&v.value))
    return *b ? "true" : "false";
  if (const auto* i = std::get_if<std::int64_t>(&v.value))
    return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&v.value))
    return fmt::format("{}", *d);
  if (const auto* a = v.array()) {
    std::string out;
    for (const auto& e : *a) {
      auto t = option_text(e);
      if (!t)
        return std::nullopt;
      out += (out.empty() ? "" : ",") + *t;
    }
    return out;
  }
  return std::nullopt;
}

Cell to_cell(const tracer_value& v) {
  switch (v.type) {
    case TRACER_VALUE_INT:
      return v.i;
    case TRACER_VALUE_UINT:
      return v.u;
    case TRACER_VALUE_DOUBLE:
      return v.d;
    case TRACER_VALUE_STRING:
      return v.str == nullptr ? std::string() : std::string(v.str, v.len);
    default:
      return std::monostate{};
  }
}

/// Opens the plugin `c.path` names (trusted: see trusted_file.hpp) and loads it from that
/// descriptor; checks its descriptor (the ABI's major version, the functions every stage needs).
/// Runs the object's constructors and entry point: on the plugin's thread, or in a child
/// process (find_plugins). Sets c.desc, or c.load_error and c.load_hint.
void load_library(PluginCore& c) {
  const std::string& path = c.path;
  auto file = trust::open_trusted(path, "plugin");
  if (!file) {
    c.load_error = file.error().message;
    c.load_hint = file.error().hint;
    return;
  }
  c.lib->fd = std::move(file->fd);
  // The loader knows an object by the name it was opened by and returns the one it has for a
  // name it knows: a C++ plugin is never unloaded (its STB_GNU_UNIQUE symbols make it
  // NODELETE), so "/proc/self/fd/7" could name an earlier plugin loaded through descriptor 7.
  // The loading thread's id and the descriptor make a name no earlier load had (the same file
  // is still found as the same object: the loader also compares device and inode).
  const std::string name = fmt::format("/proc/self/task/{}/fd/{}", ::gettid(), c.lib->fd.get());
  c.lib->handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (c.lib->handle == nullptr) {
    const char* err = ::dlerror();
    std::string why = err != nullptr ? err : "dlopen failed";
    if (const auto at = why.find(name); at != std::string::npos)
      why.replace(at, name.size(), path);
    c.load_error = fmt::format("cannot load plugin '{}': {}", path, why);
    c.load_hint = "build it as a shared object (-shared -fPIC) for this machine";
    return;
  }
  void* sym = ::dlsym(c.lib->handle, TRACER_PLUGIN_ENTRY);
  if (sym == nullptr) {
    c.load_error = fmt::format("plugin '{}' has no entry point '{}'", path, TRACER_PLUGIN_ENTRY);
    c.load_hint =
        "export it: extern \"C\" const tracer_plugin_descriptor* tracer_plugin_entry(void)";
    return;
  }
  const tracer_plugin_descriptor* d = nullptr;
  try {
    d = reinterpret_cast<tracer_plugin_entry_fn>(sym)();
  } catch (...) {
    d = nullptr;
  }
  if (d == nullptr || !PluginStage::covers(d->size, TRACER_END_OF(abi_minor))) {
    c.load_error =
        fmt::format("plugin '{}': its entry point gave no descriptor{}", path,
                    d == nullptr ? std::string() : fmt::format(" (its size is {} bytes)", d->size));
    return;
  }
  if (d->abi_major != TRACER_PLUGIN_ABI_MAJOR) {
    c.load_error =
        fmt::format("plugin '{}' is built for the plugin ABI {}.{}; this tracer speaks {}.{}", path,
                    d->abi_major, d->abi_minor, TRACER_PLUGIN_ABI_MAJOR, TRACER_PLUGIN_ABI_MINOR);
    c.load_hint = fmt::format("rebuild it against tracer/plugin.h of this tracer (ABI major {})",
                              TRACER_PLUGIN_ABI_MAJOR);
    return;
  }
  if (!PluginStage::covers(d->size, TRACER_END_OF(destroy))) {
    c.load_error = fmt::format(
        "plugin '{}': its descriptor's size is {} bytes, and tracer needs at least {} (through "
        "destroy) of ABI {}.{}",
        path, d->size, TRACER_END_OF(destroy), TRACER_PLUGIN_ABI_MAJOR, TRACER_PLUGIN_ABI_MINOR);
    c.load_hint = "set size = sizeof(tracer_plugin_descriptor) with this tracer's tracer/plugin.h";
    return;
  }
  std::string missing;
  for (const auto& [function, set] :
       {std::pair{"create", d->create != nullptr}, std::pair{"fields", d->fields != nullptr},
        std::pair{"on_events", d->on_events != nullptr},
        std::pair{"destroy", d->destroy != nullptr}}) {
    if (!set)
      missing += fmt::format("{}{}", missing.empty() ? "" : ", ", function);
  }
  if (!missing.empty()) {
    c.load_error = fmt::format(
        "plugin '{}': its descriptor has no {} (every stage needs create, "
        "fields, on_events and destroy)",
        path, missing);
    return;
  }
  c.desc = d;
  c.desc_size = d->size;
}

// The calls, each run on the plugin's thread.
void job_load(PluginCore& c) {
  try {
    load_library(c);
  } catch (...) {
    c.load_error =
        fmt::format("plugin '{}': an exception crossed the boundary while loading it", c.path);
  }
}

void job_create(PluginCore& c) {
  std::vector<const char*> kp, vp;
  for (std::size_t i = 0; i < c.keys.size(); ++i) {
    kp.push_back(c.keys[i].c_str());
    vp.push_back(c.values[i].c_str());
  }
  const char* error = nullptr;
  c.threw = false;
  try {
    c.self = c.desc->create(kp.data(), vp.data(), static_cast<std::uint32_t>(kp.size()), &error);
    c.create_error = error != nullptr ? error : "";
  } catch (...) {
    c.self = nullptr;
    c.threw = true;
  }
}

/// `n` names at `names` (null entries as "") into `out`.
void copy_names(const char* const* names, std::uint32_t n, std::vector<std::string>& out) {
  for (std::uint32_t i = 0; i < n && names != nullptr; ++i)
    out.emplace_back(names[i] != nullptr ? names[i] : "");
}

void job_fields(PluginCore& c) {
  const char* const* names = nullptr;
  std::uint32_t n = 0;
  c.threw = false;
  try {
    c.rc = c.desc->fields(c.self, &names, &n);
    if (c.rc == 0 && n != 0 && names == nullptr)
      c.rc = 1;
    if (c.rc == 0)
      copy_names(names, n, c.field_names);
  } catch (...) {
    c.threw = true;
  }
}

void job_columns(PluginCore& c) {
  const char* const* k = nullptr;
  const char* const* v = nullptr;
  std::uint32_t nk = 0, nv = 0;
  c.threw = false;
  try {
    c.rc = c.desc->columns(c.self, &k, &nk, &v, &nv);
    if (c.rc == 0) {
      copy_names(k, nk, c.key_names);
      copy_names(v, nv, c.value_names);
    }
  } catch (...) {
    c.threw = true;
  }
}

void job_events(PluginCore& c) {
  c.threw = false;
  try {
    c.rc = c.desc->on_events(c.self, &c.host, c.batch.data(),
                             static_cast<std::uint32_t>(c.batch.size()));
  } catch (...) {
    c.threw = true;
  }
}

void job_snapshot(PluginCore& c) {
  const tracer_rows rows{
      .size = sizeof(tracer_rows),
      .ctx = &c,
      .row =
          [](void* ctx, const tracer_value* keys, std::uint32_t n_keys, const tracer_value* values,
             std::uint32_t n_values) {
            auto* core = static_cast<PluginCore*>(ctx);
            // A row with other columns than the plugin named is refused (the outputs line
            // cells up with names).
            if ((n_keys != 0 && keys == nullptr) || (n_values != 0 && values == nullptr) ||
                n_keys != core->n_keys || n_values != core->n_values)
              return 1;
            try {
              TableRow row;
              for (std::uint32_t i = 0; i < n_keys; ++i)
                row.keys.push_back(to_cell(keys[i]));
              for (std::uint32_t i = 0; i < n_values; ++i)
                row.values.push_back(to_cell(values[i]));
              core->rows.push_back(std::move(row));
            } catch (...) {
              return 1;
            }
            return 0;
          },
  };
  c.threw = false;
  try {
    c.rc = c.desc->snapshot(c.self, &rows, c.reset ? 1 : 0);
  } catch (...) {
    c.threw = true;
  }
}

void job_last_error(PluginCore& c) {
  try {
    const char* why = c.desc->last_error(c.self);
    c.last_error = why != nullptr ? why : "";
  } catch (...) {
    c.last_error.clear();
  }
}

void job_destroy(PluginCore& c) {
  try {
    c.desc->destroy(c.self);
  } catch (...) {  // NOLINT(bugprone-empty-catch): nothing to do at destruction
  }
  c.self = nullptr;
}

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> out;
  const char* env = std::getenv("TRACER_PLUGIN_PATH");
  std::string_view dirs(env != nullptr ? env : "");
  while (!dirs.empty()) {
    const auto colon = dirs.find(':');
    if (const auto dir = dirs.substr(0, colon); !dir.empty())
      out.emplace_back(dir);
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
  }
  return out;
}

/// Loads the plugin at `path` in a child process and reads its descriptor there: a plugin that
/// crashes or hangs while loading is a problem of its line, never of `tracer list`.
PluginInfo describe_in_child(const std::string& path) {
  PluginInfo info{.path = path};
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    info.problem = fmt::format("cannot describe it: pipe: {}", std::strerror(errno));
    return info;
  }
  UniqueFd rd(fds[0]), wr(fds[1]);
  const pid_t child = ::fork();
  if (child < 0) {
    info.problem = fmt::format("cannot describe it: fork: {}", std::strerror(errno));
    return info;
  }
  if (child == 0) {
    rd.reset();
    PluginCore c;
    c.path = path;
    load_library(c);
    std::string msg;
    if (c.desc == nullptr) {
      msg = "E" + c.load_error;
    } else {
      const auto* d = c.desc;
      msg = fmt::format("O{}\n{}\n{}\n{}", d->abi_major, d->abi_minor,
                        d->name != nullptr ? d->name : "", d->summary != nullptr ? d->summary : "");
    }
    std::string_view left(msg);
    while (!left.empty()) {
      const ssize_t n = ::write(wr.get(), left.data(), left.size());
      if (n <= 0)
        break;
      left.remove_prefix(static_cast<std::size_t>(n));
    }
    ::_exit(0);
  }
  wr.reset();
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{.fd = rd.get(), .events = POLLIN, .revents = 0};
    const int r = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0) {
      timed_out = true;
      break;
    }
    char buf[4096];
    const ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n <= 0)
      break;
    if (got.size() < 65536)
      got.append(buf, static_cast<std::size_t>(n));
  }
  if (timed_out)
    ::kill(child, SIGKILL);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    info.problem =
        "loading it did not finish within 2 s (a constructor or its entry point does "
        "not return)";
  } else if (WIFSIGNALED(status)) {
    info.problem = fmt::format("loading it crashed ({})", ::strsignal(WTERMSIG(status)));
  } else if (got.starts_with('E')) {
    info.problem = got.substr(1);
  } else if (got.starts_with('O')) {
    std::vector<std::string> parts;
    std::string_view rest = std::string_view(got).substr(1);
    for (int i = 0; i < 3; ++i) {
      const auto nl = rest.find('\n');
      parts.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
    parts.emplace_back(rest);
    info.abi_major = detail::parse_uint<std::uint32_t>(parts[0]).value_or(0);
    info.abi_minor = detail::parse_uint<std::uint32_t>(parts[1]).value_or(0);
    info.name = parts[2];
    info.summary = parts[3];
  } else {
    info.problem = "loading it ended without a word";
  }
  return info;
}

}  // namespace

Result<std::string> find_plugin(const std::string& name, const std::string& recipe) {
  std::vector<fs::path> candidates;
  std::error_code ec;
  if (name.find('/') != std::string::npos) {
    // Relative to the recipe's directory, whatever the current one: `tracer run even.toml`
    // with plugin = "./lib.so" is the recipe's lib.so, never a name the loader searches for.
    const fs::path p(name);
    candidates.push_back(p.is_absolute() ? p : fs::absolute(recipe, ec).parent_path() / p);
  } else {
    for (const auto& dir : plugin_dirs())
      candidates.push_back(fs::absolute(dir, ec) / name);
  }
  for (const auto& c : candidates) {
    if (!fs::exists(c, ec))
      continue;
    return c.lexically_normal().string();  // absolute: dlopen never searches (see load_library)
  }
  return fail(ENOENT, fmt::format("no plugin '{}'", name),
              name.find('/') != std::string::npos
                  ? std::string("a relative path is taken from the recipe's directory")
                  : std::string("a bare name is searched in TRACER_PLUGIN_PATH (dirs separated by "
                                "':'); write ./NAME for the recipe's directory"));
}

PluginStage::PluginStage() = default;

PluginStage::~PluginStage() {
  if (core_ && core_->self != nullptr && timed_out_.empty())
    call(job_destroy, "destroy");
  thread_.reset();  // joined, or abandoned when stuck in the plugin
}

StageSpec PluginStage::spec() {
  return {.name = "plugin",
          .summary = "a stage from a shared object through tracer's C ABI (tracer/plugin.h)",
          .options = {{.name = "plugin",
                       .type = OptionSpec::Type::kString,
                       .required = true,
                       .help = "the shared object: ./lib.so (the recipe's directory) or a name "
                               "in TRACER_PLUGIN_PATH"},
                      {.name = "budget",
                       .type = OptionSpec::Type::kDuration,
                       .help = "how long one call into the plugin may take (default 250ms, at "
                               "most 400ms); a call over it turns the stage off"}},
          .needs = {},
          .open_options = true};
}

bool PluginStage::call(void (*job)(PluginCore&), const char* what) noexcept {
  if (thread_ == nullptr || !timed_out_.empty())
    return false;
  if (thread_->run(job, budget_))
    return true;
  ++timeouts_;
  off_ = true;
  try {
    timed_out_ = what;
    last_error_ =
        fmt::format("{} ran past its budget of {} ms: the stage is off and its thread abandoned",
                    what, budget_.count());
  } catch (...) {  // NOLINT(bugprone-empty-catch): the counters say it
  }
  return false;
}

void PluginStage::configure(const ConfigValue& options, Diagnostics& diags) {
  StageOptions opts(spec(), options, diags);
  where_ = options.where;
  if (auto b = opts.duration("budget")) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(*b);
    if (ms.count() < 1 || ms > kMaxBudget) {
      diags.add(opts.where("budget"),
                fmt::format("budget must be between 1ms and {}ms", kMaxBudget.count()),
                "a stop is honoured within 0.5 s whatever a plugin does: a call may not take "
                "longer");
    } else {
      budget_ = ms;
    }
  }
  const auto name = opts.string("plugin");
  if (!name)
    return;
  const SourceRegion at = opts.where("plugin");
  auto path = find_plugin(*name, at.path);
  if (!path) {
    diags.add(at, path.error().message, path.error().hint, {.option = "plugin"});
    return;
  }
  // Another user's file is refused before any of its code runs, here or in a child.
  if (auto trusted = trust::open_trusted(*path, "plugin"); !trusted) {
    diags.add(at, trusted.error().message, trusted.error().hint, {.option = "plugin"});
    return;
  }
  // Its constructors and entry point run first in a child process: one that crashes or hangs
  // there is this error, not a crash of tracer (or of the host embedding it).
  if (const PluginInfo vetted = describe_in_child(*path); !vetted.problem.empty()) {
    diags.add(at,
              vetted.problem.starts_with("loading it")
                  ? fmt::format("plugin '{}': {}", *path, vetted.problem)
                  : vetted.problem,
              "fix the plugin: tracer loads it in a child process first", {.option = "plugin"});
    return;
  }
  core_ = std::make_shared<PluginCore>();
  core_->path = *path;
  thread_ = std::make_unique<PluginThread>(core_);
  if (!call(job_load, "loading it")) {
    diags.add(at,
              fmt::format("plugin '{}': loading it ran past its budget of {} ms (a constructor or "
                          "its entry point does not return)",
                          *path, budget_.count()),
              "fix the plugin; its thread is abandoned", {.option = "plugin"});
    return;
  }
  if (core_->desc == nullptr) {
    diags.add(at, core_->load_error, core_->load_hint, {.option = "plugin"});
    return;
  }
  const tracer_plugin_descriptor* d = core_->desc;
  name_ = d->name != nullptr ? d->name : "plugin";
  // Its own options, as text.
  if (const ConfigTable* t = options.table()) {
    for (const auto& [key, v] : *t) {
      if (key == "plugin" || key == "use" || key == "budget")
        continue;
      auto text = option_text(v);
      if (!text) {
        diags.add(v.where, fmt::format("plugin option '{}' must be a value or a list", key));
        continue;
      }
      core_->keys.push_back(key);
      core_->values.push_back(std::move(*text));
    }
  }
  if (!call(job_create, "create")) {
    diags.add(where_, fmt::format("plugin '{}': create {}", name_, last_error_),
              "fix the plugin, or give it a larger budget (at most 400ms)");
    return;
  }
  if (core_->threw) {
    diags.add(where_,
              fmt::format("plugin '{}': an exception crossed the boundary in create", name_),
              "a plugin's calls must not throw");
    return;
  }
  if (core_->self == nullptr) {
    diags.add(where_, fmt::format("plugin '{}' refused its options: {}", name_,
                                  core_->create_error.empty() ? std::string("no reason given")
                                                              : core_->create_error));
  }
}

void PluginStage::bind(BindContext& ctx, Diagnostics& diags) {
  if (!core_ || core_->self == nullptr || off_)
    return;
  const auto said = [&](const char* what) {
    if (!timed_out_.empty()) {
      diags.add(where_, fmt::format("plugin '{}': {} {}", name_, what, last_error_),
                "fix the plugin, or give it a larger budget (at most 400ms)");
      return true;
    }
    if (core_->threw) {
      diags.add(where_,
                fmt::format("plugin '{}': an exception crossed the boundary in {}", name_, what),
                "a plugin's calls must not throw");
      return true;
    }
    return false;
  };
  core_->field_names.clear();
  if (!call(job_fields, "fields") || core_->threw) {
    said("fields");
    return;
  }
  if (core_->rc != 0) {
    diags.add(where_, fmt::format("plugin '{}' did not name its fields", name_));
    return;
  }
  for (const auto& field : core_->field_names) {
    if (auto f = ctx.schema.bind(field, where_, diags))
      core_->fields.push_back(*f);
  }
  if (covers(core_->desc_size, TRACER_END_OF(columns)) && core_->desc->columns != nullptr) {
    core_->key_names.clear();
    core_->value_names.clear();
    if (!call(job_columns, "columns") || core_->threw) {
      said("columns");
      return;
    }
    if (core_->rc == 0) {
      key_names_ = core_->key_names;
      value_names_ = core_->value_names;
    }
  }
  core_->host = tracer_host{
      .size = sizeof(tracer_host),
      .ctx = core_.get(),
      .read =
          [](void* core, const tracer_event* event, std::uint32_t index, tracer_value* out) {
            auto* c = static_cast<PluginCore*>(core);
            // A late call (its batch ran over the budget and is gone) reads nothing.
            if (out == nullptr || index >= c->fields.size() || !c->enter())
              return 1;
            struct Leave {
              PluginCore* c;
              ~Leave() { c->leave(); }
            } const leave{c};
            *out = {};
            const Value v = c->fields[index].read(*reinterpret_cast<const Event*>(event));
            if (const auto* i = std::get_if<std::int64_t>(&v)) {
              out->type = TRACER_VALUE_INT;
              out->i = *i;
            } else if (const auto* u = std::get_if<std::uint64_t>(&v)) {
              out->type = TRACER_VALUE_UINT;
              out->u = *u;
            } else if (const auto* d = std::get_if<double>(&v)) {
              out->type = TRACER_VALUE_DOUBLE;
              out->d = *d;
            } else if (const auto* s = std::get_if<std::string_view>(&v)) {
              try {
                out->str = c->keep(*s);
              } catch (...) {
                return 1;
              }
              out->type = TRACER_VALUE_STRING;
              out->len = std::min(s->size(), PluginCore::kChunk);
            }
            return 0;
          },
      .drop =
          [](void* core, const tracer_event* event) {
            auto* c = static_cast<PluginCore*>(core);
            // The plugin was handed these events to drop (they are this stage's batch).
            if (c->enter()) {
              const_cast<Event*>(reinterpret_cast<const Event*>(event))->drop();
              c->leave();
            }
          },
  };
}

void PluginStage::failed(const char* what, bool exception) noexcept {
  if (exception) {
    ++exceptions_;
    off_ = true;
  } else {
    ++failures_;
  }
  core_->last_error.clear();
  if (!exception && covers(core_->desc_size, TRACER_END_OF(last_error)) &&
      core_->desc->last_error != nullptr && !call(job_last_error, "last_error"))
    return;  // call() said why
  try {
    last_error_ = fmt::format("{}: {}", what,
                              exception ? "an exception crossed the plugin boundary"
                              : !core_->last_error.empty() ? core_->last_error
                                                           : "failed");
  } catch (...) {  // NOLINT(bugprone-empty-catch): the counts say it
  }
}

void PluginStage::on_events(std::span<Event* const> events) noexcept {
  if (!core_ || core_->self == nullptr)
    return;
  if (off_) {
    missed_ += events.size();
    return;
  }
  core_->batch.clear();
  for (Event* e : events)
    core_->batch.push_back(reinterpret_cast<const tracer_event*>(e));
  core_->new_batch();
  core_->open.store(true);
  const bool in_time = call(job_events, "on_events");
  core_->close();  // before the events go back to the pipeline: a call still running reads no more
  if (!in_time) {
    missed_ += events.size();
    return;
  }
  if (core_->threw)
    failed("on_events", true);
  else if (core_->rc != 0)
    failed("on_events", false);
}

void PluginStage::snapshot(Table& out, bool reset) {
  out.stage = name_;
  out.title = name_;
  out.key_names = key_names_;
  out.value_names = value_names_;
  if (core_ && core_->self != nullptr && !off_ &&
      covers(core_->desc_size, TRACER_END_OF(snapshot)) && core_->desc->snapshot != nullptr) {
    core_->rows.clear();
    core_->n_keys = key_names_.size();
    core_->n_values = value_names_.size();
    core_->reset = reset;
    if (call(job_snapshot, "snapshot")) {
      if (core_->threw)
        failed("snapshot", true);
      else if (core_->rc != 0)
        failed("snapshot", false);
      for (auto& row : core_->rows)
        out.rows.push_back(std::move(row));
    }
  }
  out.note = last_error_;  // the plugin's last failure, if any (its counters count them)
}

void PluginStage::counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const {
  out.emplace_back("failures", failures_);
  out.emplace_back("exceptions", exceptions_);
  if (timeouts_ != 0)
    out.emplace_back("timeouts", timeouts_);
  if (missed_ != 0)
    out.emplace_back("missed", missed_);
}

void PluginStage::stop() {
  if (timed_out_.empty())
    return;
  throw Error(ErrorCategory::kRuntime, std::make_error_code(std::errc::timed_out),
              fmt::format("plugin '{}': {} ran past its budget of {} ms; the stage was turned off "
                          "({} events missed) and its thread abandoned",
                          name_, timed_out_, budget_.count(), missed_),
              "fix the plugin (a call must return), or give it a larger budget (at most 400ms)",
              where_);
}

}  // namespace tracer::stages

namespace tracer {

int abandoned_plugin_threads() noexcept {
  return stages::g_abandoned.load();
}

std::vector<PluginInfo> find_plugins() {
  std::vector<PluginInfo> out;
  for (const auto& dir : stages::plugin_dirs()) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      if (e.path().extension() != ".so")
        continue;
      auto found = stages::find_plugin(e.path().filename().string(), {});
      if (!found) {
        out.push_back({.path = e.path().string(), .problem = found.error().message});
        continue;
      }
      PluginInfo info = stages::describe_in_child(*found);
      info.path = e.path().string();
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const PluginInfo& a, const PluginInfo& b) { return a.path < b.path; });
  return out;
}

}  // namespace tracer
