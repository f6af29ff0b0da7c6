// The loss formula in one place: each probe's losses by kind, their sum, and the engine's total
// over every probe (what the CLI's status line and summary print, and an embedder reads).
#include <gtest/gtest.h>

#include "tracer/stats.hpp"

namespace tracer {
namespace {

TEST(Stats, LostIsEveryKindOfLossOfEveryProbe) {
  ProbeStats ring;  // LOST and LOST_SAMPLES records on two CPUs, and records never processed
  RingStats cpu0, cpu1;
  cpu0.lost = 5;
  cpu0.lost_samples = 2;
  cpu1.lost = 3;
  cpu1.unprocessed = 1;
  ring.per_cpu = {{0, cpu0}, {1, cpu1}};
  ProbeStats output;  // BPF output drops: those the ring's LOST counted are not counted twice
  RingStats cpu;
  cpu.lost = 4;
  output.per_cpu = {{0, cpu}};
  output.bpf_output_drops = 10;
  ProbeStats kernel;  // in-kernel aggregation: map full and stacks the stack map could not hold
  kernel.kernel_dropped = 7;
  kernel.kernel_stacks_lost = 3;
  kernel.targets_dropped = 100;  // processes, reported beside the losses
  kernel.bpf_skipped = 50;       // likewise

  EXPECT_EQ(ring.losses().ring, 11U);
  EXPECT_EQ(ring.lost(), 11U);
  EXPECT_EQ(output.losses().ring, 4U);
  EXPECT_EQ(output.losses().output_drops, 6U);
  EXPECT_EQ(output.lost(), 10U);
  EXPECT_EQ(kernel.losses().map_full, 4U);
  EXPECT_EQ(kernel.losses().stacks_lost, 3U);
  EXPECT_EQ(kernel.lost(), 7U);

  Stats all;
  all.probes = {ring, output, kernel};
  EXPECT_EQ(all.lost(), 11U + 10U + 7U);
  EXPECT_EQ(Stats{}.lost(), 0U);
}

}  // namespace
}  // namespace tracer
