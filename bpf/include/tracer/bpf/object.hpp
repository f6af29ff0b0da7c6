// bpf::Object: a libbpf BPF object (open, CO-RE relocate, load), its programs and maps, the
// verifier log when the kernel rejects it, and the BTF layout of the structs it emits.
//
// Usage:
//   auto obj = bpf::Object::open_shipped("syscall_output");   // or open_file / compile_and_open
//   TRACER_TRY(obj->set_global("nr_args", std::uint32_t{3}));  // .rodata, before load
//   if (auto st = obj->load(); !st)
//     log(st.error().describe());              // names the program; hint = verifier log tail
//   TRACER_TRY(obj->update_elem<std::uint32_t, std::uint8_t>("tgids", tgid, 1));
//   auto fd = obj->program_fd("syscall_output");  // for perf::Event::set_bpf
//   auto schema = obj->struct_schema("syscall_output_event");
#pragma once

#include <linux/bpf.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tracer/bpf/schema.hpp"
#include "tracer/result.hpp"

struct bpf_object;
struct bpf_map;

namespace tracer::bpf {

/// Options of Object::compile_and_open (a recipe's .bpf.c compiled at run time).
struct CompileOptions {
  /// clang to run; empty: the one the build used, else clang-14 or clang from PATH.
  std::string clang{};
  /// Extra -I directories (the source's own directory is always searched).
  std::vector<std::filesystem::path> include_dirs{};
  /// Extra flags after the fixed ones (-target bpf -O2 -g -D__TARGET_ARCH_x86).
  std::vector<std::string> extra_flags{};
  /// Directory holding vmlinux.h; empty: generated from `btf_path` into the cache on first use.
  std::filesystem::path vmlinux_dir{};
  std::filesystem::path btf_path = "/sys/kernel/btf/vmlinux";
  /// Cache directory; empty: $XDG_CACHE_HOME/tracer/bpf or ~/.cache/tracer/bpf.
  std::filesystem::path cache_dir{};
  /// Compile even when the cache holds the object (the result replaces the cached one).
  bool force = false;
  /// Write nothing to the cache (tracer check): the whole compile, vmlinux.h included, runs in
  /// a private temporary directory (mkdtemp under $TMPDIR, mode 0700) removed before return.
  bool scratch = false;
};

/// What compile_and_open did.
struct CompileInfo {
  bool cache_hit = false;
  std::filesystem::path object_path;  // the cached, stripped .bpf.o
  std::string key;                    // hex content hash naming it
};

struct LoadOptions {
  /// Bytes of verifier log kept per program when a load fails (the kernel keeps the tail).
  std::uint32_t log_bytes = 4u << 20;
  /// Verifier log level for the retry after a rejection: 1 (instructions and states on the
  /// failing path) or 2 (every instruction).
  std::uint32_t log_level = 1;
  /// Lines of the log's tail kept in Failure::hint.
  std::uint32_t hint_lines = 25;
};

/// Why the last load() failed: the program the kernel rejected and its logs.
struct LoadFailure {
  std::string program;          // empty when no program was at fault (e.g. a map failed)
  std::string verifier_log;     // the full log the kernel wrote (for --verbose)
  std::string trimmed_log;      // its last lines, up to and including the error line
  std::string libbpf_messages;  // what libbpf printed (warnings, CO-RE relocation details)
};

/// A shipped BPF program: its name and its stripped object, embedded in libtracer.
struct ShippedProgram {
  std::string_view name;
  std::span<const std::byte> object;
};

/// Every BPF object tracer ships (syscall_output, tgid_gate).
[[nodiscard]] std::span<const ShippedProgram> shipped_programs() noexcept;

class Object {
 public:
  Object(Object&&) noexcept;
  Object& operator=(Object&&) noexcept;
  Object(const Object&) = delete;
  Object& operator=(const Object&) = delete;
  ~Object();

  /// Opens a .bpf.o file (ELF with BTF).
  /// @return the object (not loaded), or a Failure with libbpf's errno and messages.
  [[nodiscard]] static Result<Object> open_file(const std::filesystem::path& path);
  /// Opens an object from memory (the bytes are copied); `name` names it in messages.
  [[nodiscard]] static Result<Object> open_memory(std::span<const std::byte> bytes,
                                                  std::string_view name);
  /// Opens one of shipped_programs().
  /// @return the object, or ENOENT listing the shipped names.
  [[nodiscard]] static Result<Object> open_shipped(std::string_view name);
  /// Compiles a .bpf.c with clang (-target bpf -O2 -g -D__TARGET_ARCH_x86 -I<vmlinux.h dir>
  /// -I<source dir>), strips DWARF (BTF stays), caches the object by a hash of the source and
  /// its local #includes, the flags, vmlinux.h and clang's version, and opens it. A second call
  /// with the same inputs reuses the cached object without running the compiler.
  /// @return the object, or a Failure: EINVAL with clang's diagnostics (file:line:col) in the
  /// hint when the source does not compile, ENOENT when clang or the source is missing.
  [[nodiscard]] static Result<Object> compile_and_open(const std::filesystem::path& bpf_c,
                                                       const CompileOptions& opts = {});

