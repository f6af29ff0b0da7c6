// The generator's side of an aggregation's kernel part (tracer/ext/kernel_form.hpp KernelAgg):
// KernelCode written into the program's Writer, its update primitives plain or atomic as the
// program's value is per-CPU or shared. The generator names no aggregation: the stage's
// KernelAgg writes its value and its update through this.
#pragma once

#include <cstdint>
#include <string_view>

#include "codegen_internal.hpp"
#include "tracer/ext/kernel_form.hpp"

namespace tracer::kernel::gen {

/// How a program's update is written: `cas` with atomics (a shared value, or a preemptible
/// program), `inc` the macro that counts into the stats, `vinc` the one that counts into the
/// value.
struct UpdateStyle {
  bool cas = false;
  std::string_view inc = "TR_INC", vinc = "TR_INC";
};

class CodeWriter final : public KernelCode {
 public:
  explicit CodeWriter(Writer& w, UpdateStyle style = {}) : w_(&w), style_(style) {}

  void line(std::string_view text) override { w_->line("{}", text); }
  void raw(std::string_view text) override { w_->raw(text); }
  void blank() override { w_->blank(); }
  void in() override { w_->in(); }
  void out() override { w_->out(); }
  void count(std::string_view ptr) override { w_->line("{}({});", style_.vinc, ptr); }
  void add(std::string_view lvalue, std::string_view v) override;
  void add_carry(std::string_view lvalue, std::string_view v, std::string_view carry) override;
  void raise(std::string_view target, std::string_view e) override;
  void bucket_add(std::uint32_t buckets) override;
  void bucket_function(std::string_view call) override;

 private:
  Writer* w_;
  UpdateStyle style_;
};

/// The plan's aggregation's kernel part (checked present by check()).
/// @throws std::logic_error for a plan without one.
[[nodiscard]] const KernelAgg& kernel_agg(const Aggregation& agg);

}  // namespace tracer::kernel::gen
