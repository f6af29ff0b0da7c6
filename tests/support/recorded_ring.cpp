#include "support/recorded_ring.hpp"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "support/synthetic_ring.hpp"
#include "tracer/perf/record_text.hpp"
#include "tracer/perf/ring.hpp"

namespace tracer::testing {

std::string golden_text(const perf::SampleLayout& layout,
                        std::span<const std::byte> bytes,
                        const tracefs::Format* format) {
  std::string out;
  const auto err = perf::for_each_record(bytes, [&](std::span<const std::byte> rec) {
    perf::Record r;
    const auto e = perf::decode(rec, layout, r);
    if (e != perf::DecodeError::kOk) {
      out += fmt::format("DECODE ERROR: {}\n", perf::to_string(e));
      return;
    }
    out += perf::to_text(r) + "\n";
    const auto* s = std::get_if<perf::Sample>(&r.body);
    if (s != nullptr && !s->raw.empty() && format == nullptr) {
      std::string hex;
      for (const std::byte b : s->raw)
        hex += fmt::format("{:02x}", static_cast<unsigned>(b));
      out += "  raw " + hex + "\n";
    } else if (s != nullptr && !s->raw.empty()) {
      std::string fields;
      for (const auto& f : format->fields) {
        if (f.is_common)
          continue;
        if (auto v = tracefs::read_int(f, s->raw))
          fields += fmt::format(" {}={}", f.name, *v);
      }
      out += " " + fields + "\n";
    }
  });
  if (err != perf::DecodeError::kOk)
    out += fmt::format("WALK ERROR: {}\n", perf::to_string(err));
  return out;
}

Status write_recorded_ring(const RecordedRing& r,
                           const tracefs::Format* format,
                           const std::string& stem) {
  const std::string golden = golden_text(r.layout, r.bytes, format);
  std::ofstream hex(stem + ".hex");
  hex << "# Ring bytes recorded from this kernel (tests/tools/capture_ring.cpp).\n";
  hex << "# attr: " << r.attr_text << "\n# decodes to:\n";
  std::istringstream lines(golden);
  for (std::string line; std::getline(lines, line);)
    hex << "#   " << line << "\n";
  for (std::size_t off = 0; off < r.bytes.size(); off += 16) {
    hex << fmt::format("{:08x}:", off);
    for (std::size_t i = off; i < off + 16 && i < r.bytes.size(); i += 2) {
      hex << fmt::format(" {:02x}", static_cast<unsigned>(r.bytes[i]));
      if (i + 1 < r.bytes.size())
        hex << fmt::format("{:02x}", static_cast<unsigned>(r.bytes[i + 1]));
    }
    hex << "\n";
  }
  std::ofstream attr(stem + ".attr");
  attr << fmt::format(
      "sample_type={:#x}\nread_format={:#x}\nsample_id_all={}\nsample_regs_user={:#x}\n"
      "format={}\nattr={}\n",
      r.layout.sample_type, r.layout.read_format, r.layout.sample_id_all ? 1 : 0,
      r.sample_regs_user, r.format_file, r.attr_text);
  std::ofstream expected(stem + ".expected");
  expected << golden;
  if (!hex || !attr || !expected)
    return fail(EIO, "cannot write " + stem + ".*");
  return {};
}

Result<RecordedRing> read_recorded_ring(const std::string& stem) {
  RecordedRing r;
  std::ifstream attr(stem + ".attr");
  if (!attr)
    return fail(ENOENT, "cannot read " + stem + ".attr");
  std::uint64_t st = 0, rf = 0, regs = 0;
  int id_all = 0;
  for (std::string line; std::getline(attr, line);) {
    const auto eq = line.find('=');
    if (eq == std::string::npos)
      continue;
    const std::string key = line.substr(0, eq), value = line.substr(eq + 1);
    if (key == "sample_type")
      st = std::stoull(value, nullptr, 0);
    if (key == "read_format")
      rf = std::stoull(value, nullptr, 0);
    if (key == "sample_id_all")
      id_all = std::stoi(value);
    if (key == "sample_regs_user")
      regs = std::stoull(value, nullptr, 0);
    if (key == "format")
      r.format_file = value;
    if (key == "attr")
      r.attr_text = value;
  }
  r.sample_regs_user = regs;
  r.layout = perf::SampleLayout::from(st, rf, id_all != 0, 0, regs);
  r.bytes = read_xxd(stem + ".hex");
  return r;
}

}  // namespace tracer::testing
