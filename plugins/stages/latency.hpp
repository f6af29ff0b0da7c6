// latency: pairs an entry and an exit probe by a key (tid by default) and hands the exit event
// on with a derived field `duration` (ns, exit time - entry time). Entry events stop here; events
// of other probes pass through untouched.
//
// Counted, never silent: exits without a pending entry (missing entry, or the exit came first
// from another CPU's ring), entries overwritten before their exit (missing exit), and exits
// older than their entry (out of order; dropped).
#pragma once

#include <unordered_map>

#include "aggregate.hpp"

namespace tracer::stages {

struct LatencyStats {
  std::uint64_t paired = 0;
  std::uint64_t missing_entry = 0;    // exit with no pending entry
  std::uint64_t missing_exit = 0;     // entry replaced by a newer one, or pending at stop
  std::uint64_t out_of_order = 0;     // exit time before entry time
  std::uint64_t evicted = 0;          // pending entries dropped when the table was full
  std::uint64_t pending_at_stop = 0;  // entries still waiting for their exit at the end (also
                                      // in missing_exit)
};

class Latency : public Stage, public InKernel {
 public:
  [[nodiscard]] InKernel* in_kernel() noexcept override { return this; }
  [[nodiscard]] static StageSpec spec();

  void configure(const ConfigValue& options, Diagnostics& diags) override;
  void bind(BindContext& ctx, Diagnostics& diags) override;
  void on_events(std::span<Event* const> events) noexcept override;
  void stop() override;
  void counters(std::vector<std::pair<std::string, std::uint64_t>>& out) const override;
  [[nodiscard]] KernelForm kernel_form() const override;
  void absorb_counters(const KernelLatencyCounters& c) override;
  [[nodiscard]] const LatencyStats& stats() const noexcept { return stats_; }

 private:
  std::string entry_name_, exit_name_, key_name_ = "tid", exit_key_name_;
  SourceRegion entry_where_, exit_where_, key_where_, exit_key_where_, table_where_;
  std::size_t max_pending_ = 65536;
  std::uint32_t entry_ = 0, exit_ = 0;
  bool bound_ = false;
  std::optional<FieldRef> key_, exit_key_, time_;
  std::uint32_t slot_ = 0;
  KeyEncoder enc_;
  // key -> entry time (0: nothing pending). Entries are kept after their exit so the same
  // threads do not allocate again.
  std::unordered_map<std::string, std::uint64_t, KeyHash, KeyEq> pending_;
  std::size_t pending_count_ = 0;
  LatencyStats stats_;
};

}  // namespace tracer::stages
