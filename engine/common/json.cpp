#include "tracer/common/json.hpp"

#include <iterator>

namespace tracer::json {

namespace {

void put_str(fmt::memory_buffer& out, std::string_view s) {
  out.append(s.data(), s.data() + s.size());
}

}  // namespace

void append_escaped(fmt::memory_buffer& out, std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      ++i;
    } else if (c < 0x20) {
      switch (c) {
        case '\n':
          put_str(out, "\\n");
          break;
        case '\t':
          put_str(out, "\\t");
          break;
        case '\r':
          put_str(out, "\\r");
          break;
        default:
          fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
      }
      ++i;
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
    } else {
      // Keep a well-formed UTF-8 sequence; escape a stray byte as its Latin-1 code point so the
      // line stays valid JSON.
      std::size_t n = c >= 0xF0 && c < 0xF5   ? 4
                      : c >= 0xE0 && c < 0xF0 ? 3
                      : c >= 0xC2 && c < 0xE0 ? 2
                                              : 0;
      bool ok = n != 0 && i + n <= s.size();
      for (std::size_t k = 1; ok && k < n; ++k)
        ok = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (ok && n == 3) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);  // overlong, surrogates
      } else if (ok && n == 4) {
        const auto c1 = static_cast<unsigned char>(s[i + 1]);
        ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
      }
      if (ok) {
        put_str(out, s.substr(i, n));
        i += n;
      } else {
        fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(c));
        ++i;
      }
    }
  }
}

void append_string(fmt::memory_buffer& out, std::string_view s) {
  out.push_back('"');
  append_escaped(out, s);
  out.push_back('"');
}

std::string escape(std::string_view s) {
  fmt::memory_buffer out;
  append_escaped(out, s);
  return fmt::to_string(out);
}

}  // namespace tracer::json
