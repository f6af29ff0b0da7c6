// Ring bytes recorded from a real kernel (tests/data/rings/<k>-<arch>/*.hex) decode to their
// golden text, read straight and replayed through a synthetic ring at every wrap offset.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "support/recorded_ring.hpp"
#include "support/synthetic_ring.hpp"
#include "support/temp_dir.hpp"
#include "tracer/perf/ring.hpp"

namespace tracer::perf {
namespace {

namespace fs = std::filesystem;

using tracer::testing::slurp;

std::vector<fs::path> recorded_cases() {
  std::vector<fs::path> stems;
  for (const auto& dir : fs::directory_iterator(fs::path(TRACER_TEST_DATA_DIR) / "rings")) {
    for (const auto& f : fs::directory_iterator(dir)) {
      if (f.path().extension() == ".hex")
        stems.push_back(f.path().parent_path() / f.path().stem());
    }
  }
  return stems;
}

TEST(RecordedRing, DecodesToGoldenAtEveryWrapOffset) {
  const auto cases = recorded_cases();
  ASSERT_FALSE(cases.empty()) << "no recorded rings under tests/data/rings";
  for (const auto& stem : cases) {
    SCOPED_TRACE(stem.string());
    auto rec = testing::read_recorded_ring(stem.string());
    ASSERT_TRUE(rec.has_value()) << rec.error().describe();
    const auto kernel_dir = stem.parent_path().filename();
    std::optional<tracefs::Format> format;  // none: RAW data that is not a tracepoint record
    if (!rec->format_file.empty()) {
      auto parsed = tracefs::parse_format(
          slurp(fs::path(TRACER_TEST_DATA_DIR) / "tracefs" / kernel_dir / rec->format_file));
      ASSERT_TRUE(parsed.has_value()) << parsed.error().describe();
      format = std::move(*parsed);
    }
    const tracefs::Format* fmt = format ? &*format : nullptr;
    const std::string expected = slurp(stem.string() + ".expected");
    ASSERT_FALSE(expected.empty());
    EXPECT_EQ(expected.find("ERROR"), std::string::npos) << "the golden text holds an error";
    EXPECT_EQ(testing::golden_text(rec->layout, rec->bytes, fmt), expected);

    // Replay: the same bytes, laid into a ring as the kernel would, starting at every offset.
    testing::SyntheticRing synth(1);
    ASSERT_LE(rec->bytes.size(), synth.data_size());
    int offsets = 0;
    for (std::uint64_t start = 0; start < synth.data_size(); start += 8, ++offsets) {
      synth.set_position(start);
      std::size_t pos = 0;
      ASSERT_EQ(for_each_record(rec->bytes,
                                [&](std::span<const std::byte> r) {
                                  ASSERT_TRUE(synth.write(r));
                                  pos += r.size();
                                }),
                DecodeError::kOk);
      synth.publish();
      auto ring = Ring::adopt(synth.meta_and_data(), {}, false);
      ASSERT_TRUE(ring.has_value());
      std::vector<std::byte> linear;
      ring->load_head();
      for (auto p = ring->peek(); !p.record.empty(); p = ring->peek()) {
        linear.insert(linear.end(), p.record.begin(), p.record.end());
        ring->consume(p.record.size());
      }
      ring->commit();
      ASSERT_EQ(testing::golden_text(rec->layout, linear, fmt), expected) << "start " << start;
    }
    EXPECT_EQ(offsets, 512);
  }
}

}  // namespace
}  // namespace tracer::perf
