// KernelCode into a generated program (kernel_code.hpp).
#include "kernel_code.hpp"

#include <stdexcept>

namespace tracer::kernel::gen {

namespace {

// bpf/progs/tracer_buckets.h, the C twin of tracer/common/buckets.hpp (embedded by CMake).
constexpr std::string_view kBucketsC =
#include "tracer_buckets_h.inc"
    ;

}  // namespace

void CodeWriter::add(std::string_view lvalue, std::string_view v) {
  if (style_.cas)
    w_->line("__sync_fetch_and_add(&{}, {});", lvalue, v);
  else
    w_->line("{} += {};", lvalue, v);
}

void CodeWriter::add_carry(std::string_view lvalue, std::string_view v, std::string_view carry) {
  if (style_.cas) {
    w_->line("if (__sync_fetch_and_add(&{0}, {1}) + {1} < {1})", lvalue, v);
  } else {
    w_->line("{} += {};", lvalue, v);
    w_->line("if ({} < {})", lvalue, v);
  }
  w_->line("\t{} += 1;", carry);
}

void CodeWriter::raise(std::string_view target, std::string_view e) {
  emit_raise(*w_, target, e, style_.cas, style_.inc);
}

void CodeWriter::bucket_add(std::uint32_t buckets) {
  w_->line("__u32 b = tr_bucket(v);");
  w_->line("/* Forget what clang knows of b, so that the bound the verifier needs stays. */");
  w_->line(R"(asm volatile("" : "+r"(b));)");
  w_->line("if (b >= {})", buckets);
  w_->line("\tb = {};", buckets - 1);
  w_->line("{}(&p->counts[b]);", style_.vinc);
}

void CodeWriter::bucket_function(std::string_view call) {
  w_->raw(kBucketsC);
  w_->blank();
  w_->line("static __always_inline __u32 tr_bucket(__s64 v)");
  w_->line("{{");
  w_->line("\treturn {};", call);
  w_->line("}}");
  w_->blank();
}

const KernelAgg& kernel_agg(const Aggregation& agg) {
  if (agg.agg == nullptr)
    throw std::logic_error("a kernel plan without its aggregation's kernel part");
  return *agg.agg;
}

}  // namespace tracer::kernel::gen
