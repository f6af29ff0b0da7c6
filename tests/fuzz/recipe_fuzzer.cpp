// Fuzzes the recipe loader: arbitrary bytes as a recipe file, with a small stage catalog and a
// few --set overrides so those paths run too. Only tracer::Error may escape load_string(), and
// it is the expected outcome for almost every input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tracer/error.hpp"
#include "tracer/recipe.hpp"

namespace {

const tracer::RecipeLoadOptions& options() {
  using Type = tracer::OptionSpec::Type;
  static const tracer::RecipeLoadOptions kOptions{
      .sets = {"pid=42", "recipe.duration=5s"},
      .stages = {
          {.name = "count",
           .summary = {},
           .options = {{.name = "by", .type = Type::kFieldList, .required = false, .help = {}},
                       {.name = "top", .type = Type::kInt, .required = false, .help = {}},
                       {.name = "every", .type = Type::kDuration, .required = false, .help = {}}}},
          {.name = "filter",
           .summary = {},
           .options = {{.name = "expr", .type = Type::kExpression, .required = true, .help = {}}}},
          {.name = "jsonl",
           .summary = {},
           .options = {{.name = "max_size", .type = Type::kSize, .required = false, .help = {}}}},
      }};
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
  }
  return 0;
}