  /// Set when the object came from compile_and_open.
  [[nodiscard]] const std::optional<CompileInfo>& compile_info() const noexcept {
    return compile_info_;
  }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// Sets a global variable of the object's .rodata/.data/.bss (`const volatile` knobs) before
  /// load, found by name in the object's BTF.
  /// @return EINVAL if already loaded or the size differs, ENOENT if no such variable.
  [[nodiscard]] Status set_global(std::string_view var, std::span<const std::byte> value);
  template <typename T>
  [[nodiscard]] Status set_global(std::string_view var, const T& value) {
    return set_global(var, std::as_bytes(std::span(&value, 1)));
  }

  /// Creates the maps and loads every program. Programs are loaded without a log first; a
  /// rejected one is retried by libbpf at `log_level` into a buffer of ours.
  /// @return ok, or a Failure with the kernel's errno whose message names the rejected program
  /// and whose hint is the tail of its verifier log (last_load_failure() has all of it).
  [[nodiscard]] Status load(const LoadOptions& opts = {});
  [[nodiscard]] bool loaded() const noexcept { return loaded_; }
  [[nodiscard]] const std::optional<LoadFailure>& last_load_failure() const noexcept {
    return load_failure_;
  }

  // Programs ----------------------------------------------------------------------------------
  [[nodiscard]] std::vector<std::string> program_names() const;
  /// @return the fd (owned by the object), ENOENT listing the programs, EBADF before load().
  [[nodiscard]] Result<int> program_fd(std::string_view prog) const;
  /// @return the program's type (BPF_PROG_TYPE_TRACEPOINT...), or ENOENT.
  [[nodiscard]] Result<bpf_prog_type> program_type(std::string_view prog) const;
  /// Runs of the program the kernel skipped because another BPF program was running on that
  /// CPU (bpf_prog_active; bpf_prog_info.recursion_misses, 5.12+): hits it saw none of, and,
  /// on a tracepoint, neither did the perf event it is attached to. 0 when unknown.
  [[nodiscard]] std::uint64_t program_skips(std::string_view prog) const;
  /// The same for a program's fd.
  [[nodiscard]] static std::uint64_t program_skips(int prog_fd) noexcept;

  // Maps --------------------------------------------------------------------------------------
  [[nodiscard]] std::vector<std::string> map_names() const;
  /// @return the fd (owned by the object), ENOENT listing the maps, EBADF before load().
  [[nodiscard]] Result<int> map_fd(std::string_view map) const;
  [[nodiscard]] Result<bpf_map_type> map_type(std::string_view map) const;
  /// Declared max_entries (after load: what the kernel got; PERF_EVENT_ARRAY: possible CPUs).
  [[nodiscard]] Result<std::uint32_t> map_max_entries(std::string_view map) const;
  /// Changes max_entries before load.
  [[nodiscard]] Status set_map_max_entries(std::string_view map, std::uint32_t n);

  /// bpf_map_update_elem with size checks. `flags`: BPF_ANY, BPF_NOEXIST, BPF_EXIST.
  [[nodiscard]] Status update_elem(std::string_view map,
                                   std::span<const std::byte> key,
                                   std::span<const std::byte> value,
                                   std::uint64_t flags = BPF_ANY);
  /// bpf_map_delete_elem; ENOENT when the key is absent.
  [[nodiscard]] Status delete_elem(std::string_view map, std::span<const std::byte> key);
  /// The value bytes of `key` (per-CPU maps: see percpu_values). ENOENT when absent.
  [[nodiscard]] Result<std::vector<std::byte>> lookup_elem(std::string_view map,
                                                           std::span<const std::byte> key) const;
  /// A per-CPU map's value of `key`, one entry per possible CPU (index = CPU number).
  [[nodiscard]] Result<std::vector<std::vector<std::byte>>> percpu_values(
      std::string_view map,
      std::span<const std::byte> key) const;
  /// Every (key, value) of a map, by bpf_map_get_next_key (a map being updated meanwhile may
  /// skip or repeat keys, as with bpftool map dump). Per-CPU values are concatenated per CPU,
  /// each padded to 8 bytes.
  [[nodiscard]] Result<std::vector<std::pair<std::vector<std::byte>, std::vector<std::byte>>>>
  entries(std::string_view map) const;

