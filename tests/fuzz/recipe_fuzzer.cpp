// Fuzzes the recipe loader and `tracer check`: arbitrary bytes as a recipe file, with every
// registered stage and a few --set overrides so those paths run too; a recipe that loads is then
// checked as `tracer check` checks it (against this system: tracepoints, binaries, symbols, BPF
// sources, each probe trial-opened and closed, the stages bound in a dry run). Only tracer::Error
// may escape, and it is the expected outcome for almost every input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include <chrono>
#include <string>

#include <boost/asio/io_context.hpp>

#include "tracer/error.hpp"
#include "tracer/recipe.hpp"
#include "tracer/session.hpp"

namespace {

const tracer::RecipeLoadOptions& options() {
  static const tracer::RecipeLoadOptions kOptions{.sets = {"pid=42", "recipe.duration=5s"},
                                                  .stages = tracer::stage_catalog()};
  return kOptions;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto recipe = tracer::Recipe::load_string(text, "fuzz.toml", options());
    (void)recipe.to_engine_options({});
  } catch (const tracer::Error& e) {
    // A rejected recipe, what most inputs are: it must say where and what, as a recipe error.
    if (e.category() != tracer::ErrorCategory::kRecipe || !e.where() ||
        std::string_view(e.what()).empty())
      std::abort();
    return 0;
  }
  // `tracer check`: whatever it finds is a tracer::Error with a message; nothing is written.
  try {
    const auto recipe = tracer::Recipe::load_string(text, "fuzz.toml", options());
    boost::asio::io_context io;
    std::string out;
    tracer::Sink sink = tracer::Sink::to_string(&out);
    tracer::SessionOptions so;
    so.pipeline.dry_run = true;  // as `tracer check`: no output path is opened
    so.all_problems = true;
    so.duration = std::chrono::seconds(1);
    tracer::Session session(io.get_executor(), recipe, sink, std::move(so));
    (void)session.check();
    (void)session.placement();
    if (!out.empty())
      std::abort();  // check prints nothing of the stages' own
  } catch (const tracer::Error& e) {
    if (std::string_view(e.what()).empty())
      std::abort();
  }
  return 0;
}
