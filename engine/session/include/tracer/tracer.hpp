// tracer's supported API in one include: what an embedder builds against (docs/embedding.md).
// The installed headers are this one and every tracer header it reaches; the rest of the tree's
// headers are the layers' own and are not installed.
//
//   tracer::Session  a recipe run live on the host's executor (session.hpp)
//   tracer::Replay   the same recipe over a perf.data file (replay.hpp)
//   tracer::Engine   probes, rings and the reactor without a recipe (engine.hpp)
//   tracer::Recipe   recipes loaded, checked and edited (recipe.hpp)
//   Stage, Pipeline  the stage API and the built-in stages (stage.hpp, pipeline.hpp, stages.hpp)
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
#include "tracer/stage.hpp"
#include "tracer/stages.hpp"
#include "tracer/symbols/symbols.hpp"
