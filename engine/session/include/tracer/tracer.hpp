// tracer's supported API in one include: what an embedder builds against (docs/embedding.md).
// The stable API is this header and every tracer header it reaches (cmake/public_headers.cmake);
// the extension points (stages written in C++ against the stage API, the registry) are
// tracer/ext/ext.hpp's, installed but unstable (docs/embedding.md). The rest of the tree's headers
// are the layers' own and are not installed.
//
//   tracer::Session  a recipe run live on the host's executor (session.hpp)
//   tracer::Replay   the same recipe over a perf.data file (replay.hpp)
//   tracer::Engine   probes, rings and the reactor without a recipe (engine.hpp)
//   tracer::Recipe   recipes loaded, checked and edited (recipe.hpp)
//   Pipeline         the stages of a recipe fed by batches (pipeline.hpp; stages: tracer/ext/)
//   perfdata         perf.data reading and writing (perfdata/reader.hpp, perfdata/writer.hpp)
//   symbols          addresses to names (symbols/symbols.hpp)
//   SelfCounter      a thread counting its own code regions (perf/self_counter.hpp)
//   plugin.h         the C ABI of out-of-tree stages (a shared object a recipe names)
#pragma once

#include "tracer/engine.hpp"
#include "tracer/error.hpp"
#include "tracer/perf/self_counter.hpp"
#include "tracer/perfdata/reader.hpp"
#include "tracer/perfdata/writer.hpp"
#include "tracer/pipeline.hpp"
#include "tracer/plugin.h"
#include "tracer/recipe.hpp"
#include "tracer/replay.hpp"
#include "tracer/result.hpp"
#include "tracer/session.hpp"
#include "tracer/symbols/symbols.hpp"

// The API: exported by libtracer.so, whose other symbols are hidden (engine/CMakeLists.txt).
#pragma GCC visibility push(default)

#pragma GCC visibility pop
