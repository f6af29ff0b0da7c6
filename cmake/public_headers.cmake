# The installed headers, declared: tracer's stable API (TRACER_PUBLIC_HEADERS: what
# tracer/tracer.hpp reaches) and its extension points (TRACER_EXT_HEADERS: what
# tracer/ext/ext.hpp reaches beyond it, all under tracer/ext/). The build computes both closures
# and refuses to configure when they are not these lists (a header that became reachable by an
# include is an API change to make here, on purpose); the install puts exactly these in include/,
# and ctest Embedding.FindPackageConsumer compares the installed tree with them.
# docs/embedding.md says what the compatibility rule for each is.
set(TRACER_PUBLIC_HEADERS
    tracer/bpf/map_source.hpp
    tracer/bpf/schema.hpp
    tracer/comm_cache.hpp
    tracer/config_value.hpp
    tracer/counter_source.hpp
    tracer/diagnostics.hpp
    tracer/engine.hpp
    tracer/engine_options.hpp
    tracer/error.hpp
    tracer/perf/abi.hpp
    tracer/perf/aux_chunk.hpp
    tracer/perf/counter_set.hpp
    tracer/perf/event.hpp
    tracer/perf/event_attr.hpp
    tracer/perf/record.hpp
    tracer/perf/record_ref.hpp
    tracer/perf/ring_stats.hpp
    tracer/perf/self_counter.hpp
    tracer/perfdata/format.hpp
    tracer/perfdata/perfmon.hpp
    tracer/perfdata/reader.hpp
    tracer/perfdata/writer.hpp
    tracer/pipeline.hpp
    tracer/plugin.h
    tracer/probe.hpp
    tracer/recipe.hpp
    tracer/reorder.hpp
    tracer/replay.hpp
    tracer/result.hpp
    tracer/schema.hpp
    tracer/session.hpp
    tracer/stage_spec.hpp
    tracer/stats.hpp
    tracer/symbols/symbols.hpp
    tracer/table.hpp
    tracer/tracefs/tracefs.hpp
    tracer/tracer.hpp
    tracer/unique_fd.hpp
    tracer/value.hpp
)

set(TRACER_EXT_HEADERS
    tracer/ext/ext.hpp
    tracer/ext/filter_tree.hpp
    tracer/ext/kernel_form.hpp
    tracer/ext/stage.hpp
    tracer/ext/stage_options.hpp
    tracer/ext/stages.hpp
)
