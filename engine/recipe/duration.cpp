#include "tracer/duration.hpp"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

namespace tracer {
namespace {

// Splits "1.5s" into 1.5 and "s"; false when there is no leading number.
bool split_number(std::string_view text, double& value, std::string_view& unit) {
  std::size_t i = 0;
  while (i < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[i])) != 0 || text[i] == '.')) {
    ++i;
  }
  if (i == 0)
    return false;
  const std::string num(text.substr(0, i));
  char* end = nullptr;
  value = std::strtod(num.c_str(), &end);
  if (end != num.c_str() + num.size())
    return false;
  unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ')
    unit.remove_prefix(1);
  return true;
}

}  // namespace

Result<std::chrono::nanoseconds> parse_duration(std::string_view text) {
  double v = 0;
  std::string_view unit;
  const auto bad = [&] {
    return fail(EINVAL, fmt::format("bad duration '{}'", text),
                "write a number and a unit: 10ns, 100us, 250ms, 5s, 2m, 1h");
  };
  if (!split_number(text, v, unit))
    return bad();
  double scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1e9;
  } else if (unit == "ms") {
    scale = 1e6;
  } else if (unit == "us") {
    scale = 1e3;
  } else if (unit == "ns") {
    scale = 1;
  } else if (unit == "m" || unit == "min") {
    scale = 60e9;
  } else if (unit == "h") {
    scale = 3600e9;
  } else {
    return bad();
  }
  const double ns = v * scale;
  if (!std::isfinite(ns) || ns > 9.2e18)
    return bad();
  return std::chrono::nanoseconds(static_cast<std::int64_t>(std::llround(ns)));
}

Result<std::uint64_t> parse_size(std::string_view text) {
  double v = 0;
  std::string_view unit;
  const auto bad = [&] {
    return fail(EINVAL, fmt::format("bad size '{}'", text),
                "write bytes or a binary unit: 4096, 64k, 64KiB, 8m, 8MiB, 1g");
  };
  if (!split_number(text, v, unit))
    return bad();
  std::string u(unit);
  for (auto& c : u)
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 0;
  if (u.empty() || u == "b") {
    scale = 1;
  } else if (u == "k" || u == "kb" || u == "kib") {
    scale = 1024.0;
  } else if (u == "m" || u == "mb" || u == "mib") {
    scale = 1024.0 * 1024;
  } else if (u == "g" || u == "gb" || u == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return bad();
  }
  const double bytes = v * scale;
  if (!std::isfinite(bytes) || bytes > 1.8e19 || bytes != std::floor(bytes))
    return bad();
  return static_cast<std::uint64_t>(bytes);
}

}  // namespace tracer
