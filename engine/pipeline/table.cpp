// Sinks, and cells as text.
#include "tracer/table.hpp"

#include <cctype>

#include "tracer/output_file.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <ranges>
#include <system_error>
#include <type_traits>

#if defined(__x86_64__)
#include <asm/perf_regs.h>
#endif

namespace tracer {

// Sink

void Sink::Closer::operator()(std::FILE* f) const noexcept {
  if (f != nullptr)
    std::fclose(f);
}

Sink Sink::to_file(std::FILE* file) noexcept {
  Sink s;
  s.file_ = file;
  return s;
}

Sink Sink::discard() noexcept {
  return {};
}

Sink Sink::to_string(std::string* text) noexcept {
  Sink s;
  s.text_ = text;
  return s;
}

Result<Sink> Sink::open(const std::string& path) {
  TRACER_ASSIGN_OR_RETURN(auto fd, open_output_file(path));
  std::FILE* f = ::fdopen(fd.get(), "w");
  if (f == nullptr) {
    const int err = errno;
    return fail(err, fmt::format("sink: cannot write '{}': {}", path, std::strerror(err)));
  }
  [[maybe_unused]] const int owned_by_file = fd.release();
  Sink s;
  s.owned_.reset(f);
  s.file_ = f;
  return s;
}

void Sink::write(std::string_view bytes) noexcept {
  if (text_ != nullptr) {
    try {
      text_->append(bytes);
    } catch (...) {  // NOLINT(bugprone-empty-catch): a test sink out of memory drops output
    }
  } else if (file_ != nullptr) {
    if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size() && error_ == 0)
      error_ = errno != 0 ? errno : EIO;
  }
}

void Sink::flush() noexcept {
  if (file_ != nullptr && (std::fflush(file_) != 0 || std::ferror(file_) != 0) && error_ == 0)
    error_ = errno != 0 ? errno : EIO;
}

std::string folded_text(const Stack& s) {
  std::string out;
  for (const auto& f : std::views::reverse(s.frames)) {
    if (!out.empty())
      out += ';';
    out += symbols::frame_label(f, /*with_offset=*/false);
  }
  return out;
}

std::optional<double> to_number(const Cell& c) noexcept {
  if (const auto* i = std::get_if<std::int64_t>(&c))
    return static_cast<double>(*i);
  if (const auto* u = std::get_if<std::uint64_t>(&c))
    return static_cast<double>(*u);
  if (const auto* d = std::get_if<double>(&c))
    return *d;
  return std::nullopt;
}

std::string to_text(const Cell& c) {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return {};
        else if constexpr (std::is_same_v<T, std::string>)
          return v;
        else if constexpr (std::is_same_v<T, Stack>)
          return folded_text(v);
        else
          return fmt::format("{}", v);
      },
      c);
}

std::vector<ValueKind> value_kinds_of(const Table& t) {
  if (t.value_kinds.size() == t.value_names.size())
    return t.value_kinds;
  std::vector<ValueKind> out;
  for (std::size_t v = 0; v < t.value_names.size(); ++v) {
    const std::string& n = t.value_names[v];
    if ((t.histogram && v == 0) || n == "count")
      out.push_back(ValueKind::kCount);
    else if (n == "sum")
      out.push_back(ValueKind::kSum);
    else if (n == "min")
      out.push_back(ValueKind::kMin);
    else if (n == "max")
      out.push_back(ValueKind::kMax);
    else if (n == "unit")
      out.push_back(ValueKind::kLabel);
    else if (n.size() > 1 && n[0] == 'p' && std::isdigit(static_cast<unsigned char>(n[1])) != 0)
      out.push_back(ValueKind::kQuantile);
    else
      out.push_back(ValueKind::kGauge);
  }
  return out;
}

}  // namespace tracer
