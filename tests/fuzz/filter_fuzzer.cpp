// Fuzzes the filter expression language (#27): arbitrary text as a `filter` stage's expr and as a
// probe's tracefs filter, deep and long. Parsing must end in an expression or a positioned error
// within the limits (1,024 terms, nesting 64), never a crash or a recursion as deep as the text;
// a parsed expression is printed, lowered to the kernel's form, bound to a schema with every
// field kind (ints, a __data_loc string, a char array, an array, pid/comm/cpu) and evaluated on
// a few events.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "plugins/stages/filter.hpp"
#include "support/stage_batches.hpp"
#include "tracer/diagnostics.hpp"
#include "tracer/ext/kernel_form.hpp"
#include "tracer/ext/stage.hpp"

namespace {

struct World {
  tracer::ProbeInfo probe = tracer::testing::fake_probe(0, "p");
  tracer::CommCache comm{{.capacity = 16, .proc_root = "/nonexistent", .read_proc = false}};
  tracer::testing::Records records;
  World() {
    records.event(probe, {.nr = -7, .path = "/etc/passwd", .bytes = 4096, .name = "worker"}, 10, 11,
                  100, 0);
    records.event(probe, {.nr = 42, .path = "", .bytes = -1, .name = "a*b[c]"}, 1, 1, 200, 1);
    records.event(probe, {.nr = 0, .path = std::string(300, 'x'), .bytes = 0, .name = ""}, 0, 0,
                  300, 1);
  }
};

World& world() {
  static World w;
  return w;
}

void exercise(std::optional<tracer::stages::FilterExpr> expr,
              const tracer::stages::FilterError& error) {
  if (!expr) {
    if (error.message.empty())
      std::abort();  // a refusal says why
    return;
  }
  (void)expr->dump();
  tracer::KernelForm form;
  expr->to_kernel(form);
  auto& w = world();
  tracer::Schema schema(std::span(&w.probe, 1), {}, w.comm);
  tracer::Diagnostics diags;
  if (!expr->bind(schema, {.path = "fuzz.toml", .line = 1, .column = 1}, diags))
    return;
  for (const auto& ref : w.records.refs()) {
    const tracer::Event e{.ref = &ref,
                          .sample = std::get_if<tracer::perf::Sample>(&ref.record.body),
                          .kind = tracer::RecordKind::kSample};
    (void)expr->eval(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  tracer::stages::FilterError error;
  exercise(tracer::stages::FilterExpr::parse(text, error), error);
  tracer::stages::FilterError tracefs_error;
  exercise(tracer::stages::FilterExpr::parse_tracefs(text, tracefs_error), tracefs_error);
  return 0;
}
