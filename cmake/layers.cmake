# The layer graph, written once. Each layer: its folder and the layers it builds on directly
# (what it links; the layers below those come through them). Read by
#   engine/CMakeLists.txt            the layer libraries and their links,
#   cmake/check_layers.cmake         the include check (a layer includes its own headers and
#                                    those of every layer it reaches),
#   cmake/check_layer_doc.cmake      docs/architecture.md's layer table, checked against this
#                                    (ctest Layers.TheDocumentedGraphIsTheBuildsOne).
# Lowest first: a layer builds only on layers before it.
set(TRACER_LAYERS common perf tracefs bpf symbols model perfdata recipe core pipeline stages kernel
                  session exporter cli)

set(TRACER_LAYER_DIR_common engine/common)
set(TRACER_LAYER_DIR_perf engine/perf)
set(TRACER_LAYER_DIR_tracefs engine/tracefs)
set(TRACER_LAYER_DIR_bpf bpf)
set(TRACER_LAYER_DIR_symbols engine/symbols)
set(TRACER_LAYER_DIR_model engine/model)
set(TRACER_LAYER_DIR_perfdata engine/perfdata)
set(TRACER_LAYER_DIR_recipe engine/recipe)
set(TRACER_LAYER_DIR_core engine/core)
set(TRACER_LAYER_DIR_pipeline engine/pipeline)
set(TRACER_LAYER_DIR_stages plugins)
set(TRACER_LAYER_DIR_kernel engine/kernel)
set(TRACER_LAYER_DIR_session engine/session)
set(TRACER_LAYER_DIR_exporter engine/exporter)
set(TRACER_LAYER_DIR_cli cmd)

set(TRACER_LAYER_ON_common)
set(TRACER_LAYER_ON_perf common)
set(TRACER_LAYER_ON_tracefs common)
set(TRACER_LAYER_ON_bpf perf)
set(TRACER_LAYER_ON_symbols common)
set(TRACER_LAYER_ON_model bpf tracefs)
set(TRACER_LAYER_ON_perfdata model symbols)
set(TRACER_LAYER_ON_recipe model symbols)
# The reactor and the stage API are siblings: neither reaches the other; the session joins them.
set(TRACER_LAYER_ON_core model symbols)
set(TRACER_LAYER_ON_pipeline recipe)
set(TRACER_LAYER_ON_stages pipeline perfdata)
set(TRACER_LAYER_ON_kernel pipeline core)
set(TRACER_LAYER_ON_session kernel stages)
set(TRACER_LAYER_ON_exporter session)
set(TRACER_LAYER_ON_cli exporter)

# tracer_layer_reach(<layer> <out>): every layer <layer> reaches (itself included), in layer
# order; a layer named before it in TRACER_LAYERS only, or a fatal error.
function(tracer_layer_reach layer out)
  set(reach ${layer})
  set(queue ${TRACER_LAYER_ON_${layer}})
  list(FIND TRACER_LAYERS ${layer} at)
  if(at EQUAL -1)
    message(FATAL_ERROR "layers.cmake: '${layer}' is no layer")
  endif()
  while(queue)
    list(POP_FRONT queue below)
    list(FIND TRACER_LAYERS ${below} below_at)
    if(below_at EQUAL -1 OR NOT below_at LESS at)
      message(FATAL_ERROR "layers.cmake: '${layer}' builds on '${below}', which is not a layer "
                          "before it")
    endif()
    if(NOT below IN_LIST reach)
      list(APPEND reach ${below})
      list(APPEND queue ${TRACER_LAYER_ON_${below}})
    endif()
  endwhile()
  set(ordered)
  foreach(name IN LISTS TRACER_LAYERS)
    if(name IN_LIST reach)
      list(APPEND ordered ${name})
    endif()
  endforeach()
  set(${out} ${ordered} PARENT_SCOPE)
endfunction()
