#include "tracer/syscall_names.hpp"

#include <array>
#include <cstddef>

namespace tracer::core {
namespace {

struct NrName {
  std::int64_t nr;
  std::string_view name;
};

constexpr NrName kSyscalls[] = {
#include "syscall_names.inc"
    {-1, {}},  // keeps the array non-empty when the header gave nothing
};

constexpr std::size_t kTableSize = [] {
  std::int64_t max = -1;
  for (const auto& s : kSyscalls)
    max = s.nr > max ? s.nr : max;
  return static_cast<std::size_t>(max + 1);
}();

// Indexed by number: the lookup on the hot path is one bounds check and a load.
constexpr auto kByNumber = [] {
  std::array<std::string_view, kTableSize> t{};
  for (const auto& s : kSyscalls) {
    if (s.nr >= 0)
      t[static_cast<std::size_t>(s.nr)] = s.name;
  }
  return t;
}();

}  // namespace

std::string_view syscall_name(std::int64_t nr) noexcept {
  if (nr < 0 || static_cast<std::uint64_t>(nr) >= kByNumber.size())
    return {};
  return kByNumber[static_cast<std::size_t>(nr)];
}

std::optional<std::int64_t> syscall_number(std::string_view name) noexcept {
  for (const auto& s : kSyscalls) {
    if (s.nr >= 0 && s.name == name)
      return s.nr;
  }
  return std::nullopt;
}

}  // namespace tracer::core
