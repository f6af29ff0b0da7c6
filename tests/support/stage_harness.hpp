// Test support for pipeline stage tests: a pipeline writing to a string (Harness), events of
// the fake tracepoint (ev), a strict JSON checker (Json) and output lines.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "support/stage_batches.hpp"
#include "tracer/ext/stages.hpp"
#include "tracer/pipeline.hpp"

namespace tracer::testing {

using namespace std::chrono_literals;

// A pipeline writing to a string, with stages from the global registry.
struct Harness {
  std::string out;
  Sink sink = Sink::to_string(&out);
  Pipeline pipeline;
  Diagnostics diags;
  std::vector<ProbeInfo> probes;

  explicit Harness(std::vector<ProbeInfo> p, PipelineOptions o = {})
      : pipeline(sink, std::move(o)), probes(std::move(p)) {}
  Harness& add(std::string_view use, ConfigTable options = {}) {
    pipeline.add(stage_registry(), use, cv_table(std::move(options)), diags);
    return *this;
  }
  void bind() {
    pipeline.bind(probes, diags);
    pipeline.start(0ns);
  }
  std::string errors() const { return diags.format(); }
};

inline FakeEvent ev(std::int32_t nr,
                    std::string path = "/tmp/x",
                    std::int64_t bytes = 0,
                    std::string name = "n") {
  FakeEvent e;
  e.nr = nr;
  e.path = std::move(path);
  e.bytes = bytes;
  e.name = std::move(name);
  return e;
}

// ---------------------------------------------------------------------------------------------
// A small strict JSON checker (RFC 8259) that also decodes top-level string members.

class Json {
 public:
  explicit Json(std::string_view s) : s_(s) {}
  bool valid() {
    ws();
    if (!value(0))
      return false;
    ws();
    return i_ == s_.size();
  }
  std::map<std::string, std::string> strings;  // top-level "key": "string" members, decoded

 private:
  bool value(int depth) {
    ws();
    if (i_ >= s_.size())
      return false;
    const char c = s_[i_];
    if (c == '{')
      return object(depth);
    if (c == '[')
      return array(depth);
    if (c == '"') {
      std::string ignored;
      return string(ignored);
    }
    if (s_.substr(i_, 4) == "true" || s_.substr(i_, 4) == "null") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "false") {
      i_ += 5;
      return true;
    }
    return number();
  }
  bool object(int depth) {
    ++i_;
    ws();
    if (peek() == '}') {
      ++i_;
      return true;
    }
    while (true) {
      ws();
      std::string key;
      if (!string(key))
        return false;
      ws();
      if (peek() != ':')
        return false;
      ++i_;
      ws();
      if (depth == 0 && peek() == '"') {
        std::string v;
        if (!string(v))
          return false;
        strings[key] = v;
      } else if (!value(depth + 1)) {
        return false;
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == '}') {
        ++i_;
        return true;
      }
      return false;
    }
  }
  bool array(int depth) {
    ++i_;
    ws();
    if (peek() == ']') {
      ++i_;
      return true;
    }
    while (true) {
      if (!value(depth + 1))
        return false;
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      if (peek() == ']') {
        ++i_;
        return true;
      }
      return false;
    }
  }
  bool string(std::string& out) {
    if (peek() != '"')
      return false;
    ++i_;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"')
        return true;
      if (c < 0x20)
        return false;
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        continue;
      }
      if (i_ >= s_.size())
        return false;
      const char e = s_[i_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out.push_back(e);
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 'b':
        case 'f':
          out.push_back(' ');
          break;
        case 'u': {
          if (i_ + 4 > s_.size())
            return false;
          const auto hex = std::string(s_.substr(i_, 4));
          if (hex.find_first_not_of("0123456789abcdefABCDEF") != std::string::npos)
            return false;
          const auto cp = std::stoul(hex, nullptr, 16);
          out.push_back(cp < 0x80 ? static_cast<char>(cp) : '?');
          i_ += 4;
          break;
        }
        default:
          return false;
      }
    }
    return false;
  }
  bool number() {
    const std::size_t start = i_;
    if (peek() == '-')
      ++i_;
    if (!std::isdigit(static_cast<unsigned char>(peek())))
      return false;
    if (peek() == '0')
      ++i_;
    else
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    if (peek() == '.') {
      ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return false;
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-')
        ++i_;
      if (!std::isdigit(static_cast<unsigned char>(peek())))
        return false;
      while (std::isdigit(static_cast<unsigned char>(peek())))
        ++i_;
    }
    return i_ > start;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  std::string_view s_;
  std::size_t i_ = 0;
};

inline std::vector<std::string> lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < s.size()) {
    auto end = s.find('\n', start);
    if (end == std::string::npos)
      end = s.size();
    out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

}  // namespace tracer::testing
