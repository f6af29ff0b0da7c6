// C++ names in uprobe specs: functions matched by their demangled names, with or without a
// signature, '*' and '?' as wildcards (tracer/symbols/uprobe_target.hpp).
#include <fmt/core.h>
#include <gelf.h>
#include <libelf.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "symbols_internal.hpp"
#include "tracer/common/edit_distance.hpp"
#include "tracer/symbols/uprobe_target.hpp"

namespace tracer::symbols {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMaxNearMatches = 5;

}  // namespace

std::string_view cxx_function_name(std::string_view demangled) {
  // Skips a balanced group opened at `i` ('(' '<' '{' '['), returning the index past it.
  const auto skip_group = [&](std::size_t i) {
    int depth = 0;
    for (; i < demangled.size(); ++i) {
      const char c = demangled[i];
      if (c == '(' || c == '<' || c == '{' || c == '[')
        ++depth;
      else if ((c == ')' || c == '>' || c == '}' || c == ']') && --depth == 0)
        return i + 1;
    }
    return demangled.size();
  };
  std::size_t name_start = 0;
  for (std::size_t i = 0; i < demangled.size();) {
    const std::string_view rest = demangled.substr(i);
    if (rest.starts_with("(anonymous namespace)")) {
      i += std::string_view("(anonymous namespace)").size();
    } else if (rest.starts_with("operator") &&
               (i == 0 || demangled[i - 1] == ':' || demangled[i - 1] == ' ')) {
      // The operator's own characters are part of the name: "operator()", "operator<<".
      i += std::string_view("operator").size();
      if (demangled.substr(i).starts_with("()"))
        i += 2;
      while (i < demangled.size() &&
             std::string_view("<>=!+-*/%^&|~[],").find(demangled[i]) != std::string_view::npos)
        ++i;
    } else if (rest.front() == '(') {
      return demangled.substr(name_start, i - name_start);  // the parameters
    } else if (rest.front() == '<' || rest.front() == '{' || rest.front() == '[') {
      i = skip_group(i);
    } else if (rest.front() == ' ') {
      name_start = ++i;  // a template function's return type came first: "int ns::f<int>(int)"
    } else {
      ++i;
    }
  }
  return demangled.substr(name_start);
}

bool is_cxx_pattern(std::string_view name) {
  return name.find("::") != std::string_view::npos || name.find('(') != std::string_view::npos ||
         name.find('*') != std::string_view::npos || name.find('?') != std::string_view::npos;
}

Result<std::vector<FunctionMatch>> match_functions(const fs::path& binary,
                                                   std::string_view pattern) {
  TRACER_ASSIGN_OR_RETURN(
      detail::OpenElf file,
      detail::open_elf(
          binary, "elf",
          "uprobes need an executable or shared library, e.g. /usr/bin/bash:readline"));
  Elf* elf = file.elf.get();
  // With a signature the whole demangled text is matched, else the name without it (every
  // overload).
  const bool signature = pattern.find('(') != std::string_view::npos;
  std::vector<FunctionMatch> out;
  std::set<std::string> names;   // every function's, for near matches
  std::set<std::uint64_t> seen;  // file offsets: aliases (C1/C2 constructors) probe once
  const auto scan = [&](Elf64_Word table) {
    detail::for_each_defined_symbol(elf, table, [&](const detail::DefinedSymbol& s) {
      if (s.type != STT_FUNC && s.type != STT_GNU_IFUNC)
        return;
      std::string demangled = detail::demangle(s.name);
      const std::string_view name = cxx_function_name(demangled);
      if (names.size() < 100000)
        names.emplace(signature ? std::string_view(demangled) : name);
      if (!detail::wildcard_match(pattern, signature ? std::string_view(demangled) : name))
        return;
      const auto offset = detail::vaddr_to_offset(elf, s.sym.st_value);
      if (!offset || !seen.insert(*offset).second)
        return;
      out.push_back({.demangled = demangled,
                     .mangled = s.name,
                     .file_offset = *offset,
                     .size = s.sym.st_size});
    });
  };
  scan(SHT_SYMTAB);
  if (out.empty() && names.empty())
    scan(SHT_DYNSYM);  // stripped: what it exports
  if (out.empty()) {
    const auto near = tracer::detail::nearest(
        pattern, names,
        {.max_distance = 4, .limit = kMaxNearMatches, .related_only = false, .substring = true});
    return fail(
        ENOENT, fmt::format("elf: no function matches '{}' in {}", pattern, binary.string()),
        tracer::detail::did_you_mean(
            near,
            fmt::format("`tracer list uprobes {} '*'` lists its functions", binary.string())));
  }
  std::sort(out.begin(), out.end(), [](const FunctionMatch& a, const FunctionMatch& b) {
    return a.demangled < b.demangled;
  });
  return out;
}

}  // namespace tracer::symbols
