// JSON strings, the one escaper of the layers and the CLI: JSON lines, summaries, logs.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace tracer::json {

/// `s` escaped for the inside of a JSON string: quotes, backslash and control characters
/// escaped, well-formed UTF-8 kept, and every byte of an invalid sequence as \u00XX (its
/// Latin-1 code point), so that a hostile name still makes a valid line.
void append_escaped(fmt::memory_buffer& out, std::string_view s);

/// A JSON string literal: `"` + append_escaped + `"`.
void append_string(fmt::memory_buffer& out, std::string_view s);

/// append_escaped into a string (no quotes).
[[nodiscard]] std::string escape(std::string_view s);

}  // namespace tracer::json
