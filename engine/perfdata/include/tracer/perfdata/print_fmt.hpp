// PrintFmt: a tracepoint's `print fmt` (the TP_printk of its format file), evaluated on a
// record's RAW payload the way libtraceevent does for `perf script`, so that replayed tracepoint
// lines can be diffed with perf's.
//
// The common subset is understood: conversions %d %i %u %x %X %o %c %s %p with flags, width,
// precision and the h/hh/l/ll/z lengths; arguments that are C expressions over REC->field,
// integer and string literals, casts, the arithmetic, bitwise, relational and logical operators,
// ?:, and the helpers __get_str, __print_flags and __print_symbolic. Anything else (%pS, %pI4,
// __print_hex, __get_bitmask, ...) makes the format unsupported: print() then writes the fields
// as name=value and the caller can say so (see problem()).
//
// Usage:
//   const auto fmt = PrintFmt::parse(format);
//   if (!fmt.supported()) warn(format.name, fmt.problem());
//   std::string line;
//   fmt.print(sample.raw, line);  // appends
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "tracer/tracefs/tracefs.hpp"

namespace tracer::perfdata {

class PrintFmt {
 public:
  /// Parses `format.print_fmt` against `format`'s fields. Never fails: an unsupported format is
  /// remembered (supported() false) and printed as name=value.
  [[nodiscard]] static PrintFmt parse(const tracefs::Format& format);

  PrintFmt(PrintFmt&&) noexcept;
  PrintFmt& operator=(PrintFmt&&) noexcept;
  ~PrintFmt();

  [[nodiscard]] bool supported() const noexcept;
  /// Why the format is not supported ("" when it is).
  [[nodiscard]] const std::string& problem() const noexcept;

  /// Appends the record's text to `out`: the print fmt evaluated, or (unsupported format, or a
  /// payload a field does not fit) the non-common fields as name=value.
  /// @return true if the print fmt was used.
  bool print(std::span<const std::byte> raw, std::string& out) const;

  /// The fallback: " name=value" for each non-common field (strings as text, pointers in hex,
  /// other arrays as "[N bytes]"), without the leading space.
  static void print_fields(const tracefs::Format& format,
                           std::span<const std::byte> raw,
                           std::string& out);

  struct Impl;

 private:
  explicit PrintFmt(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tracer::perfdata
