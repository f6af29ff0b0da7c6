// tracefs: finding (or mounting) it, listing tracepoints, reading ids and format files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tracer/result.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

namespace tracer::tracefs {

/// One field of a tracepoint's `format` file.
struct Field {
  std::string name;  // "filename"
  std::string type;  // the C type as written, without the name and array suffix: "const char *"
  std::uint32_t offset = 0;
  std::uint32_t size = 0;  // bytes the field occupies in the record (4 for __data_loc)
  bool is_signed = false;
  bool is_common = false;    // common_* fields
  bool is_data_loc = false;  // __data_loc: u32 (len << 16 | offset from record start)
  bool is_rel_loc = false;   // __rel_loc: u32 (len << 16 | offset from the end of this field)
  bool is_string = false;    // char arrays and dynamic char strings
  std::optional<std::uint32_t> array_len;  // "char comm[16]" -> 16; dynamic arrays -> nullopt
  std::uint32_t element_size = 0;          // size of one element (for arrays), else == size
};

struct Format {
  std::string system;
  std::string name;
  std::uint32_t id = 0;
  std::vector<Field> fields;  // common fields first, as in the file
  std::string print_fmt;

  [[nodiscard]] const Field* field(std::string_view name) const noexcept;
};

/// A `char *` field (`const char * filename` of syscalls:sys_enter_openat): the record holds
/// the pointer, the string is wherever it points (user memory for a system call's argument).
[[nodiscard]] bool is_string_pointer(const Field& f) noexcept;

/// A tracefs filter as the kernel must get it for `format`'s event: a string comparison of a
/// `char *` field that points into user memory (a system call's argument: the "syscalls"
/// system, as tracer's in-kernel programs read it) names the field `.ustring`, else the kernel
/// reads the pointer as a kernel string, which fails, and the filter matches nothing, silently
/// (`filename == "/etc/passwd"` on sys_enter_openat). Quoted text and fields that already have
/// a suffix are left as they are.
[[nodiscard]] std::string kernel_filter(std::string_view filter, const Format& format);

/// Parses the text of a `format` file.
/// @return the format, or a Failure (EINVAL) that names the line that did not parse.
[[nodiscard]] Result<Format> parse_format(std::string_view text,
                                          std::string_view system = {},
                                          std::string_view event = {});

/// Reads a field's value out of a RAW payload, bounds-checked. Integer fields of 1/2/4/8 bytes are
/// sign- or zero-extended per `is_signed`.
/// @return std::nullopt if the field does not fit in `raw` or is not an integer of those sizes.
[[nodiscard]] std::optional<std::int64_t> read_int(const Field& f,
                                                   std::span<const std::byte> raw) noexcept;
/// A string field (char array or __data_loc/__rel_loc char[]), up to its first NUL.
[[nodiscard]] std::optional<std::string_view> read_string(const Field& f,
                                                          std::span<const std::byte> raw) noexcept;
/// The bytes of a dynamic (__data_loc/__rel_loc) or fixed array field.
[[nodiscard]] std::optional<std::span<const std::byte>> read_bytes(
    const Field& f,
    std::span<const std::byte> raw) noexcept;

struct TracepointName {
  std::string system;
  std::string event;
};
/// "sys:event" or "sys/event" -> {sys, event}; std::nullopt if malformed.
[[nodiscard]] std::optional<TracepointName> split_tracepoint(std::string_view spec);

class Tracefs {
 public:
  /// Finds tracefs in /proc/mounts (tracefs, or debugfs's tracing/); mounts it at
  /// /sys/kernel/tracing when absent and we may.
  /// @return the instance, or a Failure that says whether it was absent and why mounting failed.
  [[nodiscard]] static Result<Tracefs> open();
  /// Uses `root` as the tracefs root (tests, fake trees).
  [[nodiscard]] static Tracefs at(std::filesystem::path root) { return Tracefs(std::move(root)); }

  [[nodiscard]] const std::filesystem::path& root() const noexcept { return root_; }

  /// Every "system:event" under events/, sorted; optionally filtered by a shell glob
  /// (fnmatch on "system:event").
  [[nodiscard]] Result<std::vector<TracepointName>> list_tracepoints(
      std::string_view glob = {}) const;

  /// @return the tracepoint id, or ENOENT with up to 5 near matches in the hint.
  [[nodiscard]] Result<std::uint32_t> tracepoint_id(const TracepointName& tp) const;
  /// @return the parsed format file (id included), or ENOENT with near matches in the hint.
  [[nodiscard]] Result<Format> format(const TracepointName& tp) const;

  /// Up to `max` existing tracepoints nearest to `tp` by edit distance (for hints).
  [[nodiscard]] std::vector<std::string> near_matches(const TracepointName& tp,
                                                      std::size_t max = 5) const;

 private:
  explicit Tracefs(std::filesystem::path root) : root_(std::move(root)) {}
  std::filesystem::path root_;
};

}  // namespace tracer::tracefs

#pragma GCC visibility pop
