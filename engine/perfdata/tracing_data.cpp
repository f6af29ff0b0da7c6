// TRACING_DATA: the tracefs files perf needs to decode tracepoint payloads, laid out as
// tools/perf/util/trace-event-read.c trace_report() reads them (version "0.6"):
//   "\027\bDtracing" "0.6\0" | u8 big-endian? | u8 sizeof(long) | u32 page size
//   "header_page\0"  u64 size, events/header_page
//   "header_event\0" u64 size, events/header_event
//   u32 ftrace formats (0)
//   u32 systems, each: "system\0" u32 events, each: u64 size, events/<system>/<event>/format
//   u32 kallsyms size (0: perf resolves kernel addresses itself)
//   u32 printk_formats size, printk_formats
//   u64 saved_cmdlines size, saved_cmdlines
// Integers in host byte order (the file's order, announced by the endianness byte).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "record_bytes.hpp"
#include "tracer/common/text_file.hpp"
#include "tracer/perfdata/writer.hpp"
#include "tracer/tracefs/tracefs.hpp"

namespace tracer::perfdata {
namespace {

/// A tracefs file of the tracing data (a format, printk_formats, saved_cmdlines).
Result<std::string> slurp(const std::string& path) {
  return tracer::detail::read_text_file(path, "perf-data", std::size_t{16} << 20);
}

using detail::put;

void put_bytes(std::vector<std::byte>& out, std::string_view s) {
  detail::put_raw(out, s.data(), s.size());
}

void put_cstr(std::vector<std::byte>& out, std::string_view s) {
  put_bytes(out, s);
  out.push_back(std::byte{0});
}

}  // namespace

Result<std::vector<std::byte>> build_tracing_data(
    const std::string& tracefs_root,
    std::span<const std::pair<std::string, std::string>> formats) {
  std::string root = tracefs_root;
  if (root.empty()) {
    TRACER_ASSIGN_OR_RETURN(auto tfs, tracefs::Tracefs::open());
    root = tfs.root().string();
  }
  std::vector<std::byte> out;
  put_bytes(out, kTracingMagic);
  put_cstr(out, "0.6");
  out.push_back(
      std::byte{std::endian::native == std::endian::big ? std::uint8_t{1} : std::uint8_t{0}});
  out.push_back(std::byte{sizeof(long)});
  put<std::uint32_t>(out, static_cast<std::uint32_t>(::sysconf(_SC_PAGESIZE)));

  for (const char* name : {"header_page", "header_event"}) {
    TRACER_ASSIGN_OR_RETURN(const std::string text, slurp(root + "/events/" + name));
    put_cstr(out, name);
    put<std::uint64_t>(out, text.size());
    put_bytes(out, text);
  }
  put<std::uint32_t>(out, 0);  // ftrace's own events: none

  // Systems in name order, each event once.
  std::map<std::string, std::vector<std::string>> systems;
  for (const auto& [system, event] : formats) {
    auto& events = systems[system];
    if (std::find(events.begin(), events.end(), event) == events.end())
      events.push_back(event);
  }
  put<std::uint32_t>(out, static_cast<std::uint32_t>(systems.size()));
  for (const auto& [system, events] : systems) {
    put_cstr(out, system);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(events.size()));
    for (const auto& event : events) {
      TRACER_ASSIGN_OR_RETURN(const std::string text,
                              slurp(root + "/events/" + system + "/" + event + "/format"));
      put<std::uint64_t>(out, text.size());
      put_bytes(out, text);
    }
  }

  put<std::uint32_t>(out, 0);  // kallsyms: perf 6.x skips it and uses its own resolver
  // printk formats and saved cmdlines are optional: an unreadable file is an empty one.
  const auto printk = slurp(root + "/printk_formats");
  const std::string_view printk_text = printk ? std::string_view(*printk) : std::string_view{};
  put<std::uint32_t>(out, static_cast<std::uint32_t>(printk_text.size()));
  put_bytes(out, printk_text);
  const auto cmdlines = slurp(root + "/saved_cmdlines");
  const std::string_view cmdlines_text =
      cmdlines ? std::string_view(*cmdlines) : std::string_view{};
  put<std::uint64_t>(out, cmdlines_text.size());
  put_bytes(out, cmdlines_text);
  return out;
}

}  // namespace tracer::perfdata