  template <typename K, typename V>
  [[nodiscard]] Status update_elem(std::string_view map,
                                   const K& key,
                                   const V& value,
                                   std::uint64_t flags = BPF_ANY) {
    return update_elem(map, std::as_bytes(std::span(&key, 1)), std::as_bytes(std::span(&value, 1)),
                       flags);
  }
  template <typename K>
  [[nodiscard]] Status delete_elem(std::string_view map, const K& key) {
    return delete_elem(map, std::as_bytes(std::span(&key, 1)));
  }
  /// A per-CPU array's `index` slot as T per CPU.
  template <typename T>
  [[nodiscard]] Result<std::vector<T>> percpu_array(std::string_view map,
                                                    std::uint32_t index = 0) const {
    TRACER_ASSIGN_OR_RETURN(auto raw, percpu_values(map, std::as_bytes(std::span(&index, 1))));
    std::vector<T> out(raw.size());
    for (std::size_t cpu = 0; cpu < raw.size(); ++cpu) {
      if (raw[cpu].size() != sizeof(T))
        return fail(EINVAL, "bpf: map '" + std::string(map) + "': value is " +
                                std::to_string(raw[cpu].size()) + " bytes, not " +
                                std::to_string(sizeof(T)));
      std::memcpy(&out[cpu], raw[cpu].data(), sizeof(T));
    }
    return out;
  }
  /// The sum over CPUs of a per-CPU array's `index` slot (counters).
  template <typename T>
  [[nodiscard]] Result<T> percpu_array_sum(std::string_view map, std::uint32_t index = 0) const {
    TRACER_ASSIGN_OR_RETURN(auto per_cpu, percpu_array<T>(map, index));
    T sum{};
    for (const T& v : per_cpu)
      sum += v;
    return sum;
  }

  // BTF ---------------------------------------------------------------------------------------
  /// The layout of `struct <name>` (or a typedef of a struct/union) from the object's BTF: what
  /// names the fields of payloads the object emits with bpf_perf_event_output.
  /// @return the schema, ENOENT (listing the object's structs) or ENODATA (no BTF).
  [[nodiscard]] Result<StructSchema> struct_schema(std::string_view struct_name) const;
  /// The key and value layouts of map `map` from its BTF (maps declared with __type(key, ...)
  /// and __type(value, ...) carry them).
  /// @return the schema, ENOENT listing the maps, ENODATA when the map has no BTF types.
  [[nodiscard]] Result<MapSchema> map_schema(std::string_view map) const;

  /// The libbpf object, for what this class does not wrap (attach by libbpf, skeletons).
  [[nodiscard]] ::bpf_object* raw() const noexcept { return obj_.get(); }

 private:
  struct Closer {
    void operator()(::bpf_object* o) const noexcept;
  };
  Object(std::unique_ptr<::bpf_object, Closer> obj, std::string name);
  [[nodiscard]] static Result<Object> open_impl(std::span<const std::byte> bytes,
                                                const std::filesystem::path* path,
                                                std::string_view name,
                                                bool copy);
  [[nodiscard]] Result<struct ::bpf_map*> find_map(std::string_view map) const;
  [[nodiscard]] Result<int> loaded_map_fd(std::string_view map) const;

  std::unique_ptr<::bpf_object, Closer> obj_;
  std::vector<std::byte> bytes_;  // open_memory's copy: libbpf reads it until load
  std::string name_;
  std::optional<CompileInfo> compile_info_;
  std::optional<LoadFailure> load_failure_;
  bool loaded_ = false;
};

/// The tail of a verifier log worth showing: up to `max_lines` lines ending at the error line
/// (the last line that is not the "processed N insns" summary or blank).
[[nodiscard]] std::string trim_verifier_log(std::string_view log, std::size_t max_lines = 25);

/// A vmlinux.h for `btf_path`, generated (by libbpf's BTF dumper, as bpftool does) into
/// `cache_dir`/vmlinux-<hash>/ on first use.
/// @return the directory that holds vmlinux.h.
[[nodiscard]] Result<std::filesystem::path> ensure_vmlinux_h(
    const std::filesystem::path& cache_dir,
    const std::filesystem::path& btf_path = "/sys/kernel/btf/vmlinux");

/// $XDG_CACHE_HOME/tracer/bpf, else $HOME/.cache/tracer/bpf.
[[nodiscard]] Result<std::filesystem::path> default_cache_dir();

/// Creates `dir` (mode 0700) if needed and checks that a root process may trust what it finds
/// there: a directory, not a link, owned by this user, writable by no one else (EPERM with the
/// fix otherwise). The compile cache's directories are made with it.
[[nodiscard]] Status make_cache_dir(const std::filesystem::path& dir);

}  // namespace tracer::bpf
